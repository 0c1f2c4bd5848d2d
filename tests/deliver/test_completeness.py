"""`rgt completeness` on a small real grid (docs/deliver.md §7): two methods × two seeds, one method pulled and
sealed here by the real manifest builder, the other run for real on a sim box and never pulled. The verb
reports the missing checkpoint, the validation-split number and every remote-only file (on the pull list),
writes completeness.json, and the teardown plan names the points whose checkpoint is only on the box while the
gate decides exactly as it does without a [grid]."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.remote.build_manifest import build
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support.capsules import sha256_file, write_capsule, write_split
from support.helpers import FIXTURES, toml_string, wait_for_liveness

CKPT = FIXTURES / "cells" / "seed0" / "best.pth"
CKPT_SHA = sha256_file(CKPT)
CKPT_BYTES = CKPT.stat().st_size
GRID = """
[grid]
dims = { method = ["base", "ours"], seed = [0, 1] }
capsule = "{method}/seed{seed}"
test_id = "main"
"""


def rgt_toml(stage: Path, grid: str = GRID) -> str:
    command = f"cp -R {toml_string(str(stage))[1:-1]}/runs/ours/{{cell}}/. {{out}}/"
    return f"""[project]
name = "grid"

[instances.box]
provider = "sim"

[runs.ours]
instance = "box"
workdir = "/workspace/job"
command = {toml_string(command)}
log = "train.log"
remote_root = "/workspace/rgt/ours"
roster = ["seed0", "seed1"]
required = ["run.json", "best.pth"]
python = {toml_string(sys.executable)}
{grid}"""


def capsule(root: Path, run_id: str, cell: str, split_sha: str, *, split: str = "test",
            checkpoint: bool = True) -> Path:
    """A capsule whose run.json names splits/main.json with its real sha256 and whose metrics.json names the
    checkpoint it came from."""
    data = {"dataset": "synthetic", "split_manifest": "splits/main.json", "split_manifest_sha256": split_sha,
            "data_sha256": "7c" * 32}
    folder = write_capsule(root, run_id, cell, metrics={"acc": 0.5}, items=[{"acc": 1.0}, {"acc": 0.0}],
                           split=split, record={"provenance": {"data": data}},
                           metrics_extra={"checkpoint_sha256": CKPT_SHA})
    if checkpoint:
        shutil.copyfile(CKPT, folder / "best.pth")
    return folder


@pytest.fixture
def grid_project(tmp_path: Path) -> Iterator[Path]:
    """base/seed0 complete and sealed here; base/seed1 without best.pth and with a validation-split number;
    ours/seed0 and ours/seed1 only on the sim box (launched, finished, not pulled)."""
    root, stage = tmp_path / "p", tmp_path / "stage"
    split = write_split(root, "main", {"train": [("a.bin", b"a")], "test": [("b.bin", b"b")]})
    split_sha = sha256_file(split)
    capsule(root, "base", "seed0", split_sha)
    capsule(root, "base", "seed1", split_sha, split="val", checkpoint=False)
    assert build(str(root / "runs" / "base"), "base", ["seed0", "seed1"], ["run.json"]) == 0  # the real seal
    for cell in ("seed0", "seed1"):
        capsule(stage, "ours", cell, split_sha)
    (root / "rgt.toml").write_text(rgt_toml(stage), encoding="utf-8")
    yield root


async def launch_ours(root: Path) -> None:
    session = open_session(str(root))
    try:
        await create_instance(session, "box")
        await launch_run(session, "ours")
        await wait_for_liveness(session, "ours")
    finally:
        await session.close_transports()
        session.close()


async def pull(root: Path, run_id: str) -> None:
    session = open_session(str(root))
    try:
        pulled = await pull_run(session, run_id)
        assert pulled.ok, pulled.failed
    finally:
        await session.close_transports()
        session.close()


def points(body: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return {p["capsule"]: (p["state"], p["CKPT"], p["SPLIT"], p["INPUTS"], p["VISUALS"], p["UNIFORM"])
            for p in body["points"]}


def test_a_small_grid_reports_each_kind_of_hole_and_the_pull_list(
        grid_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(launch_ours(grid_project))
    capsys.readouterr()
    code = main(["completeness", str(grid_project), "--format", "json"])
    out = capsys.readouterr().out
    body = json.loads((grid_project / "completeness.json").read_text(encoding="utf-8"))
    assert code == 1 and json.loads(out) == body
    assert points(body) == {
        "base/seed0": ("complete", "ok", "ok", "ok", "n/a", "ok"),
        "base/seed1": ("incomplete", "missing", "mismatch", "ok", "n/a", "ok"),
        "ours/seed0": ("pull", "remote_only", "remote_only", "remote_only", "n/a", "remote_only"),
        "ours/seed1": ("pull", "remote_only", "remote_only", "remote_only", "n/a", "remote_only"),
    }
    seed1 = next(p for p in body["points"] if p["capsule"] == "base/seed1")
    assert seed1["point"] == {"method": "base", "seed": 1} and seed1["test_id"] == "main"
    assert seed1["details"] == {
        "CKPT": "runs/base/seed1/best.pth is not here (run base has no box in rgt.toml)",
        "SPLIT": "runs/base/seed1/test/main/metrics.json says split 'val'; the grid claims 'test'"}
    sizes = {p: (grid_project.parent / "stage" / p).stat().st_size
             for p in ("runs/ours/seed0/run.json", "runs/ours/seed0/test/main/metrics.json")}
    assert [(i["path"], i["remote"], i["bytes"], i["points"]) for i in body["pull_list"]] == [
        ("runs/ours/seed0/best.pth", "/workspace/rgt/ours/seed0/best.pth", CKPT_BYTES, ["method=ours seed=0"]),
        ("runs/ours/seed0/run.json", "/workspace/rgt/ours/seed0/run.json", sizes["runs/ours/seed0/run.json"],
         ["method=ours seed=0"]),
        ("runs/ours/seed0/test/main/metrics.json", "/workspace/rgt/ours/seed0/test/main/metrics.json",
         sizes["runs/ours/seed0/test/main/metrics.json"], ["method=ours seed=0"]),
        ("runs/ours/seed1/best.pth", "/workspace/rgt/ours/seed1/best.pth", CKPT_BYTES, ["method=ours seed=1"]),
        ("runs/ours/seed1/run.json", "/workspace/rgt/ours/seed1/run.json", sizes["runs/ours/seed0/run.json"],
         ["method=ours seed=1"]),
        ("runs/ours/seed1/test/main/metrics.json", "/workspace/rgt/ours/seed1/test/main/metrics.json",
         sizes["runs/ours/seed0/test/main/metrics.json"], ["method=ours seed=1"]),
    ]
    assert body["summary"] == {"points": 4, "complete": 1, "pull": 2, "unknown": 0, "incomplete": 1}
    assert body["grid"] == {"dims": {"method": ["base", "ours"], "seed": [0, 1]}, "capsule": "{method}/seed{seed}",
                            "test_id": "main", "split": "test"}


def test_the_text_form_names_each_hole_and_the_pull_list(grid_project: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(launch_ours(grid_project))
    capsys.readouterr()
    assert main(["completeness", str(grid_project)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "completeness: 4 grid point(s) over method × seed, claimed split test"
    assert lines[1] == ("COMPLETE   method=base seed=0 (base/seed0, test main): CKPT=ok SPLIT=ok INPUTS=ok "
                        "VISUALS=n/a UNIFORM=ok")
    assert lines[2:5] == [
        "INCOMPLETE method=base seed=1 (base/seed1, test main): CKPT=missing SPLIT=mismatch INPUTS=ok "
        "VISUALS=n/a UNIFORM=ok",
        "           CKPT: runs/base/seed1/best.pth is not here (run base has no box in rgt.toml)",
        "           SPLIT: runs/base/seed1/test/main/metrics.json says split 'val'; the grid claims 'test'"]
    assert "pull list (6 file(s) only on a box; pull them before any teardown):" in lines
    assert "  runs/ours/seed1/best.pth <- /workspace/rgt/ours/seed1/best.pth (2.5 KiB)" in lines
    assert lines[-1] == "summary: 1 complete, 2 to pull, 1 incomplete, 0 unknown of 4; wrote completeness.json"


def test_pulling_closes_the_remote_only_points(grid_project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(launch_ours(grid_project))
    asyncio.run(pull(grid_project, "ours"))
    capsys.readouterr()
    assert main(["completeness", str(grid_project), "--format", "json"]) == 1  # base/seed1 is still a hole
    body = json.loads(capsys.readouterr().out)
    assert points(body)["ours/seed0"] == ("complete", "ok", "ok", "ok", "n/a", "ok")
    assert points(body)["ours/seed1"] == ("complete", "ok", "ok", "ok", "n/a", "ok")
    assert body["pull_list"] == []


async def test_the_teardown_plan_names_the_points_whose_checkpoint_is_only_on_the_box(grid_project: Path) -> None:
    await launch_ours(grid_project)
    session = open_session(str(grid_project))
    try:
        plan = await teardown.plan(session, "box")
    finally:
        await session.close_transports()
        session.close()
    grid_lines = [line for line in plan.lines if line.startswith("Grid:")]
    assert grid_lines == [
        "Grid:      method=ours seed=0 (ours/seed0): checkpoint only on this box, 2.5 KiB: pull it before teardown "
        "(rgt completeness lists the pull list)",
        "Grid:      method=ours seed=1 (ours/seed1): checkpoint only on this box, 2.5 KiB: pull it before teardown "
        "(rgt completeness lists the pull list)"]
    (grid_project / "rgt.toml").write_text(rgt_toml(grid_project.parent / "stage", grid=""), encoding="utf-8")
    session = open_session(str(grid_project))
    try:
        without = await teardown.plan(session, "box")
    finally:
        await session.close_transports()
        session.close()
    assert not any(line.startswith("Grid:") for line in without.lines)
    assert (plan.gate_open, plan.reasons, plan.warnings) == (without.gate_open, without.reasons, without.warnings)
    assert plan.gate_open is False and plan.reasons


def test_no_grid_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "rgt.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    assert main(["completeness", str(root)]) == 2
    assert "no [grid]" in capsys.readouterr().err
    assert not (root / "completeness.json").exists()


async def test_the_teardown_modal_names_a_seed_the_grid_expects_that_is_only_on_the_box(tmp_path: Path) -> None:
    """Run r1's roster (seed0, seed1) is pulled and verified, so the gate is open; the grid also expects seed2,
    which a later job left on the box only. The modal says so; the gate stays open (it judges the roster)."""
    from textual.widgets import Static

    from remote_gpu_trainer.app import RgtApp
    from remote_gpu_trainer.screens.teardown import TeardownScreen
    from support.gate_helpers import box_root, project_text, verified_project
    from support.tui_helpers import gate_open, wait_until

    grid = '\n[grid]\ndims = { seed = [0, 1, 2] }\ncapsule = "r1/seed{seed}"\ntest_id = "main"\n'
    root = await verified_project(tmp_path / "p", project_text(extra=grid))
    late = box_root(root) / "seed2"
    late.mkdir()
    shutil.copyfile(CKPT, late / "best.pth")
    session = open_session(str(root))
    app = RgtApp(session)
    try:
        async with app.run_test(size=(140, 48)) as pilot:
            await wait_until(pilot, lambda: gate_open(app))
            await pilot.press("t")
            await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
            modal = app.screen
            assert isinstance(modal, TeardownScreen) and modal.plan.gate_open
            shown = str(modal.query_one("#teardown-lines", Static).render())
            assert ("Grid:      seed=2 (r1/seed2): checkpoint only on this box, 2.5 KiB: pull it before teardown "
                    "(rgt completeness lists the pull list)") in shown
            assert "seed=0" not in shown and "seed=1 " not in shown  # pulled and sealed: nothing to say
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, TeardownScreen))
    finally:
        await session.close_transports()
        session.close()
