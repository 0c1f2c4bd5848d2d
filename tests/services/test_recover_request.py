"""An agent asks for a run's recovery limits to be approved through the inbox (docs/agents.md, docs/remote-ops.md
§10.1): filing approves nothing, an allowance never covers it, only a person's approval of the plan they saw records
the approval, and limits edited after filing send the request back to pending rather than approve what nobody saw."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.services.inbox import allowances, decide
from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor, person_actor
from remote_gpu_trainer.services.inbox.requests import file_request
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover.approval import check_approval, last_decision
from remote_gpu_trainer.services.session import Session
from support.helpers import RUN, write_project

AGENT = agent_actor("claude-code")
PERSON = person_actor("/dev/pts/7")
LIMITS = ('recover = { max_price_per_hour = 0.6, max_spend = 12.5, max_restarts = 2, '
          'until = 2099-01-01T00:00:00Z }')


def standing(session: Session) -> bool:
    run = session.project.run(RUN)
    assert run.recover is not None
    return check_approval(session, run, run.recover).ok


def test_a_recovery_request_is_approved_only_by_a_person_and_never_by_an_allowance(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root, extra_run=LIMITS)

    async def go() -> None:
        session = open_session(str(root))
        try:
            allowances.grant(session, max_price_per_hour=10.0, total=1000.0, hours=24, actor=PERSON)
            request = await file_request(session, RequestKind.RECOVER, actor=AGENT, why="it may be preempted",
                                         run_id=RUN)
            assert request.state == "pending" and not standing(session)  # the allowance let nothing through
            assert any("at most 12.50 USD spent by recovery in all" in line for line in request.plan.lines)
            with pytest.raises(ConfigError, match="only a person"):
                await decide.approve(session, request.id, actor=AGENT, shown_digest=request.plan.digest)
            assert not standing(session)

            done = await decide.approve(session, request.id, actor=PERSON, shown_digest=request.plan.digest)
            assert done.state == "done" and standing(session)
            decision = last_decision(session, RUN)
            assert decision is not None and decision.actor == PERSON

            later = await file_request(session, RequestKind.RECOVER, actor=AGENT, why="more restarts", run_id=RUN)
            text = (root / "rgt.toml").read_text().replace("max_restarts = 2", "max_restarts = 9")
            (root / "rgt.toml").write_text(text)
            session.project = load_project(root / "rgt.toml")
            assert not standing(session)  # the edit made the first approval stale
            with pytest.raises(Exception, match="changed"):  # the plan shown is not the plan now
                await decide.approve(session, later.id, actor=PERSON, shown_digest=later.plan.digest)
            assert not standing(session)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_recovery_request_names_a_run_with_limits(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root)

    async def go() -> None:
        session = open_session(str(root))
        try:
            with pytest.raises(ConfigError, match="runs.r1.recover is not set"):
                await file_request(session, RequestKind.RECOVER, actor=AGENT, why="x", run_id=RUN)
            with pytest.raises(ConfigError, match="'nope' is not one"):
                await file_request(session, RequestKind.RECOVER, actor=AGENT, why="x", run_id="nope")
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_limits_edited_after_they_were_shown_are_not_approved(tmp_path: Path) -> None:
    """What a person approves is what they were shown: rgt.toml edited between the prompt and the answer records
    nothing (services/recover/approval.approve)."""
    from remote_gpu_trainer.services.recover import approval

    root = tmp_path / "p"
    write_project(root, extra_run=LIMITS)
    session = open_session(str(root))
    try:
        shown = session.project.run(RUN).recover
        (root / "rgt.toml").write_text((root / "rgt.toml").read_text().replace("max_spend = 12.5", "max_spend = 99"))
        session.project = load_project(root / "rgt.toml")
        with pytest.raises(ConfigError, match="changed since it was shown: nothing was approved"):
            approval.approve(session, RUN, shown, PERSON)  # type: ignore[arg-type]
        assert last_decision(session, RUN) is None and not standing(session)
    finally:
        session.close()
