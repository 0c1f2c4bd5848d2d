"""Phase 0 by bytes (issue: real projects): `runs.<id>.checkpoint_bytes` makes the environment audit weigh best +
the resume anchor against the durable disk's free bytes before anything launches; a budget that cannot fit
refuses `rgt run` (exit 1, nothing started), one that fits launches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.helpers import copy_command, write_project


def rgt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=root, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))


def test_a_checkpoint_budget_that_cannot_fit_refuses_the_launch(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root, copy_command(), extra_run='checkpoint_bytes = "100TB"')  # no test machine has 200 TB
    up = rgt(root, "up", "r1")  # rents, then audits: the failed row is shown and the exit code says it
    assert up.returncode == 1 and "✖ fail     3 checkpoint_budget" in up.stdout and "(does not fit)" in up.stdout
    refused = rgt(root, "run", "r1")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.startswith("rgt: phase-0 audit: 1 row(s) failed, first: checkpoint_budget: ")
    assert "(does not fit)" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not (root / ".rgt" / "sim" / "box" / "workspace" / "job" / ".rgt" / "r1" / "pid").exists()

    toml = root / "rgt.toml"
    toml.write_text(toml.read_text().replace('checkpoint_bytes = "100TB"', 'checkpoint_bytes = "1MB"'))
    launched = rgt(root, "run", "r1")
    assert launched.returncode == 0, launched.stdout + launched.stderr


def test_checkpoint_bytes_is_a_size_and_a_bad_one_names_its_line(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root, copy_command(), extra_run='checkpoint_bytes = "lots"')
    bad = rgt(root, "run", "r1")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "checkpoint_bytes" in bad.stderr and "rgt.toml" in bad.stderr
