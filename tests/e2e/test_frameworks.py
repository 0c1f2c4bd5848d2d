"""Real frameworks' default outputs through the whole arc on a sim box, as a user drives it: up, push, run,
watch, pull, verify, audit, report, build, down (issue 23, docs/frameworks.md).

Each training script under tests/fixtures/frameworks/ is written from its framework's quick-start defaults and
run unchanged; only rgt.toml is rgt's. The expected numbers are read from the run's own files with each
framework's own reader (json for trainer_state.json, csv for Lightning, TensorBoard's EventAccumulator, the
MLflow client, W&B's console summary), never from rgt, so a wrong reading in rgt fails here.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from support.frameworks import FRAMEWORKS, Framework, figure_spec, framework_project, rgt_ok, table_spec
from support.helpers import run_rgt
from support.mounts import tmpfs
from support.sshd_fixtures import Sshd


@pytest.mark.parametrize("name", sorted(FRAMEWORKS))
def test_a_framework_goes_through_the_arc_with_default_settings(tmp_path: Path, name: str) -> None:
    framework = FRAMEWORKS[name]
    root = framework_project(tmp_path / name, framework)
    drive_arc(root, framework)
    done = rgt_ok("down", "r1", "--confirm", "sim-box", cwd=root)
    assert "terminated, confirmed by the provider" in done


@pytest.mark.sshd
def test_a_framework_goes_through_the_arc_over_a_real_sshd(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """Lightning's default outputs (`epoch=2-step=24.ckpt`, `hparams.yaml`) over SSH: the builder, the pull and
    the probe meet the names the framework writes on a real box."""
    framework = FRAMEWORKS["lightning_csv"]
    ssh_dir = ssh_home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "config").write_text(f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
                                    f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n")
    root = framework_project(tmp_path / "project", framework, box=tmp_path / "box",
                             instance_body='provider = "ssh"\nhost = "gpu-box"\nprice_per_hour = 1.5')
    rgt_ok("trust", "box", "--fingerprint", sshd.host_public_key().get_fingerprint("sha256"), cwd=root)
    report = drive_arc(root, framework)
    (run,) = [r for r in report["runs"] if r["id"] == "r1"]
    assert run["gate"]["open"] is True, run["gate"]


def test_a_partial_framework_run_pulls_verifies_and_names_its_unfinished_cells(tmp_path: Path) -> None:
    """HF Trainer refuses a `metric_for_best_model` its evaluation does not produce, at the first evaluation,
    mid-run, with its own message: that cell fails (exit 1), the wrapper starts no further cell, and the run
    still pulls, verifies and reports what it has, saying which cells are left out."""
    framework = FRAMEWORKS["hf_trainer"]
    broken = framework.command + " $( [ {cell} = 2 ] && echo --metric_for_best_model nope --load_best_model_at_end )"
    root = framework_project(tmp_path / "partial", replace(framework, command=broken, roster=("1", "2", "3")))
    rgt_ok("up", "r1", cwd=root)
    rgt_ok("push", "r1", cwd=root)
    rgt_ok("run", "r1", cwd=root)
    watched = run_rgt("watch", "r1", "--interval", "0.5", cwd=root, timeout=600)
    assert "dead (exit 1)" in watched.stdout.splitlines()[-1], watched.stdout
    log = (root / ".rgt" / "sim" / "box" / "workspace" / "job" / "train.log").read_text(errors="replace")
    assert "metric_for_best_model" in log and "== rgt: cell 2 exited 1" in log and "cell 3 started" not in log
    rgt_ok("pull", "r1", cwd=root)
    verified = rgt_ok("verify", "r1", cwd=root)
    assert re.search(r"^failed \(exit 1\) +2/ ", verified, re.M) and re.search(r"^never started +3/ ", verified, re.M)
    report = json.loads(rgt_ok("--report", "--format", "json", cwd=root))
    (run,) = [r for r in report["results"]["runs"] if r["id"] == "r1"]
    assert run["left_out"] == ["2 failed (exit 1)", "3 never started"]
    row = next(m for m in run["metrics"] if (m["test_id"], m["metric"]) == ("val", "loss"))
    assert row["cells"] == ["r1/1"] and row["seeds"] == 1
    assert math.isclose(row["mean"], expected_value(root, framework, "1"), rel_tol=1e-9)
    (gated,) = [r for r in report["runs"] if r["id"] == "r1"]
    assert gated["gate"]["open"] is True, gated["gate"]
    done = rgt_ok("down", "r1", "--confirm", "sim-box", cwd=root)
    assert "terminated, confirmed by the provider" in done
    shown = rgt_ok("events", cwd=root)  # the plan the approval was given against names the unfinished cells
    assert "Cells:     run r1: 2 of 3 cell(s) did not finish, as the box recorded: 2 failed (exit 1), 3 never " \
           "started" in " ".join(shown.split("\n")).replace("│ ", ""), shown


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 700 KiB tmpfs: the first HF checkpoint (about 400 KiB) fits, the second does not."""
    mount = tmp_path / "box"
    mount.mkdir()
    with tmpfs(mount, "700k"):
        yield mount


