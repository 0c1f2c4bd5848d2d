"""Cells that failed or never started (issue 23, docs/gate.md §2): the box's job wrapper records each cell's exit
code, the builder lists what such a cell left and names it in the manifest's `cells`, verify names it, VERIFY leaves
it out of the numbers, and the gate opens once everything that exists is home and verified. Each relaxation rests
on the box's own exit codes: where they are missing or the run has not ended, nothing is relaxed."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.catalogue.load import load_project
from remote_gpu_trainer.audits.gate import Approval, evaluate_gate
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, parse_manifest
from remote_gpu_trainer.clock import utc_now
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services.box_layout import ctl_dir
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from remote_gpu_trainer.services.gate import gather_gate_inputs
from support.evidence_helpers import INSTANCE_ID, Env, make_env, write_cell

ROSTER = ("seed0", "seed1", "seed2")


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path, roster=ROSTER, required=("best.pth", "best_metrics.json"))


def record_exits(env: Env, cells: dict[str, int], run: int | None) -> Path:
    """What the job wrapper writes in the run's control folder: each started cell's exit code, then the run's."""
    ctl = Path(env.transport.resolve(ctl_dir(env.run)))
    ctl.mkdir(parents=True, exist_ok=True)
    for cell, code in cells.items():
        (ctl / f"{cell}.exit_code").write_text(f"{code}\n")
    if run is not None:
        (ctl / "exit_code").write_text(f"{run}\n")
    return ctl


def partial_run(env: Env) -> None:
    """seed0 finished; seed1 crashed after writing a log and half its outputs; seed2 never started."""
    write_cell(env.box, "seed0", 0)
    (env.box / "seed1").mkdir()
    (env.box / "seed1" / "seed1.log").write_text("epoch 1\nRuntimeError: CUDA error: an illegal memory access\n")
    record_exits(env, {"seed0": 0, "seed1": 1}, run=1)


def gate(env: Env) -> tuple[bool, list[str]]:
    decision = evaluate_gate(gather_gate_inputs(env.project, env.run, env.db, INSTANCE_ID,
                                                Approval(INSTANCE_ID, utc_now()),
                                                now=utc_now() + timedelta(seconds=1)))
    return decision.open, decision.reasons


async def test_a_partial_run_pulls_and_verifies_with_its_unfinished_cells_named(env: Env) -> None:
    partial_run(env)
    pulled = await pull(env.project, env.run, env.transport, env.db)
    assert pulled.ok and sorted(pulled.files) == ["seed0/best.pth", "seed0/best_metrics.json", "seed0/seed0.log",
                                                  "seed1/seed1.log"]
    manifest = json.loads((env.local / MANIFEST_NAME).read_text())
    assert manifest["cells"] == {"seed1": {"state": "failed", "exit_code": 1},
                                 "seed2": {"state": "never_started", "exit_code": None}}
    assert manifest["top_level_dirs"] == list(ROSTER)
    open_before, reasons = gate(env)
    assert not open_before and any("PULL_VERIFIED" in r for r in reasons)
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert [(c.cell, c.words()) for c in verified.cells] == [("seed1", "failed (exit 1)"),
                                                             ("seed2", "never started")]
    assert gate(env) == (True, [])


async def test_verify_leaves_unfinished_cells_out_of_the_numbers_and_says_so(env: Env) -> None:
    partial_run(env)
    (env.box / "seed1" / "best_metrics.json").write_text('{"val_loss": 9.5}')  # a crashed cell's stale number
    await pull(env.project, env.run, env.transport, env.db)
    assert (await verify(env.project, env.run, env.db)).ok
    project = load_project(env.project.root)
    from remote_gpu_trainer.audits.catalogue.numbers import seed_values
    from remote_gpu_trainer.audits.catalogue.statistics import check_seed_count

    number = next(n for n in project.numbers if n.metric == "val_loss")
    run = env.run.id
    assert number.cells == (f"{run}/seed0", f"{run}/seed1")  # both cells hold the number ...
    assert [v.capsule.key for v in seed_values(project, number)] == [f"{run}/seed0"]  # ... only one is a seed
    result = check_seed_count(project, {"min_seeds": 3, "min_seeds_high_variance": 5, "cv_high_variance": 0.5,
                                        "resamples": 100, "rng_seed": 0})
    disclosed = next(f for f in result.findings if f.subject == f"run:{run}")
    assert disclosed.message == "left out of seeds and means: seed1 failed (exit 1), seed2 never started"


