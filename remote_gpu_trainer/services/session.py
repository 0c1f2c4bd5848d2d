"""A project opened for work, the floor every service stands on: its config, its state database, the provider
and transport caches, the read-only mode, and one question per box in flight.

The TUI, the CLI verbs and `--report` all go through a Session, so a number or a refusal is computed in one
place: the verbs live in the services that own them (instances, launch, liveness, run_logs, evidence/verbs,
overview, ...), each taking the session, and every face calls them there. A Session imports no service (the
import graph of services/ starts here) and forwards to none (tests/services/test_session_floor.py); what a
service keeps between calls (the log monitors, the providers' last answers, the host keys awaiting trust)
it keeps in its own cache(), which only its own functions touch. A Session never imports Textual; long work
is async and bounded by timeouts, and one question per box is in flight at a time (asked()).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import InstanceConfig, ProjectConfig
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.profiles import Profile
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.providers.registry import provider_for
from remote_gpu_trainer.state.db import StateDB

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.base import Provider

T = TypeVar("T")
C = TypeVar("C")
PROVIDER_TIMEOUT_S = 20.0


MAX_REPLACEMENTS = 100  # a chain of boxes recovery rented one in place of another is followed at most this far


class Session:
    def __init__(self, project: ProjectConfig, *, clock: Clock = utc_now, read_only: bool = False,
                 provider_timeout_s: float = PROVIDER_TIMEOUT_S) -> None:
        self.project = project
        self.clock = clock
        self.provider_timeout_s = provider_timeout_s  # each question to a provider or box waits this long
        # a project folder rgt may not write to still serves the read-only verbs (--report, events,
        # --read-only): the state is read from a copy, and every cost-affecting action is refused
        self.folder_read_only = not project_writable(project)
        self.read_only = read_only or self.folder_read_only
        self.db = StateDB(project.state_db, clock, read_only=self.folder_read_only)
        self._providers: dict[str, Provider] = {}
        self._transports: dict[str, Transport] = {}
        self._caches: dict[str, Any] = {}  # owner module -> the cache it keeps (see cache)
        self._closers: list[Callable[[], None]] = []
        self._inflight: dict[str, asyncio.Future[Any]] = {}  # one question per box at a time (see asked)

    def close(self) -> None:
        for close in self._closers:
            close()
        self.db.close()

    async def close_transports(self) -> None:
        """Close connections to the far side (jobs keep running: they were launched detached)."""
        for task in list(self._inflight.values()):
            task.cancel()
        self._inflight.clear()
        transports, self._transports = list(self._transports.values()), {}
        closers = [t.close for t in transports] + [p.close for p in self._providers.values()]
        for close in closers:
            try:
                await close()
            except (RgtError, OSError):
                pass

    def cache(self, owner: str, make: Callable[[], C], close: Callable[[C], None] | None = None) -> C:
        """What the service module `owner` keeps between calls on this session, made by `make` on first use
        and closed by `close` with the session. The owner passes its own `__name__` and reads and writes the
        cache through its own functions only, so each cache has one home (tests/services/test_session_floor.py
        holds every caller to `__name__`); the Session keeps it without knowing its type, so it imports no
        service."""
        if owner not in self._caches:
            made = self._caches[owner] = make()
            if close is not None:
                self._closers.append(lambda: close(made))
        return cast(C, self._caches[owner])

    # -- plumbing ------------------------------------------------------------------------------------
    def instance(self, name: str) -> InstanceConfig:
        """The instance as configured; a box `rgt up` rented (and rgt.toml does not name yet) gets its id, and a box
        recovery rented in place of that one (docs/remote-ops.md §10.1) gets the replacement's: only an instance with
        a `launch` constraint can be rented, so only such an instance asks the event log."""
        config = self.project.instances[name]
        current = config.id
        if current is None:
            current = self.db.launched_provider_id(name)
        if current is not None and config.launch is not None:
            for _ in range(MAX_REPLACEMENTS):
                replacement = self.db.replacement_of(name, current)
                if replacement is None:
                    break
                current = replacement
        return config if current == config.id else dataclasses.replace(config, id=current)

    def provider(self, name: str) -> Provider:
        if name not in self._providers:
            self._providers[name] = provider_for(self.instance(name), self.project.state_dir, self.clock)
        return self._providers[name]

    def profile(self, name: str) -> Profile:
        return self.provider(name).profile

    def asked(self, key: str, ask: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """The one question `key` in flight to a box (started by `ask` when none is): a slow box is asked
        once, however many refreshes, reports or verbs wait for it, and a caller that stops waiting does
        not cancel it (the answer still lands in the state for the next refresh)."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(ask())
            self._inflight[key] = task

            def forget(done: asyncio.Future[Any], key: str = key) -> None:
                if self._inflight.get(key) is done:
                    del self._inflight[key]

            task.add_done_callback(forget)
        return asyncio.shield(task)

    async def answers(self, questions: dict[str, Callable[[], Awaitable[T]]],
                      wait_s: float | None) -> dict[str, T]:
        """Ask every box at once, each within its own timeout, and return the answers that came within
        `wait_s` (all of them when None); the others keep going in the background."""
        futures = {key: self.asked(key, ask) for key, ask in questions.items()}
        if futures:
            await asyncio.wait(futures.values(), timeout=wait_s)
        answers: dict[str, T] = {}
        for key, future in futures.items():
            if future.done():
                answers[key] = future.result()  # the askers catch what a box can do; anything else is a bug
            else:
                future.add_done_callback(_quiet)
        return answers

    def transport(self, name: str) -> Transport:
        """The transport to the box (made once per session); an async verb reaches it through
        services/instances.py's remote(), which first asks a cloud provider for the box's address."""
        if name not in self._transports:
            self._transports[name] = self.provider(name).transport(self.instance(name))
        return self._transports[name]

    async def forget_transport(self, name: str) -> None:
        """Close and drop the instance's transport: its box changed (recovery rented a replacement or started it
        again), so the next use connects where the provider says the box is now."""
        transport = self._transports.pop(name, None)
        if transport is not None:
            try:
                await transport.close()
            except (RgtError, OSError):
                pass

    def has_transport(self, name: str) -> bool:
        return name in self._transports

    def require_writable(self, what: str) -> None:
        if self.folder_read_only:
            raise RgtError(f"{what}: the project folder {self.project.root} is read-only; only --report, "
                           "events and --read-only work there")
        if self.read_only:
            raise RgtError(f"{what} is a cost-affecting action and rgt is in --read-only mode")


def project_writable(project: ProjectConfig) -> bool:
    """Whether rgt may write the project's state: `.rgt/` when it exists, else the project folder (where
    it would be created). A read-only mount is refused by access() for root too."""
    import os

    folder = project.state_dir if project.state_dir.exists() else project.root
    if not os.access(folder, os.W_OK):
        return False
    return not project.state_db.exists() or os.access(project.state_db, os.W_OK)


def _quiet(future: asyncio.Future[Any]) -> None:
    """Retrieve a background answer's outcome nobody waits for (so asyncio does not warn about it)."""
    if not future.cancelled():
        future.exception()
