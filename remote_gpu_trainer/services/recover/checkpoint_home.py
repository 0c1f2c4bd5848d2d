"""The newest checkpoint of a recoverable run, kept home (docs/remote-ops.md §10.1, "The checkpoint kept home").

A run with `runs.<id>.recover` must not have its newest checkpoint only on the box: a spot box can take its disk
with it. While such a run runs, every watcher (the TUI, `rgt watch RUN`, the patrol) calls `keep_home`. At most once
per interval (the run's Young/Daly cadence W where μ is known, EVERY_DEFAULT_S where it is not) it asks the box for
each cell's newest checkpoint with its size and sha256, streams the ones not home yet, and keeps a copy only when its
bytes are the box's (size and sha256) and it loaded weights-only in the isolated load-check process, like any pull
(services/evidence/load_checks.py). Only then does it replace that cell's previous copy, so a failed copy never costs
the copy before it.

Copies live in `.rgt/recovery/<run-id>/checkpoints/<cell>/`, never under `runs/<run-id>/`: they are not the run's
evidence, which is only ever a pull of the finished run's manifest, verified as a whole. Each kept copy is a `recover`
event (step `checkpoint_home`) naming the cell, the file, its path on the box, its sha256 and size, the box's
modification time and the load check's verdict; `home_copies` reads them back, trusting a copy only while its file is
still here with that size.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.manifest import path_problems
from remote_gpu_trainer.audits.recover import home_copy_due
from remote_gpu_trainer.errors import RgtError, TransportError, VerbFailed
from remote_gpu_trainer.fsutil import fsync_dir, lstat_or_none, remove_if_present, run_lock
from remote_gpu_trainer.services.box_layout import cell_root, checkpoint_find
from remote_gpu_trainer.services.instances import remote
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
    from remote_gpu_trainer.providers.base import Transport
    from remote_gpu_trainer.services.session import Session

ACTOR = "rgt:recover"
STEP = "checkpoint_home"
EVERY_DEFAULT_S = 1800.0  # how often the box is asked when no cadence is known (no μ for the run)
LIST_TIMEOUT_S = 600.0  # the box hashes each cell's newest checkpoint: seconds per GiB
CHUNK = 4 << 20
_LAST_ASKED: dict[tuple[str, str], float] = {}  # (state dir, run id) -> when this process last asked the box

# Per cell: the newest checkpoint by modification time, its size and its sha256, one tab-separated line. The box's
# answer is parsed strictly (`_parse_listing`): a line that is not exactly this is ignored.
_LIST_SCRIPT = r"""set -u
root=$1; shift
for cell in "$@"; do
  dir="$root/$cell"
  [ -d "$dir" ] || continue
  newest=$(%(find)s | awk 'NR == 1 || $1 > t { t = $1; n = $0 } END { print n }')
  [ -n "$newest" ] || continue
  path=${newest#* }
  size=$(stat -c %%s -- "$path" 2>/dev/null) || continue
  sum=$(sha256sum < "$path" 2>/dev/null) || continue
  printf 'CKPT\t%%s\t%%s\t%%s\t%%s\t%%s\n' "$cell" "${newest%%%% *}" "$size" "${sum%%%% *}" "${path#"$dir"/}"
done
exit 0
"""


@dataclass(frozen=True)
class OnBox:
    """A cell's newest checkpoint as the box states it."""

    cell: str
    path: str  # relative to the cell's result root
    mtime: float  # the box's clock
    size: int
    sha256: str


@dataclass(frozen=True)
class HomeCopy:
    """A cell's newest checkpoint as kept here."""

    cell: str
    path: str  # relative to the cell's result root on the box (`{resume}` resolves to it there)
    local: Path
    sha256: str
    size: int
    box_mtime: float  # when the run wrote it, by the box's clock: its age is the work a lost box would cost
    copied_at: datetime
    loaded: bool
    verdict: str  # the load check's words: "loads weights-only: N tensors", or why it did not


@dataclass(frozen=True)
class KeepResult:
    """What one call did: the copies it made, and why a cell's checkpoint was not kept (one line each)."""

    copied: tuple[HomeCopy, ...] = ()
    problems: tuple[str, ...] = ()
    asked: bool = False  # whether the box was asked at all (False: not due, or another rgt is copying)


def home_dir(project: ProjectConfig, run_id: str) -> Path:
    """Where the run's copies live: beside its recovery notes, never inside runs/<run-id>/."""
    return project.state_dir / "recovery" / run_id / "checkpoints"


def home_copies(session: Session, run_id: str) -> dict[str, HomeCopy]:
    """Each cell's latest kept copy whose file is still here with its size (a copy removed by hand is no copy)."""
    found: dict[str, HomeCopy] = {}
    for event in session.db.events(run_id=run_id, kind=EventKind.RECOVER):
        if event.detail.get("step") != STEP:
            continue
        copy = _from_event(session.project, run_id, event.detail, event.at)
        if copy is not None:
            found[copy.cell] = copy
    return {cell: copy for cell, copy in found.items()
            if (info := lstat_or_none(copy.local)) is not None and info.st_size == copy.size}


def interval_s(session: Session, run: RunConfig) -> float:
    """How often the box is asked: the Young/Daly cadence W when it is known, else EVERY_DEFAULT_S."""
    from remote_gpu_trainer.services.watch.checkpoint_cadence import run_cadence

    found = run_cadence(session, run.id, None)
    return found.interval_s if found is not None else EVERY_DEFAULT_S


async def keep_home(session: Session, run_id: str, *, force: bool = False) -> KeepResult | None:
    """Copy each cell's newest checkpoint home when it is due and not home yet (None: the run has no `recover`
    limits, or this session may not write). `force` asks the box now, whatever the interval says."""
    run = session.project.runs.get(run_id)
    if run is None or run.recover is None or session.read_only:
        return None
    key = (str(session.project.state_dir), run_id)
    copies = home_copies(session, run_id)
    last = max([_LAST_ASKED.get(key, 0.0), *(_monotonic_at(session, copy.copied_at) for copy in copies.values())])
    if not force and not home_copy_due(last, interval_s(session, run), time.monotonic()):
        return KeepResult()
    try:
        with run_lock(session.project.state_dir, f"{run_id}.checkpoint-home", "copying a checkpoint home"):
            _LAST_ASKED[key] = time.monotonic()
            return await _keep(session, run, copies)
    except VerbFailed:
        return KeepResult()  # another rgt is copying this run's checkpoint now


async def _keep(session: Session, run: RunConfig, copies: dict[str, HomeCopy]) -> KeepResult:
    try:
        transport = await remote(session, run.instance)
        listing = await newest_on_box(run, transport)
    except (RgtError, OSError, TimeoutError) as exc:
        return KeepResult(problems=(f"the box could not list its checkpoints: {escape_control(str(exc))}",),
                          asked=True)
    copied: list[HomeCopy] = []
    problems: list[str] = []
    for found in listing:
        held = copies.get(found.cell)
        if held is not None and held.sha256 == found.sha256:
            continue
        try:
            copy = await copy_home(session, run, transport, found)
        except (RgtError, OSError, TimeoutError, NotTheBoxBytes) as exc:
            problems.append(f"{found.cell}/{escape_control(found.path)}: not kept: {escape_control(str(exc))}")
            continue
        copied.append(copy)
    return KeepResult(copied=tuple(copied), problems=tuple(problems), asked=True)


async def newest_on_box(run: RunConfig, transport: Transport) -> list[OnBox]:
    """Each cell's newest checkpoint, its size and sha256, as the box states them."""
    cells = [shlex.quote(cell) for cell in run.roster]
    if not cells:
        return []
    root = shlex.quote(transport.resolve(run.remote_root.rstrip("/")))
    script = _LIST_SCRIPT % {"find": checkpoint_find('"$dir"')}
    result = await transport.run(f"bash -s -- {root} {' '.join(cells)}", stdin=script.encode(),
                                 timeout=LIST_TIMEOUT_S)
    if result.rc != 0:
        raise TransportError(f"listing exited {result.rc}: {escape_control(result.error_text.strip()[:200])}")
    return _parse_listing(result.stdout.decode("utf-8", "replace"), set(run.roster))


def _parse_listing(text: str, cells: set[str]) -> list[OnBox]:
    """The box's lines, strictly: a known cell, a safe relative path, numbers that are numbers, a hex sha256."""
    found: dict[str, OnBox] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 6 or parts[0] != "CKPT" or parts[1] not in cells \
                or path_problems(f"{parts[1]}/{parts[5]}") or parts[5].rsplit("/", 1)[-1].startswith("."):
            continue
        try:
            mtime, size = float(parts[2]), int(parts[3])
        except ValueError:
            continue
        sha256 = parts[4].lower()
        if size < 0 or len(sha256) != 64 or any(char not in "0123456789abcdef" for char in sha256):
            continue
        found[parts[1]] = OnBox(cell=parts[1], path=parts[5], mtime=mtime, size=size, sha256=sha256)
    return [found[cell] for cell in sorted(found)]


class NotTheBoxBytes(Exception):
    """What arrived is not what the box stated (another size or sha256): the file changed while it was read."""


async def copy_home(session: Session, run: RunConfig, transport: Transport, found: OnBox) -> HomeCopy:
    """Stream, check, load-verify, then keep: the cell's previous copy is replaced only by a good one."""
    folder = home_dir(session.project, run.id) / found.cell
    folder.mkdir(parents=True, exist_ok=True)
    name = found.path.rsplit("/", 1)[-1]
    part = folder / f".{name}.part"
    remote_path = f"{cell_root(run, found.cell)}/{found.path}"  # as the transport's file calls take it
    try:
        await _stream(transport, remote_path, part, found)
        loaded, verdict = await _load_check(session, run, part, found)
        target = folder / name
        os.replace(part, target)
        fsync_dir(folder)
    finally:
        remove_if_present(part)
    for old in folder.iterdir():
        if old.name != name and not old.name.startswith("."):
            remove_if_present(old)
    copied_at = session.clock()
    events.recover_step(
        session.db, run_id=run.id, instance=run.instance, step=STEP, actor=ACTOR,
        summary=f"{run.id}: {found.cell}/{found.path} kept home ({found.size:,} bytes, {verdict})",
        detail={"cell": found.cell, "path": found.path, "name": name, "sha256": found.sha256, "bytes": found.size,
                "box_mtime": found.mtime, "loaded": loaded, "verdict": verdict})
    return HomeCopy(cell=found.cell, path=found.path, local=target, sha256=found.sha256, size=found.size,
                    box_mtime=found.mtime, copied_at=copied_at, loaded=loaded, verdict=verdict)


async def _stream(transport: Transport, remote_path: str, part: Path, found: OnBox) -> None:
    """The box's bytes into `part`, hashed on the way and fsynced; NotTheBoxBytes when they are not the stated ones."""
    digest = hashlib.sha256()
    done = 0
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        async for chunk in transport.read_chunks(remote_path, 0, CHUNK, expect=found.size):
            done += len(chunk)
            if done > found.size:
                raise NotTheBoxBytes(f"it grew past the {found.size:,} bytes the box stated while it was read")
            await asyncio.to_thread(_append, fd, chunk, digest)
        await asyncio.to_thread(os.fsync, fd)
    finally:
        os.close(fd)
    if done != found.size or digest.hexdigest() != found.sha256:
        raise NotTheBoxBytes(f"{done:,} bytes arrived whose sha256 is not the one the box stated: it changed "
                              "while it was read (asked again at the next interval)")


def _append(fd: int, chunk: bytes, digest: Any) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]
    digest.update(chunk)


