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
import contextlib
import json
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.preemption import is_preempted
from remote_gpu_trainer.audits.recover import Step
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.gate import gate_view
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover import approval
from remote_gpu_trainer.services.recover.checkpoint_home import keep_home
from remote_gpu_trainer.services.recover.ledger import spent
from remote_gpu_trainer.services.recover.run import recover_run
from remote_gpu_trainer.services.report_overview import report_overview
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state.events import EventKind
from support import fake_clouds
from support.fake_clouds import FakeRunPod, FakeVast
from support.helpers import INSTANCE, RUN, wait_for_liveness
from support.recover_cloud import (
    OUTBID,
    approve,
    bid_won,
    box_away,
    box_back,
    checkpoint,
    exit_code,
    hold,
    kill_job,
    launched_approved,
    launched_holding,
    loopback_key,
    outbid,
    project,
    rent_project,
    seen,
)
from support.recover_project import notify_to
from support.sshd_fixtures import Sshd
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

vast_fake = fake_clouds.vast_fake
runpod_fake = fake_clouds.runpod_fake
cloud_env = fake_clouds.cloud_env

VAST_ID, POD_ID = "7", "pod1"
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
            outbid(row)
            await box_away(first, box_home, sshd)
            paused = await seen(first)
            assert paused.liveness.detail == f"preempted: the provider says '{OUTBID}'", paused.liveness
            waiting = await recover_run(first, RUN, paused)
            assert waiting is not None and waiting.step == Step.WAIT and not waiting.relaunched, waiting
            assert "the provider says the box is resuming" in waiting.reasons[0]
            assert steps(first) == ["approved", "preempted", "decided"] and launches(first) == 1

            bid_won(row)  # the bid won: same GPU, same disk
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


def spot_pod(tmp_path: Path, fake: FakeRunPod, *, restarts: int = 3) -> tuple[Path, Path]:
    """A running RunPod pod at 0.44/h and the project whose interruptible instance it is."""
    fake.add_pod(POD_ID, "RUNNING", cost=0.44)
    box = tmp_path / "box"
    return project(tmp_path / "p", box, "runpod", POD_ID, fake.url, restarts=restarts), box


def test_an_interrupted_runpod_spot_pod_is_started_again_within_the_limits_and_the_run_resumes_there(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, sshd: Sshd) -> None:
    root, box = spot_pod(tmp_path, runpod_fake)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_approved(session, cloud_env, sshd, box)

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
    root, box = spot_pod(tmp_path, runpod_fake, restarts=1)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_approved(session, cloud_env, sshd, box)
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
    root, box = spot_pod(tmp_path, runpod_fake)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_approved(session, cloud_env, sshd, box)
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


def destroyed_vast(tmp_path: Path, home: Path, fake: FakeVast, first: Sshd) -> tuple[Path, Path, dict[str, Any]]:
    """A vast.ai box at `first`, two offers the limits allow, and the project that rents by its launch constraint."""
    row = fake.add_instance(VAST_ID, ssh_host="127.0.0.1", ssh_port=first.port)
    fake.offers = [{"id": 900, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.35},
                   {"id": 901, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.45}]
    loopback_key(home, first)
    box = tmp_path / "box"
    return rent_project(tmp_path / "p", box, VAST_ID, fake.url), box, row


async def replaced(session: Session, fake: FakeVast, row: dict[str, Any], box: Path, first: Sshd,
                   replacement: Sshd, *, relaunch_holds_at: int | None) -> None:
    """The run launched on `first` with its checkpoint kept home and recovery approved; then outbid (waited for), then
    destroyed with its disk; recovery rents the offer at `replacement` and relaunches there."""
    async def comes_up() -> None:  # vast.ai provisions the rented box, then it runs, reached at its SSH address
        while not (new := [i for i in fake.instances if i != VAST_ID]):
            await asyncio.sleep(0.05)
        fake.instances[new[0]].update(actual_status="running", intended_status="running", cur_state="running",
                                      ssh_host="127.0.0.1", ssh_port=replacement.port)

    await launched_holding(session, first, box, at_step=2)
    kept = await keep_home(session, RUN)
    assert kept is not None and [c.path for c in kept.copied] == ["ckpt_001.pt"], kept
    approve(session)
    kill_job(box, signal.SIGKILL)
    outbid(row)
    waiting = await recover_run(session, RUN, await seen(session))
    assert waiting is not None and waiting.step == Step.WAIT, waiting
    fake.deleted.add(VAST_ID)  # destroyed, its disk with it (the session's connection to it is left open)
    shutil.rmtree(box)
    gone = await seen(session)
    assert is_preempted(gone.liveness) and (await instance_status(session, INSTANCE)).state == "terminated"
    hold(box, relaunch_holds_at)
    up = asyncio.create_task(comes_up())
    outcome = await recover_run(session, RUN, gone)
    await up
    assert outcome is not None and outcome.relaunched, outcome


