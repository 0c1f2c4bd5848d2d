"""Recovery of a preempted run within limits a person approved once (services/recover/, docs/remote-ops.md §10.1),
on an interruptible sim box whose job the test preempts with SIGTERM, as RunPod's spot pods are (exit 143).

A real trainer (tests/fixtures/resumable_trainer.py) saves a torch checkpoint per step and resumes from `{resume}`;
the box stays up, so recovery relaunches there. Every test tries to get recovery to act when it must not: without
an approval, with a stale one, past max_restarts, with a second watcher racing; and checks that nothing is ever torn
down (the sim box keeps billing and no teardown event is written)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from remote_gpu_trainer.audits.recover import Step
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.fsutil import run_lock
from remote_gpu_trainer.report import render, to_dict
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.gate import gate_view
from remote_gpu_trainer.services.instances import create_instance, instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover import approval
from remote_gpu_trainer.services.recover.run import recover_run
from remote_gpu_trainer.services.report_overview import report_overview
from remote_gpu_trainer.state.events import EventKind
from support.helpers import INSTANCE, RUN, kill_group, wait_for_liveness
from support.recover_project import (
    PERSON,
    checkpoint,
    disk,
    hold,
    launched_and_preempted,
    launches,
    never_torn_down,
    preempt,
    project,
    seen_by_watcher,
    wait_exists,
)
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)


def test_a_preempted_run_resumes_on_its_box_once_approved_and_its_evidence_opens_the_gate(
        tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811 (the fixture)
    root = project(tmp_path / "p", apprise=f"json://{receiver.url.removeprefix('http://')}")

    async def go() -> None:
        session = open_session(str(root))
        try:
            seen = await launched_and_preempted(session, root)
            refused = await recover_run(session, RUN, seen)
            assert refused is not None and refused.step == Step.REFUSED and not refused.relaunched
            assert "no person approved recovery of r1" in refused.reasons[0]
            assert len(launches(session)) == 1  # nothing relaunched without the approval
            again = await recover_run(session, RUN, seen)  # a patrol's next look: the same refusal, said once
            assert again is not None and again.step == Step.REFUSED
            decided = [e for e in session.db.events(run_id=RUN, kind=EventKind.RECOVER)
                       if e.detail["step"] == "decided"]
            assert len(decided) == 1

            waiting = (await report_overview(session)).runs[0].recovery
            assert waiting is not None and not waiting.approved and waiting.restarts_used == 0
            assert waiting.why_not.startswith("no person approved") and waiting.checkpoint_age_s is not None

            approval.approve(session, RUN, session.project.run(RUN).recover, PERSON)
            hold(root, None)
            outcome = await recover_run(session, RUN, seen)
            assert outcome is not None and outcome.relaunched, outcome
            assert outcome.reasons == ("relaunched on box, restart 1",)
            relaunch = launches(session)[-1]
            approved = approval.last_decision(session, RUN)
            assert approved is not None and approved.actor == PERSON
            assert len(launches(session)) == 2 and relaunch["recover"] == {"approval": approved.seq, "restart": 1}
            await wait_for_liveness(session)
            shown = await report_overview(session)
            document = to_dict(shown)["runs"][0]["recovery"]
            assert document["approved"] is True and document["why_not"] is None
            assert (document["restarts_used"], document["max_restarts"], document["spent"]) == (1, 3, 0.0)
            assert "recovery approved · restarts 1/3 · spent 0.00/25.00 USD" in render(shown, "text")
            log = (disk(root) / "workspace" / "job" / "train.log").read_text()
            assert f"resumed from {checkpoint(root, 1)} at step 2" in log and "finished from step 2" in log

            await pull_run(session, RUN)
            verified = await verify_run(session, RUN)
            assert verified.ok, verified
            status = await instance_status(session, INSTANCE)
            assert gate_view(session, RUN, status.provider_id, "finished").evidence_ok
            assert status.state == "running"  # still billing: recovery never tears down
            never_torn_down(session)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())
    titles = [request.body.decode() for request in receiver.wait_for(2)]
    assert "r1 was preempted and is not recovered" in titles[0] and "no person approved" in titles[0]
    assert "r1 was preempted and relaunched" in titles[1] and "restart 1 of 3" in titles[1]


def test_max_restarts_stops_recovery_and_a_stale_approval_recovers_nothing(
        tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811 (the fixture)
    root = project(tmp_path / "p", restarts=1, apprise=f"json://{receiver.url.removeprefix('http://')}")

    async def go() -> None:
        session = open_session(str(root))
        try:
            seen = await launched_and_preempted(session, root)
            approval.approve(session, RUN, session.project.run(RUN).recover, PERSON)
            hold(root, 4)  # the relaunch waits at step 4, where the test preempts it again
            first = await recover_run(session, RUN, seen)
            assert first is not None and first.relaunched
            wait_exists(checkpoint(root, 3))
            preempt(root)
            second = await recover_run(session, RUN, await seen_by_watcher(session))
            assert second is not None and second.step == Step.REFUSED
            assert second.reasons == ("1 of 1 restart(s) used (runs.r1.recover.max_restarts)",)
            assert len(launches(session)) == 2

            text = (root / "rgt.toml").read_text().replace("max_restarts = 1", "max_restarts = 5")
            (root / "rgt.toml").write_text(text)  # more restarts, but nobody approved them
            session.project = load_project(root / "rgt.toml")
            stale = await recover_run(session, RUN, await seen_by_watcher(session))
            assert stale is not None and stale.step == Step.REFUSED and len(launches(session)) == 2
            assert stale.reasons[0].startswith("runs.r1.recover changed since person:/dev/pts/test approved it: "
                                               "stale")
            approval.revoke(session, RUN, PERSON)
            revoked = await recover_run(session, RUN, await seen_by_watcher(session))
            assert revoked is not None and "was revoked by person:/dev/pts/test" in revoked.reasons[0]
            assert len(launches(session)) == 2
            never_torn_down(session)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())
    said = [request.body.decode() for request in receiver.wait_for(3)]
    assert "r1 was preempted and relaunched" in said[0], said
    assert "r1 was preempted and is not recovered" in said[1] and "1 of 1 restart(s) used" in said[1], said


def test_two_watchers_recover_one_preemption_once(tmp_path: Path) -> None:
    """Two sessions (a TUI and a patrol) see the same preemption at once: the run's lock lets one relaunch it; the
    other either finds the lock held or, under it, a run that is running again."""
    root = project(tmp_path / "p")

    async def go() -> None:
        first, second = open_session(str(root)), open_session(str(root))
        try:
            seen = await launched_and_preempted(first, root)
            approval.approve(first, RUN, first.project.run(RUN).recover, PERSON)
            hold(root, None)
            outcomes = await asyncio.gather(recover_run(first, RUN, seen), recover_run(second, RUN, seen))
            assert sorted(bool(o and o.relaunched) for o in outcomes) == [False, True], outcomes
            assert len(launches(first)) == 2
            launched = [e for e in first.db.events(run_id=RUN, kind=EventKind.RECOVER)
                        if e.detail["step"] == "launched"]
            assert len(launched) == 1
            await wait_for_liveness(first)
            never_torn_down(first)
        finally:
            for session in (first, second):
                await session.close_transports()
                session.close()

    asyncio.run(go())


def test_a_run_without_limits_or_not_preempted_is_left_alone(tmp_path: Path) -> None:
    root = project(tmp_path / "p")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await create_instance(session, INSTANCE)
            hold(root, 2)
            await launch_run(session, RUN)
            wait_exists(checkpoint(root, 1))
            running = await seen_by_watcher(session)
            assert running.liveness.state == "running"
            assert await recover_run(session, RUN, running) is None  # a watcher's running run: nothing asked
            approval.approve(session, RUN, session.project.run(RUN).recover, PERSON)
            kill_group(disk(root) / "workspace" / "job" / ".rgt" / RUN / "pgid", signal.SIGKILL)
            dead = await seen_by_watcher(session)
            assert dead.liveness.state == "dead" and not dead.liveness.detail.startswith("preempted")
            assert await recover_run(session, RUN, dead) is None  # killed, not preempted: a person reads the log
            assert len(launches(session)) == 1
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_run_whose_lock_another_rgt_holds_is_left_to_it_and_nothing_is_said_or_written(tmp_path: Path) -> None:
    """A pull (or a teardown, or another watcher) holds the run's lock, or another run's on the same box (its own
    recovery may be renting or starting that box): recovery does nothing this look, writes no decision and gives the
    watcher no line to print; once the locks are free, the next look recovers."""
    root = project(tmp_path / "p")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:  # a second run on the same box
        handle.write(f'\n[runs.r2]\ninstance = "{INSTANCE}"\nworkdir = "/workspace/job2"\ncommand = "true"\n'
                     'log = "train.log"\nremote_root = "/workspace/rgt/r2"\nroster = ["seed0"]\n'
                     'required = ["best.pth"]\n')

    async def go() -> None:
        session = open_session(str(root))
        try:
            seen = await launched_and_preempted(session, root)
            approval.approve(session, RUN, session.project.run(RUN).recover, PERSON)
            with run_lock(session.project.state_dir, RUN, "pulling"):
                assert await recover_run(session, RUN, seen) is None
            with run_lock(session.project.state_dir, "r2", "recovering"):  # another run on the same box
                assert await recover_run(session, RUN, seen) is None
            assert [e.detail["step"] for e in session.db.events(run_id=RUN, kind=EventKind.RECOVER)] == ["approved"]
            assert len(launches(session)) == 1
            hold(root, None)
            later = await recover_run(session, RUN, seen)
            assert later is not None and later.relaunched, later
            await wait_for_liveness(session)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())
