"""Run ids are append-only: a run whose results exist is never launched again under its id; `--rerun` mints
a new id with a sibling result root, and the box's gate then covers both runs."""

from __future__ import annotations

import shutil
from pathlib import Path

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.state.db import StateDB
from support.helpers import RUN, write_project
from support.helpers import run_rgt as rgt


def launches(project: Path) -> list[str]:
    db = StateDB(project / ".rgt" / "state.db")
    try:
        return [record.run_id for record in db.launch_history()]
    finally:
        db.close()


def finished_run(project: Path) -> None:
    assert rgt("up", RUN, cwd=project).returncode == 0
    assert rgt("run", RUN, cwd=project).returncode == 0
    watched = rgt("watch", RUN, "--interval", "0.2", cwd=project)
    assert watched.returncode == 0, watched.stderr


def test_a_run_with_results_on_the_box_is_not_launched_again(project_dir: Path) -> None:
    finished_run(project_dir)
    again = rgt("run", RUN, cwd=project_dir)
    assert again.returncode == 1
    assert "append-only" in again.stderr and "results in /workspace/rgt/r1" in again.stderr
    assert f"rgt run {RUN} --rerun" in again.stderr
    assert launches(project_dir) == [RUN]


def test_a_pulled_run_is_not_launched_again_even_when_the_box_was_emptied(project_dir: Path) -> None:
    finished_run(project_dir)
    assert rgt("pull", RUN, cwd=project_dir).returncode == 0
    box_root = project_dir / ".rgt" / "sim" / "box" / "workspace" / "rgt" / RUN
    for path in sorted(box_root.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    again = rgt("run", RUN, cwd=project_dir)
    assert again.returncode == 1
    assert "a manifest recorded" in again.stderr and f"a local root runs/{RUN}/" in again.stderr
    assert launches(project_dir) == [RUN]


def test_rerun_mints_a_new_id_with_a_sibling_root_and_the_gate_covers_both(project_dir: Path) -> None:
    finished_run(project_dir)
    assert rgt("pull", RUN, cwd=project_dir).returncode == 0
    assert rgt("verify", RUN, cwd=project_dir).returncode == 0
    before = (project_dir / "rgt.toml").read_bytes()

    rerun = rgt("run", RUN, "--rerun", cwd=project_dir)
    assert rerun.returncode == 0, rerun.stderr
    assert "added [runs.r1-r2]" in rerun.stdout
    after = (project_dir / "rgt.toml").read_bytes()
    assert after.startswith(before.rstrip(b"\n")), "the user's text is kept byte for byte"
    project = load_project(project_dir / "rgt.toml")
    assert project.run("r1-r2").remote_root == "/workspace/rgt/r1-r2"
    assert project.run("r1-r2").roster == project.run(RUN).roster
    assert launches(project_dir) == [RUN, "r1-r2"]

    assert rgt("watch", "r1-r2", "--interval", "0.2", cwd=project_dir).returncode == 0
    refused = rgt("down", RUN, "--confirm", "sim-box", cwd=project_dir)
    assert refused.returncode == 3, refused.stderr
    assert "r1-r2: no PULL_VERIFIED.json" in refused.stderr, refused.stderr
    assert (project_dir / ".rgt" / "sim" / "box").is_dir()

    assert rgt("pull", "r1-r2", cwd=project_dir).returncode == 0
    assert rgt("verify", "r1-r2", cwd=project_dir).returncode == 0
    done = rgt("down", RUN, "--confirm", "sim-box", cwd=project_dir)
    assert done.returncode == 0, done.stderr
    assert not (project_dir / ".rgt" / "sim" / "box").exists()


def test_a_rerun_of_a_rerun_counts_on(tmp_path: Path) -> None:
    from remote_gpu_trainer.services.project_files import rerun_id

    write_project(tmp_path)
    project = load_project(tmp_path / "rgt.toml")
    assert rerun_id(project, "r1", set()) == "r1-r2"
    assert rerun_id(project, "r1", {"r1-r2"}) == "r1-r3"
    assert rerun_id(project, "r1-r3", set()) == "r1-r4"
    (tmp_path / "runs" / "r1-r2").mkdir(parents=True)
    assert rerun_id(project, "r1", set()) == "r1-r3"


def test_a_local_root_alone_refuses_the_id(project_dir: Path) -> None:
    """Evidence copied in from elsewhere (or left by an older state database) holds the id, with nothing
    recorded here and nothing on the box."""
    assert rgt("up", RUN, cwd=project_dir).returncode == 0
    (project_dir / "runs" / RUN / "seed0").mkdir(parents=True)
    (project_dir / "runs" / RUN / "seed0" / "best_metrics.json").write_text('{"val_loss": 0.5}', encoding="utf-8")
    again = rgt("run", RUN, cwd=project_dir)
    assert again.returncode == 1
    assert f"run {RUN} already has a local root runs/{RUN}/: run ids are append-only" in again.stderr
    assert launches(project_dir) == []


def test_a_recorded_manifest_alone_refuses_the_id(project_dir: Path) -> None:
    """The verified local copy deleted (it is read-only, its folder is not) and the box emptied: the manifest the
    state database recorded still holds the id."""
    finished_run(project_dir)
    assert rgt("pull", RUN, cwd=project_dir).returncode == 0
    assert rgt("verify", RUN, cwd=project_dir).returncode == 0
    shutil.rmtree(project_dir / "runs" / RUN)
    box_root = project_dir / ".rgt" / "sim" / "box" / "workspace" / "rgt" / RUN
    shutil.rmtree(box_root)
    box_root.mkdir()
    again = rgt("run", RUN, cwd=project_dir)
    assert again.returncode == 1
    assert f"run {RUN} already has a manifest recorded: run ids are append-only" in again.stderr
    assert launches(project_dir) == [RUN]
