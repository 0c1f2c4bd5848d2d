"""An agent carries the demo through `rgt mcp` (issue 28): the real `mcp` client over stdio, the server in its own
process. The person brings the box up at a terminal (`rgt up`: renting is not an agent's tool); the agent launches,
watches until the run finished, pulls, verifies, audits, builds and reconciles, each from the tool's JSON document.
Along the way: the exact tool list, an unknown run refused as an error result naming it, a teardown that stays a
pending request with the box still running, every changing call in the event log under the agent's name, no secret
in any result or event, and nothing on the server's stderr."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from remote_gpu_trainer.services.demo_project import DEMO_INSTANCE, DEMO_RUN, create_demo
from remote_gpu_trainer.state.db import StateDB
from support.helpers import FIXED_NOW, FixedClock, run_rgt
from support.mcp_agent import ACTOR, Agent, agent

# written out here, not read from agents/tools.py: a tool dropped or renamed there must fail this file
TOOLS = {
    "rgt_status", "rgt_report", "rgt_events", "rgt_watch", "rgt_push", "rgt_run", "rgt_pull", "rgt_verify",
    "rgt_audit", "rgt_findings", "rgt_build", "rgt_reconcile", "rgt_completeness", "rgt_recovery_note",
    "rgt_request_rent", "rgt_request_stop", "rgt_request_teardown", "rgt_request_resume",
    "rgt_request_finding_decision", "rgt_requests", "rgt_request_recovery",
}
RUNPOD_KEY = "rpa_" + "Q7f3K9x2M4p8R1t6W0z5" + "Yb2Nc4Dd"  # token-shaped, in the variable RunPod's client reads
SERVICE_SECRET = "correct-horse-battery-" + "staple-42"  # no token shape: a secret only by its variable's name
SECRETS = {"RUNPOD_API_KEY": RUNPOD_KEY, "MY_SERVICE_TOKEN": SERVICE_SECRET}
CHANGING = ("rgt_run", "rgt_pull", "rgt_verify", "rgt_audit", "rgt_build", "rgt_reconcile")


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """The quick demo with its sim box up, as a person at a terminal brings it up."""
    folder = tmp_path / "rgt-demo"
    create_demo(folder, quick=True)
    up = run_rgt("up", DEMO_RUN, str(folder), cwd=tmp_path)
    assert up.returncode == 0, up.stderr
    return folder


async def watch_until_over(agent: Agent) -> dict[str, object]:
    """rgt_watch, one look per call, until the run left running: what an agent polls."""
    while True:
        look = await agent.document("rgt_watch", {"run": DEMO_RUN})
        assert look["schema"] == "rgt-watch/v1" and look["run"] == DEMO_RUN
        if look["state"] not in ("running", "stalled", "unknown"):
            return look
        await asyncio.sleep(0.2)  # an agent's poll interval; the loop ends on the state it waits for


async def test_an_agent_carries_the_demo_from_launch_to_reconcile(demo: Path, tmp_path: Path) -> None:
    stderr = tmp_path / "server-stderr.txt"
    async with agent(demo, stderr, env=SECRETS) as rgt:
        listed = await rgt.client.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        by_name = {tool.name: tool for tool in listed.tools}
        assert "timeout_s" in by_name["rgt_pull"].input_schema["properties"]
        assert by_name["rgt_watch"].annotations is not None and by_name["rgt_watch"].annotations.read_only_hint

        unknown = await rgt.call("rgt_watch", {"run": "no-such-run"})
        assert unknown.is_error and "no-such-run" in unknown.content[0].text  # type: ignore[union-attr]
        assert unknown.structured_content["error"]["exit_code"] == 2

        launched = await rgt.document("rgt_run", {"run": DEMO_RUN})
        assert launched["schema"] == "rgt-run/v1" and launched["launched"]["pid"] > 0
        assert {row["status"] for row in launched["environment"]} <= {"pass", "warn", "skipped"}
        finished = await watch_until_over(rgt)
        assert finished["state"] == "finished", finished

        pulled = await rgt.document("rgt_pull", {"run": DEMO_RUN})
        assert pulled["schema"] == "rgt-pull/v1" and pulled["ok"] and pulled["failed"] == []
        verified = await rgt.document("rgt_verify", {"run": DEMO_RUN})
        # the pull's progress reached the agent, up to every byte (read a call later: a notification's callback
        # runs in its own task, and need not have run when the result it preceded arrived)
        assert (pulled["bytes"], pulled["bytes"]) in [(done, total) for done, total, _ in rgt.progress]
        assert verified["ok"] and verified["marker"].endswith("PULL_VERIFIED.json")
        audited = await rgt.document("rgt_audit", {})
        assert audited["schema"] == "rgt-audit/v1" and audited["checks"]
        built = await rgt.document("rgt_build", {})
        assert built["schema"] == "rgt-build/v1" and built["exit_code"] == 0
        assert [(step["kind"], step["status"]) for step in built["steps"]] == [
            ("figure", "passed"), ("table", "passed"), ("evidence", "passed"), ("macros", "passed")]
        reconciled = await rgt.document("rgt_reconcile", {})
        assert [(d["doc"], d["line"]) for d in reconciled["drifts"]] == [("paper.md", 7)]  # the demo's stale number

        await read_what_is_there(rgt)
        asked = await rgt.document("rgt_request_teardown", {"instance": DEMO_INSTANCE, "why": "verified; done"})
        assert asked["request"]["state"] == "pending" and asked["request"]["filed_by"] == ACTOR
        await refused_with_secrets(rgt)
        status = await rgt.document("rgt_status", {})
        assert [(box["name"], box["state"]) for box in status["instances"]] == [(DEMO_INSTANCE, "running")]

    events = StateDB(demo / ".rgt" / "state.db", FixedClock(FIXED_NOW)).events()
    by_agent = [e for e in events if e.kind == "agent_tool"]
    assert [e.detail["tool"] for e in by_agent if e.detail["outcome"] == "ok"] == [*CHANGING, "rgt_request_teardown"]
    assert {e.actor for e in by_agent} == {ACTOR}
    assert next(e for e in events if e.kind == "launch").actor == ACTOR
    assert not any(e.detail.get("tool") == "rgt_watch" for e in by_agent)  # reading changes nothing, logs nothing
    stored = json.dumps([(e.summary, e.detail) for e in events])
    for secret in SECRETS.values():
        assert secret not in stored
        assert not any(secret in seen for seen in rgt.seen)
    assert stderr.read_text(encoding="utf-8") == ""


async def refused_with_secrets(rgt: Agent) -> None:
    """An argument carrying a credential is refused before anything runs, and logged with the value replaced."""
    for why in (f"the key is {RUNPOD_KEY}", f"use {SERVICE_SECRET} to log in"):
        refused = await rgt.call("rgt_request_teardown", {"instance": DEMO_INSTANCE, "why": why})
        assert refused.is_error and "`why` holds what looks like a secret" in refused.content[0].text  # type: ignore
    requests = await rgt.document("rgt_requests", {})
    assert [r["state"] for r in requests["requests"]] == ["pending"]  # only the first, clean request was filed


async def read_what_is_there(rgt: Agent) -> None:
    """The reading tools and the resources after the arc: the report with the box's gate open, the findings the
    build's audit raised (the stale number among them), the recovery note, a docs page."""
    report = await rgt.document("rgt_report", {})
    assert report["schema"] == "rgt-report/v1"
    assert [(i["name"], i["gate"]["open"]) for i in report["instances"]] == [(DEMO_INSTANCE, True)]
    findings = await rgt.document("rgt_findings", {"run": DEMO_RUN})
    assert findings["schema"] == "rgt-findings/v1" and findings["run"] == DEMO_RUN
    stale = next(f for f in findings["findings"] if f["check"] == "V31")
    assert (await rgt.document("rgt_findings", {"finding": stale["id"]}))["subject"] == "doc:paper.md:7"
    note = await rgt.document("rgt_recovery_note", {"run": DEMO_RUN})
    assert note["exists"] and note["lines"][0] == f"# Recovery note: run {DEMO_RUN}"
    resources = await rgt.client.list_resources()
    assert [str(r.uri) for r in resources.resources] == ["rgt://report"]
    read = await rgt.client.read_resource(f"rgt://recovery/{DEMO_RUN}")
    assert read.contents[0].text.splitlines() == note["lines"]  # type: ignore[union-attr]
    page = await rgt.client.read_resource("rgt://docs/gate")
    assert page.contents[0].text.startswith("# The teardown gate")  # type: ignore[union-attr]
