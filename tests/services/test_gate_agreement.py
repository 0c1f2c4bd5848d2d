"""One gate, four faces (docs/gate.md §7.2): `--report`, the dashboard, the teardown modal and `rgt down` agree.

Where they say closed, typing exactly the names the report lists at risk (`--accept-loss`) lets `rgt down` proceed,
and the approval records those names.

Hole 1 of issue 24 was a disagreement: `rgt --report` showed the gate CLOSED while `rgt down` sent the destroying
call. Each case below is a box state a user reaches (a verified run, an unpulled one, an unpulled sibling, a lost
state database with the run's table removed, an unreadable ledger, another project's run on the box). For each,
the report's instance gate (the installed console script), the dashboard's teardown control (the Overview the
dashboard renders, built as the dashboard builds it), the modal's confirm (the plan it is given) and the exit
status of `rgt down` must all say the same thing. Real sim boxes, real jobs, real SQLite.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from remote_gpu_trainer.screens.dashboard import OVERVIEW_WAIT_S
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from support.gate_helpers import (
    SIM_ID,
    approvals,
    held_command,
    launch_finished,
    launch_held,
    project_text,
    pull_and_verify,
    rgt,
    write_text_project,
)
from support.helpers import INSTANCE, RUN

LEDGER = Path(".rgt") / "sim" / INSTANCE / "root" / ".rgt-ledger"


def _entry(root: Path, run_id: str = RUN) -> Path:
    project_id = (root / ".rgt" / "project-id").read_text().strip()
    return root / LEDGER / project_id / f"{run_id}.json"


async def verified(root: Path) -> None:
    write_text_project(root, project_text())
    await launch_finished(root)
    await pull_and_verify(root)


async def unpulled(root: Path) -> None:
    write_text_project(root, project_text())
    await launch_finished(root)


async def unpulled_sibling(root: Path) -> None:
    write_text_project(root, project_text(second_run=True))
    await launch_finished(root, "r2")
    await launch_finished(root, RUN, create=False)
    await pull_and_verify(root)  # r1 is home; r2 is only on the box


async def lost_database(root: Path) -> None:
    """r2 launched and never pulled, its table then removed and the state database deleted; r1 verified."""
    await unpulled_sibling(root)
    text = (root / "rgt.toml").read_text()
    (root / "rgt.toml").write_text(text[:text.index("\n[runs.r2]")] + "\n")
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (root / ".rgt" / name).unlink(missing_ok=True)


async def unreadable_ledger(root: Path) -> None:
    """r1 verified; r2 on the same box never launched by this rgt; the box's ledger is garbage: whether another
    copy of rgt launched r2 there is unknown."""
    write_text_project(root, project_text(second_run=True))
    await launch_finished(root)
    await pull_and_verify(root)
    _entry(root).write_bytes(b"\x00garbage")


async def unreadable_ledger_all_home(root: Path) -> None:
    """Every run the project has on the box is verified home: a garbage ledger is a warning, not a loss."""
    await verified(root)
    _entry(root).write_bytes(b"\x00garbage")


async def another_projects_run(root: Path) -> None:
    """The box's ledger also holds a run of another project (a shared box): this project cannot vouch for it."""
    await verified(root)
    entry = json.loads(_entry(root).read_bytes())
    other = "f" * 32
    entry.update(project_id=other, project_root="/elsewhere/other-project")
    folder = root / LEDGER / other
    folder.mkdir()
    (folder / f"{RUN}.json").write_text(json.dumps(entry))


async def symlinked_root(root: Path) -> None:
    """runs/r1 replaced by a link to a copy of itself (hole 5): the evidence is not a local copy rgt keeps."""
    await verified(root)
    local = root / "runs" / RUN
    copy = root.parent / "elsewhere"
    shutil.copytree(local, copy, symlinks=True)
    shutil.rmtree(local)
    local.symlink_to(copy, target_is_directory=True)


async def workdir_edited_while_running(root: Path) -> None:
    """r1 is running (seed1 held until `release` exists) and rgt.toml's workdir was edited (hole 2)."""
    write_text_project(root, project_text(command=held_command(root.parent / "release")))
    await launch_held(root)
    config = root / "rgt.toml"
    config.write_text(config.read_text().replace('workdir = "/workspace/job-r1"', 'workdir = "/workspace/moved"'))


CASES: dict[str, tuple[Callable[[Path], Awaitable[None]], bool]] = {
    "verified": (verified, True),
    "unpulled": (unpulled, False),
    "unpulled sibling": (unpulled_sibling, False),
    "lost database, table removed": (lost_database, False),
    "unreadable ledger": (unreadable_ledger, False),
    "unreadable ledger, every run home": (unreadable_ledger_all_home, True),
    "another project's run": (another_projects_run, False),
    "runs/<id> a symlink": (symlinked_root, False),
    "workdir edited while the job runs": (workdir_edited_while_running, False),
}


async def faces(root: Path) -> dict[str, bool]:
    """What the dashboard, the modal and the report say; `rgt down` is asked last (it may destroy the box)."""
    session = open_session(str(root))
    try:
        overview = await observe_and_build(session, wait_s=OVERVIEW_WAIT_S)
        run = overview.run(RUN)
        assert run is not None
        dashboard = run.teardown.enabled
        plan = await teardown.plan(session, INSTANCE)
        modal = plan.enabled  # what TeardownScreen's confirm and Enter read (screens/teardown.py)
    finally:
        await session.close_transports()
        session.close()
    report = rgt("--report", str(root), "--format", "json", cwd=root)
    (box,) = json.loads(report.stdout)["instances"]
    assert sorted(box["gate"]["at_risk"]) == sorted(plan.loss_names)  # one list of names, wherever it is read
    return {"report": box["gate"]["open"], "dashboard": dashboard, "modal": modal}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_report_the_dashboard_the_modal_and_rgt_down_agree(tmp_path: Path, case: str) -> None:
    make, expected = CASES[case]
    root = tmp_path / "proj"
    try:
        await make(root)
        seen = await faces(root)
        down = rgt("down", RUN, str(root), "--confirm", SIM_ID, cwd=root)
        seen["rgt down"] = down.returncode == 0
        assert down.returncode in (0, 3), (down.stdout, down.stderr)
        assert seen == dict.fromkeys(seen, expected), (seen, down.stderr)
        if not expected:  # the person may still give up exactly what the report names at risk
            report = json.loads(rgt("--report", str(root), "--format", "json", cwd=root).stdout)
            names = report["instances"][0]["gate"]["at_risk"]
            waived = rgt("down", RUN, str(root), "--confirm", SIM_ID, "--accept-loss", ",".join(names), cwd=root)
            assert waived.returncode == 0, (names, waived.stdout, waived.stderr)
            assert not (root / ".rgt" / "sim" / INSTANCE).exists()
            assert sorted(approvals(root)[-1]["accepted_loss"]) == sorted(names)  # type: ignore[arg-type]
    finally:
        (tmp_path / "release").touch()  # a held job ends
