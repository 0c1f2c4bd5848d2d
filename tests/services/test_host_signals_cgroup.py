"""A memory hog under a real cgroup memory limit: S66 fires from the memory TSV the wrapper's monitor wrote (one
watcher pass sees the whole 60-s window), and S67 once the kernel's OOM killer ended the job. The slow test of
this part (about 70 s): the 60-s window is real time on the box.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.services.box_layout import ctl_dir
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.log_monitor import Alert
from remote_gpu_trainer.services.watch.run_logs import evaluate_rules, follow_log, take_alerts
from remote_gpu_trainer.text import gib
from support.helpers import RUN, wait_for_liveness, write_project

LIMIT = 64 << 20
HOG = '''\
import os, sys, time
folder, usage, go = sys.argv[1:4]
limit = int(open(os.path.join(folder, sys.argv[4])).read())
held = []
while int(open(os.path.join(folder, usage)).read()) < 0.93 * limit:
    held.append(b"x" * (1 << 20))
print("holding", flush=True)
while not os.path.exists(go):
    time.sleep(0.2)
held.append(b"x" * (2 * limit))
'''


@pytest.fixture
def memory_cgroup() -> Iterator[tuple[Path, str, str]]:
    """A fresh memory cgroup limited to 64 MiB: (folder, usage file, limit file); v1 or v2, whichever is here."""
    v2 = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    base, usage, limit = ((Path("/sys/fs/cgroup"), "memory.current", "memory.max") if v2 == "cgroup2fs" else
                          (Path("/sys/fs/cgroup/memory"), "memory.usage_in_bytes", "memory.limit_in_bytes"))
    folder = base / f"rgt-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
        (folder / limit).write_text(str(LIMIT))
    except OSError as exc:
        pytest.fail(f"the kernel refuses a memory cgroup here ({exc}): .ci/run's machine (root, cgroup v1 or "
                    "v2) provides one", pytrace=False)
    try:
        yield folder, usage, limit
    finally:
        for _ in range(100):
            try:
                folder.rmdir()
                break
            except OSError:
                subprocess.run(["sleep", "0.1"], check=False)


def _held_for(tsv: Path, limit: int) -> float:
    """Seconds the TSV's trailing rows show the cgroup at >= 90 % of `limit`."""
    lines = tsv.read_text().splitlines() if tsv.exists() else []
    if len(lines) < 2:
        return 0.0
    names = lines[0].split("\t")
    t, cur, top = names.index("t"), names.index("cg_current_bytes"), names.index("cg_max_bytes")
    times = []
    for row in reversed(lines[1:]):
        cols = row.split("\t")
        if len(cols) != len(names) or cols[top] != str(limit) or not cols[cur] or int(cols[cur]) <= 0.9 * limit:
            break
        times.append(float(cols[t]))
    return times[0] - times[-1] if times else 0.0


async def test_a_memory_hog_raises_s66_from_the_tsv_and_s67_when_killed(memory_cgroup: tuple[Path, str, str],
                                                                        tmp_path: Path) -> None:
    folder, usage, limit = memory_cgroup
    (tmp_path / "hog.py").write_text(HOG)
    procs = folder / "cgroup.procs"
    go = tmp_path / "go"
    command = (f"echo $$ > {procs} && echo $BASHPID > {procs} && "
               f"exec {sys.executable} {tmp_path / 'hog.py'} {folder} {usage} {go} {limit}")
    root = tmp_path / "proj"
    write_project(root, command, roster=("seed0",), instance_body='provider = "local"', box=tmp_path / "box")
    session = open_session(str(root))
    try:
        await launch_run(session, RUN)
        tsv = Path(ctl_dir(session.project.run(RUN))) / "mem.tsv"
        deadline = asyncio.get_running_loop().time() + 240
        while _held_for(tsv, LIMIT) < 62:
            assert asyncio.get_running_loop().time() < deadline, tsv.read_text() if tsv.exists() else "no TSV"
            await asyncio.sleep(1)
        held = await _pass(session)
        go.touch()
        assert await wait_for_liveness(session, states=("dead", "finished")) == "dead"
        state = await run_state(session, RUN)
        killed = await _pass(session)
    finally:
        go.touch()
        session.close()
    assert re.fullmatch(rf"cgroup memory at (9\d|100)% of memory\.max \(0\.1 of {re.escape(gib(LIMIT))}\) for "
                        r"\d+s", held["S66"].message), held["S66"].message
    assert held["S66"].severity == "warn" and "S67" not in held
    assert (state.exit_code, state.liveness.detail) == (137, "exit 137 (SIGKILL: out of memory or killed)")
    assert killed["S67"].severity == "critical"
    assert killed["S67"].message == "memory.events oom_kill rose by 1 since the last sample"


async def _pass(session: Session) -> dict[str, Alert]:
    await follow_log(session, RUN)
    state = await run_state(session, RUN)
    await evaluate_rules(session, RUN, state)
    return {a.signature: a for a in take_alerts(session)}
