"""DELIVER only reads the evidence (docs/deliver.md §1): on a real sim run launched, pulled and verified by rgt,
`rgt build` (figures, a table, EVIDENCE.json, the macros), `rgt reconcile` and `rgt completeness`, each as a user
runs it in its own process, leave every file under runs/ byte for byte and mode for mode as verification left
it, and the teardown gate open: `rgt down` still tears the box down."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

from support.capsules import write_capsule, write_evidence
from support.figures import curve, write_figure
from support.gate_helpers import assert_torn_down, project_text, rgt, verified_project
from support.helpers import FIXTURES, toml_string
from support.tables import write_table

EXTRA = """
[deliver]
docs = ["paper.md"]

[grid]
dims = { seed = [0, 1] }
capsule = "r1/seed{seed}"
test_id = "main"
"""


def snapshot(root: Path) -> dict[str, tuple[int, str | None]]:
    """Every entry under runs/: its mode bits and, for a file, the sha256 of its bytes."""
    found = {}
    for path in sorted((root / "runs").rglob("*")):
        info = os.lstat(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else None
        found[path.relative_to(root).as_posix()] = (stat.S_IMODE(info.st_mode), digest)
    return found


async def test_build_reconcile_and_completeness_leave_runs_and_the_gate_as_verified(tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    for seed, cell in enumerate(("seed0", "seed1")):
        folder = write_capsule(stage, "r1", cell, seed=seed, metrics={"acc": 0.8 + seed / 100}, n=50,
                               train=curve(seed / 100))
        for name in ("best.pth", "best_metrics.json"):
            shutil.copyfile(FIXTURES / "cells" / cell / name, folder / name)
    command = f"cp -R {toml_string(str(stage))[1:-1]}/runs/r1/{{cell}}/. {{out}}/"
    root = await verified_project(tmp_path / "p", project_text(command=command, extra=EXTRA))
    series = [{"label": "r1", "capsules": ["r1/seed0", "r1/seed1"]}]
    write_figure(root, "acc", "bar", series=series, test_id="main", metric="acc")
    write_figure(root, "loss", "line", series=series, y="loss")
    write_table(root, "main", [{"method": "r1", "capsules": ["r1"]}], test_id="main", layout={"columns": ["acc"]})
    write_evidence(root, [{"id": "C1", "statement": "acc", "evidence": [
        {"exp_id": "r1", "test_id": "main", "metric": "acc", "cells": ["r1/seed0", "r1/seed1"], "precision": 3}]}])
    (root / "paper.md").write_text("Accuracy 0.805 on main.\n", encoding="utf-8")
    before = snapshot(root)
    assert before["runs/r1/seed0/best.pth"][0] & 0o222 == 0  # verification made the copy read-only
    codes = {" ".join(args): rgt(*args, str(root), cwd=root).returncode
             for args in (("build",), ("reconcile",), ("completeness",))}
    assert codes == {"build": 0, "reconcile": 0, "completeness": 1}  # the grid lacks splits/main.json: a hole
    assert sorted(p.name for p in (root / "figures/acc").iterdir()) == [
        "figure.json", "final.pdf", "final.png", "final.svg", "source.csv"]
    assert (root / "tables/macros/final.tex").is_file() and (root / "completeness.json").is_file()
    assert snapshot(root) == before
    assert_torn_down(root)
