"""Load-verifying checkpoints (docs/gate.md §5 step 6) in a pool of long-lived load-check processes.

Torch is never imported here: checkpoints are load-verified by `remote_gpu_trainer.isolated.load_check` in a
small pool of long-lived load-check processes (each imports torch once), each in its own process group with a
scrubbed environment, a per-file timeout, and a parent-death signal so none outlives rgt. Each distinct
content is load-checked once per verification, and a verdict the bytes alone decide is cached by (sha256,
load-check key) across verifications (the table and its column keep their names: `checkpoint_probes`, `probe_key`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.manifest import (
    Manifest,
    MarkerCheckpoint,
    Problem,
    is_checkpoint,
    required_checkpoints,
)
from remote_gpu_trainer.checkpoint_kinds import CheckpointKind, kind_of
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.isolated.environment import isolated_environment as isolated_environment
from remote_gpu_trainer.isolated.load_check import LOAD_CHECK_VERSION
from remote_gpu_trainer.state.db import StateDB

LOAD_CHECK_MIN_TIMEOUT_S = 120.0
LOAD_CHECK_S_PER_GIB = 30.0
DETERMINISTIC_ERRORS = {"blocked_global", "nonfinite", "no_tensors", "no_state_key"}
_PROBLEM_CODES = {
    "blocked_global": "ckpt_blocked_global", "nonfinite": "ckpt_nonfinite", "no_tensors": "ckpt_no_tensors",
    "no_state_key": "ckpt_no_state_key", "timeout": "ckpt_timeout",
}


def load_check_key(run: RunConfig, kind: CheckpointKind) -> str:
    """What besides the bytes decides a load check's verdict: its version, torch version, the request (allow-list,
    state keys and the file's kind, assets/checkpoints.toml)."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    request = load_check_request(run, kind)  # the key's field names are stored: "probe" stays
    return json.dumps({"probe": LOAD_CHECK_VERSION, "torch": torch_version, **request}, sort_keys=True)


def load_check_request(run: RunConfig, kind: CheckpointKind) -> dict[str, Any]:
    """The request fields for a file of this kind: the run's allowed globals with the kind's own, its state
    keys, and how the kind is checked."""
    allowed = sorted(set(run.allowed_globals) | set(kind.globals))
    return {"allow_globals": allowed, "state_keys": list(run.state_keys), **kind.request()}


async def load_check_checkpoints(root: Path, run: RunConfig, manifest: Manifest, hashed: dict[str, str],
                            per_file: dict[str, list[Problem]], db: StateDB,
                            report: Callable[[str], None],
                            timeout: float | None) -> list[MarkerCheckpoint]:
    """Step 6: each distinct content (sha256) whose bytes matched is load-checked once, in a small pool.

    Verdicts are cached by (sha256, load-check key) across verifications; inside one verification every path
    with the same bytes gets the verdict of the one path that was checked.
    """
    groups = _contents(run, manifest, hashed)
    keys = {sha256: load_check_key(run, kind_of(paths[0])) for sha256, paths in groups.items()}
    verdicts, fresh = _cached_verdicts(groups, keys, db, report)
    if fresh:
        verdicts.update(await _check_fresh(root, run, groups, fresh, keys, db, report, timeout))
    return _checkpoints(groups, verdicts, per_file)


def _contents(run: RunConfig, manifest: Manifest, hashed: dict[str, str]) -> dict[str, list[str]]:
    """The checkpoints whose bytes matched, grouped by content (sha256), each group's paths sorted."""
    wanted = set(required_checkpoints(manifest.finished(run.roster), run.required, run.checkpoint_globs))
    wanted |= {entry.path for entry in manifest.files if is_checkpoint(entry.path, run.checkpoint_globs)}
    groups: dict[str, list[str]] = {}
    for path in sorted(path for path in wanted if path in hashed):
        groups.setdefault(hashed[path], []).append(path)
    return groups


