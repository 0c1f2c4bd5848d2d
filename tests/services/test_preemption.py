"""Preemption and checkpoint cadence in real sim runs (docs/remote-ops.md §10): S94 fires when a job stops writing
checkpoints; a job SIGTERMed on an interruptible box reads preempted; `rgt run --resume` needs auto_resume, never
rents, and the teardown gate stays closed after it."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from remote_gpu_trainer.services.watch.run_logs import evaluate_rules, follow_log
from remote_gpu_trainer.state.db import StateDB
from support.helpers import FIXTURES, INSTANCE, RUN, toml_string, wait_for_liveness, write_project
from support.helpers import run_rgt as rgt

STALE_JOB = """\
import pathlib, sys, time
out = pathlib.Path(sys.argv[1])
(out / "ckpt_1.pt").write_bytes(b"weights")
print("checkpoint saved in 1.0s", flush=True)
for i in range(60):  # 12 s of training lines, and no checkpoint after the first
    print(f"step={i} loss={1.0 / (i + 1):.4f}", flush=True)
    time.sleep(0.2)
"""

PREEMPTIBLE_JOB = """\
import pathlib, shutil, sys, time
out, cells = pathlib.Path(sys.argv[1]), sys.argv[2]
shutil.copytree(cells, out, dirs_exist_ok=True)
print("checkpoint saved in 1.0s", flush=True)
if pathlib.Path("started").exists():  # the resumed launch: load the checkpoint and finish
    print("resumed from the checkpoint", flush=True)
    sys.exit(0)
pathlib.Path("started").write_text("1")
time.sleep(60)
"""


def job_project(root: Path, script: str, extra_run: str = "", instance_body: str = 'provider = "sim"') -> Path:
    job = root.parent / "job.py"
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(script)
    command = f"{sys.executable} {job} {{out}} {FIXTURES / 'cells' / 'seed0'}"
    return write_project(root, command=command, roster=("seed0",), extra_run=extra_run, instance_body=instance_body)


async def test_s94_fires_when_the_job_stops_writing_checkpoints(tmp_path: Path) -> None:
    # μ = 0.001 h = 3.6 s, C = 1.0 s from the log: W = sqrt(2 · 3.6 · 1) ≈ 2.68 s, so 2 × W ≈ 5.4 s
    job_project(tmp_path / "p", STALE_JOB, extra_run="mtbp_hours = 0.001")
    session = open_session(str(tmp_path / "p"))
    try:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        deadline = time.monotonic() + 30
        fired = []
        while not fired and time.monotonic() < deadline:
            await follow_log(session, RUN)
            await evaluate_rules(session, RUN, await run_state(session, RUN))
            monitor = opened_monitor(session, RUN)
            fired = [e for e in monitor.ledger.entries() if e.signature == "S94"]
            await asyncio.sleep(0.2)
        assert fired, "S94 never fired"
        evidence = fired[0].first_evidence
        age = int(evidence.split("newest checkpoint ")[1].split(" s old")[0])
        assert age >= 5 and evidence.endswith(  # over 2 × W = 5.36 s, shown rounded: 5 at the earliest
            "over 2 × W = 5 s (Young/Daly W 3 s): a preemption now loses that much work")
        overview = await observe_and_build(session)
        run = overview.run(RUN)
        assert run is not None and run.checkpoint_cadence is not None
        cadence = run.checkpoint_cadence
        assert cadence.interval_s == math.sqrt(2 * 3.6 * 1.0)
        assert (cadence.write_s, cadence.write_source, cadence.mtbp_s) == (1.0, "log", 3.6)
        assert cadence.mtbp_source == f"rgt.toml runs.{RUN}.mtbp_hours"
        assert cadence.overdue is (run.liveness == "running")
        await wait_for_liveness(session, states=("finished", "dead"))
    finally:
        await session.close_transports()
        session.close()


def launches(root: Path) -> list[str]:
    db = StateDB(root / ".rgt" / "state.db")
    try:
        return [record.run_id for record in db.launch_history()]
    finally:
        db.close()


def wait_for(path: Path, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} never held {text!r}"
        time.sleep(0.1)


def set_sim_state(root: Path, state: str) -> dict[str, object]:
    """The simulated provider's own record (its 'API'): what a pause by the provider would leave."""
    record_path = root / ".rgt" / "sim" / f"{INSTANCE}.json"
    record = json.loads(record_path.read_text())
    record["state"] = state
    record_path.write_text(json.dumps(record))
    return dict(record)


