"""The sentinel on a real loopback Slurm cluster (docs/remote-ops.md §9.1, Slurm): `rgt run` submits the job with
sbatch and starts the sentinel on the login node with the job id; with every rgt session closed, a local HTTP
receiver gets exactly one notification when the job ends: `finished` for a clean batch job, `died` for one
scancel'd (its wrapper records exit 143). The sentinel reads the job's end from squeue, by the job id in its
config, not from a pid."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support.helpers import RUN, copy_command, wait_file, write_project
from support.slurm_fixtures import Cluster
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

INSTANCE = "cluster"
POLL_S = 0.5


def notify_project(root: Path, box: Path, url: str, command: str) -> Path:
    write_project(root, command, roster=("seed0",), instance=INSTANCE, instance_body='provider = "slurm"', box=box)
    (root / "webhook.url").write_text(url + "\n")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(f'\n[notify]\nwebhook_file = "webhook.url"\nkind = "json"\npoll_seconds = {POLL_S}\n')
    return root


def launch_and_close(root: Path) -> dict[str, object]:
    async def go() -> dict[str, object]:
        session = open_session(str(root))
        try:
            return await launch_run(session, RUN)
        finally:
            await session.close_transports()
            session.close()
    return asyncio.run(go())


def test_a_batch_job_that_finishes_unwatched_is_notified_once(cluster: Cluster, tmp_path: Path,
                                                               receiver: Receiver) -> None:  # noqa: F811
    root, box = tmp_path / "proj", tmp_path / "box"
    notify_project(root, box, receiver.url, "sleep 2 && " + copy_command())
    detail = launch_and_close(root)
    facts, job = detail["sentinel"], str(detail["slurm_job"])
    assert isinstance(facts, dict) and facts["where"] == "login node" and job.isdigit()
    ctl = box / "job" / ".rgt" / RUN
    assert json.loads((ctl / "sentinel.json").read_text())["slurm_job"] == job
    [request] = receiver.wait_for(1, timeout=90)
    body = json.loads(request.body)
    assert (body["event"], body["run"], body["instance"]) == ("finished", RUN, INSTANCE)
    assert wait_file(ctl / "sentinel.exited") == "finished\n"
    time.sleep(4 * POLL_S)
    assert len(receiver.requests) == 1
    assert (box / "rgt" / RUN / "seed0" / "best.pth").stat().st_size > 0


def test_a_cancelled_batch_job_is_notified_died(cluster: Cluster, tmp_path: Path,
                                                receiver: Receiver) -> None:  # noqa: F811
    root, box = tmp_path / "proj", tmp_path / "box"
    notify_project(root, box, receiver.url, "echo started && sleep 300")
    detail = launch_and_close(root)
    job = str(detail["slurm_job"])
    ctl = box / "job" / ".rgt" / RUN
    wait_file(box / "job" / "train.log", timeout=90)
    assert receiver.requests == []  # running, its log fresh: nothing to say
    subprocess.run(["scancel", job], check=True, timeout=30)  # SIGTERM to the job, as a user or a preemption would
    [request] = receiver.wait_for(1, timeout=90)
    body = json.loads(request.body)
    assert (body["event"], body["detail"]) == ("died", "exit 143 (SIGTERM: stopped or preempted)"), body
    assert wait_file(ctl / "sentinel.exited") == "died\n"
    time.sleep(4 * POLL_S)
    assert len(receiver.requests) == 1
