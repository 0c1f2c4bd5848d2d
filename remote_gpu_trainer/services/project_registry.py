"""Every project this user has opened, so `rgt status --all` and `rgt watch --all` find them without being told.

A small JSON file under the XDG state directory ($XDG_STATE_HOME/rgt/projects.json): one entry per project
folder, added when a session opens the project. It is an index, not evidence: a folder that no longer holds
an rgt.toml is reported as gone by the readers and never deleted silently; `forget()` drops an entry on the
user's word. Writers take a file lock and replace the file atomically, so two rgt processes opening projects
at once never lose an entry or leave half a file.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from remote_gpu_trainer.clock import Clock, iso_z, parse_iso, utc_now
from remote_gpu_trainer.config.project import user_state_dir
from remote_gpu_trainer.fsutil import atomic_write

SCHEMA = "rgt-projects/v1"
STAMP_FRESH_S = 86_400.0  # a project opened again within a day keeps its stamp: see remember()
LOCK_WAIT_S = 5.0
LOCK_POLL_S = 0.05


@dataclass(frozen=True)
class KnownProject:
    """One registered project folder and when rgt last opened it (to within STAMP_FRESH_S)."""

    root: Path
    last_opened: str

    @property
    def present(self) -> bool:
        """Whether the folder still holds a project (a moved or deleted project is shown, never dropped)."""
        return (self.root / "rgt.toml").is_file()


def registry_path() -> Path:
    return user_state_dir() / "projects.json"


def known_projects() -> list[KnownProject]:
    """The registered projects, in the order they were first opened; an unreadable registry reads as empty
    (it is an index that the next open rebuilds, never a reason to fail a status)."""
    return [KnownProject(Path(root), str(seen)) for root, seen in _read(registry_path()).items()]


def remember(root: Path, clock: Clock = utc_now) -> bool:
    """Record that the project at `root` was opened now; False when the registry could not be written (a
    read-only home or a lock held too long): opening the project goes on either way. A project already
    registered with a stamp less than STAMP_FRESH_S old is left as it is, without taking the lock: rewriting the
    file, fsync and all, on every open was ~8 ms of each `rgt --report` (issue 29)."""
    key = str(root.resolve())
    now = clock()
    if _fresh(_read(registry_path()).get(key), now):
        return True

    def add(entries: dict[str, str]) -> None:
        entries[key] = iso_z(now)

    return _update(add)


def _fresh(stamp: str | None, now: datetime) -> bool:
    """A stamp this registry wrote, at most STAMP_FRESH_S before `now` (one from the future is not fresh)."""
    try:
        then = parse_iso(stamp) if stamp else None
    except ValueError:
        return False
    return then is not None and 0 <= (now - then).total_seconds() < STAMP_FRESH_S


def forget(root: Path) -> bool:
    """Drop the project at `root` from the registry (the user's word); False when it was not there."""
    key = str(root.resolve())
    found: list[bool] = []

    def drop(entries: dict[str, str]) -> None:
        found.append(entries.pop(key, None) is not None)

    return _update(drop) and bool(found and found[0])


def _update(change: Callable[[dict[str, str]], None]) -> bool:
    path = registry_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(Path(str(path) + ".lock"), LOCK_WAIT_S):
            entries = _read(path)
            change(entries)
            data = json.dumps({"schema": SCHEMA, "projects": entries}, indent=2, sort_keys=True) + "\n"
            atomic_write(path, data.encode(), mode=0o600)
    except OSError:  # TimeoutError included: a lock held too long
        return False
    return True


@contextmanager
def _locked(lock_file: Path, wait_s: float) -> Iterator[None]:
    """An exclusive flock(2) on `lock_file`, waited for at most `wait_s` (TimeoutError after). flock itself, as
    the filelock package takes it on Unix: that package's import was ~9 ms of every `rgt` that opens a project
    (`rgt --report` included, docs/architecture.md §5), for one lock taken once."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{lock_file}: held by another rgt for over {wait_s:g} s") from None
                time.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _read(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) and data.get("schema") == SCHEMA else None
    if not isinstance(projects, dict):
        return {}
    return {str(k): str(v) for k, v in projects.items() if isinstance(k, str)}
