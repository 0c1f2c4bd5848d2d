"""`rgt approve` and `rgt reject` as a person types them at a real pseudo-terminal, on a real sim project with an
agent's requests filed through the inbox service: the approval tears the box down through services/teardown
with the gate re-checked, a closed gate refuses with the box left alone, and the same commands without a terminal
(what an agent running shell commands has) are refused with nothing changed."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from remote_gpu_trainer.request_views import RequestView
from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor
from remote_gpu_trainer.services.inbox.requests import file_request, get_request
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.state.events import EventKind
from support.gate_helpers import (
    SIM_ID,
    launch_finished,
    project_text,
    pull_and_verify,
    rgt,
    seed_verdicts,
    sim_disk,
    write_text_project,
)
from support.helpers import INSTANCE, RUN
from support.pty_runner import run_at_terminal

AGENT = agent_actor("test-agent")
ID_PROMPT = "Type the instance id"
YES_PROMPT = "type yes: "
PERSON = re.compile(r"^person:/dev/(pts/\d+|tty\w*)$")


def _project(root: Path) -> Path:
    write_text_project(root, project_text())
    seed_verdicts(root)
    return root


def _file(root: Path, kind: RequestKind, **where: str) -> RequestView:
    """An agent's request, filed through the service as `rgt mcp`'s request tools file it."""

    async def body() -> RequestView:
        session = open_session(str(root))
        try:
            return await file_request(session, kind, actor=AGENT, why="the agent's reason", **where)
        finally:
            await session.close_transports()
            session.close()

    return asyncio.run(body())


def _request(root: Path, ident: str) -> RequestView:
    session = open_session(str(root))
    try:
        return get_request(session, ident)
    finally:
        session.close()


def _events(root: Path) -> list[tuple[str, str]]:
    session = open_session(str(root))
    try:
        return [(event.kind, event.actor) for event in session.db.events()]
    finally:
        session.close()


def test_approve_at_a_terminal_tears_the_box_down_only_once_the_gate_is_open(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    asyncio.run(launch_finished(root))
    filed = _file(root, RequestKind.TEARDOWN, instance=INSTANCE)
    assert filed.id == "Q-000001" and filed.state == "pending"

    piped = rgt("approve", filed.id, str(root), cwd=root)  # what an agent's shell tool has: no terminal
    assert piped.returncode == 2 and "needs a person at a terminal" in piped.stderr, piped.stderr
    assert len(piped.stderr.strip().splitlines()) == 1
    closed = run_at_terminal("approve", filed.id, str(root), cwd=root, prompt=ID_PROMPT, answer=SIM_ID)
    assert closed.returncode == 3 and not closed.prompted, closed.output  # not pulled: nothing to ask
    assert "the teardown gate is closed" in closed.output and "Filed:" in closed.output
    assert sim_disk(root).is_dir() and _request(root, filed.id).state == "pending"

    asyncio.run(pull_and_verify(root))
    wrong = run_at_terminal("approve", filed.id, str(root), cwd=root, prompt=ID_PROMPT, answer="not-the-box")
    assert wrong.returncode == 1 and wrong.prompted and "not approved" in wrong.output, wrong.output
    assert sim_disk(root).is_dir() and _request(root, filed.id).state == "pending"

    done = run_at_terminal("approve", filed.id, str(root), cwd=root, prompt=ID_PROMPT, answer=SIM_ID)
    assert done.returncode == 0 and done.prompted, done.output
    assert "agent:test-agent" in done.output and "the agent's reason" in done.output  # who filed it, and why
    assert f"{filed.id} (teardown) done" in done.output
    assert not sim_disk(root).exists()
    after = _request(root, filed.id)
    assert after.state == "done" and after.decided_by is not None and PERSON.match(after.decided_by), after
    kinds = _events(root)
    assert (EventKind.APPROVAL, after.decided_by) in kinds and EventKind.TORN_DOWN in [k for k, _ in kinds]
    log = rgt("events", str(root), cwd=root)
    assert log.returncode == 0 and after.decided_by in log.stdout, log.stdout  # the actor column names the person


def test_reject_and_approve_a_rent_at_a_terminal_and_neither_without_one(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    first = _file(root, RequestKind.RENT, run_id=RUN)
    assert first.state == "pending"

    piped = rgt("reject", first.id, str(root), "--note", "not yet", cwd=root)
    assert piped.returncode == 2 and "needs a person at a terminal" in piped.stderr, piped.stderr
    assert _request(root, first.id).state == "pending"
    rejected = run_at_terminal("reject", first.id, str(root), "--note", "not yet", cwd=root)
    assert rejected.returncode == 0 and f"{first.id} (rent) rejected" in rejected.output, rejected.output
    view = _request(root, first.id)
    assert view.state == "rejected" and view.outcome == "not yet" and PERSON.match(view.decided_by or ""), view

    second = _file(root, RequestKind.RENT, run_id=RUN)
    declined = run_at_terminal("approve", second.id, str(root), cwd=root, prompt=YES_PROMPT, answer="no")
    assert declined.returncode == 1 and declined.prompted and not sim_disk(root).exists(), declined.output
    approved = run_at_terminal("approve", second.id, str(root), cwd=root, prompt=YES_PROMPT, answer="yes")
    assert approved.returncode == 0 and f"{second.id} (rent) done" in approved.output, approved.output
    assert sim_disk(root).is_dir() and _request(root, second.id).state == "done"


def test_an_allowance_granted_at_a_terminal_lets_a_rent_through_and_none_is_granted_without_one(
        tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    terms = ("--allowance", "--max-price", "1.00", "--total", "5", "--hours", "2")
    piped = rgt("approve", str(root), *terms, cwd=root)
    assert piped.returncode == 2 and "needs a person at a terminal" in piped.stderr, piped.stderr
    granted = run_at_terminal("approve", str(root), *terms, cwd=root, prompt=YES_PROMPT, answer="yes")
    assert granted.returncode == 0 and "granted A-000001" in granted.output, granted.output

    rent = _file(root, RequestKind.RENT, run_id=RUN)  # the sim box bills $0.89/h: within the allowance
    assert rent.state == "done" and rent.allowance == "A-000001", rent
    assert sim_disk(root).is_dir()
    teardown = _file(root, RequestKind.TEARDOWN, instance=INSTANCE)
    assert teardown.state == "pending"  # an allowance never covers a teardown

    listed = rgt("approve", "--list", str(root), "--format", "json", cwd=root)  # reads: no terminal needed
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["schema"] == "rgt-inbox/v1" and [r["id"] for r in document["requests"]] == [teardown.id]
    assert document["allowances"][0]["used"] == 0.89 and document["allowances"][0]["active"] is True
    text = rgt("approve", "--list", str(root), cwd=root)
    assert text.returncode == 0 and "A-000001 active" in text.stdout and teardown.id in text.stdout, text.stdout

    refused = rgt("approve", "--revoke", "A-000001", str(root), cwd=root)
    assert refused.returncode == 2 and "needs a person at a terminal" in refused.stderr
    revoked = run_at_terminal("approve", "--revoke", "A-000001", str(root), cwd=root)
    assert revoked.returncode == 0 and "revoked A-000001" in revoked.output, revoked.output
    after = json.loads(rgt("approve", "--list", str(root), "--format", "json", cwd=root).stdout)
    assert after["allowances"][0]["active"] is False and after["allowances"][0]["revoked_at"] is not None


def test_approve_with_accept_loss_gives_up_the_runs_at_risk_as_rgt_down_does(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    asyncio.run(launch_finished(root))  # finished, never pulled: r1's results are at risk
    request = _file(root, RequestKind.TEARDOWN, instance=INSTANCE)
    closed = run_at_terminal("approve", request.id, cwd=root, prompt=ID_PROMPT, answer=SIM_ID)
    assert closed.returncode == 3 and not closed.prompted and sim_disk(root).exists()
    given_up = run_at_terminal("approve", request.id, "--accept-loss", RUN, cwd=root, prompt=ID_PROMPT,
                               answer=SIM_ID)
    assert given_up.returncode == 0 and given_up.prompted, given_up.output
    assert f"Giving up: the results of {RUN}" in given_up.output
    assert not sim_disk(root).exists() and _request(root, request.id).state == "done"