async def _load_check(session: Session, run: RunConfig, part: Path, found: OnBox) -> tuple[bool, str]:
    """The load check's verdict for these bytes (cached by sha256 like a pull's), in the isolated process."""
    from remote_gpu_trainer.checkpoint_kinds import kind_of
    from remote_gpu_trainer.services.evidence.load_checks import (
        DETERMINISTIC_ERRORS,
        LoadCheckPool,
        check_timeout,
        load_check_key,
        load_check_problem,
        load_check_request,
    )

    kind = kind_of(found.path)
    key = load_check_key(run, kind)
    result = session.db.cached_load_check(found.sha256, key)
    if result is None:
        pool = LoadCheckPool(1)
        try:
            result = await pool.check(part, load_check_request(run, kind), check_timeout(part))
        finally:
            await pool.close()
        if result.get("ok") or result.get("error") in DETERMINISTIC_ERRORS:
            session.db.store_load_check(found.sha256, key, result)
    if result.get("ok"):
        return True, f"loads weights-only: {result.get('tensors')} tensors"
    return False, f"does not load: {escape_control(load_check_problem(found.path, result).detail)}"


def _from_event(project: ProjectConfig, run_id: str, detail: dict[str, Any], at: datetime) -> HomeCopy | None:
    """A kept copy from its event; None for one whose fields are not what this module writes."""
    cell, path, name = detail.get("cell"), detail.get("path"), detail.get("name")
    size, sha256, mtime = detail.get("bytes"), detail.get("sha256"), detail.get("box_mtime")
    if not (isinstance(cell, str) and isinstance(path, str) and isinstance(name, str) and isinstance(sha256, str)
            and isinstance(size, int) and isinstance(mtime, int | float)) or "/" in name or name.startswith("."):
        return None
    return HomeCopy(cell=cell, path=path, local=home_dir(project, run_id) / cell / name, sha256=sha256, size=size,
                    box_mtime=float(mtime), copied_at=at, loaded=bool(detail.get("loaded")),
                    verdict=str(detail.get("verdict", "")))


def _monotonic_at(session: Session, at: datetime) -> float:
    """A wall-clock time as this process's monotonic clock reads it (for the interval between copies)."""
    return time.monotonic() - max(0.0, (session.clock() - at.astimezone(UTC)).total_seconds())


def age_s(copy: HomeCopy, now: datetime) -> float:
    """The kept checkpoint's age: how long ago the run wrote it, by the box's clock against ours."""
    return max(0.0, now.timestamp() - copy.box_mtime)


async def watcher_lines(session: Session, run_id: str, liveness_state: str) -> list[str]:
    """A watcher's part (the TUI, `rgt watch RUN`, the patrol): while the run runs, keep its checkpoint home when
    that is due; a line for each copy kept and each cell not kept, nothing otherwise."""
    if liveness_state not in ("running", "stalled"):
        return []
    kept = await keep_home(session, run_id)
    if kept is None:
        return []
    return ([f"{run_id}: {copy.cell}/{escape_control(copy.path)} kept home ({copy.size:,} bytes, {copy.verdict})"
             for copy in kept.copied] + [f"{run_id}: checkpoint not kept home: {problem}" for problem in kept.problems])
