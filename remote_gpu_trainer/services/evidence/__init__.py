"""The evidence chain: build the manifest on the box, pull it resumably, verify locally, feed the gate.

gate-and-manifests.md §3-§7 and remote-ops.md §8. Trust the artifact, not the claim: the builder's hash
is recorded at build time (trust boundary 1), the pull checks every byte against it while streaming, and
verification re-derives everything from the local bytes before it writes PULL_VERIFIED.json, which it
deletes first so a failed or interrupted run never leaves an old success behind.

Torch is never imported here: checkpoints are load-verified by `remote_gpu_trainer.probes.ckpt_probe` in a
small pool of long-lived probe processes (each imports torch once), each in its own process group with a
scrubbed environment, a per-file timeout, and a parent-death signal so none outlives rgt. Nothing here imports Textual.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import re
import shlex
import shutil
import signal
import stat
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer import __version__
from remote_gpu_trainer.audits.gate import (
    Approval,
    GateDecision,
    GateInputs,
    LocalFile,
    VerificationSeen,
    config_sha256,
    evaluate_evidence_only,
    evaluate_gate,
)
from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    MARKER_NAME,
    Manifest,
    ManifestFile,
    MarkerCheckpoint,
    Problem,
    is_checkpoint,
    marker_bytes,
    parse_manifest,
    path_problems,
    required_checkpoints,
    sha256_bytes,
)
from remote_gpu_trainer.clock import utc_now
from remote_gpu_trainer.config import ProjectConfig, RunConfig, run_config_record
from remote_gpu_trainer.errors import HostKeyChanged, RgtError, TransportError, VerbFailed
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.probes.ckpt_probe import PROBE_VERSION
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.remote import program_stdin
from remote_gpu_trainer.services.evidence import pull_batches
from remote_gpu_trainer.state.db import FileKey, StateDB
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import escape_control, size

__all__ = [
    "Approval", "FileStatus", "GateDecision", "GateInputs", "LocalFile", "PullProgress", "PullResult",
    "VerifyResult", "build_manifest", "builder_stdin", "checkpoint_statuses", "evaluate_evidence_only",
    "evaluate_gate", "gather_gate_inputs", "hash_with_cache", "pull", "remote_manifest", "verify",
]

BUILDER_TIMEOUT_S = 3600.0
MANIFEST_MAX_BYTES = 256 << 20  # a manifest of a million files is about 200 MiB
PULL_FILES = 16  # files in flight at once
PULL_LARGE = 3  # of which larger than LARGE_FILE
LARGE_FILE = 4 << 20
BATCH_WRITERS = 8  # threads writing one batch's files (concurrent fsyncs share journal commits)
PULL_TRIES = 3
CHUNK = 4 << 20
FSYNC_EVERY = 256 << 20
PROBE_MIN_TIMEOUT_S = 120.0
PROBE_S_PER_GIB = 30.0
MARKER_TEMP_PREFIX = ".rgt-tmp-PULL_VERIFIED."
VERIFIER_VERSION = f"{__version__}+{PROBE_VERSION}"
STATUSES = ("pending", "pulled", "verified", "missing", "size_mismatch", "hash_mismatch", "unloadable",
            "nonfinite")
_SHA_LINE = re.compile(r"^MANIFEST_SHA256=([0-9a-f]{64})$", re.MULTILINE)
_DETERMINISTIC_PROBE_ERRORS = {"blocked_global", "nonfinite", "no_tensors", "no_state_key"}
_PROBE_CODES = {
    "blocked_global": "ckpt_blocked_global", "nonfinite": "ckpt_nonfinite", "no_tensors": "ckpt_no_tensors",
    "no_state_key": "ckpt_no_state_key", "timeout": "ckpt_timeout",
}
_STATUS_OF_CODE = {
    "missing_local": "missing", "required_missing": "missing", "incomplete_part": "missing",
    "size_mismatch": "size_mismatch", "hash_mismatch": "hash_mismatch", "ckpt_nonfinite": "nonfinite",
    "metrics_invalid": "unloadable",
}
_STATUS_RANK = {status: rank for rank, status in enumerate(
    ("missing", "size_mismatch", "hash_mismatch", "nonfinite", "unloadable"))}


# -- value types ---------------------------------------------------------------------------------------------

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
    manifest_sha256: str
    files: list[str]  # every path the manifest lists
    bytes: int
    fetched: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    failed: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class FileStatus:
    path: str
    bytes: int
    sha256: str
    status: str  # one of STATUSES
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    errors: list[Problem]
    files: list[FileStatus]
    manifest_sha256: str | None = None
    marker: Path | None = None


# -- building the manifest on the far side -------------------------------------------------------------------

def builder_stdin(params: dict[str, Any]) -> bytes:
    """The builder's source with its PARAMS line in front (remote.program_stdin)."""
    return program_stdin("build_manifest.py", params)


async def build_manifest(transport: Transport, run: RunConfig, db: StateDB, *,
                         timeout: float = BUILDER_TIMEOUT_S) -> str:
    """Run the builder on the box and record the manifest's hash (trust boundary 1). Returns the hash."""
    params = {"root": transport.resolve(run.remote_root), "run_id": run.id, "roster": list(run.roster),
              "required": list(run.required)}
    where = f"{run.remote_root}/{MANIFEST_NAME}"
    result = await transport.run(f"{shlex.quote(run.python)} -", stdin=builder_stdin(params), timeout=timeout)
    match = _SHA_LINE.search(result.text)
    printed = match.group(1) if match else None
    if result.rc == 0 and printed:
        db.record_manifest(run.id, printed)
        return printed
    if result.rc == 4:
        recorded = db.recorded_manifest(run.id)
        if printed is not None and printed == recorded:
            return printed
        known = "this project never recorded one" if recorded is None else f"recorded {recorded[:12]}"
        raise VerbFailed(f"{where}: a different manifest already exists ({(printed or '?')[:12]}; {known}): "
                         "use a new run id or move the old manifest aside")
    if result.rc == 1:
        raise VerbFailed(f"{run.remote_root}: manifest refused: {_builder_problems(result.error_text)}")
    if result.rc == 127:
        raise VerbFailed(f"{run.python}: interpreter not found on the instance: "
                         f"set python in [runs.{run.id}]")
    tail = " ".join(result.error_text.split())[-300:] or "no output"
    raise VerbFailed(f"{where}: manifest builder failed (exit {result.rc}): {tail}")


