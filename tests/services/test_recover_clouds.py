"""Recovery of a preempted run on the vast.ai and RunPod fakes (docs/remote-ops.md §10.1), over a real sshd.

Each provider's preemption as its API shows it: vast.ai pauses an outbid instance at once with no signal
(`actual_status` stopped while `intended_status` stays running, `status_msg` saying it was outbid), and brings it back
on the same GPU with its disk once the bid wins again; RunPod SIGTERMs an interruptible pod's job (exit 143) and the
pod goes EXITED, with no word for why, its volume disk kept. The real torch trainer resumes from its newest checkpoint
on the same box and finishes; the run's evidence pulls, verifies and opens the gate. Every test also tries to get
recovery to do what it must not: act twice for two watchers, act on a stale approval, start a box `rgt down` stopped,
or ever stop or destroy anything (the fakes log every request: no DELETE, no stop)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from remote_gpu_trainer.audits.preemption import is_preempted
from remote_gpu_trainer.audits.recover import Step
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.gate import gate_view
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover.ledger import spent
from remote_gpu_trainer.services.recover.run import recover_run
from remote_gpu_trainer.services.report_overview import report_overview
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state.events import EventKind
from support import fake_clouds
from support.fake_clouds import FakeRunPod, FakeVast
from support.helpers import INSTANCE, RUN, wait_for_liveness
from support.recover_cloud import (
    approve,
    box_away,
    box_back,
    checkpoint,
    exit_code,
    hold,
    kill_job,
    launched_holding,
    project,
    seen,
)
from support.sshd_fixtures import Sshd

vast_fake = fake_clouds.vast_fake
runpod_fake = fake_clouds.runpod_fake
cloud_env = fake_clouds.cloud_env

VAST_ID, POD_ID = "7", "pod1"
OUTBID = "Instance outbid, paused"
TEARDOWN = (EventKind.TORN_DOWN, EventKind.STOPPED, EventKind.TEARDOWN_UNCONFIRMED)


def steps(session: Session) -> list[str]:
    return [e.detail["step"] for e in session.db.events(run_id=RUN, kind=EventKind.RECOVER)]


def launches(session: Session) -> int:
    return len(session.db.launch_history(RUN))


async def finished_and_gated(session: Session, box: Path, resumed_from: int) -> None:
    """The relaunch resumed from the checkpoint of step `resumed_from`, finished, and its evidence opens the gate."""
    await wait_for_liveness(session)
    log = (box / "job" / "train.log").read_text()
    assert f"resumed from {checkpoint(box, resumed_from)} at step {resumed_from + 1}" in log, log
    assert f"finished from step {resumed_from + 1}" in log, log
    await pull_run(session, RUN)
    verified = await verify_run(session, RUN)
    assert verified.ok, verified
    status = await instance_status(session, INSTANCE)
    assert status.state == "running"  # still billing: recovery never tears down
    assert gate_view(session, RUN, status.provider_id, "finished").evidence_ok
    assert [e for e in session.db.events() if e.kind in TEARDOWN] == []


def test_an_outbid_vast_box_is_waited_for_and_the_run_resumes_there_once_when_the_bid_wins_again(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd) -> None:
    row = vast_fake.add_instance(VAST_ID)
    box_home = cloud_env
    box = tmp_path / "box"
    root = project(tmp_path / "p", box, "vastai", VAST_ID, vast_fake.url)

    async def go() -> None:
        first, second = open_session(str(root)), open_session(str(root))
        try:
            await box_back(first, box_home, sshd)
            await launched_holding(first, sshd, box, at_step=2)
            approve(first)

            kill_job(box, signal.SIGKILL)  # outbid: paused at once, no signal the job could catch
            row.update(actual_status="stopped", intended_status="running", status_msg=OUTBID)
            await box_away(first, box_home, sshd)
            outbid = await seen(first)
            assert outbid.liveness.detail == f"preempted: the provider says '{OUTBID}'", outbid.liveness
            waiting = await recover_run(first, RUN, outbid)
            assert waiting is not None and waiting.step == Step.WAIT and not waiting.relaunched, waiting
            assert "the provider says the box is resuming" in waiting.reasons[0]
            assert steps(first) == ["approved", "preempted", "decided"] and launches(first) == 1

            row.update(actual_status="running", status_msg="success, running")  # the bid won: same GPU, same disk
            hold(box, None)
            for session in (first, second):
                await box_back(session, box_home, sshd)
            back = await seen(first)
            assert back.liveness.state == "dead" and not is_preempted(back.liveness), back.liveness  # the word is gone
            shown = (await report_overview(first)).runs[0].recovery
            assert shown is not None and shown.preempted_seen == f"preempted: the provider says '{OUTBID}'"
            outcomes = await asyncio.gather(recover_run(first, RUN, back), recover_run(second, RUN, back))
            assert sorted(bool(o and o.relaunched) for o in outcomes) == [False, True], outcomes
            assert launches(first) == 2 and steps(first).count("launched") == 1

            await finished_and_gated(first, box, resumed_from=1)
            assert {r.method for r in vast_fake.requests()} == {"GET"}  # never stopped, started or destroyed
        finally:
            for session in (first, second):
                await session.close_transports()
                session.close()

    asyncio.run(go())


def test_an_interrupted_runpod_spot_pod_is_started_again_within_the_limits_and_the_run_resumes_there(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, sshd: Sshd) -> None:
    runpod_fake.add_pod(POD_ID, "RUNNING", cost=0.44)
    box = tmp_path / "box"
    root = project(tmp_path / "p", box, "runpod", POD_ID, runpod_fake.url)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await box_back(session, cloud_env, sshd)
            await launched_holding(session, sshd, box, at_step=2)
            approve(session)

            kill_job(box, signal.SIGTERM)  # RunPod's interruption: SIGTERM, then the pod is EXITED
            assert exit_code(box) == "143"
            runpod_fake.set_status(POD_ID, "EXITED")
            await box_away(session, cloud_env, sshd)
            interrupted = await seen(session)
            assert interrupted.liveness.detail == ("preempted: the provider says stopped of this interruptible box, "
                                                   "and rgt did not put it down"), interrupted.liveness
            hold(box, None)
            started = await recover_run(session, RUN, interrupted)
            assert started is not None and started.step == Step.START_BOX and not started.relaunched, started
            assert steps(session) == ["approved", "preempted", "decided", "starting", "started"]
            assert runpod_fake.pods[POD_ID]["status"] == "RUNNING" and launches(session) == 1

            await box_back(session, cloud_env, sshd)  # the pod answers again, its volume disk kept
            resumed = await recover_run(session, RUN, await seen(session))
            assert resumed is not None and resumed.relaunched, resumed
            assert steps(session)[-2:] == ["launching", "launched"] and launches(session) == 2
            await finished_and_gated(session, box, resumed_from=1)
            assert spent(session, RUN) > 0  # the started pod bills on the meter, and counts against max_spend
            writes = [(r.method, r.path, r.body) for r in runpod_fake.requests() if r.method != "GET"]
            assert writes == [("POST", f"/pods/{POD_ID}/action", {"action": "start"})], writes
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_stale_approval_or_a_pod_rgt_down_stopped_is_never_started_by_recovery(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, sshd: Sshd) -> None:
    runpod_fake.add_pod(POD_ID, "RUNNING", cost=0.44)
    box = tmp_path / "box"
    root = project(tmp_path / "p", box, "runpod", POD_ID, runpod_fake.url, restarts=1)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await box_back(session, cloud_env, sshd)
            await launched_holding(session, sshd, box, at_step=2)
            approve(session)
            text = (root / "rgt.toml").read_text().replace("max_restarts = 1", "max_restarts = 5")
            (root / "rgt.toml").write_text(text)  # more restarts than the person approved
            session.project = load_project(root / "rgt.toml")

            kill_job(box, signal.SIGTERM)
            runpod_fake.set_status(POD_ID, "EXITED")
            await box_away(session, cloud_env, sshd)
            stale = await recover_run(session, RUN, await seen(session))
            assert stale is not None and stale.step == Step.REFUSED, stale
            assert stale.reasons[0].startswith("runs.r1.recover changed since person:/dev/pts/test approved it")
            assert [r for r in runpod_fake.requests() if r.method != "GET"] == []
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_pod_a_person_stopped_with_rgt_down_is_not_preempted_and_never_started_by_recovery(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, sshd: Sshd) -> None:
    """The person gives up the running run's results and stops the pod through the gate: its job gets SIGTERM (exit
    143) and the pod goes EXITED, as an interruption would leave it; but rgt down wrote the stop, so nobody calls it
    preempted and recovery, approved or not, starts nothing."""
    runpod_fake.add_pod(POD_ID, "RUNNING", cost=0.44)
    box = tmp_path / "box"
    root = project(tmp_path / "p", box, "runpod", POD_ID, runpod_fake.url)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await box_back(session, cloud_env, sshd)
            await launched_holding(session, sshd, box, at_step=2)
            approve(session)
            shown = await teardown.plan(session, INSTANCE, "stop", accept_loss=(RUN,))

            async def pod_stops() -> None:  # what RunPod does on the stop: SIGTERM to the job, then EXITED
                while not [r for r in runpod_fake.requests() if r.method == "POST"]:
                    await asyncio.sleep(0.02)
                kill_job(box, signal.SIGTERM)

            stopping = asyncio.create_task(pod_stops())
            result = await teardown.execute(session, INSTANCE, POD_ID, shown.lines, action_id="stop",
                                            accept_loss=(RUN,))
            await stopping
            assert result.final_state == "stopped" and exit_code(box) == "143", result
            await box_away(session, cloud_env, sshd)
            stopped = await seen(session)
            assert stopped.liveness.state == "unknown" and not is_preempted(stopped.liveness), stopped.liveness
            assert await recover_run(session, RUN, stopped) is None  # not preempted: a watcher hands nothing over
            assert await recover_run(session, RUN) is None  # asked directly: not preempted either
            posts = [r.body for r in runpod_fake.requests() if r.method != "GET"]
            assert posts == [{"action": "stop"}], posts  # the person's stop, and no start
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())
