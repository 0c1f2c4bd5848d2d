"""The approval inbox on a real sim project: a request never acts, a person's approval runs it through the same
services with the gate re-checked, an allowance covers rents only within it, a relaunch or a changed plan stops an
approval, and only a person decides."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.services.inbox import allowances, decide
from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor, person_actor
from remote_gpu_trainer.services.inbox.requests import file_request, get_request, pending_count, wait_for_change
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state.events import EventKind
from support.gate_helpers import (
    SIM_ID,
    launch_finished,
    project_text,
    pull_and_verify,
    relaunch_finished,
    seed_verdicts,
    sim_disk,
    write_text_project,
)
from support.helpers import INSTANCE, RUN

AGENT = agent_actor("claude-code")
PERSON = person_actor("/dev/pts/7")


def _project(root: Path) -> Path:
    write_text_project(root, project_text())
    seed_verdicts(root)
    return root


async def _in_session(root: Path, body):  # type: ignore[no-untyped-def]
    session = open_session(str(root))
    try:
        return await body(session)
    finally:
        await session.close_transports()
        session.close()


def test_a_teardown_request_waits_and_runs_only_when_a_person_approves_the_plan_they_saw(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    asyncio.run(launch_finished(root))

    async def file(session: Session) -> str:
        request = await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why="results are home",
                                     instance=INSTANCE)
        assert request.state == "pending" and request.plan.blocked  # not pulled yet: the gate is closed
        assert (await instance_status(session, INSTANCE)).state == "running"
        with pytest.raises(VerbFailed, match="cannot run now"):
            await decide.approve(session, request.id, actor=PERSON, shown_digest=request.plan.digest,
                                 typed_id=SIM_ID)
        with pytest.raises(ConfigError, match="only a person"):
            await decide.approve(session, request.id, actor=AGENT, shown_digest=request.plan.digest, typed_id=SIM_ID)
        assert get_request(session, request.id).state == "pending" and pending_count(session) == 1
        return request.plan.digest

    old_digest = asyncio.run(_in_session(root, file))
    asyncio.run(pull_and_verify(root))

    async def approve(session: Session) -> None:
        # the plan the agent filed is not the plan now (the gate opened): approving the old one runs nothing
        with pytest.raises(decide.PlanChanged):
            await decide.approve(session, "Q-000001", actor=PERSON, shown_digest=old_digest, typed_id=SIM_ID)
        now = await decide.current_plan(session, "Q-000001")
        assert now.state == "pending" and now.plan.digest != old_digest and not now.plan.blocked
        with pytest.raises(ConfigError, match="typed id"):
            await decide.approve(session, now.id, actor=PERSON, shown_digest=now.plan.digest, typed_id="wrong")
        assert sim_disk(root).exists()
        done = await decide.approve(session, now.id, actor=PERSON, shown_digest=now.plan.digest, typed_id=SIM_ID)
        assert done.state == "done" and done.decided_by == PERSON, done.outcome
        kinds = [(e.kind, e.actor) for e in session.db.events()]
        assert (EventKind.APPROVAL, PERSON) in kinds and (EventKind.TORN_DOWN, "rgt") in kinds
        filed = [e for e in session.db.events(kind=EventKind.REQUEST) if e.detail["state"] == "pending"]
        assert filed[0].actor == AGENT and filed[0].detail["why"] == "results are home"

    asyncio.run(_in_session(root, approve))
    assert not sim_disk(root).exists()


def test_a_request_filed_before_a_relaunch_is_refused_when_it_would_execute(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    asyncio.run(launch_finished(root))
    asyncio.run(pull_and_verify(root))

    async def file(session: Session) -> str:
        request = await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why="done", instance=INSTANCE)
        assert not request.plan.blocked
        return request.plan.digest

    digest = asyncio.run(_in_session(root, file))
    asyncio.run(relaunch_finished(root))
    asyncio.run(pull_and_verify(root))  # even with the new launch verified, the request spoke of the old one

    async def approve(session: Session) -> None:
        with pytest.raises(VerbFailed, match="launched again since it was filed"):
            await decide.approve(session, "Q-000001", actor=PERSON, shown_digest=digest, typed_id=SIM_ID)
        assert get_request(session, "Q-000001").state == "refused"
        with pytest.raises(ConfigError, match="only a pending request"):
            await decide.approve(session, "Q-000001", actor=PERSON, shown_digest=digest, typed_id=SIM_ID)

    asyncio.run(_in_session(root, approve))
    assert sim_disk(root).exists()


def test_an_allowance_lets_a_rent_within_it_through_refuses_one_above_and_never_covers_a_teardown(
        tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def body(session: Session) -> None:
        with pytest.raises(ConfigError, match="only a person"):
            allowances.grant(session, actor=AGENT, max_price_per_hour=5, total=100, hours=1)
        low = allowances.grant(session, actor=PERSON, max_price_per_hour=0.50, total=10, hours=2)
        above = await file_request(session, RequestKind.RENT, actor=AGENT, why="train", run_id=RUN)
        assert above.state == "pending" and "above every allowance" in above.outcome  # the sim box bills $0.89/h
        assert (await instance_status(session, INSTANCE)).state != "running"
        allowances.revoke(session, low.id, actor=PERSON)
        decide.reject(session, above.id, actor=PERSON, note="wait for the new allowance")
        granted = allowances.grant(session, actor=PERSON, max_price_per_hour=1.00, total=2.0, hours=2)
        within = await file_request(session, RequestKind.RENT, actor=AGENT, why="train", run_id=RUN,
                                    params={"hours": 2})
        assert within.state == "done" and within.allowance == granted.id, within.outcome
        assert (await instance_status(session, INSTANCE)).state == "running"
        used = next(a for a in allowances.allowances(session) if a.id == granted.id)
        assert used.used == pytest.approx(1.78)
        teardown = await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why="stop paying",
                                      instance=INSTANCE)
        assert teardown.state == "pending" and teardown.allowance is None
        stop = await file_request(session, RequestKind.STOP, actor=AGENT, why="pause", instance=INSTANCE)
        assert stop.state == "pending"
        views, timed_out = await wait_for_change(session, [teardown.id, stop.id], 0.3)
        assert timed_out and [v.state for v in views] == ["pending", "pending"]
        assert (await instance_status(session, INSTANCE)).state == "running"
        rent_events = [e for e in session.db.events(kind=EventKind.APPROVAL)]
        assert [e.actor for e in rent_events] == [f"{AGENT} (allowance {granted.id})"]

    asyncio.run(_in_session(root, body))


def test_the_total_of_an_allowance_is_never_spent_twice(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def body(session: Session) -> None:
        granted = allowances.grant(session, actor=PERSON, max_price_per_hour=1.0, total=1.0, hours=1)
        first = await file_request(session, RequestKind.RENT, actor=AGENT, why="train", run_id=RUN)
        assert first.state == "done" and first.allowance == granted.id
        seq = int(granted.id.split("-")[1])
        assert not session.db.take_allowance(seq, 99, 0.5)  # $0.89 of $1.00 used: another $0.50 does not fit

    asyncio.run(_in_session(root, body))


def test_a_finding_decision_runs_on_a_persons_word_with_the_agents_note(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def body(session: Session) -> None:
        from remote_gpu_trainer.state.audit import FindingWrite

        session.db.write_finding(FindingWrite(check="V05", subject="r1", severity="warn", status="open",
                                              message="one seed", fingerprint="f1"))
        finding = session.db.finding_records()[0].id
        with pytest.raises(ConfigError, match="disclosure"):
            await file_request(session, RequestKind.FINDING, actor=AGENT, why="budget",
                               params={"finding": finding, "decision": "acknowledge", "note": "one seed"})
        request = await file_request(session, RequestKind.FINDING, actor=AGENT, why="budget",
                                     params={"finding": finding, "decision": "acknowledge", "note": "one seed",
                                             "disclosure": "single seed"})
        assert request.state == "pending" and session.db.finding_record(finding).status == "open"
        done = await decide.approve(session, request.id, actor=PERSON, shown_digest=request.plan.digest)
        assert done.state == "done"
        record = session.db.finding_record(finding)
        assert record.status == "acknowledged" and record.disclosure == "single seed" and record.status_by == PERSON

    asyncio.run(_in_session(root, body))


def test_two_faces_approving_at_once_execute_the_request_once(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def file(session: Session) -> str:
        request = await file_request(session, RequestKind.RENT, actor=AGENT, why="train", run_id=RUN)
        return request.plan.digest

    digest = asyncio.run(_in_session(root, file))

    async def both() -> list[object]:
        tui, terminal = open_session(str(root)), open_session(str(root))
        try:
            return await asyncio.gather(
                decide.approve(tui, "Q-000001", actor=person_actor("tui"), shown_digest=digest),
                decide.approve(terminal, "Q-000001", actor=PERSON, shown_digest=digest), return_exceptions=True)
        finally:
            for session in (tui, terminal):
                await session.close_transports()
                session.close()

    outcomes = asyncio.run(both())
    done = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, ConfigError)]
    assert len(done) == 1 and len(refused) == 1, outcomes
    assert "decided elsewhere" in str(refused[0]) or "only a pending request" in str(refused[0])

    async def check(session: Session) -> None:
        creates = [e for e in session.db.events(kind=EventKind.APPROVAL) if e.detail.get("action") == "create"]
        assert len(creates) == 1 and get_request(session, "Q-000001").state == "done"

    asyncio.run(_in_session(root, check))


def test_a_request_that_carries_a_secret_or_names_nothing_real_is_not_filed(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")

    async def body(session: Session) -> None:
        key = "rpa_" + "A1b2C3d4E5f6G7h8J9k0"
        with pytest.raises(ConfigError, match="secret"):
            await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why=f"use {key}", instance=INSTANCE)
        with pytest.raises(ConfigError, match="instance"):
            await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why="x", instance="nope")
        with pytest.raises(ConfigError, match="hours"):
            await file_request(session, RequestKind.RENT, actor=AGENT, why="x", run_id=RUN, params={"hours": -1})
        with pytest.raises(ConfigError, match="why"):
            await file_request(session, RequestKind.RENT, actor=AGENT, why="  ", run_id=RUN)
        assert session.db.request_rows() == []
        assert all(key not in e.summary + str(e.detail) for e in session.db.events())

    asyncio.run(_in_session(root, body))


def test_the_report_says_who_asked_and_who_decided(tmp_path: Path) -> None:
    import json

    from support.gate_helpers import rgt

    root = _project(tmp_path / "p")

    async def body(session: Session) -> None:
        request = await file_request(session, RequestKind.RENT, actor=AGENT, why="train the model", run_id=RUN)
        await file_request(session, RequestKind.STOP, actor=AGENT, why="pause \x1b[31mnow", instance=INSTANCE)
        await decide.approve(session, request.id, actor=PERSON, shown_digest=request.plan.digest)

    asyncio.run(_in_session(root, body))
    report = json.loads(rgt("--report", "--format", "json", cwd=root).stdout)
    rows = {r["id"]: r for r in report["requests"]}
    assert rows["Q-000001"]["filed_by"] == AGENT and rows["Q-000001"]["decided_by"] == PERSON
    assert rows["Q-000001"]["state"] == "done" and rows["Q-000002"]["state"] == "pending"
    assert rows["Q-000002"]["why"] == "pause \\x1b[31mnow"  # text from an agent is escaped like text from a box
    text = rgt("--report", cwd=root).stdout
    assert "REQUESTS (the approval inbox: 1 pending" in text
    assert f"Q-000001 rent of run r1 on box: done · filed by {AGENT} · done by {PERSON}" in text


def test_a_person_may_give_up_the_results_at_risk_when_approving_a_teardown(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    asyncio.run(launch_finished(root))

    async def body(session: Session) -> None:
        request = await file_request(session, RequestKind.TEARDOWN, actor=AGENT, why="not worth pulling",
                                     instance=INSTANCE)
        with pytest.raises(VerbFailed, match="cannot run now"):
            await decide.approve(session, request.id, actor=PERSON, shown_digest=request.plan.digest,
                                 typed_id=SIM_ID)
        finding = await file_request(session, RequestKind.RENT, actor=AGENT, why="x", run_id=RUN)
        with pytest.raises(ConfigError, match="accepting a loss is for a teardown"):
            await decide.approve(session, finding.id, actor=PERSON, shown_digest=finding.plan.digest,
                                 accept_loss=(RUN,))
        done = await decide.approve(session, request.id, actor=PERSON, shown_digest=request.plan.digest,
                                    typed_id=SIM_ID, accept_loss=(RUN,))
        assert done.state == "done", done.outcome
        approval = [e for e in session.db.events(kind=EventKind.APPROVAL) if e.detail.get("action") == "terminate"]
        assert approval[-1].actor == PERSON and list(approval[-1].detail["accepted_loss"]) == [RUN]

    asyncio.run(_in_session(root, body))
    assert not sim_disk(root).exists()