def _builder_problems(stderr: str) -> str:
    """The first problems of the builder's JSON list, in one line."""
    try:
        problems = json.loads(stderr.strip().splitlines()[-1])
        items = [Problem(str(p["code"]), str(p["path"]), str(p["detail"])) for p in problems]
    except (ValueError, IndexError, KeyError, TypeError, RecursionError):  # the box wrote it: anything goes
        return " ".join(stderr.split())[-300:] or "no details"
    shown = "; ".join(item.line() for item in items[:3])
    more = f" (and {len(items) - 3} more)" if len(items) > 3 else ""
    return shown + more


# -- pulling -------------------------------------------------------------------------------------------------

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
    file costs round trips, small files travel in batches (services/pull_batches.py); any of them a batch
    did not bring back clean goes down the per-file path like the rest."""
    root = project.run_dir(run.id)
    root.mkdir(parents=True, exist_ok=True)
    recorded = db.recorded_manifest(run.id) or await build_manifest(transport, run, db)
    manifest = await _manifest_for_pull(root, run, transport, recorded)
    await asyncio.to_thread(_check_free_space, root, manifest)
    puller = _Puller(root, run, transport, db, progress or (lambda _: None))
    small = [entry for entry in manifest.files
             if transport.batches_small_files and entry.bytes <= pull_batches.BATCH_FILE_MAX]
    batched_paths = {entry.path for entry in small}
    singles = [entry for entry in manifest.files if entry.path not in batched_paths]
    async with asyncio.TaskGroup() as group:
        batched = [group.create_task(puller.pull_batch(batch)) for batch in _groups(small)]
        tasks = {entry.path: group.create_task(puller.pull_file(entry.path, entry.bytes, entry.sha256))
                 for entry in singles}
    await asyncio.to_thread(puller.seal_all)  # the renames are durable and cached before we return
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
    return PullResult(manifest_sha256=manifest.sha256, files=[entry.path for entry in manifest.files],
                      bytes=manifest.total_bytes,
                      fetched=fetched, present=present, failed=failed)


def _check_free_space(root: Path, manifest: Manifest) -> None:
    """Refuse, with the figures, a pull whose remaining bytes do not fit on the local disk."""
    needed = 0
    for entry in manifest.files:
        target = root.joinpath(*entry.path.split("/"))
        info = _lstat(target)
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_size == entry.bytes:
            continue
        part = _lstat(target.with_name(target.name + ".part"))
        have = part.st_size if part is not None and stat.S_ISREG(part.st_mode) and part.st_size <= entry.bytes else 0
        needed += entry.bytes - have
    free = shutil.disk_usage(root).free
    if needed > free:
        raise VerbFailed(f"{root}: the pull needs {size(needed)} more ({needed:,} bytes of "
                         f"{size(manifest.total_bytes)} listed), only {size(free)} ({free:,} bytes) are free there: "
                         "free space, then pull again")


async def _manifest_for_pull(root: Path, run: RunConfig, transport: Transport, recorded: str) -> Manifest:
    """The recorded manifest, checked by every §2 rule before it is written into the local root.

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
        return _acceptable(existing, run, final)
    remote = f"{run.remote_root.rstrip('/')}/{MANIFEST_NAME}"
    data = await _read_box_manifest(transport, remote)
    if sha256_bytes(data) != recorded:
        raise VerbFailed(f"{remote}: manifest on the box (sha256 {sha256_bytes(data)[:12]}) is not the one "
                         f"recorded at build time ({recorded[:12]}): the evidence changed; investigate")
    manifest = _acceptable(data, run, remote)
    await asyncio.to_thread(_check_free_space, root, manifest)  # before anything is written here
    await asyncio.to_thread(atomic_write, final, data)
    return manifest


async def _read_box_manifest(transport: Transport, remote: str) -> bytes:
    """The box's manifest bytes, read only when it is a regular file no larger than any manifest can be:
    a link to /dev/zero would fill memory, and opening a FIFO would hang the pull (and the SFTP session)."""
    info = await transport.stat(remote)
    if info is None:
        raise VerbFailed(f"{remote}: the manifest on the box is gone: build it again (rgt pull builds it)")
    if info.kind != "file" or info.size > MANIFEST_MAX_BYTES:
        what = f"a {info.kind}" if info.kind != "file" else f"{size(info.size)}, more than any manifest"
        raise VerbFailed(f"{remote}: the manifest on the box is {what}: refused unread; investigate the box")
    data = bytearray()
    async for chunk in transport.read_chunks(remote, 0, expect=info.size):
        data += chunk
        if len(data) > info.size:
            raise VerbFailed(f"{remote}: the manifest on the box grew while it was read: refused; pull again")
    return bytes(data)


