"""The box is the ledger (docs/gate.md §7.2): what rgt remembers is never the only evidence of what a box holds.

Each test tries to get `rgt down` to destroy results that are not home, as a careless user or a damaged
project would: the run's table removed and the state database lost in every way a user loses one, a box whose
ledger is garbage, a never-launched run on a box that cannot be asked, another project's run on the same box.
In each the console script exits 3 and the box keeps its files; with `--accept-loss` naming exactly the runs
at risk it proceeds, and the waiver with the reasons shown is in the event log before the provider call.
Real parts only: sim boxes running real detached jobs, the real `rgt` console script, real SQLite.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from remote_gpu_trainer.services.opening import open_session
from support.gate_helpers import (
    SIM_ID,
    approvals,
    box_root,
    held_command,
    launch_finished,
    launch_held,
    project_text,
    pull_and_verify,
    refused_reasons,
    release_and_finish,
    rgt,
    sim_disk,
    write_text_project,
)
from support.helpers import RUN

LEDGER = Path("root") / ".rgt-ledger"  # in the sim box's disk: its login's home is /root


def ledger_dir(root: Path) -> Path:
    return sim_disk(root) / LEDGER


def project_id(root: Path) -> str:
    return (root / ".rgt" / "project-id").read_text().strip()


def entry_of(root: Path, run_id: str = RUN) -> dict[str, object]:
    data: dict[str, object] = json.loads((ledger_dir(root) / project_id(root) / f"{run_id}.json").read_bytes())
    return data


def remove_run_table(root: Path, run_id: str) -> None:
    """Delete `[runs.<id>]` and its lines from rgt.toml, as a user tidying the file would."""
    path = root / "rgt.toml"
    kept: list[str] = []
    skipping = False
    for line in path.read_text().splitlines():
        if line.startswith("["):
            skipping = line.strip() == f"[runs.{run_id}]"
        if not skipping:
            kept.append(line)
    path.write_text("\n".join(kept) + "\n")


def down(root: Path, run_id: str, *extra: str) -> tuple[int, str]:
    result = rgt("down", run_id, str(root), "--confirm", SIM_ID, *extra, cwd=root)
    return result.returncode, result.stdout + result.stderr


async def two_runs_one_launched(root: Path) -> None:
    """r1 launched and finished on the sim box, never pulled; r2 on the same box, never launched."""
    write_text_project(root, project_text(second_run=True))
    await launch_finished(root, RUN)


# -- what a launch leaves on the box ------------------------------------------------------------------------

async def test_a_launch_writes_its_bindings_into_the_box_ledger_and_a_copy_beside_its_control_files(
        tmp_path: Path) -> None:
    root = tmp_path / "proj"
    await two_runs_one_launched(root)
    entry = entry_of(root)
    assert entry["schema"] == "rgt-ledger/v1" and entry["run_id"] == RUN and entry["project_id"] == project_id(root)
    assert entry["project_root"] == str(root) and entry["cells"] == ["seed0", "seed1"]
    assert entry["result_root"] == str(box_root(root))  # the path as processes on the box see it
    assert Path(str(entry["control_folder"])).name == RUN and "cp " in str(entry["command"])
    config = entry["config"]
    assert isinstance(config, dict) and config["remote_root"] == "/workspace/rgt/r1"
    copy = Path(str(entry["control_folder"])) / "ledger.json"
    assert json.loads(copy.read_bytes()) == entry
    session = open_session(str(root))
    try:
        assert session.db.launch_history(RUN)[-1].detail["launch_id"] == entry["launch_id"]
    finally:
        session.close()


async def test_a_box_that_cannot_take_its_ledger_entry_gets_no_job(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    assert rgt("up", RUN, str(root), cwd=root).returncode == 0
    blocker = sim_disk(root) / LEDGER
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder\n")  # mkdir -p of the ledger's folder fails on the box
    result = rgt("run", RUN, str(root), cwd=root)
    assert result.returncode != 0, result.stdout
    assert "the box's ledger could not be written" in result.stderr and "not launched" in result.stderr
    assert not (sim_disk(root) / "workspace" / "job-r1" / "train.log").exists()  # no job ever started
    assert not box_root(root).exists() or not any(box_root(root).iterdir())  # no cell wrote anything


# -- the state database is not the only memory (hole 4) ------------------------------------------------------

def _lose_database(root: Path, how: str) -> None:
    state = root / ".rgt"
    files = [state / name for name in ("state.db", "state.db-wal", "state.db-shm")]
    if how == "moved aside":
        for path in files:
            if path.exists():
                path.rename(path.with_name(path.name + ".bak"))
    elif how == "deleted":
        for path in files:
            path.unlink(missing_ok=True)
    elif how == "replaced by a fresh one":
        for path in files:
            path.unlink(missing_ok=True)
        assert rgt("--report", str(root), cwd=root).returncode in (0, 1)  # opens, so creates, a new database
        assert (state / "state.db").exists()
    elif how == "truncated":
        path = state / "state.db"
        for extra in files[1:]:
            extra.unlink(missing_ok=True)
        os.truncate(path, path.stat().st_size // 3)
        code, out = down(root, "r2")
        assert code == 2 and "state.db" in out, out  # damaged: one line naming it, nothing torn down
        assert sim_disk(root).is_dir()
        _lose_database(root, "moved aside")  # what the message tells the user to do
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["moved aside", "deleted", "truncated", "replaced by a fresh one"])
async def test_a_lost_state_database_leaves_the_box_ledger_keeping_an_unpulled_run_safe(
        tmp_path: Path, how: str) -> None:
    root = tmp_path / "proj"
    await two_runs_one_launched(root)
    remove_run_table(root, RUN)  # the run is in no rgt.toml any more: only the database and the box know it
    code, out = down(root, "r2")
    assert code == 3, out  # while the database lives, its launch log covers r1
    _lose_database(root, how)
    code, out = down(root, "r2")
    assert code == 3, out
    assert (box_root(root) / "seed0" / "best.pth").is_file(), "the box lost the unpulled results"
    reasons = refused_reasons(root)
    assert any(reason.startswith(f"{RUN} (no longer in rgt.toml)") for reason in reasons), reasons
    assert f"--accept-loss {RUN}" in out, out  # the way out is named, never taken for the user


async def test_accepting_the_loss_by_name_proceeds_and_the_waiver_is_logged_before_the_call(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    await two_runs_one_launched(root)
    remove_run_table(root, RUN)
    _lose_database(root, "deleted")
    code, out = down(root, "r2", "--accept-loss", "r2")  # a name that is not at risk waives nothing
    assert code == 3 and "not at risk on this box" in out, out
    assert sim_disk(root).is_dir()
    code, out = down(root, "r2", "--accept-loss", RUN)
    assert code == 0, out
    assert not sim_disk(root).exists()
    approval = approvals(root)[-1]
    waived = approval["accepted_loss"]
    assert isinstance(waived, dict) and list(waived) == [RUN] and waived[RUN], approval
    session = open_session(str(root))
    try:
        kinds = [event.kind for event in session.db.events()]
    finally:
        session.close()
    assert kinds.index("approval") < kinds.index("action"), kinds  # the waiver is written before the call


async def test_a_run_verified_home_needs_no_waiver_after_the_database_was_lost_and_rebuilt(tmp_path: Path) -> None:
    """The ledger closes nothing that is home: after a lost database, pull and verify again and the gate opens."""
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    await launch_finished(root, RUN)
    await pull_and_verify(root)
    _lose_database(root, "deleted")
    code, out = down(root, RUN)
    assert code == 3, out  # the marker's verification record went with the database
    shutil.rmtree(root / "runs" / RUN)
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    code, out = down(root, RUN)
    assert code == 0, out


# -- unknown is never empty (hole 1) ------------------------------------------------------------------------

@pytest.mark.parametrize("garbage", [b"{not json", b"{}", b'{"schema": "rgt-ledger/v1"}'])
async def test_an_unreadable_ledger_keeps_the_gate_closed_for_every_run_that_may_be_there(
        tmp_path: Path, garbage: bytes) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(second_run=True))
    await launch_finished(root, RUN)
    await pull_and_verify(root)  # r1 is home; r2 was never launched by this rgt
    entry = ledger_dir(root) / project_id(root) / f"{RUN}.json"
    entry.write_bytes(garbage)
    code, out = down(root, RUN)
    assert code == 3, out
    assert sim_disk(root).is_dir()
    reasons = refused_reasons(root)
    assert any(reason.startswith("r2") and "ledger could not be read" in reason for reason in reasons), reasons
    assert not any(reason.startswith(f"{RUN}:") for reason in reasons), reasons  # r1 is home: nothing against it
    code, out = down(root, RUN, "--accept-loss", "r2")
    assert code == 0, out
    assert approvals(root)[-1]["accepted_loss"] == {"r2": [r for r in reasons if r.startswith("r2")]}


# -- rgt adopt: the ledger back into the launch log ---------------------------------------------------------

async def test_adopt_rebuilds_the_launch_record_so_the_run_can_be_pulled_verified_and_torn_down(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    await launch_finished(root, RUN)
    _lose_database(root, "deleted")
    code, out = down(root, RUN)
    assert code == 3, out
    adopted = rgt("adopt", "box", str(root), cwd=root)
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.startswith(f"adopted  {RUN}: launched "), adopted.stdout
    again = rgt("adopt", "box", str(root), "--format", "json", cwd=root)
    body = json.loads(again.stdout)
    assert body["adopted"] == [] and [e["run_id"] for e in body["known"]] == [RUN], body
    session = open_session(str(root))
    try:
        (record,) = session.db.launch_history(RUN)
        assert record.detail["launch_id"] == entry_of(root)["launch_id"] and record.detail["method"] == "adopted"
        assert [event.kind for event in session.db.events()].count("adopted") == 1
    finally:
        session.close()
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    code, out = down(root, RUN)
    assert code == 0, out
    assert not sim_disk(root).exists()


async def test_adopt_of_a_box_whose_ledger_cannot_be_read_says_so_and_records_nothing(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    await launch_finished(root, RUN)
    (ledger_dir(root) / project_id(root) / f"{RUN}.json").write_bytes(b"[]")
    result = rgt("adopt", "box", str(root), cwd=root)
    assert result.returncode != 0 and "not a rgt-ledger/v1 entry" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    session = open_session(str(root))
    try:
        assert len(session.db.launch_history(RUN)) == 1 and session.db.events(kind="adopted") == []
    finally:
        session.close()


# -- found by the gate model (tests/services/test_gate_actions.py's author, by hand) -------------------------

async def test_a_database_lost_while_the_job_runs_does_not_make_it_read_as_never_launched(tmp_path: Path) -> None:
    """The box's control folder records the launch: the job still reads running, pull takes nothing
    half-written, and `rgt down` exits 3 until the job ended and its results are home."""
    root = tmp_path / "proj"
    release = tmp_path / "release"
    write_text_project(root, project_text(command=held_command(release)))
    await launch_held(root)
    _lose_database(root, "deleted")
    pulled = rgt("pull", RUN, str(root), cwd=root)
    assert pulled.returncode != 0 and "still running" in pulled.stderr, (pulled.stdout, pulled.stderr)
    assert not (root / "runs" / RUN).exists() or not any((root / "runs" / RUN).rglob("*.pth"))
    code, out = down(root, RUN)
    assert code == 3, out
    assert (box_root(root) / "seed0" / "best.pth").is_file()
    await release_and_finish(root, release)
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert (root / "runs" / RUN / "seed1" / "best.pth").is_file()  # the cell that was still running came home
    code, out = down(root, RUN)
    assert code == 0, out


async def test_an_unpulled_launch_keeps_its_id_when_remote_root_is_edited(tmp_path: Path) -> None:
    """`rgt run` again under an edited remote_root would leave the first launch's results where no record
    points any more: the id is refused while any root it used holds results."""
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    await launch_finished(root, RUN)
    config = root / "rgt.toml"
    config.write_text(config.read_text().replace('remote_root = "/workspace/rgt/r1"',
                                                 'remote_root = "/workspace/rgt/b"'))
    again = rgt("run", RUN, str(root), cwd=root)
    assert again.returncode != 0 and "results in /workspace/rgt/r1" in again.stderr, (again.stdout, again.stderr)
    code, out = down(root, RUN)
    assert code == 3, out
    assert (box_root(root) / "seed0" / "best.pth").is_file()
