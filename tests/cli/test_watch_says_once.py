"""`rgt watch RUN` says a state once, when it changes: a stalled run's detail ("log silent 3s") changes at every
pass and used to reprint "stalled" every interval (seen with a real trainer frozen for minutes); and
`rgt watch RUN --once --format json` carries the run's open alerts, the stall included, at every look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support.helpers import write_project


def test_a_stalled_run_is_said_once_until_its_state_changes(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root, "echo started && sleep 6", roster=("seed0",), extra_run="stall_after = 1")

    def rgt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=root, capture_output=True,
                              text=True, timeout=120, env=dict(os.environ))

    assert rgt("up", "r1").returncode == 0 and rgt("run", "r1").returncode == 0
    watched = rgt("watch", "r1", "--interval", "0.2", "--progress-every", "3600")
    said = [line.split(" run r1: ")[1].split(" (")[0] for line in watched.stdout.splitlines() if " run r1: " in line]
    assert said.count("stalled") == 1, watched.stdout
    assert said[-1] == "dead" and watched.returncode == 1, watched.stdout  # exit 0, but no best.pth: incomplete
    assert said.index("stalled") < len(said) - 1


def test_watch_once_json_carries_the_alerts_of_a_stalled_run_at_every_look(tmp_path: Path) -> None:
    """Each `--once --format json` is a document on its own: a stall raised by an earlier look is still an alert
    (the second look used to say `alerts: []` while the run was still stalled)."""
    root = tmp_path / "p"
    write_project(root, "echo started && sleep 12", roster=("seed0",), extra_run="stall_after = 1")

    def look() -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "watch", "r1", "--once", "--format", "json"],
                              cwd=root, capture_output=True, text=True, timeout=120, env=dict(os.environ))
        return json.loads(done.stdout)

    def signatures(doc: dict[str, object]) -> list[str]:
        alerts = doc["alerts"]
        assert isinstance(alerts, list)
        return [alert["signature"] for alert in alerts]

    for verb in ("up", "run"):
        assert subprocess.run([sys.executable, "-m", "remote_gpu_trainer", verb, "r1"], cwd=root, capture_output=True,
                              timeout=120, env=dict(os.environ)).returncode == 0
    deadline = time.monotonic() + 60
    first = look()
    while "S61" not in signatures(first):
        assert time.monotonic() < deadline, first
        time.sleep(0.2)
        first = look()
    second = look()
    assert first["state"] == second["state"] == "stalled", (first, second)
    assert "S61" in signatures(second), second
    stall = next(alert for alert in second["alerts"] if alert["signature"] == "S61")  # type: ignore[union-attr]
    assert stall["severity"] in ("warn", "critical") and stall["fix"] and stall["title"].startswith("S61 ")
