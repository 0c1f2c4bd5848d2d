"""The resumable pull: the recorded manifest first, then every file it lists, each byte checked on the way.

docs/gate.md §3-§4 and docs/remote-ops.md §8. The manifest is fetched only when its sha256 is the one
recorded at build time, and every file is streamed through sha256 against the manifest's entry before it
is renamed into place; a file that changed on the box is refused, never accepted. This module drives the
transfers (how many at once, the retries, the batches of small files from pull_batches.py, naming why a
file failed); pull_local.py is where the bytes land on the local disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    Adoption,
    Manifest,
    ManifestFile,
    Problem,
    sha256_bytes,
)
from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
from remote_gpu_trainer.errors import HostKeyChanged, RgtError, TransportError, VerbFailed
from remote_gpu_trainer.fsutil import atomic_write, fsync_dir, lstat_or_none, remove_if_present
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.services.evidence import pull_batches
from remote_gpu_trainer.services.evidence.local_root import CHUNK, box_folders, not_home, recreate_links
from remote_gpu_trainer.services.evidence.manifest import (
    acceptable_manifest,
    build_manifest,
    read_box_manifest,
    recorded_adoption,
)
from remote_gpu_trainer.services.evidence.pull_local import (
    Refused,
    append_hashed,
    local_checks,
    local_side,
    open_part,
    seal,
    write_batch,
)
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import escape_control, size

PULL_FILES = 16  # files in flight at once
PULL_LARGE = 3  # of which larger than LARGE_FILE
LARGE_FILE = 4 << 20
PULL_TRIES = 3
FSYNC_EVERY = 256 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class PullProgress:
    """One file's progress; `phase` is present, resuming, downloading, done, retrying or failed."""

    path: str
    done: int
    total: int
    phase: str

    def line(self) -> str:
        """`downloading seed0/best.pth  1.5 MB/4.0 MB (38%)`, the path escaped (it came from the box)."""
        percent = 100.0 * self.done / self.total if self.total else 100.0
        return f"{self.phase:<11} {escape_control(self.path)}  {size(self.done)}/{size(self.total)} ({percent:.0f}%)"


@dataclass(frozen=True)
class PullResult:
    """What one pull did with each file the manifest lists: fetched, already present, or failed (why)."""

    manifest_sha256: str
    files: list[str]  # every path the manifest lists
    bytes: int
    fetched: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    failed: list[Problem] = field(default_factory=list)
    adopted_run_id: str | None = None  # the manifest was adopted (docs/gate.md §2.1), its bytes naming this run id

    @property
    def ok(self) -> bool:
        return not self.failed


class _ContractBroken(Exception):
    """The remote file no longer matches the manifest: retrying cannot help. `reason` is the Problem code."""

    def __init__(self, message: str, reason: str = "changed_on_box") -> None:
        super().__init__(message)
        self.reason = reason


async def pull(project: ProjectConfig, run: RunConfig, transport: Transport, db: StateDB,
               progress: Callable[[PullProgress], None] | None = None) -> PullResult:
    """Manifest first, then every listed file resumably; never deletes anything local but its own `.part`
    (and a local file whose bytes are not the manifest's, which is fetched again in its place).

    Before any file is fetched, the bytes still to come are compared with the free space where the run
    lands: a pull that cannot fit is refused with the figures instead of failing half-way. Up to
    PULL_FILES files are in flight at once (small files are latency-bound), at most PULL_LARGE of them
    larger than LARGE_FILE (their read-ahead windows are what costs memory). Over a transport where each
    file costs round trips, small files travel in batches (pull_batches.py); any of them a batch
    did not bring back clean goes down the per-file path like the rest."""
    root = project.run_dir(run.id)
    elsewhere = not_home(project.root, run.id, box_folders(project, run))
    if elsewhere is not None:  # docs/gate.md §5: a "copy" that is the box's own files is no copy
        raise VerbFailed(f"runs/{run.id} is not a local copy: {elsewhere}")
    root.mkdir(parents=True, exist_ok=True)
    recorded = db.recorded_manifest(run.id) or await build_manifest(transport, run, db)
    manifest, space_checked = await _manifest_for_pull(root, run, transport, recorded, recorded_adoption(db, run.id))
    if not space_checked:
        await _in_thread(_check_free_space, root, manifest)
    puller = _Puller(root, run, transport, db, progress or (lambda _: None))
    small = [entry for entry in manifest.files
             if transport.batches_small_files and entry.bytes <= pull_batches.BATCH_FILE_MAX]
    batched_paths = {entry.path for entry in small}
    singles = [entry for entry in manifest.files if entry.path not in batched_paths]
    async with asyncio.TaskGroup() as group:
        batched = [group.create_task(puller.pull_batch(batch)) for batch in _groups(small)]
        tasks = {entry.path: group.create_task(puller.pull_file(entry.path, entry.bytes, entry.sha256))
                 for entry in singles}
    await _in_thread(puller.seal_all)  # the renames are durable and cached before we return
    outcomes = {path: task.result() for path, task in tasks.items()}
    for task in batched:
        outcomes.update(task.result())
    fetched, present, failed = [], [], []
    for entry in manifest.files:
        outcome = outcomes[entry.path]
        if isinstance(outcome, Problem):
            failed.append(outcome)
        elif outcome == "present":
            present.append(entry.path)
        else:
            fetched.append(entry.path)
    if not failed:
        recreate_links(root, manifest)  # docs/gate.md §2: only links to listed files inside the root
    return PullResult(manifest_sha256=manifest.sha256, files=[entry.path for entry in manifest.files],
                      bytes=manifest.total_bytes,
                      fetched=fetched, present=present, failed=failed, adopted_run_id=manifest.adopted_run_id)


