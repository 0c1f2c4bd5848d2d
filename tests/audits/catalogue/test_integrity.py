"""VERIFY section G (reproducibility and integrity) on real files: per-item results, EVIDENCE.json, project
Python sources, real torch checkpoints behind "saved" log lines, and a PULL_MANIFEST.json with real hashes."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.integrity import CHECKS, claim_patterns, claimed_paths
from remote_gpu_trainer.audits.catalogue.model import CheckResult, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.runner import specs
from support.capsules import classification_items, load, write_capsule, write_evidence


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    return CHECKS[check](project, {**specs()[check].params, **overrides})


# -- V29 -------------------------------------------------------------------------------------------------------
def test_v29_values_that_recompute_pass(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.7}, items=classification_items(10, correct=7))
    res = run("V29", load(tmp_path))
    assert res.status == "pass" and res.subjects == ("capsule:r/seed0",)


def test_v29_stored_value_not_from_the_predictions_is_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.75}, items=classification_items(10, correct=7))
    (finding,) = run("V29", load(tmp_path)).findings
    assert finding.severity == "critical" and "not re-derivable from saved predictions" in finding.message
    assert finding.values == {"main.acc.stored": 0.75, "main.acc.recomputed": 0.7}


def test_v29_row_count_missing_column_and_nan_are_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path / "n", "r", "seed0", metrics={"acc": 0.7}, items=classification_items(10, correct=7), n=12)
    (finding,) = run("V29", load(tmp_path / "n")).findings
    assert "10 result rows for split test, metrics.json n = 12" in finding.message
    items = [{k: v for k, v in row.items() if k != "acc"} | {"f1": 1.0} for row in classification_items(4, correct=4)]
    write_capsule(tmp_path / "col", "r", "seed0", metrics={"acc": 1.0}, items=items)
    assert "column 'acc' missing" in run("V29", load(tmp_path / "col")).findings[0].message
    items = classification_items(4, correct=4)
    items[2]["acc"] = float("nan")
    write_capsule(tmp_path / "nan", "r", "seed0", metrics={"acc": 1.0}, items=items)
    assert "1 non-finite" in run("V29", load(tmp_path / "nan")).findings[0].message


def test_v29_pooled_and_custom_aggregates(tmp_path: Path) -> None:
    rows = [{"target": t, "pred": p} for t, p in [(1.0, 1.5), (2.0, 2.0), (3.0, 2.0)]]
    extra = {"metrics": {"rmse": {"value": (1.25 / 3) ** 0.5, "direction": "lower_is_better",
                                  "aggregate": "pooled:rmse", "column": None},
                         "score": {"value": 3.0, "direction": "higher_is_better", "aggregate": "custom"}}}
    write_capsule(tmp_path, "r", "seed0", items=rows, metrics_extra=extra)
    res = run("V29", load(tmp_path))
    assert res.status == "pass" and "custom" in res.note


def test_v29_shuffled_control_rows_are_not_the_reported_rows(tmp_path: Path) -> None:
    items = [dict(r, condition="real") for r in classification_items(10, correct=7)]
    items += [dict(r, condition="shuffled", item_id=f"s{i}") for i, r in enumerate(classification_items(10, correct=1))]
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.7}, items=items, n=10)
    assert run("V29", load(tmp_path)).status == "pass"


def evidence_row(value: float, cells: list[str], aggregate: str = "mean_over_seeds") -> dict[str, Any]:
    return {"id": "C1", "evidence": [{"exp_id": "r", "test_id": "main", "metric": "acc", "cells": cells,
                                      "aggregate": aggregate, "value": value}]}


def test_v29_evidence_values_against_their_metrics_files(tmp_path: Path) -> None:
    for seed, correct in enumerate((6, 7, 8)):
        write_capsule(tmp_path, "r", f"seed{seed}", metrics={"acc": correct / 10},
                      items=classification_items(10, correct=correct))
    cells = ["r/seed0", "r/seed1", "r/seed2"]
    write_evidence(tmp_path, [evidence_row(0.7, cells)])
    res = run("V29", load(tmp_path))
    assert res.status == "pass" and "claim:C1" in res.subjects
    write_evidence(tmp_path, [evidence_row(0.72, cells)])
    (finding,) = run("V29", load(tmp_path)).findings
    assert finding.subject == "claim:C1" and "evidence value not generated from artifacts" in finding.message
    write_evidence(tmp_path, [evidence_row(0.7, cells + ["r/seed9"])])
    assert "no metrics.json value in r/seed9" in run("V29", load(tmp_path)).findings[0].message


# -- V30 -------------------------------------------------------------------------------------------------------
GOOD_TRAIN = """
import os, random
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
random.seed(0)
np.random.seed(0)
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
g = torch.Generator()
g.manual_seed(0)
loader = DataLoader(Dataset(), num_workers=4, generator=g)
"""

BAD_TRAIN = """
import numpy as np
import torch
from torch.utils.data import DataLoader