async def test_without_the_boxs_exit_codes_nothing_is_relaxed(env: Env) -> None:
    """No exit code for the run (still running, or a control folder someone removed): a cell without a folder
    still refuses the manifest, and with no control folder at all a crashed cell's missing files do too."""
    partial_run(env)
    ctl = Path(env.transport.resolve(ctl_dir(env.run)))
    (ctl / "exit_code").unlink()
    with pytest.raises(VerbFailed, match=r"seed2: roster cell has no folder") as refused:
        await pull(env.project, env.run, env.transport, env.db)
    assert "seed1" not in str(refused.value)  # seed1's own exit code (1) is on the box: a fact, not a guess
    for item in ctl.iterdir():
        item.unlink()
    with pytest.raises(VerbFailed, match=r"seed2: roster cell has no folder.*seed1/best.pth: required file is missing"):
        await pull(env.project, env.run, env.transport, env.db)
    assert not (env.box / MANIFEST_NAME).exists()


async def test_a_cell_that_exited_zero_must_hold_its_required_files(env: Env) -> None:
    """The box saying a cell succeeded demands its files; only a recorded failure relaxes them."""
    partial_run(env)
    record_exits(env, {"seed1": 0}, run=1)
    with pytest.raises(VerbFailed, match="seed1/best.pth: required file is missing"):
        await pull(env.project, env.run, env.transport, env.db)


@pytest.mark.parametrize("exit_text", ["abc", "", "3\n4\n", "1" * 40])
async def test_an_exit_code_file_that_is_not_a_number_relaxes_nothing(env: Env, exit_text: str) -> None:
    partial_run(env)
    ctl = Path(env.transport.resolve(ctl_dir(env.run)))
    (ctl / "seed1.exit_code").write_text(exit_text)
    (env.box / "seed2").mkdir()  # seed2 started after all: only seed1 is in question
    record_exits(env, {"seed2": 0}, run=1)
    write_cell(env.box, "seed2", 2)
    with pytest.raises(VerbFailed, match="seed1/best.pth: required file is missing"):
        await pull(env.project, env.run, env.transport, env.db)


def test_the_parser_refuses_a_cells_block_that_is_not_the_builders() -> None:
    base = {"schema": "remote-gpu-trainer/PULL/v1", "run_id": "r1", "created_at_utc": "2026-12-06T10:00:00+00:00",
            "top_level_dirs": ["a", "b"], "files": [{"path": "a/x", "bytes": 1, "sha256": "0" * 64}],
            "totals": {"files": 1, "bytes": 1}}
    for cells, why in [({"c": {"state": "failed", "exit_code": 1}}, "is not a roster cell"),
                       ({"b": {"state": "failed", "exit_code": 0}}, "state must be failed with a non-zero"),
                       ({"b": {"state": "failed", "exit_code": True}}, "state must be failed with a non-zero"),
                       ({"b": {"state": "never_started", "exit_code": 2}}, "never_started with a null"),
                       ({"b": {"state": "skipped", "exit_code": None}}, "state must be"),
                       ({}, "non-empty object")]:
        data = (json.dumps({**base, "cells": cells}, indent=2, sort_keys=True) + "\n").encode()
        _, problems = parse_manifest(data, roster=("a", "b"), run_id="r1")
        assert any(why in p.detail for p in problems), (cells, problems)
    # b without files and without a `cells` entry: the cells must match the files
    data = (json.dumps(base, indent=2, sort_keys=True) + "\n").encode()
    _, problems = parse_manifest(data, roster=("a", "b"), run_id="r1")
    assert any("top_level_dirs differs" in p.detail for p in problems)
