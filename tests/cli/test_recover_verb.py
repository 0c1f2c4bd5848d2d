"""`rgt recover RUN` (cli/recover_verbs.py, docs/remote-ops.md §10.1): a person approves the limits at a terminal by
typing the max_spend shown; an agent's shell (pipes, no terminal) is refused with nothing recorded; a wrong figure
approves nothing; the show form and its JSON say whether the approval stands and why not."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from support.helpers import RUN, write_project
from support.pty_runner import run_at_terminal

LIMITS = ('recover = { max_price_per_hour = 0.6, max_spend = 12.5, max_restarts = 2, '
          'until = 2099-01-01T00:00:00Z }')
PROMPT = "to approve, anything else to cancel:"


def rgt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def shown(root: Path) -> dict[str, object]:
    result = rgt("recover", RUN, str(root), "--format", "json", cwd=root)
    assert result.returncode == 0, result.stderr
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_a_person_approves_at_a_terminal_and_an_agent_cannot(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root, extra_run=LIMITS)
    before = shown(root)
    assert before["approved"] is False and "no person approved recovery of r1" in str(before["why_not"])
    assert before["limits"] == {"max_price_per_hour": 0.6, "max_spend": 12.5, "max_restarts": 2,
                                "until": "2099-01-01T00:00:00+00:00", "gpus": []}

    piped = rgt("recover", RUN, str(root), "--approve", cwd=root)
    assert piped.returncode == 2 and "needs a person at a terminal" in piped.stderr, piped.stderr
    wrong = run_at_terminal("recover", RUN, str(root), "--approve", cwd=root, prompt=PROMPT, answer="25")
    assert wrong.returncode == 1 and wrong.prompted and "not approved" in wrong.output, wrong.output
    assert "at most 12.50 USD spent by recovery in all" in wrong.output  # the limits were shown before the question
    assert shown(root)["approved"] is False

    done = run_at_terminal("recover", RUN, str(root), "--approve", cwd=root, prompt=PROMPT, answer="12.50")
    assert done.returncode == 0 and re.search(r"approved by person:\S+ \(event \d+\)", done.output), done.output
    after = shown(root)
    assert after["approved"] is True and after["restarts_used"] == 0 and after["why_not"] is None
    events = after["events"]
    assert isinstance(events, list) and [e["step"] for e in events] == ["approved"]
    assert str(events[0]["actor"]).startswith("person:")

    text = (root / "rgt.toml").read_text().replace("max_spend = 12.5", "max_spend = 40")
    (root / "rgt.toml").write_text(text)
    stale = shown(root)
    assert stale["approved"] is False and "changed since person:" in str(stale["why_not"])
    plain = rgt("recover", RUN, str(root), cwd=root)
    assert plain.returncode == 0 and "approved: no: runs.r1.recover changed since person:" in plain.stdout

    revoked = run_at_terminal("recover", RUN, str(root), "--revoke", cwd=root)
    assert revoked.returncode == 0 and "revoked" in revoked.output, revoked.output
    assert [e["step"] for e in shown(root)["events"]] == ["approved", "revoked"]  # type: ignore[union-attr]


def test_a_run_without_limits_is_refused_approval_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root)
    plain = rgt("recover", RUN, str(root), cwd=root)
    assert plain.returncode == 0 and "runs.r1.recover is not set" in plain.stdout
    refused = run_at_terminal("recover", RUN, str(root), "--approve", cwd=root)
    assert refused.returncode == 2 and "runs.r1.recover is not set in" in refused.output, refused.output
