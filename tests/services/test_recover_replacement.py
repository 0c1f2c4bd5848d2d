"""A preempted run whose box the provider took for good (services/recover/replace.py, docs/remote-ops.md §10.1): the
sim box's job is preempted with SIGTERM, then its disk goes away and the provider says terminated with its own word
(`preempted`, as Lambda's API says of a reclaimed spot instance). Recovery rents a replacement within the approved
limits, pushes the checkpoint kept home, and the real torch trainer resumes from it and finishes; its evidence
pulls, verifies and opens the gate. A quote above max_price_per_hour rents nothing; nothing is ever torn down."""

from __future__ import annotations

import asyncio
from pathlib import Path

from remote_gpu_trainer.audits.recover import Step
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.gate import gate_view
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover import approval
from remote_gpu_trainer.services.recover.checkpoint_home import keep_home
from remote_gpu_trainer.services.recover.ledger import spent
from remote_gpu_trainer.services.recover.run import recover_run
from remote_gpu_trainer.state.events import EventKind
from support.helpers import INSTANCE, RUN, wait_for_liveness
from support.recover_project import (
    PERSON,
    checkpoint,
    disk,
    hold,
    launched_and_preempted,
    launches,
    project,
    seen_by_watcher,
    taken_by_provider,
)

TEARDOWN = (EventKind.TORN_DOWN, EventKind.STOPPED, EventKind.TEARDOWN_UNCONFIRMED)


def steps(session: object) -> list[str]:
    return [e.detail["step"] for e in session.db.events(run_id=RUN, kind=EventKind.RECOVER)]  # type: ignore[attr-defined]


def test_a_run_whose_box_the_provider_took_resumes_on_a_replacement_from_the_checkpoint_kept_home(
        tmp_path: Path) -> None:
    root = project(tmp_path / "p")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_and_preempted(session, root, at_step=3)
            kept = await keep_home(session, RUN, force=True)  # kept while the box still answered
            assert kept is not None and [c.path for c in kept.copied] == ["ckpt_002.pt"], kept
            approval.approve(session, RUN, session.project.run(RUN).recover, PERSON)
            taken_by_provider(root)
            seen = await seen_by_watcher(session)
            assert seen.liveness.detail.startswith("preempted"), seen.liveness
            assert (await instance_status(session, INSTANCE)).state == "terminated"

            hold(root, None)
            outcome = await recover_run(session, RUN, seen)
            assert outcome is not None and outcome.relaunched, outcome
            assert steps(session) == ["checkpoint_home", "approved", "preempted", "quoted", "decided", "renting",
                                      "rented", "pushed", "launching", "launched"]
            assert (await instance_status(session, INSTANCE)).state == "running"
            assert checkpoint(root, 2).is_file()  # pushed to the new box's cell root, where {resume} looks
            await wait_for_liveness(session)
            log = (disk(root) / "workspace" / "job" / "train.log").read_text()
            assert f"resumed from {checkpoint(root, 2)} at step 3" in log and "finished from step 3" in log
            assert launches(session)[-1]["recover"] == {"approval": approval.last_decision(session, RUN).seq,
                                                        "restart": 1}
            assert spent(session, RUN) > 0  # the replacement bills on the meter, and counts against max_spend

            await pull_run(session, RUN)
            verified = await verify_run(session, RUN)
            assert verified.ok, verified
            status = await instance_status(session, INSTANCE)
            assert gate_view(session, RUN, status.provider_id, "finished").evidence_ok
            assert [e for e in session.db.events() if e.kind in TEARDOWN] == []
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_quote_above_max_price_per_hour_rents_nothing_and_says_why_once(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    text = (root / "rgt.toml").read_text().replace("max_price_per_hour = 1.0", "max_price_per_hour = 0.5")
    (root / "rgt.toml").write_text(text)  # the sim box bills 0.89/h

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_and_preempted(session, root)
            approval.approve(session, RUN, session.project.run(RUN).recover, PERSON)
            taken_by_provider(root)
            seen = await seen_by_watcher(session)
            outcome = await recover_run(session, RUN, seen)
            assert outcome is not None and outcome.step == Step.REFUSED and not outcome.relaunched
            assert any("above max_price_per_hour 0.5000" in reason for reason in outcome.reasons), outcome
            again = await recover_run(session, RUN, seen)
            assert again is not None and again.step == Step.REFUSED
            assert "renting" not in steps(session) and "rented" not in steps(session)
            assert steps(session) == ["approved", "preempted", "quoted", "decided"]  # said once, however often asked
            assert (await instance_status(session, INSTANCE)).state == "terminated"  # nothing was created
            assert not disk(root).exists() and len(launches(session)) == 1
            creations = [e for e in session.db.events(kind=EventKind.APPROVAL) if e.detail.get("action") == "create"]
            assert [e.actor for e in creations] == ["user"]  # the test's own create; recovery created nothing
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())