def _cached_verdicts(groups: dict[str, list[str]], keys: dict[str, str], db: StateDB,
                     report: Callable[[str], None]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The verdicts cached for these contents under their load-check keys, and the contents still to check."""
    verdicts: dict[str, dict[str, Any]] = {}
    fresh: list[str] = []
    for sha256, paths in groups.items():
        cached = db.cached_load_check(sha256, keys[sha256])
        if cached is None:
            fresh.append(sha256)
            continue
        verdicts[sha256] = cached
        for path in paths:
            report(f"load-verifying {path}: identical bytes were load-verified before (cached verdict)")
    return verdicts, fresh


async def _check_fresh(root: Path, run: RunConfig, groups: dict[str, list[str]], fresh: list[str],
                       keys: dict[str, str], db: StateDB, report: Callable[[str], None],
                       timeout: float | None) -> dict[str, dict[str, Any]]:
    """Load-check one path of each content in `fresh` through one pool; a verdict the bytes decide is cached."""
    verdicts: dict[str, dict[str, Any]] = {}
    counter = iter(range(1, len(fresh) + 1))

    async def one(pool: LoadCheckPool, sha256: str) -> None:
        paths = groups[sha256]
        local = root.joinpath(*paths[0].split("/"))
        copies = f"; {len(paths) - 1} more path(s) hold the same bytes" if len(paths) > 1 else ""
        request = load_check_request(run, kind_of(paths[0]))
        result = await pool.check(local, request, timeout or check_timeout(local), started=lambda: report(
            f"load-verifying {paths[0]} ({next(counter)}/{len(fresh)}{copies})"))
        if result.get("ok") or result.get("error") in DETERMINISTIC_ERRORS:
            db.store_load_check(sha256, keys[sha256], result)
        verdicts[sha256] = result

    size = pool_size(len(fresh), sum(root.joinpath(*groups[sha256][0].split("/")).stat().st_size
                                           for sha256 in fresh))
    pool = LoadCheckPool(size)
    try:
        async with asyncio.TaskGroup() as group:
            for sha256 in fresh:
                group.create_task(one(pool, sha256))
    finally:
        await pool.close()
    report(f"load-verification: {pool.answered} probe(s) answered by {pool.started} probe process(es)")
    return verdicts


def _checkpoints(groups: dict[str, list[str]], verdicts: dict[str, dict[str, Any]],
                 per_file: dict[str, list[Problem]]) -> list[MarkerCheckpoint]:
    """Every path of a content that loaded, as the marker lists it; the others get their problem."""
    checkpoints: list[MarkerCheckpoint] = []
    for sha256, paths in groups.items():
        result = verdicts[sha256]
        for path in paths:
            if result.get("ok"):
                checkpoints.append(MarkerCheckpoint(
                    path=path, sha256=sha256, format=str(result["format"]), tensors=int(result["tensors"]),
                    elements=int(result["elements"]), state_key=str(result["state_key"])))
            else:
                per_file[path].append(load_check_problem(path, result))
    checkpoints.sort(key=lambda checkpoint: checkpoint.path)
    return checkpoints


def check_timeout(path: Path) -> float:
    """A file's load-check timeout: LOAD_CHECK_MIN_TIMEOUT_S, or LOAD_CHECK_S_PER_GIB per GiB when that is longer."""
    return max(LOAD_CHECK_MIN_TIMEOUT_S, LOAD_CHECK_S_PER_GIB * path.stat().st_size / (1 << 30))


POOL_MAX = 4  # long-lived load-check processes per verification, at most one per core
# Each extra load-check process costs a torch import (about 1.5 s of CPU): measured with
# benchmarks/bench_verify.py on 2 cores, 200 small checkpoints take 1.47 s with one process and 2.63 s with
# two, so another process is started only for each further GiB of checkpoint bytes to load.
BYTES_PER_PROCESS = 1 << 30
_VERDICT_LINE_LIMIT = 16 << 20  # a verdict line (labels come from the file's keys) may be long, not unbounded


def pool_size(files: int, total_bytes: int) -> int:
    """How many load-check processes one verification starts: one per GiB to load, at most one per core, 4."""
    by_bytes = 1 + total_bytes // max(1, BYTES_PER_PROCESS)
    return max(1, min(POOL_MAX, os.cpu_count() or 1, files, by_bytes))


class _CheckerDied(Exception):
    """The load-check process ended, or answered something that is not a verdict: it is killed, never reused."""


class LoadCheckProcess:
    """One `isolated/load_check.py --serve` process: its own session and process group, scrubbed environment, and
    PR_SET_PDEATHSIG so it dies with rgt; stderr goes to an unlinked temporary file (never a full pipe)."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Any) -> None:
        self.process = process
        self.stderr = stderr
        self.ready = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(cls) -> LoadCheckProcess:
        import tempfile

        stderr = tempfile.TemporaryFile()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-m", "remote_gpu_trainer.isolated.load_check", "--serve",
                "--parent", str(os.getpid()), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=stderr, env=isolated_environment(), start_new_session=True, limit=_VERDICT_LINE_LIMIT)
        except BaseException:
            stderr.close()
            raise
        return cls(process, stderr)

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """One verdict; waits for the server's ready line first. Raises _CheckerDied on EOF or garbage."""
        if not self.ready:
            hello = await self._line()
            if hello.get("ready") is not True:
                raise _CheckerDied("no ready line")
            self.ready = True
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request).encode("utf-8") + b"\n")
            await self.process.stdin.drain()
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it died between two files
            raise _CheckerDied("input closed") from exc
        result = await self._line()
        if not isinstance(result.get("ok"), bool):
            raise _CheckerDied("a verdict without ok")
        return result

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        try:
            line = await self.process.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError) as exc:
            raise _CheckerDied("verdict line too long") from exc
        if not line:
            raise _CheckerDied("end of output")
        try:
            value = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise _CheckerDied("not JSON") from exc
        if not isinstance(value, dict):
            raise _CheckerDied("not a JSON object")
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
        """SIGKILL the whole group (anything the load check started goes too), reap, drop the stderr file."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        try:
            await asyncio.shield(self.process.wait())
        finally:
            self.stderr.close()


class LoadCheckPool:
    """At most `size` long-lived load-check processes for one verification, started on demand.

    A process that times out, crashes or answers garbage is killed with its group and its file gets a
    timeout/crash verdict; the next file gets a fresh process. `close()` must always be called (it kills
    every process still alive). `started` counts processes started, `answered` the verdict lines read.
    """

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.started = 0
        self.answered = 0
        self._slots = asyncio.Semaphore(self.size)
        self._idle: list[LoadCheckProcess] = []
        self._live: set[LoadCheckProcess] = set()
        self._closed = False

    @property
    def pids(self) -> list[int]:
        return sorted(worker.pid for worker in self._live)

    async def check(self, path: Path, request: dict[str, Any], timeout: float,
                    started: Callable[[], None] | None = None) -> dict[str, Any]:
        """The verdict for `path`; `timeout` covers the whole exchange (and a fresh process's start)."""
        async with self._slots:
            if self._closed:
                raise RuntimeError("load-check pool is closed")
            if started is not None:
                started()
            if self._idle:
                worker = self._idle.pop()
            else:  # starting is quick; the torch import it triggers is awaited under the timeout below
                worker = await LoadCheckProcess.start()
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
            except _CheckerDied as exc:
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


def load_check_problem(path: str, result: dict[str, Any]) -> Problem:
    """The Problem for a failed verdict, its detail in the words a user acts on."""
    error = str(result.get("error"))
    code = _PROBLEM_CODES.get(error, "ckpt_crash")
    if error == "blocked_global":
        names = result.get("globals") or [result.get("global")]
        listed = ", ".join(str(name) for name in names)
        detail = (f"pickle needs global{'s' if len(names) > 1 else ''} {listed}, which weights-only loading "
                  "refuses; nothing was executed (allow them in allowed_globals only if you trust the file)")
    elif error == "nonfinite":
        detail = "non-finite values in " + ", ".join(str(label) for label in result.get("labels", []))
    elif error == "no_tensors":
        detail = "holds no tensors"
    else:
        detail = str(result.get("detail") or error)
    return Problem(code, path, detail)