def test_a_disk_that_fills_mid_run_names_the_disk_and_no_false_crash(tmp_path: Path, tiny_disk: Path) -> None:
    """HF Trainer's checkpoint does not fit on the box's one disk, which also holds the log: torch.save fails, its
    traceback is cut short in the log (no room), the wrapper cannot write the exit code. The disk rows (S31 from
    the log, or S68 from the box's df) name the full disk as critical, and the job is not reported as a crash
    without traceback (S59)."""
    framework = FRAMEWORKS["hf_trainer"]
    root = framework_project(tmp_path / "disk", framework, box=tiny_disk, instance_body='provider = "local"')
    rgt_ok("push", "r1", cwd=root)
    rgt_ok("run", "r1", "--ack", "a tiny disk on purpose", cwd=root)
    watched = run_rgt("watch", "r1", "--interval", "0.5", cwd=root, timeout=600)
    lines = watched.stdout.splitlines()
    log = (tiny_disk / "job" / "train.log").read_text(errors="replace")
    disk = [line for line in lines if "CRITICAL S31" in line or "CRITICAL S68" in line]
    assert disk, watched.stdout + log[-3000:]  # S31 when the error line reached the log, S68 from df either way
    assert all(str(tiny_disk) in line for line in disk if "S68" in line), disk
    assert not any(" S59 " in line for line in lines), watched.stdout
    assert lines[-1].split(": ", 1)[1].startswith("dead"), lines[-1]
    assert watched.stderr == "", watched.stderr