class Noisy:
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __getitem__(self, i):
        return self.rng.normal()

torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
loader = DataLoader(Noisy(), num_workers=4)
"""


def declared_project(root: Path, source: str, **record: Any) -> ProjectEvidence:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "src" / "train.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "x.py").write_text("import random\nrandom.seed(0)\n", encoding="utf-8")
    write_capsule(root, "r", "seed0", record={"provenance": {"determinism": {"declared": True, "flags": []}},
                                              **record})
    return load(root)


def test_v30_declared_and_achieved_passes(tmp_path: Path) -> None:
    res = run("V30", declared_project(tmp_path, GOOD_TRAIN))
    assert res.status == "pass" and res.subjects == ("capsule:r/seed0",)


def test_v30_declared_not_achieved_lists_every_missing_item(tmp_path: Path) -> None:
    (finding,) = run("V30", declared_project(tmp_path, BAD_TRAIN)).findings
    assert finding.severity == "warn" and finding.message.startswith("determinism declared, not achieved: ")
    missing = finding.values["missing"]
    assert "numpy seed" in missing and "random seed" in missing and "torch seed" not in missing  # .venv not read
    assert "torch.use_deterministic_algorithms(True)" in missing
    assert "CUBLAS_WORKSPACE_CONFIG in the launch environment" in missing
    assert any(item.startswith("cudnn.benchmark False (set otherwise at src/train.py:") for item in missing)
    assert any(item.startswith("seeded DataLoader generator or worker_init_fn") for item in missing)
    assert any(item.startswith("per-worker reseed of Noisy.rng") for item in missing)


def test_v30_worker_init_fn_reseeding_the_dataset_rng_counts(tmp_path: Path) -> None:
    source = GOOD_TRAIN + textwrap.dedent("""
        class Noisy(Dataset):
            def __init__(self):
                self.rng = np.random.default_rng(0)
            def __getitem__(self, i):
                return self.rng.normal()

        def reseed(worker_id):
            info = torch.utils.data.get_worker_info()
            info.dataset.rng = np.random.default_rng(worker_id)

        other = DataLoader(Noisy(), num_workers=2, worker_init_fn=reseed)
        """)
    assert run("V30", declared_project(tmp_path, source)).status == "pass"


def test_v30_declared_replicates_that_differ_are_errors_undeclared_give_the_noise_band(tmp_path: Path) -> None:
    same = {"provenance": {"provenance_hash": "sha256:" + "2" * 64, "determinism": {"declared": True, "flags": []}}}
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "train.py").write_text(GOOD_TRAIN, encoding="utf-8")
    write_capsule(tmp_path / "a", "r", "seed0", metrics={"acc": 0.91}, record=same)
    write_capsule(tmp_path / "a", "r", "seed1", metrics={"acc": 0.90}, record=same)
    res = run("V30", load(tmp_path / "a"))
    assert [(f.subject, f.severity) for f in res.findings] == [("capsule:r/seed0", "error"),
                                                               ("capsule:r/seed1", "error")]
    assert "replicates with equal provenance_hash differ" in res.findings[0].message
    undeclared = {"provenance": {"provenance_hash": "sha256:" + "3" * 64}}
    write_capsule(tmp_path / "b", "r", "seed0", metrics={"acc": 0.91}, record=undeclared)
    write_capsule(tmp_path / "b", "r", "seed1", metrics={"acc": 0.90}, record=undeclared)
    res = run("V30", load(tmp_path / "b"))
    assert {f.severity for f in res.findings} == {"info"}
    assert res.findings[0].values["main/acc.band"] == pytest.approx(0.01)


def test_v30_skips_when_nothing_is_declared_or_replicated(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    assert run("V30", load(tmp_path)).status == "skipped"


# -- V32 -------------------------------------------------------------------------------------------------------
def test_claim_patterns_are_s56_and_s57() -> None:
    patterns = claim_patterns()
    assert claimed_paths("Saved checkpoint to /workspace/ckpt/epoch_3.pt", patterns) == ["/workspace/ckpt/epoch_3.pt"]
    assert claimed_paths("Epoch 3: val/loss improved to 0.3120, saved best.pth", patterns) == ["best.pth"]
    assert claimed_paths("Loaded checkpoint from /workspace/ckpt/last.pt (epoch 3)", patterns) == []


def with_log(project: ProjectEvidence, run_id: str, lines: list[str]) -> ProjectEvidence:
    return dataclasses.replace(project, log_lines={run_id: tuple(enumerate(lines, 1))})


def test_v32_saved_checkpoints_that_load_pass(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    folder = write_capsule(tmp_path, "r", "seed0")
    torch.save({"state_dict": {"w": torch.ones(2, 2)}}, folder / "best.pth")
    torch.save({"w": torch.zeros(3)}, folder / "flat.pt")
    (folder / "stats.json").write_text('{"mean": 0.5}', encoding="utf-8")
    project = with_log(load(tmp_path), "r", ["Saved checkpoint to /root/results/r/seed0/best.pth",
                                              "saved flat.pt", "Saving model checkpoint to seed0/stats.json",
                                              "[sync] uploaded to s3://bucket/r/best.pth"])
    res = run("V32", project)
    assert res.status == "pass" and "run:r" in res.subjects and "remote storage" in res.note


def test_v32_missing_empty_broken_and_unsafe_artifacts_are_critical(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    folder = write_capsule(tmp_path, "r", "seed0")
    (folder / "empty.pth").write_bytes(b"")
    (folder / "garbage.pth").write_bytes(b"not a checkpoint at all")
    (folder / "broken.json").write_text("{", encoding="utf-8")
    torch.save({"model": {"w": torch.ones(1)}, "args": argparse.Namespace(lr=0.1)}, folder / "pickle.pt")
    lines = ["Saved checkpoint to /box/r/seed0/gone.pth", "saved seed0/empty.pth", "saved seed0/garbage.pth",
             "Saved model to seed0/broken.json", "saved seed0/pickle.pt", "Saved checkpoint to ../../../etc/passwd"]
    (finding,) = run("V32", with_log(load(tmp_path), "r", lines), timeout_s=120).findings
    assert finding.subject == "run:r" and finding.severity == "critical"
    problems = {path: value["problem"] for path, value in finding.values.items()}
    assert problems["/box/r/seed0/gone.pth"] == "missing" and problems["../../../etc/passwd"] == "missing"
    assert problems["seed0/empty.pth"] == "empty file (0 bytes)"
    assert problems["seed0/garbage.pth"].startswith("does not safe-load (load_failed")
    assert problems["seed0/broken.json"].startswith("JSON does not parse")
    assert problems["seed0/pickle.pt"] == "does not safe-load (blocked_global: argparse.Namespace)"
    assert "claimed but missing: /box/r/seed0/gone.pth, log line 1" in finding.message


def test_v32_eval_protocol_set_only_on_the_command_line_warns(tmp_path: Path) -> None:
    command = {"eval_command": {"argv": ["python", "eval.py"], "overrides": ["tta=true", "lr=0.001"]}}
    write_capsule(tmp_path, "r", "seed0", metrics_extra=command)
    (finding,) = run("V32", load(tmp_path)).findings
    assert finding.severity == "warn" and finding.integrity_class == "qrp_tell"
    assert finding.message.endswith("absent from config.yaml: tta=true")  # lr=0.001 is in config.yaml


# -- V33 -------------------------------------------------------------------------------------------------------
def write_manifest(root: Path, run_id: str) -> Path:
    base = root / "runs" / run_id
    files = sorted(p for p in base.rglob("*") if p.is_file())
    entries = [{"path": p.relative_to(base).as_posix(), "bytes": p.stat().st_size,
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files]
    manifest = {"schema": "remote-gpu-trainer/PULL/v1", "run_id": run_id, "created_at_utc": "2026-06-21T02:10:45+00:00",
                "top_level_dirs": sorted({e["path"].split("/")[0] for e in entries}), "files": entries,
                "totals": {"files": len(entries), "bytes": sum(e["bytes"] for e in entries)}}
    data = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    (base / "PULL_MANIFEST.json").write_bytes(data)
    return base


def test_v33_untouched_pull_passes_with_markers_and_part_files_ignored(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.7}, items=classification_items(10, correct=7))
    write_capsule(tmp_path, "r", "seed1", metrics={"acc": 0.7}, items=classification_items(10, correct=7))
    base = write_manifest(tmp_path, "r")
    sha = hashlib.sha256((base / "PULL_MANIFEST.json").read_bytes()).hexdigest()
    (base / "PULL_VERIFIED.json").write_text(json.dumps({"manifest_sha256": sha}), encoding="utf-8")
    (base / "seed0" / "last.pth.part").write_bytes(b"half")
    res = run("V33", load(tmp_path))
    assert res.status == "pass" and set(res.subjects) == {"run:r", "capsule:r/seed0", "capsule:r/seed1"}


def test_v33_changed_added_and_removed_files_are_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.7}, items=classification_items(10, correct=7))
    write_capsule(tmp_path, "r", "seed1", metrics={"acc": 0.7}, items=classification_items(10, correct=7))
    base = write_manifest(tmp_path, "r")
    metrics = base / "seed0" / "test" / "main" / "metrics.json"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace("0.7", "0.8"), encoding="utf-8")
    (base / "seed0" / "notes.txt").write_text("re-run", encoding="utf-8")
    (base / "seed1" / "train.csv").unlink()
    res = run("V33", load(tmp_path))
    found = {f.subject: f for f in res.findings}
    assert set(found) == {"capsule:r/seed0", "capsule:r/seed1"}
    assert all(f.severity == "critical" and f.message.startswith("evidence mutated") for f in found.values())
    assert found["capsule:r/seed0"].values == {"changed": ["seed0/test/main/metrics.json"],
                                               "added": ["seed0/notes.txt"]}
    assert found["capsule:r/seed1"].values == {"removed": ["seed1/train.csv"]}


def test_v33_manifest_not_the_verified_one_or_unparseable(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    base = write_manifest(tmp_path, "r")
    (base / "PULL_VERIFIED.json").write_text(json.dumps({"manifest_sha256": "0" * 64}), encoding="utf-8")
    (finding,) = run("V33", load(tmp_path)).findings
    assert finding.subject == "run:r" and "is not the manifest PULL_VERIFIED.json verified" in finding.message
    (base / "PULL_MANIFEST.json").write_text("{not json", encoding="utf-8")
    (finding,) = run("V33", load(tmp_path)).findings
    assert finding.subject == "run:r" and "no longer parses" in finding.message


def test_v33_skips_without_a_manifest(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    res = run("V33", load(tmp_path))
    assert res.status == "skipped" and "PULL_MANIFEST.json" in res.note
