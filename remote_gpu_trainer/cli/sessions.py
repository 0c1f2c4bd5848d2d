"""Opening and closing the Session a verb works through: every verb's refusals that come before any state
is written (two entries naming one box, an unknown run, a read-only folder) happen here, in that order."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from remote_gpu_trainer.errors import ConfigError, HostKeyNotTrusted

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

RunVerb = Callable[["Session", argparse.Namespace], Awaitable[int]]
T = TypeVar("T")


def run_sync(work: Awaitable[T]) -> T:
    """`asyncio.run(work)`, except that the event loop's main task ends with None and the result is handed over
    beside it. Why: on its way out, Python 3.11's asyncio.Runner asks `signal.getsignal` for the SIGINT handler
    it installed, a partial holding the finished task; getsignal tries that handler as an enum value, and the
    ValueError it builds and drops carries the repr of the partial, so of the task, so of its result. For a
    report that was the whole Overview, twice: ~7 ms of each `rgt --report`."""
    result: list[T] = []

    async def main() -> None:
        result.append(await work)

    asyncio.run(main())
    return result[0]


def open_session(project: str | None, read_only: bool = False) -> Session:
    """services/opening.py's open_session, then the check that needs ssh config: two entries naming one box are
    refused (exit 2)."""
    from remote_gpu_trainer.providers.box_identity import check_distinct_boxes
    from remote_gpu_trainer.services import opening

    session = opening.open_session(project, read_only=read_only)
    try:
        check_distinct_boxes(session.project)
    except ConfigError:
        session.close()
        raise
    return session


def with_session(project: str | None, action: Callable[[Session], int], *, writes: str | None = None) -> int:
    """Open the project's Session, run `action`, close it. `writes` names a verb that records something (a tick,
    an audit, a finding's move): in a project folder rgt may not write it is refused (exit 2) before anything
    runs, because what it recorded would go nowhere while it said it was done."""
    session = open_session(project)
    try:
        if writes is not None and session.folder_read_only:
            raise read_only_refusal(writes, str(session.project.root))
        return action(session)
    finally:
        session.close()


def read_only_refusal(verb: str, root: str) -> ConfigError:
    return ConfigError(f"rgt {verb}: the project folder {root} is read-only; only --report, events, watch and "
                       "--read-only work there")


def on_run(verb: str, args: argparse.Namespace, action: RunVerb) -> int:
    """A verb that acts on one run: the project and the run are checked before the Session (and its state
    database) is created; a read-only folder allows `watch` only."""
    from remote_gpu_trainer.config.project import load_project, resolve_project_file
    from remote_gpu_trainer.providers.box_identity import check_distinct_boxes
    from remote_gpu_trainer.services import project_registry
    from remote_gpu_trainer.services.session import Session

    project = load_project(resolve_project_file(args.project))
    check_distinct_boxes(project)
    project.run(args.run)  # an unknown run is refused before anything is created
    project_registry.remember(project.root)  # as opening.open_session does: so `rgt status --all` finds it later
    session = Session(project)
    if session.folder_read_only and verb != "watch":
        session.close()
        raise read_only_refusal(verb, str(project.root))
    try:
        return asyncio.run(_closing_transports(session, args, action))
    finally:
        session.close()


async def _closing_transports(session: Session, args: argparse.Namespace, action: RunVerb) -> int:
    try:
        return await action(session, args)
    except HostKeyNotTrusted as exc:  # the transport's refusal, worded with the instance it was reaching
        from remote_gpu_trainer.services.bindings import run_config
        from remote_gpu_trainer.services.instances import host_key_prompts, trust_refusal

        presented = host_key_prompts(session).items()
        name = next((n for n, key in presented if key.fingerprint_sha256 == exc.fingerprint_sha256),
                    run_config(session, args.run).instance)
        exc.args = (trust_refusal(session, name, exc),)
        raise
    finally:
        await session.close_transports()
