"""One tool call as the handlers of tools.py see it: the project, who asks, the session, the progress so far.

A call opens its own Session, as one CLI verb does (cli/sessions.py), and closes it when its work ends: rgt.toml is
read as it is now, and a pull that outlives the call that started it keeps a session no other call closes under it.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.errors import RgtError

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.services.session import Session


@dataclass(frozen=True)
class Outcome:
    """What a handler returns: the document the agent reads and, when the verb ran and failed (a pull with files
    missing, a verification with problems), the error the CLI would have exited with after printing it."""

    document: dict[str, Any]
    failure: RgtError | None = None


@dataclass
class Figure:
    """The latest progress of a long call: `progress` never goes down (MCP's progress must increase)."""

    progress: float = 0.0
    total: float | None = None
    message: str = ""
    version: int = 0


class ProgressBoard:
    """Where a long call's work posts its progress (from the event loop or from a worker thread) and where every
    call waiting for that work reads it: a new figure wakes them all."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop  # made on the loop's own thread: a post from any other thread is handed over to it
        self._thread = threading.get_ident()
        self.figure = Figure()
        self._changed = asyncio.Event()

    def post(self, progress: float, total: float | None, message: str) -> None:
        if threading.get_ident() == self._thread:
            self._update(progress, total, message)
        else:
            self.loop.call_soon_threadsafe(self._update, progress, total, message)

    def _update(self, progress: float, total: float | None, message: str) -> None:
        figure = self.figure
        self.figure = Figure(max(figure.progress, progress), total, message, figure.version + 1)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def changed(self) -> asyncio.Event:
        """Set at the next figure posted after this is asked."""
        return self._changed


@dataclass
class KeptSession:
    """A Session kept from one call to the next of a tool that reads what a session accumulates (rgt_watch: the log
    monitor's step, total and ETA, as the one session of `rgt watch RUN` keeps them); opened again when rgt.toml
    changed, so an edit is read as every verb reads it. One call at a time uses it (`lock`)."""

    project_file: Path
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _session: Session | None = field(default=None, repr=False)
    _stamp: tuple[int, int] | None = None
    _closing: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def session(self) -> Session:
        from remote_gpu_trainer.cli.sessions import open_session

        stat = self.project_file.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if self._session is not None and stamp != self._stamp:
            self._retire()
        if self._session is None:
            self._session, self._stamp = open_session(str(self.project_file)), stamp
        return self._session

    def _retire(self) -> None:
        old, self._session = self._session, None
        if old is not None:
            task = asyncio.get_running_loop().create_task(_close(old))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        old, self._session = self._session, None
        if old is not None:
            await _close(old)


async def _close(session: Session) -> None:
    try:
        await session.close_transports()
    finally:
        session.close()


@dataclass
class Call:
    """The project file, the actor (`agent:<client name>`), the progress board, and what the call is about (the run
    and its instance, for the event log)."""

    project_file: Path
    actor: str
    board: ProgressBoard
    run_id: str | None = None
    instance: str | None = None
    kept: KeptSession | None = None  # the session is this one, kept by the server between calls
    _session: Session | None = field(default=None, repr=False)

    def session(self) -> Session:
        """The call's Session, opened on first use (two names for one box are refused, as every verb refuses)."""
        if self.kept is not None:
            return self.kept.session()
        if self._session is None:
            from remote_gpu_trainer.cli.sessions import open_session

            self._session = open_session(str(self.project_file))
        return self._session

    def writable(self, verb: str) -> Session:
        """The Session of a call that records something: refused in a project folder rgt may not write."""
        from remote_gpu_trainer.cli.sessions import read_only_refusal

        session = self.session()
        if session.folder_read_only:
            raise read_only_refusal(verb, str(session.project.root))
        return session

    def run(self, run_id: str) -> RunConfig:
        """The run's config (an unknown run is refused naming it and the file), remembered for the event log."""
        run = self.session().project.run(run_id)
        self.run_id, self.instance = run.id, run.instance
        return run

    def progress(self, progress: float, total: float | None = None, message: str = "") -> None:
        self.board.post(progress, total, message)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await _close(session)
