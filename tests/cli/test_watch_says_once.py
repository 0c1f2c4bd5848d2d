"""`rgt watch RUN` says a state once, when it changes: a stalled run's detail ("log silent 3s") changes at every
pass and used to reprint "stalled" every interval (seen with a real trainer frozen for minutes)."""

from __future__ import annotations

import os
import subprocess
import sys
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