def test_preempted_run_resumes_only_with_auto_resume_never_rents_and_the_gate_stays_closed(tmp_path: Path) -> None:
    root = tmp_path / "p"
    job_project(root, PREEMPTIBLE_JOB, instance_body='provider = "sim"\ninterruptible = true')
    assert rgt("up", RUN, cwd=root).returncode == 0
    assert rgt("run", RUN, cwd=root).returncode == 0
    box = root / ".rgt" / "sim" / INSTANCE
    ctl = box / "workspace" / "job" / ".rgt" / RUN
    wait_for(box / "workspace" / "job" / "train.log", "checkpoint saved")
    os.kill(int((ctl / "pid").read_text()), signal.SIGTERM)  # the spot box's SIGTERM, to the wrapper we started
    wait_for(ctl / "exit_code", "143")

    watched = rgt("watch", RUN, "--once", cwd=root)
    assert f"run {RUN}: dead (preempted: exit 143 (SIGTERM) on an interruptible box)" in watched.stdout
    note = (root / ".rgt" / "recovery" / f"{RUN}.md").read_text()
    assert f"- preempted: set `runs.{RUN}.auto_resume = true` in rgt.toml, then `rgt run {RUN} --resume`" in note

    refused = rgt("run", RUN, "--resume", cwd=root)
    assert refused.returncode == 1
    assert f"runs.{RUN}.auto_resume is not true" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1

    job_project(root, PREEMPTIBLE_JOB, extra_run="auto_resume = true",
                instance_body='provider = "sim"\ninterruptible = true')
    before = set_sim_state(root, "stopped")  # the provider paused the box (vast.ai does so when outbid)
    never_rents = rgt("run", RUN, "--resume", cwd=root)
    assert never_rents.returncode == 1
    assert f"{INSTANCE} is stopped: --resume never rents; `rgt up {RUN}` rents" in never_rents.stderr
    assert json.loads((root / ".rgt" / "sim" / f"{INSTANCE}.json").read_text()) == before
    assert launches(root) == [RUN]

    set_sim_state(root, "running")
    resumed = rgt("run", RUN, "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(f"resumed {RUN} on {INSTANCE}: pid ")
    assert launches(root) == [RUN, RUN]
    resumed_note = (root / ".rgt" / "recovery" / f"{RUN}.md").read_text()
    assert f"run `rgt run {RUN} --resume` to relaunch" in resumed_note  # a permission, never a promise
    assert "auto_resume = true permits it; rgt never relaunches by itself" in resumed_note
    assert rgt("watch", RUN, "--interval", "0.2", cwd=root).returncode == 0
    assert "resumed from the checkpoint" in (box / "workspace" / "job" / "train.log").read_text()

    down = rgt("down", RUN, "--confirm", f"sim-{INSTANCE}", cwd=root)
    assert down.returncode == 3, down.stderr
    assert box.is_dir() and json.loads((root / ".rgt" / "sim" / f"{INSTANCE}.json").read_text())["state"] == "running"


def test_auto_resume_and_network_keys_are_checked_with_their_line(tmp_path: Path) -> None:
    job_project(tmp_path / "p", STALE_JOB, extra_run=f"auto_resume = \"yes\"\nnetwork = {toml_string('mars')}")
    bad = rgt("run", RUN, cwd=tmp_path / "p")
    assert bad.returncode == 2
    assert "runs.r1.auto_resume: must be true or false" in bad.stderr and "(and 1 more problem(s))" in bad.stderr
