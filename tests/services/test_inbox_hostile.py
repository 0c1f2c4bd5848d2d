"""The approval inbox against a careless or hostile agent, on a real sim project: what an agent writes into a
request is shown to a person (`rgt approve --list`, the Approvals screen, the report) and kept in the event log,
so every text it proposes is bounded, not only `why`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor
from remote_gpu_trainer.services.inbox.requests import MAX_WHY, file_request
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.state.audit import FindingWrite
from support.gate_helpers import project_text, seed_verdicts, write_text_project

AGENT = agent_actor("hostile")


def test_a_finding_decisions_note_and_disclosure_are_bounded_like_why(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_text_project(root, project_text())
    seed_verdicts(root)

    async def body() -> None:
        session = open_session(str(root))
        try:
            session.db.write_finding(FindingWrite(check="V05", subject="r1", severity="warn", status="open",
                                                  message="one seed", fingerprint="f1"))
            finding = session.db.finding_records()[0].id
            flood = "x" * (MAX_WHY * 500)  # a megabyte the person's terminal would have to scroll through
            for params in ({"note": flood, "disclosure": "one seed"}, {"note": "one seed", "disclosure": flood}):
                with pytest.raises(ConfigError, match="characters; at most"):
                    await file_request(session, RequestKind.FINDING, actor=AGENT, why="budget",
                                       params={"finding": finding, "decision": "acknowledge", **params})
            assert session.db.request_rows() == []
            assert all(len(e.summary) + len(str(e.detail)) < MAX_WHY * 4 for e in session.db.events())
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(body())


def test_an_allowance_in_dollars_never_covers_a_price_in_another_currency_or_below_zero(tmp_path: Path) -> None:
    """AutoDL bills in CNY: 5 CNY/h is not "within $1/h"; a negative quote would give money back to the total."""
    from remote_gpu_trainer.request_views import RequestPlan
    from remote_gpu_trainer.services.inbox import allowances
    from remote_gpu_trainer.services.inbox.model import person_actor

    root = tmp_path / "p"
    write_text_project(root, project_text())
    session = open_session(str(root))
    try:
        granted = allowances.grant(session, actor=person_actor("tui"), max_price_per_hour=10.0, total=100.0, hours=1)
        in_yuan = RequestPlan(lines=(), material=(), price_per_hour=5.0, currency="CNY")
        assert allowances.take(session, RequestKind.RENT, in_yuan, 1.0, 1, "Q-000001", AGENT) is None
        assert "in CNY" in allowances.why_not_covered(session, RequestKind.RENT, in_yuan, 1.0)
        negative = RequestPlan(lines=(), material=(), price_per_hour=-50.0, currency="USD")
        assert allowances.take(session, RequestKind.RENT, negative, 1.0, 2, "Q-000002", AGENT) is None
        dollars = RequestPlan(lines=(), material=(), price_per_hour=5.0, currency="USD")
        assert allowances.take(session, RequestKind.RENT, dollars, 1.0, 3, "Q-000003", AGENT) == granted.id
        assert [a.used for a in allowances.allowances(session)] == [5.0]
    finally:
        session.close()
