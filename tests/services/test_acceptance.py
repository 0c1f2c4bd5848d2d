"""`rgt accept` on a real run: trained on the sim box, pulled and verified, then accepted here and on two other sim
instances (each its own disk: the bundle is pushed through its transport into a scratch folder there), and the
records compared. Sim boxes share this host's hostname and machine id; their instance name tells them apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.providers.sim import SimProvider
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.state.events import EventKind
from support.helpers import RUN, copy_command, write_project
from support.helpers import run_rgt as rgt

CAPSULE_SCRIPT = '''\
import csv, hashlib, json, pathlib, sys
out, cell = pathlib.Path(sys.argv[1]), sys.argv[2]
test = out / "test" / "main"
test.mkdir(parents=True)
rows = [{"item_id": f"item{i}", "target": i % 4, "pred": i % 4 if i % 3 else 0, "acc": 0.0} for i in range(12)]
for row in rows:
    row["acc"] = float(row["pred"] == row["target"])
with open(test / "results.csv", "w", newline="") as handle:
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
best = hashlib.sha256((out / "best.pth").read_bytes()).hexdigest()
acc = sum(row["acc"] for row in rows) / len(rows)
(test / "metrics.json").write_text(json.dumps({
    "schema": "remote-gpu-trainer/METRICS/v1", "run_id": "r1", "cell": cell, "test_id": "main", "split": "test",
    "n": len(rows), "checkpoint_sha256": best, "created_at": "2026-06-21T01:58:02Z",
    "metrics": {"acc": {"value": acc, "direction": "higher_is_better", "aggregate": "mean", "column": "acc"}}}))
'''
SPARES = '''
[instances.spare]
provider = "sim"

[instances.spare2]
provider = "sim"

[instances.spare3]
provider = "sim"
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A run of two capsules on `box`, pulled, verified, and accepted here, on spare and on spare2."""
    root = tmp_path_factory.mktemp("accept") / "project"
    root.mkdir()
    script = root / "make_capsule.py"
    script.write_text(CAPSULE_SCRIPT, encoding="utf-8")
    command = f"{copy_command()} && {shlex.quote(sys.executable)} {shlex.quote(str(script))} {{out}} {{cell}}"
    write_project(root, command, extra_run=SPARES)
    for verb in ("up", "run"):
        assert rgt(verb, RUN, cwd=root).returncode == 0
    for verb in ("watch", "pull", "verify"):
        done = rgt(verb, RUN, *(("--interval", "0.2") if verb == "watch" else ()), cwd=root)
        assert done.returncode == 0, done.stdout + done.stderr
    sim = SimProvider(root / ".rgt" / "sim")
    for spare in ("spare", "spare2", "spare3"):  # rented boxes without a run of their own
        asyncio.run(sim.create(InstanceConfig(name=spare, provider="sim")))
    for where in (("--here",), ("--on", "spare"), ("--on", "spare2")):
        done = rgt("accept", RUN, *where, cwd=root)
        assert done.returncode == 0, done.stdout + done.stderr
    yield root


def record(project: Path, machine: str) -> dict:
    return json.loads((project / ".rgt" / "acceptance" / RUN / f"ACCEPTANCE-{machine}.json").read_text())


def test_each_machine_re_hashed_load_checked_and_derived_the_same_core(project: Path) -> None:
    manifest = json.loads((project / "runs" / RUN / "PULL_MANIFEST.json").read_text())
    listed = {entry["path"]: entry["sha256"] for entry in manifest["files"]}
    here, spare = record(project, "here"), record(project, "spare")
    for accepted in (here, spare):
        assert accepted["schema"] == "remote-gpu-trainer/ACCEPTANCE/v1" and accepted["ok"] is True
        assert accepted["problems"] == []
        assert {p: s for p, s in accepted["files"].items() if p != "PULL_MANIFEST.json"} == listed
        assert {p for p, v in accepted["checkpoints"].items() if v["ok"]} >= {"seed0/best.pth", "seed1/best.pth"}
    assert here["core"] == spare["core"]
    assert here["core"]["seed0/main/metric/acc"] == pytest.approx(9 / 12)
    assert here["core"]["seed0/main/checkpoint_sha256"] == listed["seed0/best.pth"]
    assert here["core"]["seed1/main/results/results.csv"] == listed["seed1/test/main/results.csv"]
    assert here["core"]["seed0/best_metrics/metric/val_loss"] == 0.5
    assert here["identity"]["instance"] is None and spare["identity"]["instance"] == "spare"
    assert spare["identity"]["provider"] == "sim" and spare["identity"]["hostname"] == here["identity"]["hostname"]
    assert not any((project / ".rgt" / "sim" / "spare" / "tmp" / "rgt-accept").iterdir()), "scratch removed"
    assert not list((project / "runs" / RUN).glob("ACCEPTANCE-*")), "runs/RUN/ holds the bundle only"
    db = StateDB(project / ".rgt" / "state.db")
    try:
        accepted_events = db.events(kind=EventKind.ACCEPTANCE)
    finally:
        db.close()
    assert {event.detail["machine"] for event in accepted_events} == {"here", "spare", "spare2"}
    assert rgt("verify", RUN, cwd=project).returncode == 0, "accepting leaves the verified copy as it was"