def _check_free_space(root: Path, manifest: Manifest) -> None:
    """Refuse, with the figures, a pull whose remaining bytes do not fit on the local disk."""
    needed = 0
    for entry in manifest.files:
        target = root.joinpath(*entry.path.split("/"))
        info = lstat_or_none(target)
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_size == entry.bytes:
            continue
        part = lstat_or_none(target.with_name(target.name + ".part"))
        have = part.st_size if part is not None and stat.S_ISREG(part.st_mode) and part.st_size <= entry.bytes else 0
        needed += entry.bytes - have
    free = shutil.disk_usage(root).free
    if needed > free:
        raise VerbFailed(f"{root}: the pull needs {size(needed)} more ({needed:,} bytes of "
                         f"{size(manifest.total_bytes)} listed), only {size(free)} ({free:,} bytes) are free there: "
                         "free space, then pull again")


async def _manifest_for_pull(root: Path, run: RunConfig, transport: Transport, recorded: str,
                             adopted: Adoption | None = None) -> tuple[Manifest, bool]:
    """The recorded manifest, checked by every §2 rule (an adopted one by its adoption step, §2.1) before it is
    written into the local root, and whether the free space was checked for it (a manifest fetched now is
    checked before it is written: nothing lands here when the pull cannot fit).

    A different manifest already there stops the pull: two manifests are never mixed.
    """
    final = root / MANIFEST_NAME
    if os.path.lexists(final):
        if not final.is_file() or final.is_symlink():
            raise VerbFailed(f"{final}: not a regular file: move it aside")
        existing = final.read_bytes()
        if sha256_bytes(existing) != recorded:
            raise VerbFailed(f"{final}: a different manifest is already here (sha256 "
                             f"{sha256_bytes(existing)[:12]}, run records {recorded[:12]}): never mix two "
                             f"manifests; move {root} aside or use a new run id")
        return acceptable_manifest(existing, run, final, adopted), False
    remote = f"{run.remote_root.rstrip('/')}/{MANIFEST_NAME}"
    data = await read_box_manifest(transport, remote)
    if sha256_bytes(data) != recorded:
        raise VerbFailed(f"{remote}: manifest on the box (sha256 {sha256_bytes(data)[:12]}) is not the one "
                         f"recorded at build time ({recorded[:12]}): the evidence changed; investigate")
    manifest = acceptable_manifest(data, run, remote, adopted)
    await _in_thread(_check_free_space, root, manifest)  # before anything is written here
    await _in_thread(atomic_write, final, data)
    return manifest, True


