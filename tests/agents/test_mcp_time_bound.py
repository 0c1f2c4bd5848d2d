"""Every tool is bounded in time (issue 28): a long tool's call returns at its `timeout_s` saying the work is still
running, and the next call with the same run waits for that same work instead of starting it again.

The box is an SSH server that accepts the connection and never speaks (conftest.silent_server), so asking it takes
the provider's own timeout, far longer than the one-second bound the agent asks for: `rgt_push` on it is still
running when the bound passes, deterministically, and ends on its own once the box is given up on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from remote_gpu_trainer.state.db import StateDB
from support.helpers import FIXED_NOW, HUNG, RUN, FixedClock, write_project
from support.mcp_agent import agent


def still_running_after(document: dict[str, object]) -> int:
    assert document["state"] == "running" and document["tool"] == "rgt_push" and document["subject"] == RUN
    found = re.fullmatch(r"still running after (\d+) s; call the tool again to wait for it", str(document["note"]))
    assert found is not None, document["note"]
    return int(found[1])


def hung_project(tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose one box is an SSH server that accepts and never speaks (HOME of its own)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    root = tmp_path / "p"
    write_project(root, instance=HUNG, instance_body=f'provider = "ssh"\nhost = "nobody@127.0.0.1:{silent_server}"',
                  box=tmp_path / "box")
    return root


async def test_a_long_tool_returns_at_its_bound_and_the_next_call_waits_for_the_same_work(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    root = hung_project(tmp_path, silent_server, monkeypatch)
    stderr = tmp_path / "server-stderr.txt"
    async with agent(root, stderr) as rgt:
        first = await rgt.document("rgt_push", {"run": RUN, "timeout_s": 1})
        assert still_running_after(first) >= 1
        second = await rgt.document("rgt_push", {"run": RUN, "timeout_s": 1})
        # the same task: a new one would have started a whole second after the first, in a later second of the clock
        assert still_running_after(second) >= 2 and second["started_at"] == first["started_at"]
        done = await rgt.document("rgt_push", {"run": RUN, "timeout_s": 600})
        assert done == {"schema": "rgt-push/v1", "run": RUN, "instance": HUNG, "pushed": []}
    pushes = [e for e in StateDB(root / ".rgt" / "state.db", FixedClock(FIXED_NOW)).events()
              if e.kind == "agent_tool" and e.detail["tool"] == "rgt_push"]
    assert [(e.detail["outcome"], e.detail["arguments"]) for e in pushes] == [("ok", {"run": RUN})]
    assert stderr.read_text(encoding="utf-8") == ""


async def test_long_calls_asking_for_different_work_never_share_one_task(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """rgt_run with two different `ack`s is two pieces of work: the second may not be answered with the first's."""
    root = hung_project(tmp_path, silent_server, monkeypatch)
    async with agent(root, tmp_path / "server-stderr.txt") as rgt:
        first = await rgt.document("rgt_run", {"run": RUN, "ack": "first reason", "timeout_s": 1})
        again = await rgt.document("rgt_run", {"run": RUN, "ack": "first reason", "timeout_s": 1})
        other = await rgt.document("rgt_run", {"run": RUN, "ack": "another reason", "timeout_s": 1})
        assert first["state"] == again["state"] == other["state"] == "running"
        assert again["started_at"] == first["started_at"]  # the same work, joined
        assert other["started_at"] != first["started_at"]  # new work, a second or more later
