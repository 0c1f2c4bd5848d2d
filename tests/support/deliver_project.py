"""DELIVER projects on disk for the Deliver panel's and `rgt build`'s tests: real capsules (support/capsules.py),
and figure.json / table.json / EVIDENCE.json either as a user writes them (nothing generated) or as a build
leaves them (a real PNG drawn by matplotlib, every input's and output's sha256 recorded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from support.capsules import classification_items, sha256_file, write_capsule, write_json
from support.helpers import FIXED_NOW, FixedClock, write_project

CAPSULES = ("r1/seed0", "r1/seed1")


def draw_png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(2, 1.5), dpi=50)
    axes.plot([1, 2, 3], [1.0, 0.5, 0.25])
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def built_figure(root: Path, figure_id: str, checks: dict[str, str] | None = None) -> Path:
    """figures/<id>/ as a build leaves it: final.png and source.csv, figure.json recording their sha256 and
    the sha256 of every capsule's train.csv it read."""
    folder = root / "figures" / figure_id
    draw_png(folder / "final.png")
    (folder / "source.csv").write_text("series,x,y\nours,1,1.0\n", encoding="utf-8")
    checks = checks or {f"G{n}": "pass" for n in range(1, 7)}
    inputs = [{"capsule": c, "file": "train.csv", "path": f"runs/{c}/train.csv",
               "sha256": sha256_file(root / "runs" / c / "train.csv")} for c in CAPSULES]
    write_json(folder / "figure.json", {
        "schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": figure_id, "kind": "line",
        "supports_claims": ["C1-acc"], "inputs": inputs,
        "source": {"path": "source.csv", "sha256": sha256_file(folder / "source.csv")},
        "outputs": [{"path": "final.png", "sha256": sha256_file(folder / "final.png")}],
        "qa": {"passed": all(v in ("pass", "disclosed") for v in checks.values()), "checks": checks},
        "disclosure": None})
    return folder


def built_table(root: Path, table_id: str, checks: dict[str, str]) -> Path:
    folder = root / "tables" / table_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "final.md").write_text("| method | acc ↑ |\n|---|---|\n| ours | 0.80 ± 0.01 |\n", encoding="utf-8")
    inputs = [{"capsule": c, "test_id": "main", "metric": "acc", "path": f"runs/{c}/test/main/metrics.json",
               "sha256": sha256_file(root / "runs" / c / "test" / "main" / "metrics.json")} for c in CAPSULES]
    write_json(folder / "table.json", {
        "schema": "remote-gpu-trainer/TABLE/v1", "table_id": table_id, "inputs": inputs,
        "outputs": [{"path": "final.md", "sha256": sha256_file(folder / "final.md")}],
        "qa": {"passed": all(v in ("pass", "disclosed") for v in checks.values()), "checks": checks}})
    return folder


def claims(state: str = "audited") -> list[dict[str, Any]]:
    row = {"exp_id": "r1", "test_id": "main", "metric": "acc", "cells": list(CAPSULES), "precision": 2,
           "value": 0.805, "direction": "higher_is_better", "split": "test", "n": 100, "seeds": 2,
           "variance": {"type": "std_over_seeds", "value": 0.007}, "sources": []}
    return [{"id": "C1-acc", "statement": "The model reaches 0.80 accuracy.", "paper_anchor": "paper.md",
             "state": state, "disclosure": None, "findings": [], "evidence": [row]}]


def delivered_project(root: Path) -> Session:
    write_project(root)
    for index, capsule in enumerate(CAPSULES):
        run, cell = capsule.split("/")
        write_capsule(root, run, cell, seed=index, metrics={"acc": 0.80 + 0.01 * index},
                      items=classification_items(100, correct=80 + index))
    write_json(root / "EVIDENCE.json", {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "t",
                                        "claims": claims()})
    built_figure(root, "loss-curve")
    built_table(root, "tab-main", {"Q1_parse_back": "pass", "Q4_bold_rule": "fail"})
    return open_session(str(root), clock=FixedClock(FIXED_NOW))


def user_project(root: Path) -> Session:
    """Only what a user writes: the capsules (written into runs/ as a pull leaves them, but no pull of rgt is
    recorded, so DELIVER discloses every number built from them as unverified evidence), figure.json, table.json
    and EVIDENCE.json without a single generated key."""
    write_project(root)
    for index, capsule in enumerate(CAPSULES):
        run, cell = capsule.split("/")
        write_capsule(root, run, cell, seed=index, metrics={"acc": 0.80 + 0.01 * index},
                      items=classification_items(100, correct=80 + index))
    write_json(root / "figures" / "loss-curve" / "figure.json", {
        "schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "loss-curve", "kind": "line",
        "series": [{"label": "r1", "capsules": list(CAPSULES)}], "x": "step", "y": "loss",
        "ylabel": "loss (↓ better)"})
    write_json(root / "tables" / "tab-main" / "table.json", {
        "schema": "remote-gpu-trainer/TABLE/v1", "table_id": "tab-main", "test_id": "main",
        "rows": [{"method": "r1", "capsules": ["r1"]}], "layout": {"columns": ["acc"], "precision": {"acc": 3}}})
    write_json(root / "EVIDENCE.json", {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "t", "claims": [
        {"id": "C1-acc", "statement": "The model reaches 0.80 accuracy.",
         "evidence": [{"test_id": "main", "metric": "acc", "cells": list(CAPSULES), "precision": 3}]}]})
    return open_session(str(root), clock=FixedClock(FIXED_NOW))
