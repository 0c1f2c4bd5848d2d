"""Launch-time bindings (issue 24, hole 2; docs/gate.md §7, "Launch-time bindings"), end to end on a real sim
project: a real detached job, the real state database, the installed `rgt` console script.

Where a run's files and processes are (workdir, log, remote_root, roster, command, ...) is what its launch
used. Editing one of them in rgt.toml while the job runs must not make rgt look elsewhere: the running job
still reads running, its log is still the launched one, pull takes nothing half-written, and `rgt down` exits 3
with the box's files kept; once the job ends, pull and verify take the launched run's files and the gate opens.
After verification, an edit of an evidence key (remote_root, roster) closes the gate until `rgt verify`
(binding 4), which verifies the launched files; workdir, log and command edits only show as drift.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.gate import CONFIG_CHANGED
from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.monitors import tail_log
from support.gate_helpers import (
    assert_torn_down,
    box_root,
    copy_project,
    down,
    held_command,
    launch_held,
    local_root,
    project_text,
    refused_reasons,
    release_and_finish,
    replace_in,
    rgt,
    seed_verdicts,
    sim_disk,
    verified_project,
    write_text_project,
)
from support.helpers import RUN

DRIFT_TEXT = "rgt.toml changed since the launch (applies to the next launch)"

# key -> (text in rgt.toml, its edit, the launched value, the value rgt.toml now states), for run r1 of
# support/gate_helpers.project_text
EDITS: dict[str, tuple[str, str, object, object]] = {
    "workdir": ('workdir = "/workspace/job-r1"', 'workdir = "/workspace/job-r1-moved"',
                "/workspace/job-r1", "/workspace/job-r1-moved"),
    "log": ('log = "train.log"', 'log = "moved.log"', "train.log", "moved.log"),
    "remote_root": ('remote_root = "/workspace/rgt/r1"', 'remote_root = "/workspace/rgt/r1-moved"',
                    "/workspace/rgt/r1", "/workspace/rgt/r1-moved"),
    "roster": ('roster = ["seed0", "seed1"]', 'roster = ["seed0"]', ["seed0", "seed1"], ["seed0"]),
    "command": ("step=10/10", "step=20/20", None, None),  # the values are the whole command strings
}
EVIDENCE_KEYS = ("remote_root", "roster")  # docs/gate.md §7 binding 4: their edit closes the gate until verify


def edit(root: Path, key: str) -> dict[str, object]:
    """Apply the edit of `key` to rgt.toml; returns the drift entry the report must show for it."""
    config = root / "rgt.toml"
    old, new, launched, now = EDITS[key]
    before = config.read_text(encoding="utf-8")
    replace_in(config, old, new)
    if key == "command":  # the command as rgt.toml states it, before and after (TOML strings, read back)
        import tomllib

        launched = tomllib.loads(before)["runs"][RUN]["command"]
        now = tomllib.loads(config.read_text(encoding="utf-8"))["runs"][RUN]["command"]
    return {"key": key, "launched": launched, "now": now}


def report_run(root: Path) -> dict[str, object]:
    """Run r1's entry of `rgt --report --format json`."""
    result = rgt("--report", str(root), "--format", "json", cwd=root)
    assert result.returncode == 0, result.stderr
    runs = [run for run in json.loads(result.stdout)["runs"] if run["id"] == RUN]
    assert len(runs) == 1, runs
    return runs[0]


def local_files(root: Path) -> list[Path]:
    folder = local_root(root)
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


async def seen_running(root: Path) -> tuple[str, bytes]:
    """Liveness and the log, as a fresh session (rgt.toml read anew) sees them."""
    session = open_session(str(root))
    try:
        state = await run_state(session, RUN)
        log, _ = await tail_log(session, RUN, 0)
        return state.liveness.state, log
    finally:
        await session.close_transports()
        session.close()


@pytest.mark.parametrize("key", sorted(EDITS))
async def test_a_location_key_edited_while_the_job_runs_stays_bound_to_the_launch(tmp_path: Path, key: str) -> None:
    root = tmp_path / "proj"
    release = tmp_path / "release"
    write_text_project(root, project_text(command=held_command(release)))
    seed_verdicts(root)
    await launch_held(root)
    drift = edit(root, key)

    state, log = await seen_running(root)
    assert state == "running"  # the launched control folder, not the one the new workdir would name
    assert b"step=10/10" in log  # the launched job's log, not the new log path
    pulled = rgt("pull", RUN, str(root), cwd=root)
    assert pulled.returncode != 0 and "still running" in pulled.stderr, (pulled.stdout, pulled.stderr)
    assert local_files(root) == []  # nothing half-written was taken as the run's results
    assert report_run(root)["location_drift"] == [drift]
    note = (root / ".rgt" / "recovery" / f"{RUN}.md").read_text(encoding="utf-8")  # rewritten by the report
    if isinstance(drift["now"], str):  # what a user pastes to pick the job up names the launched places
        assert drift["now"] not in note and drift["launched"] in note, note
    refused = down(root)
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert (box_root(root) / "seed0" / "best.pth").is_file(), "a refused teardown lost the box's files"

    await release_and_finish(root, release)
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    verified = rgt("verify", RUN, str(root), cwd=root)
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    # the launched run's results, every cell it ran: seed1 too, whatever rgt.toml's roster says now
    assert {p.relative_to(local_root(root)).as_posix() for p in local_files(root)} >= {
        "seed0/best.pth", "seed1/best.pth", "seed1/best_metrics.json"}
    assert_torn_down(root)


@pytest.fixture(scope="module")
def verified_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(verified_project(tmp_path_factory.mktemp("template") / "proj"))


@pytest.mark.parametrize("key", sorted(EDITS))
def test_a_location_key_edited_after_verification(verified_template: Path, tmp_path: Path, key: str) -> None:
    """An evidence key closes the gate until verify, which verifies the launched files; the others show as
    drift in the report and neither open nor close anything."""
    root = copy_project(verified_template, tmp_path / "proj")
    marker = (local_root(root) / MARKER_NAME).read_bytes()
    drift = edit(root, key)
    report = rgt("--report", str(root), cwd=root)
    assert report.returncode == 0, report.stderr
    assert f"{DRIFT_TEXT}: {key} " in report.stdout, report.stdout
    if key in EVIDENCE_KEYS:
        refused = down(root)
        assert refused.returncode == 3, (refused.stdout, refused.stderr)
        assert CONFIG_CHANGED in refused_reasons(root)
        assert sim_disk(root).is_dir()
        verified = rgt("verify", RUN, str(root), cwd=root)
        assert verified.returncode == 0, (verified.stdout, verified.stderr)
        checked = {item["path"] for item in json.loads((local_root(root) / MARKER_NAME).read_bytes())["checkpoints"]}
        assert checked == {"seed0/best.pth", "seed1/best.pth"}  # the launched roster's cells, both
        assert (local_root(root) / MARKER_NAME).read_bytes() != marker
    assert report_run(root)["location_drift"] == [drift]
    assert_torn_down(root)