def drive_arc(root: Path, framework: Framework) -> dict[str, Any]:
    """up, push, run, watch, a refused down, pull, verify, report, audit and a figure: the report's JSON."""
    rgt_ok("up", "r1", cwd=root)
    rgt_ok("push", "r1", cwd=root)
    rgt_ok("run", "r1", cwd=root)
    watched = rgt_ok("watch", "r1", "--interval", "0.5", cwd=root, timeout=600)
    assert "finished (exit 0" in watched.splitlines()[-1], watched

    refused = run_rgt("down", "r1", "--confirm", "sim-box", cwd=root)
    assert refused.returncode == 3 and "no PULL_VERIFIED.json" in refused.stderr, refused.stderr

    rgt_ok("pull", "r1", cwd=root)
    assert (root / "runs" / "r1" / "PULL_MANIFEST.json").is_file()
    verified = rgt_ok("verify", "r1", cwd=root)
    for cell in framework.roster:
        for checkpoint in framework.checkpoints:
            assert re.search(rf"^verified +{re.escape(cell)}/{re.escape(checkpoint)} +loads: ", verified, re.M), \
                f"{cell}/{checkpoint} not load-verified:\n{verified}"
    assert not re.search(r"^(unloadable|missing|nonfinite|hash_mismatch)", verified, re.M), verified
    if framework.links:
        assert (root / "runs" / "r1" / framework.roster[0] / "wandb").is_dir()

    report = json.loads(rgt_ok("--report", "--format", "json", cwd=root))
    (run,) = [r for r in report["results"]["runs"] if r["id"] == "r1"]
    row = next(m for m in run["metrics"] if (m["test_id"], m["metric"]) == (framework.test_id, framework.metric))
    expected = [expected_value(root, framework, cell) for cell in framework.roster]
    assert row["seeds"] == len(framework.roster) and row["source"] == framework.source, row
    assert math.isclose(row["mean"], sum(expected) / len(expected), rel_tol=1e-4), (row, expected)
    assert row["std"] is not None and row["std"] > 0, row
    assert row["cells"] == [f"r1/{cell}" for cell in framework.roster]
    assert all((root / source).is_file() for source in row["sources"]) and len(row["sources"]) == 2, row

    audit = run_rgt("audit", "r1", cwd=root)
    assert audit.returncode in (0, 1) and "V04" in audit.stdout, audit.stdout + audit.stderr

    figure = figure_spec(root, framework)
    rgt_ok("build", "figure", figure, cwd=root)
    with (root / "figures" / figure / "source.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and {r["seeds"] for r in rows} == {str(len(framework.roster))}, rows
    inputs = json.loads((root / "figures" / figure / "figure.json").read_text())["inputs"]
    assert [i["capsule"] for i in inputs] == row["cells"]
    for entry in inputs:  # each input names the tracker file its series was read from, hashed as read
        assert entry["path"].startswith(f"runs/{entry['capsule']}/"), entry
        assert hashlib.sha256((root / entry["path"]).read_bytes()).hexdigest() == entry["sha256"], entry

    table = table_spec(root, framework)
    built = rgt_ok("build", "table", table, cwd=root)
    assert "Q5_n_shown               disclosed" in built, built  # a tracker records no test size: n is `?`
    with (root / "tables" / table / "source.csv").open(encoding="utf-8") as handle:
        (source,) = list(csv.DictReader(handle))
    assert math.isclose(float(source["mean"]), row["mean"], rel_tol=1e-12) and source["n"] == "", source
    assert f"| {framework.name.replace('_', chr(92) + '_')} | ? | {len(framework.roster)} |" in \
        (root / "tables" / table / "final.md").read_text()
    paths = [i["path"] for i in json.loads((root / "tables" / table / "table.json").read_text())["inputs"]]
    assert paths == row["sources"], (paths, row["sources"])

    (root / "EVIDENCE.json").write_text(json.dumps({"schema": "remote-gpu-trainer/EVIDENCE/v1", "claims": [
        {"id": "C1", "statement": "The run's validation loss.", "metric": framework.metric,
         "evidence": [{"cells": row["cells"], "test_id": framework.test_id}]}]}))
    rgt_ok("build", "evidence", cwd=root)
    (generated,) = json.loads((root / "EVIDENCE.json").read_text())["claims"][0]["evidence"]
    assert math.isclose(generated["value"], row["mean"], rel_tol=1e-12) and generated["seeds"] == row["seeds"]
    assert [source["path"] for source in generated["sources"]] == row["sources"]
    return report


# -- the expected numbers, read with each framework's own tools ---------------------------------------------
def expected_value(root: Path, framework: Framework, cell: str) -> float:
    folder = root / "runs" / "r1" / cell
    reader = {"trainer_state": _trainer_state, "lightning": _lightning_csv, "tensorboard": _tensorboard,
              "mlflow": _mlflow, "wandb": _wandb_console}[framework.source]
    return reader(folder, root)


def _trainer_state(folder: Path, root: Path) -> float:
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return float([e for e in history if "eval_loss" in e][-1]["eval_loss"])


def _lightning_csv(folder: Path, root: Path) -> float:
    (path,) = folder.glob("logs/lightning_logs/version_0/metrics.csv")
    with path.open(encoding="utf-8") as handle:
        return float([r for r in csv.DictReader(handle) if r.get("val_loss")][-1]["val_loss"])


def _tensorboard(folder: Path, root: Path) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    last: tuple[int, float] | None = None
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            if tag in ("val/loss", "val_loss", "eval/loss"):
                point = accumulator.Scalars(tag)[-1]
                last = max(last or (point.step, point.value), (point.step, point.value))
    assert last is not None, f"no validation scalar in {folder}"
    return last[1]


def _mlflow(folder: Path, root: Path) -> float:
    from mlflow.tracking import MlflowClient

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when told to
        client = MlflowClient(tracking_uri=(folder / "mlruns").as_uri())
        (run,) = client.search_runs(["0"])
        return float(client.get_metric_history(run.info.run_id, "val_loss")[-1].value)


def _wandb_console(folder: Path, root: Path) -> float:
    """W&B 0.31 offers no Python reader of its offline log: its own console summary (5 significant digits)."""
    log = (root / ".rgt" / "sim" / "box" / "workspace" / "job" / "train.log").read_text(errors="replace")
    started = log.index(f"== rgt: cell {folder.name} started")
    found = re.search(r"wandb:\s+val/loss ([-0-9.e]+)", log[started:])
    assert found, log[started:]
    return float(found.group(1))
