"""The arc on a real loopback Slurm cluster through the `slurm` provider and the Session: the run goes in
with sbatch, liveness comes from squeue/sacct plus the wrapper's files, and the results are pulled and
verified like any other run. The cluster has nothing to tear down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import GateRefused
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from support.helpers import copy_command, write_project
from support.slurm_fixtures import Cluster

RUN, INSTANCE = "r1", "cluster"


def slurm_project(root: Path, box: Path, command: str) -> None:
    write_project(root, command, instance=INSTANCE, instance_body='provider = "slurm"', box=box)


async def liveness_until(session: Session, states: tuple[str, ...], timeout: float = 90) -> tuple[str, str]:
    deadline = asyncio.get_running_loop().time() + timeout
    seen = []
    while True:
        state = (await run_state(session, RUN)).liveness
        seen.append((state.state, state.detail))
        if state.state in states:
            return state.state, state.detail
        assert asyncio.get_running_loop().time() < deadline, seen[-5:]
        await asyncio.sleep(0.3)


async def test_a_batch_run_is_watched_pulled_and_verified(cluster: Cluster, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    slurm_project(root, box, "sleep 1 && " + copy_command())
    session = open_session(str(root))
    try:
        assert (await instance_status(session, INSTANCE)).state == "running"  # the login node answers sinfo
        detail = await launch_run(session, RUN)
        assert detail["method"] == "sbatch" and str(detail["slurm_job"]).isdigit()
        state, text = await liveness_until(session, ("running",))
        assert text.startswith(f"Slurm job {detail['slurm_job']}")
        meter = (await observe_and_build(session)).instance(INSTANCE)
        assert meter is not None and meter.billing.startswith("allocation · walltime ")
        assert meter.billing.endswith("/ unlimited")  # the walltime the meter shows for a batch job
        assert await liveness_until(session, ("finished",)) == ("finished", "exit 0, artifacts present")
        await pull_run(session, RUN)
        assert (await verify_run(session, RUN)).ok
        overview = await observe_and_build(session)
        run = overview.run(RUN)
        assert run is not None and run.evidence_state == "pull_verified"
        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open  # a cluster has no terminate: nothing to tear down
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, plan.provider_id, plan.lines)
    finally:
        await session.close_transports()
        session.close()


async def test_a_failing_batch_run_is_dead_with_its_exit_code(cluster: Cluster, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    slurm_project(root, box, "echo boom; exit 5")
    session = open_session(str(root))
    try:
        await launch_run(session, RUN)
        assert await liveness_until(session, ("dead",)) == ("dead", "exit 5")
    finally:
        await session.close_transports()
        session.close()
