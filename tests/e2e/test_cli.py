"""The installed console script, run as a user would: exit codes, one-line errors, nothing half-written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cpu_capability import assert_trained_under
from support.helpers import INSTANCE, RUN, write_project

RGT = [sys.executable, "-m", "remote_gpu_trainer"]


def rgt(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1764417600"}
    return subprocess.run([*RGT, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_whole_arc_headless(project_dir: Path) -> None:
    assert rgt("up", RUN, cwd=project_dir).returncode == 0
    launched = rgt("run", RUN, cwd=project_dir)
    assert launched.returncode == 0, launched.stderr
    watched = rgt("watch", RUN, "--interval", "0.2", cwd=project_dir)
    assert watched.returncode == 0, watched.stderr
    assert "finished" in watched.stdout.splitlines()[-1]

    refused = rgt("down", RUN, "--confirm", "sim-box", cwd=project_dir)
    assert refused.returncode == 3
    assert refused.stderr.startswith("rgt: teardown of box refused: no PULL_VERIFIED.json")
    assert (project_dir / ".rgt" / "sim" / INSTANCE).is_dir()

    pulled = rgt("pull", RUN, cwd=project_dir)
    assert pulled.returncode == 0, pulled.stderr
    verified = rgt("verify", RUN, cwd=project_dir)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.count("verified") >= 4

    wrong = rgt("down", RUN, "--confirm", "other-box", cwd=project_dir)
    assert wrong.returncode == 3 and "does not match" in wrong.stderr
    done = rgt("down", RUN, "--confirm", "sim-box", cwd=project_dir)
    assert done.returncode == 0, done.stderr
    assert "terminated, confirmed by the provider" in done.stdout
    assert not (project_dir / ".rgt" / "sim" / INSTANCE).exists()

    events = rgt("events", cwd=project_dir)
    assert events.returncode == 0
    assert "approval" in events.stdout and "│ Action:    sim  Terminate instance sim-box" in events.stdout
    assert "✖ no PULL_VERIFIED.json: run verify" in events.stdout  # the refusal is on record too

    report = json.loads(rgt("--report", "--format", "json", cwd=project_dir).stdout)
    assert report["instances"][0]["state"] == "terminated"
    assert report["runs"][0]["evidence_state"] == "torn_down"
    assert report["generated_at"] == "2025-11-29T12:00:00Z"


def test_report_formats_and_output_file(project_dir: Path) -> None:
    text = rgt("--report", cwd=project_dir)
    assert text.returncode == 0, text.stderr
    assert "INSTANCES" in text.stdout and f"RUN {RUN}" in text.stdout
    markdown = rgt("--report", "--format", "markdown", cwd=project_dir)
    assert markdown.stdout.startswith("# rgt report: test-project")
    assert "| name | provider | state |" in markdown.stdout
    target = project_dir / "report.json"
    written = rgt("--report", "--format", "json", "--output", str(target), cwd=project_dir)
    assert written.returncode == 0 and written.stdout == ""
    again = rgt("--report", "--format", "json", cwd=project_dir)
    assert target.read_text(encoding="utf-8") == again.stdout  # byte-identical under SOURCE_DATE_EPOCH
    strict = rgt("--report", "--strict", cwd=project_dir)
    assert strict.returncode == 1  # the gate is closed: something needs attention


@pytest.mark.parametrize(
    ("args", "setup", "message"),
    [
        (("verify", "nope"), None, "run 'nope' does not exist"),
        (("--report",), "malformed", "malformed TOML"),
        (("--report",), "provider", "unknown provider 'aws'"),
        (("pull", RUN), "missing", "no rgt.toml"),
        (("down", RUN), None, "the following arguments are required: --confirm"),
        (("--report", "--format", "yaml"), None, "invalid choice: 'yaml'"),
    ],
    ids=["unknown-run", "malformed-toml", "unknown-provider", "no-project", "down-without-confirm", "bad-format"],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(project_dir: Path, args: tuple[str, ...],
                                                         setup: str | None, message: str) -> None:
    config = project_dir / "rgt.toml"
    if setup == "malformed":
        config.write_text(config.read_text() + "\n[runs.r1\n")
    elif setup == "provider":
        config.write_text(config.read_text().replace('provider = "sim"', 'provider = "aws"'))
    elif setup == "missing":
        config.unlink()
    before = listing(project_dir)
    result = rgt(*args, cwd=project_dir)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert listing(project_dir) == before


def test_init_writes_a_valid_commented_template_and_never_overwrites(tmp_path: Path) -> None:
    made = rgt("init", "newproj", "--provider", "sim", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "newproj" / "rgt.toml").read_text()
    assert text.startswith("# rgt.toml") and 'provider = "sim"' in text
    again = rgt("init", "newproj", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (tmp_path / "newproj" / "rgt.toml").read_text() == text
    bad = rgt("init", "other", "--provider", "aws", cwd=tmp_path)
    assert bad.returncode == 2 and not (tmp_path / "other" / "rgt.toml").exists()


def test_info_names_paths_and_versions_without_importing_torch(project_dir: Path) -> None:
    result = rgt("info", cwd=project_dir)
    assert result.returncode == 0
    assert "rgt 0.1.0" in result.stdout and "torch 2." in result.stdout
    assert str(project_dir / ".rgt" / "state.db") in result.stdout
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, remote_gpu_trainer.cli, remote_gpu_trainer.app, "
         "remote_gpu_trainer.services.session; print('torch' in sys.modules, 'asyncssh' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert probe.stdout.strip() == "False False"  # neither is needed to draw the dashboard of a sim project


def test_watch_once_and_unlaunched_run(project_dir: Path) -> None:
    once = rgt("watch", RUN, "--once", cwd=project_dir)
    assert once.returncode == 0 and "unknown (not launched)" in once.stdout
    never = rgt("watch", RUN, cwd=project_dir)
    assert never.returncode == 1 and "never launched" in never.stderr


def test_demo_project_runs_the_real_training_job(tmp_path: Path, cpu_capability: str) -> None:
    """`rgt demo --no-tui --quick`: the real PyTorch job on the sim box, then the arc headless, under each ATen
    CPU capability (support/cpu_capability.py): nothing below expects the bytes one CPU trains."""
    demo = tmp_path / "demo"
    started = rgt("demo", str(demo), "--no-tui", "--quick", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    assert rgt("watch", "demo", str(demo), "--interval", "0.5", cwd=tmp_path, timeout=180).returncode == 0
    log = (demo / ".rgt" / "sim" / "gpu-box" / "workspace" / "demo" / "train.log").read_text()
    assert "loss=" in log and "lr=" in log and "cell seed2 complete" in log
    assert_trained_under(log, cpu_capability)
    assert rgt("pull", "demo", str(demo), cwd=tmp_path).returncode == 0
    verified = rgt("verify", "demo", str(demo), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    marker = json.loads((demo / "runs" / "demo" / "PULL_VERIFIED.json").read_text())
    assert {c["path"] for c in marker["checkpoints"]} >= {"seed0/best.pth", "seed1/best.pth"}
    record = json.loads((demo / "runs" / "demo" / "seed0" / "run.json").read_text())
    assert record["schema"] == "remote-gpu-trainer/RUN/v1" and record["provenance"]["seed"] == 0
    assert record["provenance"]["data"]["split_manifest_sha256"] == hashlib.sha256(
        (demo / "splits" / "demo.json").read_bytes()).hexdigest(), "the box trained on the manifest rgt built"
    audit = json.loads(rgt("audit", str(demo), "--format", "json", cwd=tmp_path).stdout)
    checks = {c["id"]: c["status"] for c in audit["checks"]}
    passed = {cid for cid, status in checks.items() if status == "pass"}
    assert {"V00", "V04", "V10", "V11", "V13", "V14", "V23", "V29", "V33"} <= passed, checks
    assert [f for f in audit["findings"] if f["severity"] != "info"] == [], "the clean demo plants nothing"
    reopened = rgt("demo", str(demo), "--no-tui", cwd=tmp_path)  # re-opening re-attaches, never relaunches
    assert reopened.returncode == 0
    assert sum(1 for line in (demo / ".rgt" / "sim" / "gpu-box" / "workspace" / "demo" / "train.log")
               .read_text().splitlines() if "cell seed0 started" in line) == 1
    assert rgt("down", "demo", str(demo), "--confirm", "sim-gpu-box", cwd=tmp_path).returncode == 0
    assert not (demo / ".rgt" / "sim" / "gpu-box").exists()


def test_the_flawed_demo_plants_what_the_checklist_finds(tmp_path: Path, cpu_capability: str) -> None:
    """`rgt demo --flawed`: a second run whose planted problems each raise their check: a test item that is a
    renamed copy of a training item (V14), a single seed (V04), an evaluation of another checkpoint (V26); under
    each ATen CPU capability."""
    demo = tmp_path / "flawed"
    started = rgt("demo", str(demo), "--no-tui", "--quick", "--flawed", cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    for run in ("demo", "demo-flawed"):  # the next steps for both runs, the planted one too
        for verb in ("watch", "pull", "verify"):
            assert f"`rgt {verb} {run} {demo}`" in started.stdout, started.stdout
    assert f"`rgt audit demo-flawed {demo}`" in started.stdout
    for run in ("demo-flawed", "demo"):
        assert rgt("watch", run, str(demo), "--interval", "0.5", cwd=tmp_path, timeout=180).returncode == 0
        assert_trained_under(demo / ".rgt" / "sim" / "gpu-box" / "workspace" / run / "train.log", cpu_capability)
        assert rgt("pull", run, str(demo), cwd=tmp_path).returncode == 0
        assert rgt("verify", run, str(demo), cwd=tmp_path).returncode == 0
    audit = json.loads(rgt("audit", str(demo), "--format", "json", cwd=tmp_path).stdout)
    found = {(f["check"], f["subject"], f["severity"]) for f in audit["findings"]}
    assert ("V14", "split:demo-flawed", "error") in found
    assert ("V26", "capsule:demo-flawed/seed0", "critical") in found
    assert ("V04", "number:demo-flawed/main/acc", "info") in found
    assert not [f for f in audit["findings"] if f["subject"].startswith(("capsule:demo/", "number:demo/", "split:demo"))
                and f["subject"] != "split:demo-flawed"], "the clean twin stays quiet"
    leak = next(f for f in audit["findings"] if f["check"] == "V14")
    assert leak["values"]["train_test"] == 1, leak["values"]


def test_write_project_helper_matches_the_contract(tmp_path: Path) -> None:
    path = write_project(tmp_path / "x")
    assert "[runs.r1]" in path.read_text()


@pytest.mark.parametrize(("damage", "code"), [("absolute", "path_unsafe"), ("dotdot", "path_unsafe"),
                                              ("duplicate", "duplicate_path"), ("symlink", "symlink")])
def test_bad_local_manifest_or_symlink_fails_verify_in_one_line(project_dir: Path, damage: str, code: str) -> None:
    assert rgt("up", RUN, cwd=project_dir).returncode == 0
    assert rgt("run", RUN, cwd=project_dir).returncode == 0
    assert rgt("watch", RUN, "--interval", "0.2", cwd=project_dir).returncode == 0
    assert rgt("pull", RUN, cwd=project_dir).returncode == 0
    local = project_dir / "runs" / RUN
    manifest_path = local / "PULL_MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    if damage == "absolute":
        manifest["files"][0]["path"] = "/etc/passwd"
    elif damage == "dotdot":
        manifest["files"][0]["path"] = "seed0/../../outside.pth"
    elif damage == "duplicate":
        manifest["files"].append(dict(manifest["files"][0]))
    if damage == "symlink":
        (local / "seed0" / "extra.pth").symlink_to(local / "seed0" / "best.pth")
    else:
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    before = listing(project_dir / "runs")
    result = rgt("verify", RUN, cwd=project_dir)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("rgt:")]  # the rest is progress
    assert len(errors) == 1 and errors[0] == result.stderr.strip().splitlines()[-1]
    assert errors[0].startswith("rgt: verification of r1 failed") and f"first: {code}" in errors[0]
    assert "Traceback" not in result.stderr
    assert listing(project_dir / "runs") == before
    assert not (local / "PULL_VERIFIED.json").exists()
    refused = rgt("down", RUN, "--confirm", "sim-box", cwd=project_dir)
    assert refused.returncode == 3


def test_phase0_audit_rows_before_launch_and_a_failed_row_needs_an_ack(project_dir: Path) -> None:
    config = project_dir / "rgt.toml"
    config.write_text(config.read_text().replace('python = ', 'gpus = 1\npython = '))  # a CPU box cannot pass
    up = rgt("up", RUN, cwd=project_dir)
    assert up.returncode == 1  # the box is up, and the audit says it cannot run this job
    assert "✖ fail     7 gpus" in up.stdout and "✔ pass     1 disk_bytes" in up.stdout
    refused = rgt("run", RUN, cwd=project_dir)
    assert refused.returncode == 1 and "phase-0 audit: 2 row(s) failed, first: gpus" in refused.stderr
    assert not (project_dir / ".rgt" / "sim" / INSTANCE / "workspace" / "job" / ".rgt").exists()
    launched = rgt("run", RUN, "--ack", "smoke test on a CPU box", cwd=project_dir)
    assert launched.returncode == 0, launched.stderr
    events = rgt("events", cwd=project_dir).stdout
    assert "env_ack" in events and "despite 2 failed audit row" in events
    report = json.loads(rgt("--report", "--format", "json", cwd=project_dir).stdout)
    environment = {row["check"]: row for row in report["runs"][0]["environment"]}
    assert environment["gpus"]["status"] == "fail" and environment["torch"]["status"] == "fail"
    assert environment["checkpoints_survive"]["status"] == "warn"  # the sim disk dies with the box
    assert len(report["runs"][0]["environment"]) == 17
