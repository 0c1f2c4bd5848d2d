"""A real project for the DELIVER claim tests: capsules a sim box wrote, pulled and verified by rgt, and an
EVIDENCE.json that cites them.

The capsules are written once into a staging folder with support.capsules (run.json, config.yaml, train.csv,
per-item results, metrics.json with a unit) plus a real torch best.pth; the run's command copies a cell's
staged files into its result root on the sim box, so `launch → pull → verify` are rgt's own, with a real state
database, a real PULL_MANIFEST.json and a real PULL_VERIFIED.json. `verified_copy` hands each test its own copy
of one such project (built once per test module), so a test can break one thing without paying for a launch.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from support.capsules import write_capsule, write_evidence
from support.gate_helpers import launch_finished, pull_and_verify, seed_verdicts
from support.helpers import toml_string

RUN = "r1"
CELLS = ("seed0", "seed1", "seed2")
PSNR = {"seed0": 31.34, "seed1": 31.42, "seed2": 31.50}  # mean 31.42, sample std 0.08
UNIT = "dB"


def items(value: float, n: int = 5) -> list[dict[str, Any]]:
    """`n` per-item rows whose psnr column means exactly `value` (a spread of ±0.5 around it)."""
    offsets = [-0.5, -0.25, 0.0, 0.25, 0.5][:n]
    return [{"item_id": f"img{i}", "psnr": value + offset} for i, offset in enumerate(offsets)]


def psnr_block(value: float, unit: str | None = UNIT) -> dict[str, Any]:
    return {"value": value, "direction": "higher_is_better", "unit": unit, "aggregate": "mean", "column": "psnr"}


def stage_capsule(root: Path, run: str, cell: str, value: float, *, seed: int = 0, split: str = "test",
                  record: Mapping[str, Any] | None = None) -> Path:
    """A full capsule under `root/runs/<run>/<cell>/` with a real best.pth, its sha256 in run.json and
    metrics.json (the file the evaluation loaded)."""
    folder = root / "runs" / run / cell
    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    torch.save({"model_state_dict": {"w": torch.randn(3, 3, generator=generator)}, "epoch": 10}, folder / "best.pth")
    best = hashlib.sha256((folder / "best.pth").read_bytes()).hexdigest()
    rows = [dict(row, split=split) for row in items(value)]
    record_extra = {"checkpoints": {"best": {"path": "best.pth", "sha256": best, "epoch": 10}},
                    "tests": [{"test_id": "set5", "split": split, "checkpoint": "best", "n": len(rows)}],
                    "task": "superres-x4", **(record or {})}
    write_capsule(root, run, cell, seed=seed, items=rows, test_id="set5", split=split, record=record_extra,
                  metrics_extra={"metrics": {"psnr": psnr_block(value)}, "checkpoint_sha256": best})
    return folder


def project_text(staging: Path, *, docs: Sequence[str] = ()) -> str:
    copy = f"cp -R {shlex.quote(str(staging))}/runs/{RUN}/{{cell}}/. {{out}}/ && echo 'cell {{cell}} complete'"
    cells = ", ".join(f'"{c}"' for c in CELLS)
    text = f"""\
[project]
name = "claims"

[instances.box]
provider = "sim"

[runs.{RUN}]
instance = "box"
workdir = "/workspace/job"
command = {toml_string(copy)}
log = "train.log"
remote_root = "/workspace/rgt/{RUN}"
roster = [{cells}]
required = ["run.json", "config.yaml", "train.csv", "best.pth"]
python = {toml_string(sys.executable)}
"""
    if docs:
        text += f"\n[deliver]\ndocs = [{', '.join(toml_string(d) for d in docs)}]\n"
    return text


def claim(claim_id: str = "C1-main-psnr", cells: Sequence[str] = tuple(f"{RUN}/{c}" for c in CELLS),
          **row: Any) -> dict[str, Any]:
    """A user-written claim (U fields only) over `cells`, psnr on set5 at precision 2."""
    body = {"exp_id": RUN, "test_id": "set5", "metric": "psnr", "aggregate": "mean_over_seeds", "cells": list(cells),
            "aliases": ["PSNR on Set5"], "precision": 2, "display_scale": 1, "figures": [], "tables": []}
    body.update(row)
    return {"id": claim_id, "statement": "The full model reaches 31.42 dB on Set5.", "paper_anchor": "paper.tex",
            "repo_implementation": "src/model.py:1", "aliases": [], "tried": 1, "evidence": [body]}


def unpulled(cells: Sequence[str] = CELLS, kind: str = "not pulled by rgt: ", test_id: str = "set5") -> str:
    """What a number built from these cells of run r1 says of them when files_project wrote them (no pull of
    rgt recorded); `kind=""` is the ladder's form, which says "not pulled by rgt" before the files."""
    paths = ", ".join(f"runs/{RUN}/{cell}/test/{test_id}/metrics.json" for cell in cells)
    return f"{paths} ({kind}no pull of run {RUN} is recorded)"


def files_project(root: Path, claims: Sequence[Mapping[str, Any]], values: Mapping[str, float] | None = None, *,
                  split: str = "test", docs: Mapping[str, str] | None = None) -> Path:
    """Capsules of run r1 written straight into runs/ (nothing launched, pulled or verified: every number built
    from them is disclosed as unverified evidence, `unpulled`, and no claim on them climbs past planned), rgt.toml
    (with `docs` in [deliver] docs, each written with its text) and EVIDENCE.json with `claims`."""
    root.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(toml_string(name) for name in docs or {})
    deliver = f"\n[deliver]\ndocs = [{listed}]\n" if docs else ""
    (root / "rgt.toml").write_text('[project]\nname = "claims"\n' + deliver, encoding="utf-8")
    for name, text in (docs or {}).items():
        (root / name).write_text(text, encoding="utf-8")
    for seed, cell in enumerate(CELLS):
        stage_capsule(root, RUN, cell, (values or PSNR)[cell], seed=seed, split=split)
    write_evidence(root, claims)
    return root


def build_verified(root: Path) -> Path:
    """Stage the capsules, launch the copy job on the sim box, pull and verify it (rgt's own services)."""
    staging = root.parent / f"{root.name}-staging"
    for seed, cell in enumerate(CELLS):
        stage_capsule(staging, RUN, cell, PSNR[cell], seed=seed)
    root.mkdir(parents=True)
    (root / "rgt.toml").write_text(project_text(staging), encoding="utf-8")
    write_evidence(root, [claim()])
    seed_verdicts(root)
    asyncio.run(launch_finished(root))
    asyncio.run(pull_and_verify(root))
    return root


def verified_copy(template: Path, target: Path) -> Path:
    """The template project copied whole (state database, sim disk, pulled runs), times kept."""
    shutil.copytree(template, target, symlinks=True)
    return target


def read_evidence(root: Path) -> dict[str, Any]:
    return json.loads((root / "EVIDENCE.json").read_text(encoding="utf-8"))
