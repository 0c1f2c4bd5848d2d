"""The two faces that are not verbs: `rgt [PROJECT]` opens the TUI, `rgt --report` prints the report
(docs/architecture.md §3.5). Textual is imported only when the TUI is actually opened."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.cli.sessions import open_session, run_sync
from remote_gpu_trainer.clock import report_now
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import Overview


def tui(project: str | None, read_only: bool) -> int:
    session = open_session(project, read_only=read_only)
    from remote_gpu_trainer.app import RgtApp

    try:
        RgtApp(session).run()
    finally:
        session.close()
    return EXIT_OK


def report(project: str | None, fmt: str, output: str | None, strict: bool, force: bool = False) -> int:
    from remote_gpu_trainer.report import needs_attention, render

    session = open_session(project, read_only=True)
    try:
        target = output_target(output, session.project.root, session.project.file, force) if output else None
        overview = run_sync(_overview_and_close(session))
    finally:
        session.close()
    text = render(dataclasses.replace(overview, generated_at=report_now()), fmt)
    if target is not None:
        write_output(target, text.encode("utf-8"), output or "", force)
    else:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    if strict and needs_attention(overview):
        return EXIT_FAILED
    return EXIT_OK


def output_target(output: str, root: Path, project_file: Path, force: bool) -> Path:
    """Where `--output` may write: never the project's rgt.toml, `.rgt/` (state, known hosts, sim disks) or
    `runs/` (the evidence the gate trusts), judged after symlinks are resolved; an existing file only with
    --force. Checked before the report is built, so a refusal costs nothing."""
    target = Path(output).expanduser().resolve()
    root = root.resolve()
    protected = [(project_file.resolve(), "the project file"), (root / "rgt.toml", "the project file"),
                 (root / ".rgt", "rgt's state folder .rgt/"), (root / "runs", "the evidence store runs/")]
    for path, what in protected:
        if target == path or target.is_relative_to(path):
            raise ConfigError(f"--output {output}: refused: it is {what} of {root} (resolved: {target}); "
                              "write the report elsewhere")
    if target.is_dir():
        raise ConfigError(f"--output {output}: is a folder: name a file")
    if target.exists() and not force:
        raise ConfigError(f"--output {output}: exists: add --force to replace it")
    return target


def write_output(target: Path, data: bytes, shown: str, force: bool) -> None:
    """Write through a temp file beside the target: replaced in one step with --force, else linked in so a
    file created meanwhile is never overwritten; the temp file never outlives the call."""
    temp = target.with_name(f".rgt-tmp-{target.name}.{os.getpid()}")
    try:
        with open(temp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if force:
            os.replace(temp, target)
        else:
            os.link(temp, target)
    except FileExistsError:
        raise ConfigError(f"--output {shown}: exists: add --force to replace it") from None
    except OSError as exc:
        raise ConfigError(f"--output {shown}: cannot write: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)


async def _overview_and_close(session: Session) -> Overview:
    """The report's Overview (services/overview.report_overview), then every connection closed."""
    from remote_gpu_trainer.services.report_overview import report_overview

    try:
        return await report_overview(session)
    finally:
        await session.close_transports()
