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


def test_without_checkpoint_bytes_the_budget_is_estimated_from_a_pulled_checkpoint(tmp_path: Path) -> None:
    """A rerun (same command) of a run whose pull listed its checkpoints: row 3 weighs the largest of them,
    says where the size came from, and refuses the launch when it cannot fit."""
    from remote_gpu_trainer.audits.manifest import canonical_json

    root = tmp_path / "p"
    write_project(root, copy_command())
    text = (root / "rgt.toml").read_text()
    table = text[text.index("[runs.r1]"):]
    (root / "rgt.toml").write_text(text + "\n" + table.replace("[runs.r1]", "[runs.r2]"))
    before = rgt(root, "up", "r2")
    assert "· skipped  3 checkpoint_budget      no checkpoint size estimate" in before.stdout, before.stdout
    huge = 100 * 10**12  # 100 TB: what r1's pull listed for its best.pth (no test machine has 200 TB free)
    files = [{"path": "seed0/best.pth", "bytes": huge, "sha256": "0" * 64},
             {"path": "seed1/best.pth", "bytes": 1000, "sha256": "1" * 64}]
    (root / "runs" / "r1").mkdir(parents=True)
    (root / "runs" / "r1" / "PULL_MANIFEST.json").write_bytes(canonical_json({
        "schema": "remote-gpu-trainer/PULL/v1", "run_id": "r1", "created_at_utc": "2026-12-06T10:00:00+00:00",
        "top_level_dirs": ["seed0", "seed1"], "files": files, "totals": {"files": 2, "bytes": huge + 1000}}))
    up = rgt(root, "up", "r2")
    row = next(line for line in up.stdout.splitlines() if "checkpoint_budget" in line)
    assert "✖ fail" in row and "(estimated: the largest checkpoint run r1 pulled) × 2" in row, row
    assert "(does not fit)" in row and f"B = {huge / 2**30:.1f} GiB" in row, row
    assert rgt(root, "run", "r2").returncode == 1