def _acceptable(data: bytes, run: RunConfig, where: object) -> Manifest:
    manifest, problems = parse_manifest(data, roster=run.roster, run_id=run.id)
    if manifest is None or problems:
        raise VerbFailed(f"{where}: manifest refused: {problems_line(problems) if problems else 'unreadable'}")
    return manifest


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
        self.batch_slots = asyncio.Semaphore(pull_batches.BATCH_PARALLEL)
        self.write_slots = asyncio.Semaphore(pull_batches.BATCH_PARALLEL)
        self.batching = True  # until a batch fails at the transport: then every file goes the per-file way
        self.written_dirs: set[Path] = set()
        self.hashed: list[tuple[str, FileKey, str]] = []

    def seal_all(self) -> None:
        """fsync each folder that got new files once, then remember their hashes (so the dashboard's next
        refresh hashes nothing)."""
        for folder in sorted(self.written_dirs):
            _fsync_dir(folder)
        self.db.store_hashes(self.hashed)

    async def pull_batch(self, entries: Sequence[ManifestFile]) -> dict[str, str | Problem]:
        """A batch of small files down one command; what it did not bring back clean (and anything with a
        `.part` to resume, or refused here) takes the per-file path."""
        outcomes: dict[str, str | Problem] = {}
        async with self.batch_slots:
            checked = await asyncio.to_thread(_local_checks, self.root, entries, self.db)
            wanted = []
            for entry, (target, state) in zip(entries, checked, strict=True):
                if state == "present":
                    self.report(PullProgress(entry.path, entry.bytes, entry.bytes, "present"))
                    outcomes[entry.path] = "present"
                elif state == "fetch" and target is not None:
                    wanted.append((entry, target))
            got: dict[str, memoryview] = {}
            if self.batching:
                try:
                    got = await pull_batches.fetch(self.transport, self.run.python, self.remote_root,
                                                   [pull_batches.Wanted(e.path, e.bytes) for e, _ in wanted])
                except (RgtError, OSError, TimeoutError):
                    # the per-file path meets the same fault and names it; a box whose batches hang or
                    # fail does not get to cost every later batch its timeout too
                    self.batching = False
        async with self.write_slots:  # the next batch streams while this one is written (disk-bound)
            written = await asyncio.to_thread(_write_batch, [(entry, target, got.get(entry.path))
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
            except _Refused as exc:
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
        target, present = await asyncio.to_thread(_local_side, self.root, path, self.db, size, sha256)
        if present:
            report(PullProgress(path, size, size, "present"))
            return "present"
        remote = f"{self.remote_root}/{path}"
        remote_info = await self.transport.stat(remote)
        part = target.with_name(target.name + ".part")
        if remote_info is None:
            _unlink(part)  # what an earlier try got of it cannot be completed
            raise _ContractBroken(f"missing on the box ({remote})", "missing_on_box")
        if remote_info.kind != "file":
            raise _ContractBroken(f"changed on the box: {remote} is not a regular file ({remote_info.kind})",
                                  "changed_on_box")
        if remote_info.size != size:
            raise _ContractBroken(f"changed on the box: {remote} is {remote_info.size} bytes, the manifest "
                                  f"says {size} (it changed after the manifest was built)", "changed_on_box")
        fd, offset, digest = await asyncio.to_thread(_open_part, part, size)
        if offset:
            report(PullProgress(path, 0, size, "resuming"))
        try:
            done = await _stream(remote, fd, offset, size, digest, self.transport,
                                 lambda count: report(PullProgress(path, count, size, "downloading")))
        except _ContractBroken:
            os.close(fd)
            _unlink(part)
            raise
        except BaseException:
            os.close(fd)  # on any other error (transport, cancel) the part stays for the next try to resume
            raise
        if done != size:
            os.close(fd)
            _unlink(part)
            raise _ContractBroken(f"changed on the box: {remote} ended at {done} bytes, the manifest says "
                                  f"{size}", "changed_on_box")
        if digest.hexdigest() != sha256:
            os.close(fd)
            _unlink(part)
            raise _HashMismatch("its sha256 after the transfer differs from the manifest's")
        renamed = await asyncio.to_thread(_seal, fd, part, target)
        self.written_dirs.add(target.parent)
        self.hashed.append((str(target), FileKey.of(renamed), sha256))
        report(PullProgress(path, size, size, "done"))
        return "fetched"


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
    pass


def _groups(entries: Sequence[ManifestFile]) -> list[list[ManifestFile]]:
    """The small files in the batches pull_batches sizes (by count and bytes)."""
    by_path = {entry.path: entry for entry in entries}
    return [[by_path[item.path] for item in batch]
            for batch in pull_batches.batches([pull_batches.Wanted(e.path, e.bytes) for e in entries])]


def _local_checks(root: Path, entries: Sequence[ManifestFile], db: StateDB) -> list[tuple[Path | None, str]]:
    """For each entry: where it lands and whether it is 'present', to 'fetch' whole, or 'single' (a
    `.part` to resume, or a path refused here: the per-file path handles and reports those)."""
    out: list[tuple[Path | None, str]] = []
    for entry in entries:
        try:
            target, present = _local_side(root, entry.path, db, entry.bytes, entry.sha256)
        except (_Refused, OSError):
            out.append((None, "single"))
            continue
        part = target.with_name(target.name + ".part")
        out.append((target, "present" if present else "single" if os.path.lexists(part) else "fetch"))
    return out


def _write_batch(items: Sequence[tuple[ManifestFile, Path, memoryview | None]]
                 ) -> list[tuple[ManifestFile, Path, os.stat_result]]:
    """Write each file whose bytes hash to the manifest's; the others are left for the per-file path.
    Several files are written at once: their fsyncs then share the file system's journal commits, where
    one after the other each waits for its own (2,000 small files: about 1.2 s of a 5 s pull)."""
    with ThreadPoolExecutor(BATCH_WRITERS) as pool:
        done = list(pool.map(lambda item: _write_whole(*item), items))
    return [(entry, target, info) for (entry, target, _), info in zip(items, done, strict=True) if info is not None]


def _write_whole(entry: ManifestFile, target: Path, data: memoryview | None) -> os.stat_result | None:
    """A new `.part` with exactly these bytes, fsynced and renamed into place, if they are the
    manifest's; None otherwise (or when the local disk refuses: the per-file path reports why). The
    folder's fsync comes once per pull (`_Puller.seal_all`)."""
    if data is None or hashlib.sha256(data).hexdigest() != entry.sha256:
        return None
    part = target.with_name(target.name + ".part")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return None  # something is there (not ours to remove) or the folder is refused: the per-file path says
    try:
        try:
            view = data
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            os.close(fd)
            raise
        return _seal(fd, part, target)
    except OSError:
        _unlink(part)
        return None


def _same_file(target: Path, written: os.stat_result) -> os.stat_result:
    """The renamed file's stat, provided it is the file that was written (not one swapped in under its
    `.part` name meanwhile); OSError otherwise, which the per-file path retries."""
    info = os.lstat(target)
    if (info.st_ino, info.st_dev) != (written.st_ino, written.st_dev):
        raise OSError(errno.EIO, "the .part was replaced while it was written", str(target))
    return info


class _Refused(Exception):
    """A manifest entry that may not land here at all (its Problem says why); never retried."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


def _local_side(root: Path, path: str, db: StateDB, size: int, sha256: str) -> tuple[Path, bool]:
    """Where the entry lands, and whether the local copy already holds the manifest's bytes. A copy
    with other bytes (damaged or edited here) loses its `.part` too: it is fetched whole again."""
    target, problem = _local_target(root, path)
    if problem is not None:
        raise _Refused(problem)
    assert target is not None
    info = _lstat(target)
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_size != size:
        return target, False
    if hash_with_cache_sync(db, target) == sha256:
        return target, True
    _unlink(target.with_name(target.name + ".part"))
    return target, False


def _open_part(part: Path, size: int) -> tuple[int, int, Any]:
    """The `.part` opened for appending (never through a symlink), its resume offset, and a hasher fed
    with the prefix already there."""
    part.parent.mkdir(parents=True, exist_ok=True)
    offset, digest = _resume_prefix(part, size)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    opened = os.fstat(fd)
    if opened.st_nlink != 1 or opened.st_size != offset:  # changed between the check and the open
        os.close(fd)
        raise OSError(errno.EIO, "the .part changed while it was opened", str(part))
    return fd, offset, digest


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
            await asyncio.to_thread(_append, fd, chunk, digest)
            done += len(chunk)
            unsynced += len(chunk)
            if unsynced >= FSYNC_EVERY:
                await asyncio.to_thread(os.fsync, fd)
                unsynced = 0
            report(done)
    return done


def _seal(fd: int, part: Path, target: Path) -> os.stat_result:
    """fsync and close the complete `.part`, rename it into place; the folder's fsync comes once per pull
    (`_Puller.seal_all`). Returns the renamed file's stat for the hash cache."""
    try:
        os.fsync(fd)
        written = os.fstat(fd)
    finally:
        os.close(fd)
    os.replace(part, target)
    return _same_file(target, written)


def _resume_prefix(part: Path, size: int) -> tuple[int, Any]:
    """Resume offset and a hasher fed with the existing prefix (hash state cannot be persisted)."""
    digest = hashlib.sha256()
    info = _lstat(part)
    if info is None:
        return 0, digest
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{part}: not a regular file")
    if info.st_nlink != 1:  # hard-linked elsewhere: appending or truncating would change the other name too
        os.unlink(part)
        return 0, digest
    if info.st_size > size:
        os.truncate(part, 0)
        return 0, digest
    with open(part, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return info.st_size, digest


def _append(fd: int, chunk: bytes, digest: Any) -> None:
    view = memoryview(chunk)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    digest.update(chunk)


def _local_target(root: Path, path: str) -> tuple[Path | None, Problem | None]:
    """The local path for a manifest entry, refusing anything that could land outside the local root."""
    reasons = path_problems(path)
    if reasons:
        return None, Problem("path_unsafe", path, reasons[0])
    current = root
    for part in path.split("/")[:-1]:
        current = current / part
        info = _lstat(current)
        if info is not None and not stat.S_ISDIR(info.st_mode):
            return None, Problem("path_unsafe", path, f"{current} is a symlink or not a folder")
    target = root.joinpath(*path.split("/"))
    info = _lstat(target)
    if info is not None and not stat.S_ISREG(info.st_mode):
        return None, Problem("path_unsafe", path, f"{target} exists and is not a regular file")
    if not target.resolve().is_relative_to(root.resolve()):
        return None, Problem("path_unsafe", path, "resolves outside the local root")
    return target, None


# -- verification --------------------------------------------------------------------------------------------

async def verify(project: ProjectConfig, run: RunConfig, db: StateDB,
                 progress: Callable[[str], None] | None = None, *,
                 probe_timeout: float | None = None) -> VerifyResult:
    """§5 in order; the marker is written only when every error list is empty.

    `progress` receives one-line status texts (for a status bar or a headless log).
    """
    root = project.run_dir(run.id)
    report = progress or (lambda _: None)
    _remove_marker(root)
    errors: list[Problem] = []
    manifest = _verify_manifest(root, run, db, errors)
    report(f"manifest {MANIFEST_NAME} checked")
    if manifest is None:
        return _finish(root, run, db, None, errors, {}, {}, [])
    local = _local_entries(root, errors)
    listed = manifest.by_path()
    per_file: dict[str, list[Problem]] = {path: [] for path in listed}
    stats: dict[str, os.stat_result] = {}
    for path, info in sorted(local.items()):
        if path in listed:
            stats[path] = info
        elif not path.endswith(".part"):
            errors.append(Problem("unexpected_local", path, "not in the manifest; remove it or re-pull"))
    for path, entry in listed.items():
        seen = stats.get(path)
        if seen is None:
            per_file[path].append(Problem("missing_local", path, "in the manifest, absent here: run pull"))
        elif seen.st_size != entry.bytes:
            per_file[path].append(Problem("size_mismatch", path,
                                          f"{seen.st_size} bytes here, {entry.bytes} in the manifest"))
    hashed = await _hash_listed(root, manifest, per_file, db, report)
    _check_required(run, manifest, errors)
    await asyncio.to_thread(_check_metrics, root, hashed, per_file)
    checkpoints = await _probe_checkpoints(root, run, manifest, hashed, per_file, db, report, probe_timeout)
    for problems in per_file.values():
        errors.extend(problems)
    return _finish(root, run, db, manifest, errors, per_file, stats, checkpoints, report)


def _remove_marker(root: Path) -> None:
    """Step 0: no old success may survive a verification that fails or is interrupted."""
    if not root.is_dir():
        return
    names = [MARKER_NAME] + [name for name in os.listdir(root) if name.startswith(MARKER_TEMP_PREFIX)]
    try:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(root / name)
        _fsync_dir(root)
    except OSError as exc:
        raise VerbFailed(f"{root / MARKER_NAME}: cannot remove the old marker ({exc.strerror}): "
                         "verification aborted") from None


def _verify_manifest(root: Path, run: RunConfig, db: StateDB, errors: list[Problem]) -> Manifest | None:
    path = root / MANIFEST_NAME
    info = _lstat(path)
    if info is None:
        errors.append(Problem("missing_local", MANIFEST_NAME, "no manifest in the local root: run pull"))
        return None
    if not stat.S_ISREG(info.st_mode):
        errors.append(Problem("symlink", MANIFEST_NAME, "manifest is a symlink or not a regular file"))
        return None
    data = path.read_bytes()
    manifest, problems = parse_manifest(data, roster=run.roster, run_id=run.id)
    errors.extend(problems)
    recorded = db.recorded_manifest(run.id)
    if recorded is not None and recorded != sha256_bytes(data):
        errors.append(Problem("manifest_mismatch", MANIFEST_NAME,
                              f"sha256 {sha256_bytes(data)[:12]} is not the manifest recorded at build time "
                              f"({recorded[:12]})"))
    return manifest


def _walk_local_root(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every non-directory entry under the local root with its lstat (links never followed), by relative
    path; the manifest and the marker at the root are not entries. Verification and the gate both read
    the local root through this one walk, so they can never disagree about what is there."""
    stack = [""]
    while stack:
        relative = stack.pop()
        with os.scandir(root / relative if relative else root) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            if not relative and entry.name in (MANIFEST_NAME, MARKER_NAME):
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
            else:
                yield path, info


def _local_entries(root: Path, errors: list[Problem]) -> dict[str, os.stat_result]:
    """Step 2: every regular file under the root by relative path.

    Symlinks, other non-regular entries and `.part` files become errors.
    """
    found: dict[str, os.stat_result] = {}
    for path, info in _walk_local_root(root):
        if stat.S_ISLNK(info.st_mode):
            errors.append(Problem("symlink", path, "symlink in the local root; replace it by the file"))
        elif not stat.S_ISREG(info.st_mode):
            errors.append(Problem("symlink", path, "not a regular file"))
        elif path.endswith(".part"):
            errors.append(Problem("incomplete_part", path, "incomplete transfer: run pull again"))
            found[path] = info
        else:
            found[path] = info
    return found


async def _hash_listed(root: Path, manifest: Manifest, per_file: dict[str, list[Problem]], db: StateDB,
                       report: Callable[[str], None]) -> dict[str, str]:
    """Steps 3-4: hash every file whose size matched, from its bytes (the hashes then seed the cache)."""
    todo = [entry for entry in manifest.files if not per_file[entry.path]]
    hashed: dict[str, str] = {}
    for index, entry in enumerate(todo, start=1):
        report(f"hashing {entry.path} ({index}/{len(todo)})")
        local = root.joinpath(*entry.path.split("/"))
        try:
            digest = await hash_fresh(db, local)  # a verdict: from the bytes, never from the cache
        except OSError as exc:
            per_file[entry.path].append(Problem("missing_local", entry.path, f"unreadable: {exc.strerror}"))
            continue
        if digest != entry.sha256:
            detail = f"sha256 {digest[:12]} here, {entry.sha256[:12]} in the manifest"
            per_file[entry.path].append(Problem("hash_mismatch", entry.path, detail))
        else:
            hashed[entry.path] = digest
    return hashed


async def hash_with_cache(db: StateDB, path: Path) -> str:
    """SHA-256 of a regular file for dashboards and the gate's freshness check: a file whose size, mtime,
    ctime and inode are unchanged is answered from the cache. Never used for a verdict (see `hash_fresh`)."""
    return await asyncio.to_thread(hash_with_cache_sync, db, path)


def hash_with_cache_sync(db: StateDB, path: Path) -> str:
    """The same, for synchronous callers (the gate, dashboards run it in a worker thread)."""
    cached = db.cached_hash(str(path), FileKey.of(os.lstat(path)))
    if cached is not None:
        return cached
    return hash_fresh_sync(db, path)


async def hash_fresh(db: StateDB, path: Path) -> str:
    """SHA-256 re-derived from the bytes, whatever the cache says; the result seeds the cache."""
    return await asyncio.to_thread(hash_fresh_sync, db, path)


def hash_fresh_sync(db: StateDB, path: Path) -> str:
    digest, key = _hash_stable(path)
    if key is not None:
        db.store_hash(str(path), key, digest)
    return digest


def _hash_stable(path: Path) -> tuple[str, FileKey | None]:
    """Hash from one descriptor; the cache key comes back only if the file did not change meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(f"{path}: not a regular file")
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    stable = FileKey.of(before) == FileKey.of(after)
    return digest.hexdigest(), FileKey.of(after) if stable else None


def _check_required(run: RunConfig, manifest: Manifest, errors: list[Problem]) -> None:
    """Step 5a: every roster cell lists every required file."""
    listed = manifest.by_path()
    for cell in run.roster:
        for name in run.required:
            path = f"{cell}/{name}"
            if path not in listed:
                errors.append(Problem("required_missing", path, "required file is not in the manifest"))


def _check_metrics(root: Path, hashed: dict[str, str], per_file: dict[str, list[Problem]]) -> None:
    """Step 5b: every `*metrics*.json` is a JSON object with no NaN or Infinity."""

    for path in sorted(hashed):
        name = path.rsplit("/", 1)[-1]
        if "metrics" not in name or not name.endswith(".json"):
            continue
        try:
            value = loads_strict(root.joinpath(*path.split("/")).read_bytes())
        except ValueError as exc:
            per_file[path].append(Problem("metrics_invalid", path, f"not valid finite JSON: {exc}"))
            continue
        if not isinstance(value, dict):
            per_file[path].append(Problem("metrics_invalid", path, "not a JSON object"))


def probe_key(run: RunConfig) -> str:
    """What besides the bytes decides a probe's verdict: probe version, torch version, allow-list, keys."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    return json.dumps({"probe": PROBE_VERSION, "torch": torch_version, "allow": sorted(run.allowed_globals),
                       "keys": list(run.state_keys)}, sort_keys=True)


async def _probe_checkpoints(root: Path, run: RunConfig, manifest: Manifest, hashed: dict[str, str],
                             per_file: dict[str, list[Problem]], db: StateDB,
                             report: Callable[[str], None],
                             timeout: float | None) -> list[MarkerCheckpoint]:
    """Step 6: each distinct content (sha256) whose bytes matched is probed once, in a small probe pool.

    Verdicts are cached by (sha256, probe key) across verifications; inside one verification every path
    with the same bytes gets the verdict of the one path that was probed.
    """
    wanted = set(required_checkpoints(run.roster, run.required, run.checkpoint_globs))
    wanted |= {entry.path for entry in manifest.files if is_checkpoint(entry.path, run.checkpoint_globs)}
    groups: dict[str, list[str]] = {}
    for path in sorted(path for path in wanted if path in hashed):
        groups.setdefault(hashed[path], []).append(path)
    key = probe_key(run)
    verdicts: dict[str, dict[str, Any]] = {}
    fresh: list[str] = []
    for sha256, paths in groups.items():
        cached = db.cached_probe(sha256, key)
        if cached is None:
            fresh.append(sha256)
            continue
        verdicts[sha256] = cached
        for path in paths:
            report(f"load-verifying {path}: identical bytes were load-verified before (cached verdict)")
    request = {"allow_globals": list(run.allowed_globals), "state_keys": list(run.state_keys)}
    counter = iter(range(1, len(fresh) + 1))

    async def one(pool: ProbePool, sha256: str) -> None:
        paths = groups[sha256]
        local = root.joinpath(*paths[0].split("/"))
        copies = f"; {len(paths) - 1} more path(s) hold the same bytes" if len(paths) > 1 else ""
        result = await pool.probe(local, request, timeout or _probe_timeout(local), started=lambda: report(
            f"load-verifying {paths[0]} ({next(counter)}/{len(fresh)}{copies})"))
        if result.get("ok") or result.get("error") in _DETERMINISTIC_PROBE_ERRORS:
            db.store_probe(sha256, key, result)
        verdicts[sha256] = result

    if fresh:
        size = probe_pool_size(len(fresh), sum(root.joinpath(*groups[sha256][0].split("/")).stat().st_size
                                               for sha256 in fresh))
        pool = ProbePool(size)
        try:
            async with asyncio.TaskGroup() as group:
                for sha256 in fresh:
                    group.create_task(one(pool, sha256))
        finally:
            await pool.close()
        report(f"load-verification: {pool.answered} probe(s) answered by {pool.started} probe process(es)")
    checkpoints: list[MarkerCheckpoint] = []
    for sha256, paths in groups.items():
        result = verdicts[sha256]
        for path in paths:
            if result.get("ok"):
                checkpoints.append(MarkerCheckpoint(
                    path=path, sha256=sha256, format=str(result["format"]), tensors=int(result["tensors"]),
                    elements=int(result["elements"]), state_key=str(result["state_key"])))
            else:
                per_file[path].append(_probe_problem(path, result))
    checkpoints.sort(key=lambda checkpoint: checkpoint.path)
    return checkpoints


def _probe_timeout(path: Path) -> float:
    return max(PROBE_MIN_TIMEOUT_S, PROBE_S_PER_GIB * path.stat().st_size / (1 << 30))


# -- the probe pool ------------------------------------------------------------------------------------------

PROBE_POOL_MAX = 4  # long-lived probe processes per verification, at most one per core
# Each extra probe process costs a torch import (about 1.5 s of CPU): measured with
# benchmarks/bench_verify.py on 2 cores, 200 small checkpoints take 1.47 s with one process and 2.63 s with
# two, so another process is started only for each further GiB of checkpoint bytes to load.
PROBE_BYTES_PER_PROCESS = 1 << 30
PROBE_ENV_KEEP = frozenset({"PATH", "HOME", "LANG", "TMPDIR"})
_PROBE_LINE_LIMIT = 16 << 20  # a verdict line (labels come from the file's keys) may be long, not unbounded


def probe_pool_size(files: int, total_bytes: int) -> int:
    """How many probe processes one verification starts: one per GiB to load, at most one per core, 4."""
    by_bytes = 1 + total_bytes // max(1, PROBE_BYTES_PER_PROCESS)
    return max(1, min(PROBE_POOL_MAX, os.cpu_count() or 1, files, by_bytes))


def probe_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The probe's whole environment: no provider keys, tokens or anything else of the caller's.

    Only PATH, HOME, LANG, LC_* and TMPDIR are kept; the GPU is hidden and torch runs single-threaded.
    """
    source = os.environ if source is None else source
    env = {name: value for name, value in source.items() if name in PROBE_ENV_KEEP or name.startswith("LC_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env


class _ProbeDied(Exception):
    pass


class ProbeProcess:
    """One `ckpt_probe --serve` process: its own session and process group, scrubbed environment, and
    PR_SET_PDEATHSIG so it dies with rgt; stderr goes to an unlinked temporary file (never a full pipe)."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Any) -> None:
        self.process = process
        self.stderr = stderr
        self.ready = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(cls) -> ProbeProcess:
        import tempfile

        stderr = tempfile.TemporaryFile()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-m", "remote_gpu_trainer.probes.ckpt_probe", "--serve",
                "--parent", str(os.getpid()), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=stderr, env=probe_environment(), start_new_session=True, limit=_PROBE_LINE_LIMIT)
        except BaseException:
            stderr.close()
            raise
        return cls(process, stderr)

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """One verdict; waits for the server's ready line first. Raises _ProbeDied on EOF or garbage."""
        if not self.ready:
            hello = await self._line()
            if hello.get("ready") is not True:
                raise _ProbeDied("no ready line")
            self.ready = True
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
            await self.process.stdin.drain()
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it died between two files
            raise _ProbeDied("input closed") from exc
        result = await self._line()
        if not isinstance(result.get("ok"), bool):
            raise _ProbeDied("a verdict without ok")
        return result

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        try:
            line = await self.process.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError) as exc:
            raise _ProbeDied("verdict line too long") from exc
        if not line:
            raise _ProbeDied("end of output")
        try:
            value = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise _ProbeDied("not JSON") from exc
        if not isinstance(value, dict):
            raise _ProbeDied("not a JSON object")
        return value

    def stderr_tail(self) -> str:
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - 4096))
            text = self.stderr.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""
        return " ".join(text.split())[-300:]

    async def kill(self) -> None:
        """SIGKILL the whole group (anything the probe started goes too), reap, drop the stderr file."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        try:
            await asyncio.shield(self.process.wait())
        finally:
            self.stderr.close()


class ProbePool:
    """At most `size` long-lived probe processes for one verification, started on demand.

    A probe that times out, crashes or answers garbage is killed with its group and its file gets a
    timeout/crash verdict; the next file gets a fresh process. `close()` must always be called (it kills
    every process still alive). `started` counts processes started, `answered` the verdict lines read.
    """

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.started = 0
        self.answered = 0
        self._slots = asyncio.Semaphore(self.size)
        self._idle: list[ProbeProcess] = []
        self._live: set[ProbeProcess] = set()
        self._closed = False

    @property
    def pids(self) -> list[int]:
        return sorted(probe.pid for probe in self._live)

    async def probe(self, path: Path, request: dict[str, Any], timeout: float,
                    started: Callable[[], None] | None = None) -> dict[str, Any]:
        """The verdict for `path`; `timeout` covers the whole exchange (and a fresh process's start)."""
        async with self._slots:
            if self._closed:
                raise RuntimeError("probe pool is closed")
            if started is not None:
                started()
            if self._idle:
                worker = self._idle.pop()
            else:  # starting is quick; the torch import it triggers is awaited under the timeout below
                worker = await ProbeProcess.start()
                self.started += 1
                self._live.add(worker)
            healthy = False
            try:
                async with asyncio.timeout(timeout):
                    result = await worker.ask({**request, "path": str(path)})
                self.answered += 1
                healthy = True
                return result
            except TimeoutError:
                return {"ok": False, "error": "timeout", "detail": f"no verdict within {timeout:.0f} s"}
            except _ProbeDied as exc:
                with contextlib.suppress(TimeoutError):  # it is exiting: let it, to report how it ended
                    await asyncio.wait_for(asyncio.shield(worker.process.wait()), 5)
                return {"ok": False, "error": "crash",
                        "detail": f"probe exit {worker.process.returncode} ({exc}): {worker.stderr_tail()}"}
            finally:
                if healthy and not self._closed:
                    self._idle.append(worker)
                else:
                    self._live.discard(worker)
                    await worker.kill()

    async def close(self) -> None:
        self._closed = True
        workers = list(self._live)
        self._live.clear()
        self._idle.clear()
        for worker in workers:
            await worker.kill()


def _probe_problem(path: str, result: dict[str, Any]) -> Problem:
    error = str(result.get("error"))
    code = _PROBE_CODES.get(error, "ckpt_crash")
    if error == "blocked_global":
        detail = (f"pickle needs global {result.get('global')}, which weights-only loading refuses; "
                  "nothing was executed (allow it in allowed_globals only if you trust the file)")
    elif error == "nonfinite":
        detail = "non-finite values in " + ", ".join(str(label) for label in result.get("labels", []))
    elif error == "no_tensors":
        detail = "holds no tensors"
    else:
        detail = str(result.get("detail") or error)
    return Problem(code, path, detail)


def _finish(root: Path, run: RunConfig, db: StateDB, manifest: Manifest | None, errors: list[Problem],
            per_file: dict[str, list[Problem]], stats: dict[str, os.stat_result],
            checkpoints: list[MarkerCheckpoint],
            report: Callable[[str], None] | None = None) -> VerifyResult:
    """Step 7 and the verification record: statuses per file, the marker only on full success."""
    files = _file_statuses(manifest, errors, per_file, checkpoints)
    marker_path: Path | None = None
    marker_sha: str | None = None
    ok = not errors and manifest is not None
    if ok and manifest is not None:
        verified_at = utc_now()  # after the last read: nothing read later can predate it
        data = marker_bytes(run_id=manifest.run_id, manifest_sha256=manifest.sha256, verified_at=verified_at,
                            verifier_version=VERIFIER_VERSION, files=len(manifest.files),
                            total_bytes=manifest.total_bytes, checkpoints=checkpoints)
        marker_sha = sha256_bytes(data)
        marker_path = _write_marker(root, data)
        if report is not None:
            report(f"verified: wrote {MARKER_NAME}")
    records = []
    for status in files:
        record = status.to_dict()
        info = stats.get(status.path)
        record["local_key"] = dataclasses.asdict(FileKey.of(info)) if info is not None else None
        records.append(record)
    # the record that makes the marker evidence: a marker the gate finds must be this one, made under
    # this configuration (a crash between the marker and this record leaves a marker the gate refuses)
    db.add_verification(run.id, ok, manifest.sha256 if manifest else None,
                        [problem.to_dict() for problem in errors], records, marker_sha256=marker_sha,
                        config_sha256=config_sha256(run), config=run_config_record(run))
    return VerifyResult(ok=ok, errors=errors, files=files,
                        manifest_sha256=manifest.sha256 if manifest else None, marker=marker_path)


def _file_statuses(manifest: Manifest | None, errors: list[Problem], per_file: dict[str, list[Problem]],
                   checkpoints: Sequence[MarkerCheckpoint] = ()) -> list[FileStatus]:
    """Each file's worst problem, or what passed: the load result for a checkpoint, the hash for the rest."""
    if manifest is None:
        return []
    loads = {c.path: f"loads: {c.format} · {c.tensors} tensors · {c.elements:,} values · key {c.state_key}"
             for c in checkpoints}
    statuses: list[FileStatus] = []
    for entry in manifest.files:
        problems = per_file.get(entry.path, [])
        worst = min(problems, key=lambda p: _STATUS_RANK[_status_of(p.code)], default=None)
        status = _status_of(worst.code) if worst is not None else "verified"
        passed = loads.get(entry.path, "size and sha256 match")
        statuses.append(FileStatus(entry.path, entry.bytes, entry.sha256, status,
                                   worst.detail if worst is not None else passed))
    for problem in errors:
        if problem.code == "required_missing":
            statuses.append(FileStatus(problem.path, 0, "", "missing", problem.detail))
    return sorted(statuses, key=lambda item: item.path)


def _status_of(code: str) -> str:
    """§5 mapping: missing, size/hash mismatch, nonfinite, every other ckpt_* (and bad metrics) unloadable."""
    return _STATUS_OF_CODE.get(code, "unloadable")


def _write_marker(root: Path, data: bytes) -> Path:
    """A reader sees no marker or a whole one (fsutil.atomic_write; its temp name starts with
    MARKER_TEMP_PREFIX, which verification sweeps)."""
    final = root / MARKER_NAME
    atomic_write(final, data)
    return final


# -- dashboards and the gate ---------------------------------------------------------------------------------

def checkpoint_statuses(project: ProjectConfig, run: RunConfig, db: StateDB) -> list[FileStatus]:
    """Cheap per-checkpoint status for dashboards: no hashing, only stat and the last verification record.

    `pending` = not local yet; `pulled` = present but not verified as it is now; otherwise the status of
    the last verification, as long as the file's size and mtime are what that verification saw.
    """
    root = project.run_dir(run.id)
    manifest = _local_manifest(root, run)
    record = db.last_verification(run.id)
    seen: dict[str, dict[str, Any]] = {}
    if record is not None and manifest is not None and record.get("manifest_sha256") == manifest.sha256:
        seen = {item["path"]: item for item in record["files"] if isinstance(item, dict) and "path" in item}
    if manifest is None:
        names = required_checkpoints(run.roster, run.required, run.checkpoint_globs)
        return [FileStatus(path, 0, "", "pending", "no manifest pulled yet") for path in names]
    statuses = []
    for entry in manifest.files:
        if not is_checkpoint(entry.path, run.checkpoint_globs):
            continue
        info = _lstat(root.joinpath(*entry.path.split("/")))
        previous = seen.get(entry.path)
        if info is None or not stat.S_ISREG(info.st_mode):
            status, detail = "pending", ""
        elif previous is not None and previous.get("local_key") == dataclasses.asdict(FileKey.of(info)):
            status, detail = str(previous.get("status")), str(previous.get("detail", ""))
        else:
            status, detail = "pulled", "not verified since it was written"
        statuses.append(FileStatus(entry.path, entry.bytes, entry.sha256, status, detail))
    return statuses


def _local_manifest(root: Path, run: RunConfig) -> Manifest | None:
    path = root / MANIFEST_NAME
    info = _lstat(path)
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    manifest, _ = parse_manifest(path.read_bytes(), roster=run.roster, run_id=run.id)
    return manifest


def gather_gate_inputs(project: ProjectConfig, run: RunConfig, db: StateDB, instance_id: str,
                       approval: Approval | None, *, now: datetime | None = None,
                       action_described: bool = True, remote: RemoteManifest | None = None,
                       liveness: str | None = None) -> GateInputs:
    """Read what the gate decides on: marker and manifest bytes, every local entry with its hash, the last
    verification recorded, the run's latest launch, and (when given) the box's manifest and the job's state.

    Hashes come from the cache when the file is unchanged (size, mtime, ctime, inode), so evaluating the gate
    twice in a row (dialog open, then right before the call) is cheap. `action_described` is G6, decided by
    the teardown screen.
    """
    root = project.run_dir(run.id)
    marker = _read_regular(root / MARKER_NAME)
    manifest_bytes = _read_regular(root / MANIFEST_NAME)
    manifest_info = _lstat(root / MANIFEST_NAME)
    listed: dict[str, int] = {}
    if manifest_bytes is not None:
        manifest, _ = parse_manifest(manifest_bytes, roster=run.roster, run_id=run.id)
        if manifest is not None:
            listed = {entry.path: entry.bytes for entry in manifest.files}
    files = tuple(_gate_listing(root, listed, db))
    record = db.last_verification_record(run.id)
    seen = None if record is None else VerificationSeen(
        ok=record.ok, at=record.at, manifest_sha256=record.manifest_sha256, marker_sha256=record.marker_sha256,
        config_sha256=record.config_sha256)
    launches = db.launch_history(run.id)
    return GateInputs(
        run_id=run.id, roster=tuple(run.roster), required=tuple(run.required),
        checkpoint_globs=tuple(run.checkpoint_globs), marker=marker, manifest=manifest_bytes,
        manifest_mtime_ns=manifest_info.st_mtime_ns if manifest_info is not None else None,
        recorded_manifest_sha256=db.recorded_manifest(run.id), local_files=files,
        instance_id=instance_id, approval=approval, now=now or utc_now(), action_described=action_described,
        remote_manifest_sha256=remote.sha256 if remote is not None else None,
        remote_checked=remote is not None and remote.reachable,
        verification=seen, config_sha256=config_sha256(run),
        launched_at=launches[-1].at if launches else None, manifest_built_at=db.manifest_built_at(run.id),
        liveness=liveness,
    )


@dataclass(frozen=True)
class RemoteManifest:
    """The box's manifest as re-read now: `reachable` False when the box did not answer (then nothing
    is known); reachable with `sha256` None means the manifest is gone from the result root."""

    reachable: bool
    sha256: str | None = None
    detail: str = ""


async def remote_manifest(transport: Transport, run: RunConfig) -> RemoteManifest:
    """G2's re-read of the manifest on the box. A missing file is an answer (gone); only a box that cannot
    be reached is 'not re-checked'."""
    where = f"{run.remote_root.rstrip('/')}/{MANIFEST_NAME}"
    try:
        info = await transport.stat(where)
        if info is None or info.kind != "file":
            return RemoteManifest(True, None, "missing" if info is None else f"not a regular file ({info.kind})")
        return RemoteManifest(True, await transport.sha256(where))
    except (TransportError, OSError, TimeoutError) as exc:
        return RemoteManifest(False, None, str(exc) or type(exc).__name__)


def _gate_listing(root: Path, listed: dict[str, int], db: StateDB) -> list[LocalFile]:
    """Every entry under the local root but the manifest and marker; listed files of the right size hashed."""
    if not root.is_dir():
        return []
    result: list[LocalFile] = []
    for path, info in _walk_local_root(root):
        regular = stat.S_ISREG(info.st_mode)
        digest = None
        if regular and listed.get(path) == info.st_size:
            with contextlib.suppress(OSError):
                digest = hash_with_cache_sync(db, root.joinpath(*path.split("/")))
        result.append(LocalFile(path, info.st_size, info.st_mtime_ns, digest, regular))
    return sorted(result)


# -- small file-system helpers -------------------------------------------------------------------------------

def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def _read_regular(path: Path) -> bytes | None:
    info = _lstat(path)
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    return path.read_bytes()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def problems_line(problems: Sequence[Problem], limit: int = 3) -> str:
    """The first problems in one line, for CLI errors."""
    shown = "; ".join(problem.line() for problem in problems[:limit])
    more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
    return shown + more