class _Puller:
    """One pull's shared parts: where files land, the transport, the limits on files in flight, and the
    folders whose new entries must be fsynced before the pull reports them (once per folder, at the end,
    instead of once per file), with the hashes streamed on the way seeding the hash cache in one
    transaction."""

    def __init__(self, root: Path, run: RunConfig, transport: Transport, db: StateDB,
                 report: Callable[[PullProgress], None]) -> None:
        self.root = root
        self.run = run
        self.remote_root = run.remote_root.rstrip("/")
        self.transport = transport
        self.db = db
        self.report = report
        self.files = asyncio.Semaphore(PULL_FILES)
        self.large = asyncio.Semaphore(PULL_LARGE)
        self.check_slots = asyncio.Semaphore(1)  # the batches' local checks, one after the other, in batch order
        self.batch_slots = asyncio.Semaphore(pull_batches.BATCH_PARALLEL)
        self.write_slots = asyncio.Semaphore(pull_batches.BATCH_PARALLEL)
        self.batching = True  # until a batch fails at the transport: then every file goes the per-file way
        self.written_dirs: set[Path] = set()
        self.hashed: list[tuple[str, FileKey, str]] = []

    def seal_all(self) -> None:
        """fsync each folder that got new files once, then remember their hashes (so the dashboard's next
        refresh hashes nothing)."""
        for folder in sorted(self.written_dirs):
            fsync_dir(folder)
        self.db.store_hashes(self.hashed)

    async def pull_batch(self, entries: Sequence[ManifestFile]) -> dict[str, str | Problem]:
        """A batch of small files down one command; what it did not bring back clean (and anything with a
        `.part` to resume, or refused here) takes the per-file path. The local checks come before the batch
        waits for a slot to stream in, so a batch's checks run while the batches before it stream instead
        of holding up its own stream."""
        outcomes: dict[str, str | Problem] = {}
        async with self.check_slots:
            checked = await _in_thread(local_checks, self.root, entries, self.db)
        wanted = []
        for entry, (target, state) in zip(entries, checked, strict=True):
            if state == "present":
                self.report(PullProgress(entry.path, entry.bytes, entry.bytes, "present"))
                outcomes[entry.path] = "present"
            elif state == "fetch" and target is not None:
                wanted.append((entry, target))
        got: dict[str, memoryview] = {}
        async with self.batch_slots:
            if self.batching:
                try:
                    got = await pull_batches.fetch(self.transport, self.run.python, self.remote_root,
                                                   [pull_batches.Wanted(e.path, e.bytes) for e, _ in wanted])
                except (RgtError, OSError, TimeoutError):
                    # the per-file path meets the same fault and names it; a box whose batches hang or
                    # fail does not get to cost every later batch its timeout too
                    self.batching = False
        async with self.write_slots:  # the next batch streams while this one is written (disk-bound)
            written = await _in_thread(write_batch, [(entry, target, got.get(entry.path))
                                                     for entry, target in wanted])
        for entry, target, info in written:
            self.written_dirs.add(target.parent)
            self.hashed.append((str(target), FileKey.of(info), entry.sha256))
            self.report(PullProgress(entry.path, entry.bytes, entry.bytes, "done"))
            outcomes[entry.path] = "fetched"
        rest = [entry for entry in entries if entry.path not in outcomes]
        results = await asyncio.gather(*(self.pull_file(entry.path, entry.bytes, entry.sha256) for entry in rest))
        outcomes.update({entry.path: result for entry, result in zip(rest, results, strict=True)})
        return outcomes

    async def pull_file(self, path: str, size: int, sha256: str) -> str | Problem:
        """'present', 'fetched', or the Problem (its code the reason) that made the file fail after its
        tries."""
        async with self.files, (self.large if size > LARGE_FILE else contextlib.nullcontext()):
            return await self._tries(path, size, sha256)

    async def _tries(self, path: str, size: int, sha256: str) -> str | Problem:
        last: Problem | None = None
        for attempt in range(1, PULL_TRIES + 1):
            try:
                return await self._fetch(path, size, sha256)
            except Refused as exc:
                self.report(PullProgress(path, 0, size, "failed"))
                return exc.problem
            except _ContractBroken as exc:
                self.report(PullProgress(path, 0, size, "failed"))
                return Problem(exc.reason, path, str(exc))
            except HostKeyChanged as exc:  # no retry can help, and nothing may be sent to that host
                self.report(PullProgress(path, 0, size, "failed"))
                return Problem("host_key_changed", path, f"host key changed: {exc}")
            except (TransportError, OSError) as exc:
                last = _transfer_problem(path, exc)
                if last.code in ("no_space", "permission_denied"):
                    break
            except _HashMismatch as exc:
                last = Problem("changed_on_box", path, f"changed on the box: {exc}")
            self.report(PullProgress(path, 0, size, "retrying" if attempt < PULL_TRIES else "failed"))
        self.report(PullProgress(path, 0, size, "failed"))
        assert last is not None
        return Problem(last.code, path, f"{last.detail} (after {attempt} {'try' if attempt == 1 else 'tries'})")

    async def _fetch(self, path: str, size: int, sha256: str) -> str:
        """One try: keep a local copy whose bytes are the manifest's, else resume the `.part` (re-hashing
        its prefix), stream the rest, check, fsync, rename; the streamed hash seeds the hash cache."""
        report = self.report
        target, present = await _in_thread(local_side, self.root, path, self.db, size, sha256)
        if present:
            report(PullProgress(path, size, size, "present"))
            return "present"
        remote = f"{self.remote_root}/{path}"
        remote_info = await self.transport.stat(remote)
        part = target.with_name(target.name + ".part")
        if remote_info is None:
            remove_if_present(part)  # what an earlier try got of it cannot be completed
            raise _ContractBroken(f"missing on the box ({remote})", "missing_on_box")
        if remote_info.kind != "file":
            raise _ContractBroken(f"changed on the box: {remote} is not a regular file ({remote_info.kind})",
                                  "changed_on_box")
        if remote_info.size != size:
            raise _ContractBroken(f"changed on the box: {remote} is {remote_info.size} bytes, the manifest "
                                  f"says {size} (it changed after the manifest was built)", "changed_on_box")
        fd, offset, digest = await _in_thread(open_part, part, size, discard=lambda opened: os.close(opened[0]))
        if offset:
            report(PullProgress(path, 0, size, "resuming"))
        try:
            done = await _stream(remote, fd, offset, size, digest, self.transport,
                                 lambda count: report(PullProgress(path, count, size, "downloading")))
        except _ContractBroken:
            os.close(fd)
            remove_if_present(part)
            raise
        except BaseException:
            os.close(fd)  # on any other error (transport, cancel) the part stays for the next try to resume
            raise
        if done != size:
            os.close(fd)
            remove_if_present(part)
            raise _ContractBroken(f"changed on the box: {remote} ended at {done} bytes, the manifest says "
                                  f"{size}", "changed_on_box")
        if digest.hexdigest() != sha256:
            os.close(fd)
            remove_if_present(part)
            raise _HashMismatch("its sha256 after the transfer differs from the manifest's")
        renamed = await _in_thread(seal, fd, part, target)
        self.written_dirs.add(target.parent)
        self.hashed.append((str(target), FileKey.of(renamed), sha256))
        report(PullProgress(path, size, size, "done"))
        return "fetched"