def test_a_destroyed_vast_box_is_replaced_within_the_limits_and_the_run_resumes_from_the_checkpoint_kept_home(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd,
        sshd_factory: Callable[..., Sshd], receiver: Receiver,  # noqa: F811 (the fixture)
        capsys: pytest.CaptureFixture[str]) -> None:
    """The outbid box never comes back: vast.ai destroys it, its disk with it. Recovery rents the cheapest offer under
    the limits through the API (the box rgt.toml's `launch` says), trusts the new box's first host key under the
    person's approval, pushes the checkpoint kept home and relaunches; the run finishes there and its evidence, pulled
    from the new box, opens the gate. The session reads the instance as the new box; nothing is destroyed by rgt."""
    replacement = sshd_factory("replacement", client_key=sshd.client_key)  # another box: another host key
    root, box, row = destroyed_vast(tmp_path, cloud_env, vast_fake, sshd)
    notify_to(root, f"json://{receiver.url.removeprefix('http://')}")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await replaced(session, vast_fake, row, box, sshd, replacement, relaunch_holds_at=None)
            new_id = session.instance(INSTANCE).id
            assert new_id not in (None, VAST_ID)
            assert steps(session) == ["checkpoint_home", "approved", "preempted", "decided", "quoted", "decided",
                                      "renting", "trusted", "rented", "pushed", "notified", "launching", "launched",
                                      "notified"]
            launched = [e for e in session.db.events(kind=EventKind.LAUNCHED)]
            assert [(e.detail["provider_id"], e.detail["replaces"]) for e in launched] == [(new_id, VAST_ID)]
            trusted = [e for e in session.db.events(kind=EventKind.HOST_KEY_TRUSTED)]
            assert [e.actor for e in trusted] == ["user", "rgt:recover"]
            assert replacement.logins() >= 1  # pushed to and relaunched on the new box, not over the old connection
            await finished_and_gated(session, box, resumed_from=1)
            assert (await instance_status(session, INSTANCE)).provider_id == new_id
            assert spent(session, RUN) > 0
            puts = [(r.method, r.path) for r in vast_fake.requests() if r.method not in ("GET", "POST")]
            assert puts == [("PUT", "/v0/asks/900/")], puts  # one rent, the cheapest offer; no DELETE, no stop
            assert await recover_run(session, RUN, await seen(session)) is None  # a second watcher: nothing to do
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())
    assert main(["status", str(root), "--timeout", "10", "--format", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [(box["name"], box["id"], box["state"]) for box in status["instances"]] == [("box", "5001", "running")]
    assert status["orphans"] == [] and status["instances"][0]["burn_per_hour"] == 0.35  # the rented box, billing
    said = [request.body.decode() for request in receiver.wait_for(2)]
    assert "recovery of r1 rented 5001" in said[0] and 'id = \\"5001\\" under [instances.box]' in said[0], said
    assert "r1 was preempted and relaunched" in said[1], said


def test_rgt_down_cannot_destroy_the_replacement_before_its_results_are_home_nor_forget_it_with_a_lost_database(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd, sshd_factory: Callable[..., Sshd],
        capsys: pytest.CaptureFixture[str]) -> None:
    """The relaunched run is still running on the replacement recovery rented. `rgt down` with the new box's id is
    refused (its results are not home); with the state database lost, the instance reads as the destroyed box again,
    so `rgt down` has nothing to act on, and `rgt status` lists the replacement as an orphan that bills: unknown is
    never empty, and the box is never destroyed."""
    replacement = sshd_factory("replacement", client_key=sshd.client_key)
    root, box, row = destroyed_vast(tmp_path, cloud_env, vast_fake, sshd)

    async def go() -> str:
        session = open_session(str(root))
        try:
            await replaced(session, vast_fake, row, box, sshd, replacement, relaunch_holds_at=3)
            return str(session.instance(INSTANCE).id)
        finally:
            await session.close_transports()
            session.close()

    new_id = asyncio.run(go())
    code = main(["down", RUN, str(root), "--confirm", new_id])
    out = capsys.readouterr()
    assert code == 3 and "run r1 is running on the box" in out.err and "results not known to be home" in out.err, out
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (root / ".rgt" / name).unlink(missing_ok=True)
    code = main(["down", RUN, str(root), "--confirm", new_id])
    out = capsys.readouterr()
    assert code == 3 and "instance state is terminated: nothing to terminate" in out.err, out  # the old box
    code = main(["status", str(root), "--timeout", "10", "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and [o["id"] for o in document["orphans"]] == [new_id], document
    assert [o["bills"] for o in document["orphans"]] == [True]
    assert [r for r in vast_fake.requests() if r.method == "DELETE" or r.body == {"state": "stopped"}] == []
    hold(box, None)
    kill_job(box, signal.SIGKILL)  # the test's own job


def test_a_replacement_quoted_above_max_price_per_hour_is_never_rented(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd) -> None:
    """Every offer costs more than the recovery limit allows (though less than the launch ceiling): nothing is rented,
    the refusal is recorded and said once however often a watcher looks, and the run waits for a person."""
    row = vast_fake.add_instance(VAST_ID, ssh_host="127.0.0.1", ssh_port=sshd.port)
    vast_fake.offers = [{"id": 900, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.8}]
    loopback_key(cloud_env, sshd)
    box = tmp_path / "box"
    root = rent_project(tmp_path / "p", box, VAST_ID, vast_fake.url, max_price=0.5)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, sshd, box, at_step=2)
            approve(session)
            kill_job(box, signal.SIGKILL)
            outbid(row)
            await recover_run(session, RUN, await seen(session))
            vast_fake.deleted.add(VAST_ID)
            await session.close_transports()
            for _ in range(2):  # a patrol's looks
                refused = await recover_run(session, RUN, await seen(session))
                assert refused is not None and refused.step == Step.REFUSED and not refused.relaunched, refused
                assert any("no rentable offer of 1x RTX 4090 under $0.50/h" in r for r in refused.reasons), refused
            assert steps(session) == ["approved", "preempted", "decided", "quoted", "decided"]
            assert [r for r in vast_fake.requests() if r.method not in ("GET", "POST")] == []  # nothing rented
            assert session.instance(INSTANCE).id == VAST_ID and launches(session) == 1
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_pod_stopped_after_its_job_was_seen_dead_is_not_preempted(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, sshd: Sshd) -> None:
    """The job was killed on a running pod and a watcher saw it dead (not preempted: a person reads its log); RunPod
    later stops the idle pod. That stop took nothing from the run, so nobody calls it preempted and recovery starts
    nothing."""
    root, box = spot_pod(tmp_path, runpod_fake)

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_approved(session, cloud_env, sshd, box)
            kill_job(box, signal.SIGKILL)
            dead = (await report_overview(session)).runs[0]  # the dashboard's look, kept as the last state seen
            assert dead.liveness == "dead" and not dead.liveness_detail.startswith("preempted"), dead
            runpod_fake.set_status(POD_ID, "EXITED")
            await box_away(session, cloud_env, sshd)
            stopped = await seen(session)
            assert stopped.liveness.state == "unknown" and not is_preempted(stopped.liveness), stopped.liveness
            assert await recover_run(session, RUN) is None
            assert [r for r in runpod_fake.requests() if r.method != "GET"] == []
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def outbid_run(tmp_path: Path, home: Path, fake: FakeVast, server: Sshd) -> tuple[Path, Path, dict[str, Any], Session]:
    """A run launched on a vast.ai box, recovery approved, then the box outbid and away; the session left open."""
    row = fake.add_instance(VAST_ID)
    box = tmp_path / "box"
    root = project(tmp_path / "p", box, "vastai", VAST_ID, fake.url)
    session = open_session(str(root))
    asyncio.run(launched_approved(session, home, server, box))
    kill_job(box, signal.SIGKILL)
    outbid(row)
    asyncio.run(box_away(session, home, server))
    return root, box, row, session


def test_rgt_watch_follows_an_outbid_run_until_its_box_is_back_and_the_relaunch_finishes(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`rgt watch RUN` over the outbid box: it says the wait once, keeps watching while vast.ai holds the box, and once
    the bid wins again it relaunches the run there and follows it to the end (exit 0)."""
    root, box, row, session = outbid_run(tmp_path, cloud_env, vast_fake, sshd)
    try:
        codes: list[int] = []
        watcher = threading.Thread(target=lambda: codes.append(main(["watch", RUN, str(root), "--interval", "0.2"])))
        watcher.start()
        deadline = time.monotonic() + 60
        while "decided" not in steps(session):  # the watch saw the preemption and recovery chose to wait
            assert time.monotonic() < deadline and watcher.is_alive(), steps(session)
            time.sleep(0.1)
        time.sleep(1.0)  # a few more passes while the box is away: the wait is not said again
        bid_won(row)
        hold(box, None)
        asyncio.run(box_back(session, cloud_env, sshd))
        watcher.join(120)
        assert not watcher.is_alive() and codes == [0], codes
    finally:
        session.close()
    out = capsys.readouterr().out
    assert out.count("recovery wait: the provider says the box is resuming") == 1, out
    assert "recovery relaunched: relaunched on box, restart 1" in out and f"run {RUN}: finished" in out, out
    assert "finished from step 2" in (box / "job" / "train.log").read_text()
    assert {r.method for r in vast_fake.requests()} == {"GET"}


def test_the_patrol_says_the_wait_once_and_relaunches_the_outbid_run_when_its_box_is_back(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`rgt watch --all` looks at the project at each tick: while vast.ai holds the outbid box, recovery waits and the
    patrol says so once; at the tick after the bid won, it relaunches the run there."""
    root, box, row, session = outbid_run(tmp_path, cloud_env, vast_fake, sshd)
    try:
        said = []
        for _ in range(2):  # two ticks while the box is away
            main(["watch", "--all", str(root), "--once"])
            said.append(capsys.readouterr().err)
        wait = "r1: recovery wait: the provider says the box is resuming"
        assert wait in said[0] and wait not in said[1], said
        bid_won(row)
        hold(box, None)
        asyncio.run(box_back(session, cloud_env, sshd))
        main(["watch", "--all", str(root), "--once"])
        assert "r1: recovery relaunched: relaunched on box, restart 1" in capsys.readouterr().err
        asyncio.run(wait_for_liveness(session))
        assert "finished from step 2" in (box / "job" / "train.log").read_text()
        assert {r.method for r in vast_fake.requests()} == {"GET"}
    finally:
        asyncio.run(session.close_transports())
        session.close()


def test_a_stop_a_person_asked_for_is_never_undone_even_unconfirmed_or_from_the_console(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, vast_fake: FakeVast, sshd: Sshd) -> None:
    """`rgt down --stop` interrupted before RunPod confirmed the stop (only the request is in the event log), and a
    vast.ai box stopped from its console (`intended_status` stopped): neither box is called preempted, and recovery
    starts neither."""
    runpod_fake.add_pod(POD_ID, "RUNNING", cost=0.44)
    runpod_fake.actions_take_effect = False  # RunPod moves the pod later
    box = tmp_path / "box"
    root = project(tmp_path / "p", box, "runpod", POD_ID, runpod_fake.url)

    async def interrupted_stop() -> None:
        session = open_session(str(root))
        try:
            await launched_approved(session, cloud_env, sshd, box)
            shown = await teardown.plan(session, INSTANCE, "stop", accept_loss=(RUN,))
            stopping = asyncio.create_task(teardown.execute(session, INSTANCE, POD_ID, shown.lines,
                                                            action_id="stop", accept_loss=(RUN,)))
            while not [r for r in runpod_fake.requests() if r.method == "POST"]:
                await asyncio.sleep(0.02)
            stopping.cancel()  # the person pressed Ctrl-C while rgt waited for the confirmation
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
            assert [e.kind for e in session.db.events() if e.kind in TEARDOWN] == []  # never confirmed
            kill_job(box, signal.SIGTERM)  # then RunPod stops it
            runpod_fake.set_status(POD_ID, "EXITED")
            await box_away(session, cloud_env, sshd)
            stopped = await seen(session)
            assert not is_preempted(stopped.liveness), stopped.liveness
            assert await recover_run(session, RUN) is None
            assert [r.body for r in runpod_fake.requests() if r.method != "GET"] == [{"action": "stop"}]
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(interrupted_stop())

    row = vast_fake.add_instance(VAST_ID)
    vast_box = tmp_path / "vast-box"
    vast_root = project(tmp_path / "vast", vast_box, "vastai", VAST_ID, vast_fake.url)

    async def console_stop() -> None:
        session = open_session(str(vast_root))
        try:
            await launched_approved(session, cloud_env, sshd, vast_box)
            kill_job(vast_box, signal.SIGKILL)
            row.update(actual_status="stopped", intended_status="stopped", cur_state="stopped")
            await box_away(session, cloud_env, sshd)
            stopped = await seen(session)
            assert not is_preempted(stopped.liveness), stopped.liveness
            assert await recover_run(session, RUN) is None
            assert {r.method for r in vast_fake.requests()} == {"GET"}
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(console_stop())


def test_a_rent_that_failed_after_the_create_is_not_made_again(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd) -> None:
    """vast.ai made the box but it never came up (it reads stopped): the attempt is recorded as failed and said, and
    at the next look recovery rents no second box for the same launch (the first may bill): a person decides."""
    root, box, row = destroyed_vast(tmp_path, cloud_env, vast_fake, sshd)

    async def never_up() -> None:
        while not (new := [i for i in vast_fake.instances if i != VAST_ID]):
            await asyncio.sleep(0.05)
        vast_fake.instances[new[0]].update(actual_status="stopped", intended_status="stopped")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, sshd, box, at_step=2)
            await keep_home(session, RUN)
            approve(session)
            kill_job(box, signal.SIGKILL)
            outbid(row)
            await recover_run(session, RUN, await seen(session))
            vast_fake.deleted.add(VAST_ID)
            await session.close_transports()
            broken = asyncio.create_task(never_up())
            failed = await recover_run(session, RUN, await seen(session))
            await broken
            assert failed is not None and failed.step == Step.REFUSED and "renting a replacement failed" in \
                failed.reasons[0], failed
            vast_fake.deleted.add(next(i for i in vast_fake.instances if i != VAST_ID))  # gone too, later
            again = await recover_run(session, RUN, await seen(session))
            assert again is not None and again.step == Step.REFUSED and "one box per launch" in again.reasons[0], again
            rents = [r for r in vast_fake.requests() if r.method == "PUT"]
            assert len(rents) == 1 and launches(session) == 1, rents
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_an_edit_of_what_recovery_may_rent_makes_the_approval_stale(tmp_path: Path, vast_fake: FakeVast) -> None:
    """The approval of an instance with `launch` says recovery trusts the first host key of a box it rents; a change
    of what it may rent (GPU, image, ceiling, spot) asks a person again."""
    root = rent_project(tmp_path / "p", tmp_path / "box", VAST_ID, vast_fake.url)
    session = open_session(str(root))
    try:
        prompt = approval.approval_prompt(session, RUN)
        assert any("trusted at its first host key" in line for line in prompt), prompt
        approve(session)
        limits = session.project.run(RUN).recover
        assert limits is not None and approval.check_approval(session, session.project.run(RUN), limits).ok
        text = (root / "rgt.toml").read_text().replace('image = "pytorch/pytorch"', 'image = "someone/else"')
        (root / "rgt.toml").write_text(text)
        session.project = load_project(root / "rgt.toml")
        stale = approval.check_approval(session, session.project.run(RUN), limits)
        assert not stale.ok and "changed since person:/dev/pts/test approved" in stale.reason, stale
    finally:
        session.close()