def test_two_different_machines_match(project: Path) -> None:
    done = rgt("accept", RUN, "--compare", "here", "spare", "--format", "json", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "MATCH" and verdict["differences"] == []
    assert rgt("accept", RUN, "--compare", "spare", "spare2", cwd=project).stdout.startswith("MATCH")


def test_the_same_machine_twice_is_no_independent_acceptance(project: Path) -> None:
    done = rgt("accept", RUN, "--compare", "spare", "spare", cwd=project)
    assert done.returncode == 1
    assert done.stdout.startswith("INDEPENDENCE_FAILED")
    copied = project.parent / "here-again.json"
    shutil.copyfile(project / ".rgt" / "acceptance" / RUN / "ACCEPTANCE-here.json", copied)
    again = rgt("accept", "--compare", str(copied), "here", RUN, cwd=project)  # RUN resolves `here`
    assert again.returncode == 1 and again.stdout.startswith("INDEPENDENCE_FAILED")


def test_an_edited_metric_value_is_a_diff_naming_it(project: Path) -> None:
    edited = record(project, "spare")
    edited["core"]["seed1/main/metric/acc"] = 0.99
    path = project.parent / "edited.json"
    path.write_text(json.dumps(edited), encoding="utf-8")
    done = rgt("accept", "--compare", str(path), str(project / ".rgt" / "acceptance" / RUN / "ACCEPTANCE-here.json"),
               "--format", "json", cwd=project)
    assert done.returncode == 1, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["verdict"] == "DIFF"
    assert [d["key"] for d in verdict["differences"]] == ["seed1/main/metric/acc"]
    assert verdict["differences"][0]["a"] == 0.99


def test_a_malformed_record_is_one_line_exit_2(project: Path) -> None:
    bad = project.parent / "bad.json"
    bad.write_text('{"schema": "remote-gpu-trainer/ACCEPTANCE/v1", "core": {"x/y": NaN}}', encoding="utf-8")
    done = rgt("accept", RUN, "--compare", str(bad), "here", cwd=project)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and str(bad) in done.stderr
    missing = rgt("accept", RUN, "--compare", "nobody", "here", cwd=project)
    assert missing.returncode == 2 and "ACCEPTANCE-nobody.json" in missing.stderr


def test_the_box_that_produced_the_run_cannot_accept_it(project: Path) -> None:
    done = rgt("accept", RUN, "--on", "box", cwd=project)
    assert done.returncode == 2 and "proves nothing" in done.stderr
    assert not (project / ".rgt" / "acceptance" / RUN / "ACCEPTANCE-box.json").exists()
    assert rgt("accept", RUN, cwd=project).returncode == 2, "--on, --here or --compare is required"


def test_a_changed_byte_fails_the_acceptance_and_is_recorded(project: Path) -> None:
    target = project / "runs" / RUN / "seed1" / "test" / "main" / "results.csv"
    original = target.read_bytes()
    mode = target.stat().st_mode
    try:
        os.chmod(target, mode | stat.S_IWUSR)
        target.write_bytes(original.replace(b"item1,", b"item1x,", 1))
        done = rgt("accept", RUN, "--on", "spare3", "--format", "json", cwd=project)
    finally:
        target.write_bytes(original)
        os.chmod(target, mode)
    assert done.returncode == 1
    failed = json.loads(done.stdout)
    assert failed["ok"] is False
    assert [(p["code"], p["path"]) for p in failed["problems"]] == [("hash_mismatch", "seed1/test/main/results.csv")]
    assert "hash_mismatch" in done.stderr and len(done.stderr.strip().splitlines()) == 1