async def _in_thread(func: Callable[..., T], *args: Any, discard: Callable[[T], None] | None = None) -> T:
    """`func(*args)` in a worker thread, returning only once that thread is done with it, even when the pull
    is cancelled meanwhile (docs/pull.md, "Cancelling a pull"). A cancel that returned while the thread was
    still writing let the caller close the descriptor under it; the next file the process opened got its
    number, and the rest of the chunk landed there. So the cancel is held until the thread ends, then
    raised; what the thread made that nobody will use (an opened `.part`) is handed to `discard`."""
    job = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        while not job.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait((job,))
        if discard is not None and not job.cancelled() and job.exception() is None:
            discard(job.result())
        raise


PULL_REASONS = {
    "host_key_changed": "host key changed", "no_space": "no space left", "changed_on_box": "changed on the box",
    "missing_on_box": "missing on the box", "permission_denied": "permission denied",
    "transfer_failed": "transfer failed", "path_unsafe": "unsafe path",
}


def _transfer_problem(path: str, exc: Exception) -> Problem:
    """Name why a transfer failed in the words a user acts on."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Problem("no_space", path, f"no space left on the local disk: {text}")
    if isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM)):
        return Problem("permission_denied", path, f"permission denied: {text}")
    if isinstance(exc, FileNotFoundError):
        return Problem("missing_on_box", path, f"missing on the box: {text}")
    return Problem("transfer_failed", path, f"transfer failed: {text}")


class _HashMismatch(Exception):
    """The streamed bytes do not hash to the manifest's sha256: the file changed on the box (retried)."""


def _groups(entries: Sequence[ManifestFile]) -> list[list[ManifestFile]]:
    """The small files in the batches pull_batches sizes (by count and bytes)."""
    by_path = {entry.path: entry for entry in entries}
    return [[by_path[item.path] for item in batch]
            for batch in pull_batches.batches([pull_batches.Wanted(e.path, e.bytes) for e in entries])]


async def _stream(remote: str, fd: int, offset: int, size: int, digest: Any, transport: Transport,
                  report: Callable[[int], None]) -> int:
    """Append the remote bytes after `offset` to `fd`, hashing as they pass; fsync every 256 MiB (the
    last fsync is the seal's). A remote file that grows past the manifest's size breaks the contract."""
    done, unsynced = offset, 0
    report(done)
    if done < size:
        async for chunk in transport.read_chunks(remote, offset, CHUNK, expect=size):
            if done + len(chunk) > size:
                raise _ContractBroken(f"changed on the box: {remote} grew past {size} bytes while reading")
            await _in_thread(append_hashed, fd, chunk, digest)
            done += len(chunk)
            unsynced += len(chunk)
            if unsynced >= FSYNC_EVERY:
                await _in_thread(os.fsync, fd)
                unsynced = 0
            report(done)
    return done
