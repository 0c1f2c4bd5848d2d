"""The load-check pool (docs/gate.md; issue 10 §2): long-lived load-check processes that import torch once,
identical bytes load-checked once per verification, a scrubbed environment, and no load check outliving rgt.

Everything is real: torch saves and loads, `isolated/load_check.py --serve` processes, the state database, and for the
kill -9 test a real `python -m remote_gpu_trainer verify` process. Processes are observed through /proc.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.services.evidence import load_checks
from remote_gpu_trainer.services.evidence.load_checks import LoadCheckPool, isolated_environment
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verbs import pull_run
from remote_gpu_trainer.services.evidence.verify import VerifyStep, verify
from remote_gpu_trainer.services.opening import open_session
from support.evidence_helpers import make_env, status_of, write_cell
from support.gate_helpers import launch_finished, local_root, project_text, write_text_project
from support.helpers import RUN

CHECKER_FRAGMENT = "remote_gpu_trainer.isolated.load_check"
# A state key no other test uses: the load-check key differs, so no verdict cached elsewhere applies here.
KEYS = ("model_state_dict", "probe-pool-tests")


def proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state letter, command line) for every process /proc shows."""
    table: dict[int, tuple[int, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    return table


def load_checks_of(parent: int) -> set[int]:
    """Live (not zombie) load-check processes whose parent is `parent`."""
    return {pid for pid, (ppid, state, cmd) in proc_table().items()
            if ppid == parent and state != "Z" and CHECKER_FRAGMENT in cmd}


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def wait_until(what: str, check: Callable[[], object], limit: float = 60.0) -> object:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def opened_by_a_reader(fifo: Path, limit: float = 60.0) -> int:
    """A write end of `fifo`, once some process holds it open for reading (ENXIO until then)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        await asyncio.sleep(0.01)
    raise AssertionError(f"nothing opened {fifo} for reading")


class ProbeWatcher:
    """Samples this process's load-check children while a verification runs (a real /proc count)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.most_at_once = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = load_checks_of(os.getpid())
            self.seen |= now
            self.most_at_once = max(self.most_at_once, len(now))
            time.sleep(0.005)

    def __enter__(self) -> ProbeWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_identical_bytes_under_50_paths_are_probed_once(tmp_path: Path) -> None:
    roster = tuple(f"cell{index:02d}" for index in range(50))
    env = make_env(tmp_path, roster=roster, state_keys=KEYS)
    for cell in roster:
        write_cell(env.box, cell, seed=501)  # the same tensors in every cell: identical bytes
    await pull(env.project, env.run, env.transport, env.db)
    texts: list[str] = []
    result = await verify(env.project, env.run, env.db, progress=lambda step: texts.append(step.text))
    assert result.ok, result.errors
    assert "load-verification: 1 probe(s) answered by 1 probe process(es)" in texts
    assert len([text for text in texts if "load-verifying" in text]) == 1
    assert all(status_of(result.files, f"{cell}/best.pth") == "verified" for cell in roster)
    env.db.close()


def test_the_pool_grows_with_the_bytes_to_load_never_past_the_cores() -> None:
    cores = os.cpu_count() or 1
    assert load_checks.pool_size(200, 200 * 2000) == 1  # small files: one torch import is cheapest
    assert load_checks.pool_size(1, 8 << 30) == 1  # never more processes than files
    assert load_checks.pool_size(8, 8 << 30) == min(load_checks.POOL_MAX, cores)
    assert load_checks.pool_size(8, (1 << 30) + 1) == min(2, cores)


async def test_a_verification_uses_at_most_pool_size_processes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_checks, "BYTES_PER_PROCESS", 1)  # as if every file were large: a full pool
    roster = tuple(f"cell{index:02d}" for index in range(12))
    env = make_env(tmp_path, roster=roster, state_keys=KEYS)
    for index, cell in enumerate(roster):
        write_cell(env.box, cell, seed=600 + index)  # twelve distinct checkpoints
    await pull(env.project, env.run, env.transport, env.db)
    size = min(load_checks.POOL_MAX, os.cpu_count() or 1)
    texts: list[str] = []
    with ProbeWatcher() as watcher:
        result = await verify(env.project, env.run, env.db, progress=lambda step: texts.append(step.text))
    assert result.ok, result.errors
    summary = [text for text in texts if text.startswith("load-verification:")]
    assert summary == [f"load-verification: 12 probe(s) answered by {size} probe process(es)"]
    assert 1 <= len(watcher.seen) <= size
    assert watcher.most_at_once <= size
    assert load_checks_of(os.getpid()) == set()  # the pool was torn down
    env.db.close()


async def test_the_probe_environment_holds_no_provider_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", "rp-secret-value")
    monkeypatch.setenv("HF_TOKEN", "hf-secret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    checkpoint = tmp_path / "one.pth"
    torch.save({"model_state_dict": {"w": torch.ones(3)}}, checkpoint)
    pool = LoadCheckPool(1)
    try:
        verdict = await pool.check(checkpoint, {"state_keys": list(KEYS)}, 120)
        assert verdict["ok"] is True, verdict
        [pid] = pool.pids
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if item)
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # its own session and process group
    finally:
        await pool.close()
    assert not alive(pid)
    assert "rp-secret-value" not in "".join(environ.values())
    assert set(environ) <= {"PATH", "HOME", "LANG", "TMPDIR", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"} | {
        name for name in environ if name.startswith("LC_")}
    assert environ["CUDA_VISIBLE_DEVICES"] == "" and environ["OMP_NUM_THREADS"] == "1"
    assert environ["LC_ALL"] == "C.UTF-8"
    assert environ == isolated_environment()


async def test_kill_9_of_rgt_verify_leaves_no_probe_alive(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(run_extra='state_keys = ["model_state_dict", "probe-pool-kill"]'))
    await launch_finished(root)  # no verdicts handed over: the checkpoints meet real probes
    session = open_session(str(root))
    try:
        assert (await pull_run(session, RUN)).ok
    finally:
        await session.close_transports()
        session.close()
    verifier = subprocess.Popen([sys.executable, "-m", "remote_gpu_trainer", "verify", RUN, str(root)],
                                cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        probes = wait_until("a probe process of that rgt", lambda: load_checks_of(verifier.pid))
    finally:
        verifier.kill()
        verifier.wait()
    assert isinstance(probes, set) and probes
    survivors = set(probes)
    deadline = time.monotonic() + 20
    while survivors and time.monotonic() < deadline:
        survivors = {pid for pid in survivors if alive(pid)}
        time.sleep(0.02)
    assert survivors == set(), f"probe processes outlived the killed rgt: {survivors}"
    assert not (local_root(root) / MARKER_NAME).exists()


async def test_a_probe_timeout_hits_only_its_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a.pth", tmp_path / "b.pth"
    torch.save({"model_state_dict": {"w": torch.ones(2)}}, first)
    torch.save({"model_state_dict": {"w": torch.zeros(2)}}, second)
    stuck = tmp_path / "never.pth"
    os.mkfifo(stuck)  # opening it for reading blocks until a writer comes: a load that never ends
    pool = LoadCheckPool(1)
    request = {"state_keys": list(KEYS)}
    try:
        verdicts = [await pool.check(first, request, 120), await pool.check(stuck, request, 2),
                    await pool.check(second, request, 120)]
    finally:
        await pool.close()
    assert [v.get("ok") for v in verdicts] == [True, False, True], verdicts
    assert verdicts[1]["error"] == "timeout"
    assert pool.started == 2 and pool.answered == 2  # the stuck process was killed; a fresh one took b.pth


async def test_a_probe_crash_hits_only_its_file_in_a_verification(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_checks, "POOL_MAX", 1)  # one load-check process, so "the process" is unambiguous
    roster = ("seed0", "seed1", "seed2")
    env = make_env(tmp_path, roster=roster, state_keys=KEYS)
    for index, cell in enumerate(roster):
        write_cell(env.box, cell, seed=700 + index)
    await pull(env.project, env.run, env.transport, env.db)
    killed: list[int] = []

    def progress(step: VerifyStep) -> None:
        if step.text.startswith("load-verifying seed1/best.pth"):  # the process that answered seed0 dies now
            for pid in load_checks_of(os.getpid()):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    result = await verify(env.project, env.run, env.db, progress=progress)
    assert len(killed) == 1
    assert [(p.code, p.path) for p in result.errors] == [("ckpt_crash", "seed1/best.pth")]
    assert status_of(result.files, "seed0/best.pth") == "verified"
    assert status_of(result.files, "seed1/best.pth") == "unloadable"
    assert status_of(result.files, "seed2/best.pth") == "verified"
    assert not (env.local / MARKER_NAME).exists()
    assert (await verify(env.project, env.run, env.db)).ok  # a crash is not cached: it is probed again
    env.db.close()


async def test_a_probe_crash_at_the_pool_kills_its_group_and_the_next_file_verifies(tmp_path: Path) -> None:
    good = tmp_path / "good.pth"
    torch.save({"model_state_dict": {"w": torch.ones(2)}}, good)
    stuck = tmp_path / "held.pth"
    os.mkfifo(stuck)
    pool = LoadCheckPool(1)
    request = {"state_keys": list(KEYS)}
    try:
        task = asyncio.create_task(pool.check(stuck, request, 120))
        writer = await opened_by_a_reader(stuck)  # the load check is inside open(): it is mid-file
        try:
            [pid] = pool.pids
            os.kill(pid, signal.SIGKILL)
            crashed = await task
        finally:
            os.close(writer)
        after = await pool.check(good, request, 120)
    finally:
        await pool.close()
    assert crashed["ok"] is False and crashed["error"] == "crash", crashed
    assert "probe exit -9" in crashed["detail"]
    assert after["ok"] is True, after
    assert pool.started == 2
    await asyncio.sleep(0)
    assert not alive(pid)


HOLDER = """
import asyncio, sys
from pathlib import Path
from remote_gpu_trainer.services.evidence.load_checks import LoadCheckPool

async def main():
    pool = LoadCheckPool(1)
    task = asyncio.create_task(pool.check(Path(sys.argv[1]), {}, 600))
    while not pool.pids:
        await asyncio.sleep(0.01)
    print(pool.pids[0], flush=True)
    await task

asyncio.run(main())
"""


async def test_a_probe_stuck_in_a_file_dies_with_its_killed_parent(tmp_path: Path) -> None:
    """The load check cannot notice its closed input while it is inside a read; the kernel's parent-death
    signal must end it all the same."""
    stuck = tmp_path / "held.pth"
    os.mkfifo(stuck)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(stuck)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, text=True)
    writer = -1
    try:
        assert holder.stdout is not None
        pid = int(holder.stdout.readline())
        writer = await opened_by_a_reader(stuck)  # the load check now waits inside read(), input unread
        assert alive(pid) and load_checks_of(holder.pid) == {pid}
        holder.kill()
        holder.wait()
        deadline = time.monotonic() + 20
        while alive(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert not alive(pid), "the probe outlived its killed parent"
    finally:
        if writer >= 0:
            os.close(writer)
        if holder.poll() is None:
            holder.kill()
            holder.wait()
