"""Results first in every `rgt --report` format (docs/deliver.md §8), through the real CLI on a real sim project
with real capsules on disk, and the run's cost from the real meter records in a real state database.

The three-seed run of tests/support/results.py has exact binary values (mean 0.75, std 0.25), so each format's
lines are compared whole.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.liveness import Liveness
from remote_gpu_trainer.cli.main import main
from remote_gpu_trainer.report import render
from remote_gpu_trainer.services.deliver.claim_views import claim_views
from remote_gpu_trainer.services.deliver.results import results_view
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import Observation
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import RunState
from remote_gpu_trainer.state.billing import Snapshot
from remote_gpu_trainer.text import duration
from remote_gpu_trainer.views import NO_AUDIT, Overview
from support.capsules import write_evidence
from support.helpers import FixedClock, write_project
from support.results import WALL_S, three_seeds

NEVER = "never launched from this project: no cost recorded"
ACC_LINE = "    main acc ↑  0.75 ± 0.25  (test, n=4, 3 seeds)  best 0.75 · last 0.625 (val/acc)"
ERR_LINE = "    main err ↓  0.25 ± 0.25  (test, n=4, 3 seeds)  best 1 · last 1.5 (loss)"
TRACKER = "https://wandb.ai/lab/ours/runs/7h3k9q2x"
CLAIM = {"id": "C1-acc", "statement": "Seeds agree on acc.", "state": "pull_verified", "disclosure": "3 seeds, no CI",
         "findings": ["F-000007"],
         "evidence": [{"exp_id": "r1", "test_id": "main", "metric": "acc",
                       "cells": ["r1/seed0", "r1/seed1", "r1/seed2"], "precision": 2, "value": 0.75,
                       "direction": "higher_is_better", "split": "test", "n": 4, "seeds": 3,
                       "variance": {"type": "std_over_seeds", "value": 0.25},
                       "disclosures": {**dict.fromkeys(("D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8")),
                                       "D3": "3 seeds, no CI"}}]}


def second_run(root: Path, run_id: str = "r2") -> None:
    text = (root / "rgt.toml").read_text(encoding="utf-8")
    body = text[text.index("[runs.r1]"):].replace("[runs.r1]", f"[runs.{run_id}]").replace("/r1", f"/{run_id}")
    (root / "rgt.toml").write_text(text + "\n" + body, encoding="utf-8")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """r1 has three seeds of capsules and a tracker link; r2 is declared and has nothing yet."""
    root = tmp_path / "proj"
    write_project(root)
    second_run(root)
    three_seeds(root, tracker=TRACKER)
    return root


def report(root: Path, fmt: str) -> str:
    target = root.parent / f"report.{fmt}"
    assert main(["--report", str(root), "--format", fmt, "--output", str(target), "--force"]) == 0
    return target.read_text(encoding="utf-8")


def test_the_text_report_opens_with_each_runs_results_then_the_evidence(project: Path) -> None:
    write_evidence(project, [CLAIM])
    text = report(project, "text")
    lines = text.splitlines()
    start = lines.index("RESULTS")
    assert lines[:start] == [lines[0], lines[1], ""] and lines[1].startswith("meter: ")
    wall = f"wall {duration(WALL_S)} (run.json created_at to closed_at)"
    (number,) = claim_views(project)[0][0].numbers  # the Deliver panel's inline form, the same in both faces
    assert lines[start:start + 17] == [
        "RESULTS",
        f"  run r1: {wall} · cost — ({NEVER})",
        ACC_LINE,
        ERR_LINE,
        f"    tracker: {TRACKER}",
        f"  run r2: wall — · cost — ({NEVER})",
        "    no results yet",
        "",
        "EVIDENCE",
        "  C1-acc [pull_verified] Seeds agree on acc.",
        f"    {number}",
        "      D1–D8: D3 3 seeds, no CI",  # every number with its per-number gate (docs/deliver.md §5)
        "    disclosure: 3 seeds, no CI",
        "    findings: F-000007",
        "",
        "INSTANCES",
        lines[start + 16],
    ]
    assert text.index("INSTANCES") < text.index("RUN r1 on box") < text.index("checklist:") < text.index("VERIFY ·")


def test_the_markdown_report_opens_with_the_results_section(project: Path) -> None:
    markdown = report(project, "markdown")
    lines = markdown.splitlines()
    assert [line for line in lines if line.startswith("## ")][:3] == ["## Results", "## Evidence", "## Instances"]
    start = lines.index("## Results")
    assert lines[start:start + 21] == [
        "## Results", "",
        "### Run r1", "",
        f"wall {duration(WALL_S)} (run.json created_at to closed_at) · cost — ({NEVER}).", "",
        f"Tracker: {TRACKER}", "",
        "| test | metric | | mean ± std | split, n, seeds | best · last (curve) | note |",
        "|---|---|:-:|---:|---|---|---|",
        "| main | acc | ↑ | 0.75 ± 0.25 | test, n=4, 3 seeds | best 0.75 · last 0.625 (val/acc) |  |",
        "| main | err | ↓ | 0.25 ± 0.25 | test, n=4, 3 seeds | best 1 · last 1.5 (loss) |  |", "",
        "### Run r2", "",
        f"wall — · cost — ({NEVER}).", "",
        "No results yet.", "",
        "## Evidence", "",
    ]
    assert lines[start + 21] == "no EVIDENCE.json: no claims written yet."


def test_the_json_report_has_results_first_at_full_precision(project: Path) -> None:
    write_evidence(project, [CLAIM])
    document = json.loads(report(project, "json"))
    assert list(document)[:5] == ["schema", "generated_at", "project", "results", "meter"]
    r1, r2 = document["results"]["runs"]
    assert r1["metrics"][0] == {
        "test_id": "main", "split": "test", "metric": "acc", "direction": "higher_is_better", "arrow": "↑",
        "unit": None, "mean": 0.75, "std": 0.25, "seeds": 3, "n": 4, "cells": ["r1/seed0", "r1/seed1", "r1/seed2"],
        "curve": "val/acc", "best": 0.75, "last": 0.625, "note": "", "source": "capsule",
        "sources": [f"runs/r1/seed{i}/test/main/metrics.json" for i in range(3)]}
    assert [m["metric"] for m in r1["metrics"]] == ["acc", "err"]
    assert {k: r1[k] for k in ("id", "status", "cells", "started_at", "finished_at", "wall_s", "wall_source",
                               "trackers")} == {
        "id": "r1", "status": "results", "cells": 3, "started_at": "2026-06-20T10:00:00Z",
        "finished_at": "2026-06-22T12:30:00Z", "wall_s": WALL_S, "wall_source": "capsules", "trackers": [TRACKER]}
    assert r2 == {"id": "r2", "status": "no_results", "cells": 0, "metrics": [], "started_at": None,
                  "finished_at": None, "wall_s": None, "wall_source": None,
                  "cost": {"amount": None, "currency": "USD", "estimate": False, "shared_with": [], "note": NEVER},
                  "trackers": [], "left_out": []}
    (claim,) = document["results"]["claims"]
    assert claim == {"id": "C1-acc", "statement": "Seeds agree on acc.", "state": "pull_verified",
                     "numbers": list(claim_views(project)[0][0].numbers), "disclosure": "3 seeds, no CI",
                     "findings": ["F-000007"], "disclosures": [CLAIM["evidence"][0]["disclosures"]]}
    assert document["results"]["evidence_note"] == ""


def test_a_project_with_no_capsules_reports_no_results_yet_never_zeros(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_project(root)
    text = report(root, "text")
    assert f"  run r1: wall — · cost — ({NEVER})\n    no results yet\n" in text
    assert "0 ± 0" not in text and " ± " not in text
    (run,) = json.loads(report(root, "json"))["results"]["runs"]
    assert (run["status"], run["metrics"], run["wall_s"], run["cost"]["amount"]) == ("no_results", [], None, None)
    assert "### Run r1\n\nwall — · cost — (" in report(root, "markdown")


def test_text_from_the_box_is_escaped_in_every_format(project: Path) -> None:
    hostile = TRACKER + "\x1b[2J\x07"
    three_seeds(project, tracker=hostile)
    for fmt in ("text", "markdown", "json"):
        out = report(project, fmt)
        assert "\x1b" not in out and "\x07" not in out
        assert (TRACKER + "\\\\x1b[2J\\\\x07" if fmt == "json" else TRACKER + "\\x1b[2J\\x07") in out


# -- time and money from the project's records ----------------------------------------------------------------
T0 = datetime(2026, 11, 1, 8, tzinfo=UTC)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def finished(hours: float | None) -> RunState:
    if hours is None:
        return RunState(Liveness("running", "log fresh"), None)
    return RunState(Liveness("finished", "exit 0"), at(hours))


def metered(root: Path, launches: dict[str, float], states: dict[str, RunState], now: float) -> tuple[Session, Any]:
    """A session whose box ran at 2.00/h from T0 and was terminated at 4 h, with each run launched at its
    hour (recorded through the state database at the session's clock), looked at `now` hours after T0."""
    clock = FixedClock(T0)
    session = open_session(str(root), clock=clock)
    for hours, state in ((0.0, "running"), (4.0, "terminated")) if not session.db.snapshots("box") else ():
        session.db.add_snapshot(Snapshot(at(hours), "box", "sim", "sim-box", state, 2.0, "user", None))
    for run_id, hours in sorted(launches.items(), key=lambda item: item[1]):
        clock.now = at(hours)
        session.db.record_launch(run_id, "box", {"handle": "h"})
    clock.now = at(now)
    return session, Observation(clock.now, {}, states, {}, {})


def test_runs_sharing_a_box_split_the_overlap_and_the_wall_time_comes_from_the_launch(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_project(root)
    second_run(root)
    session, seen = metered(root, {"r1": 0.0, "r2": 1.0}, {"r1": finished(2.0), "r2": finished(3.0)}, now=5.0)
    try:
        view = results_view(session, seen)
    finally:
        session.close()
    r1, r2 = view.runs
    # 0-1 h r1 alone (2.00), 1-2 h both (1.00 each), 2-3 h r2 alone (2.00); 3-4 h billed to nobody
    assert (r1.cost, r1.shared_with, r1.wall_s, r1.wall_source) == (3.0, ("r2",), 7200.0, "launch")
    assert (r2.cost, r2.shared_with, r2.wall_s, r2.started_at) == (3.0, ("r1",), 7200.0, at(1.0))
    assert r1.cost_note == "instance shared with r2: overlapping time split equally" and not r1.cost_estimate
    overview = Overview("p", at(5.0), "USD", 8.0, 0.0, (), (), audit=NO_AUDIT, results=view)
    assert ("  run r1: wall 2h00m (launch to finish) · cost $3.00 (instance shared with r2: overlapping time split "
            "equally)\n    no results yet\n") in render(overview, "text")


def test_a_running_run_costs_so_far_and_a_finish_read_from_the_capsules_ends_its_window(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_project(root)
    session, seen = metered(root, {"r1": 1.0}, {"r1": finished(None)}, now=3.5)
    try:
        (run,) = results_view(session, seen).runs
    finally:
        session.close()
    assert (run.cost, run.cost_note, run.wall_s, run.wall_source) == (5.0, "still running: cost so far", 9000.0,
                                                                      "running")
    # the box no longer answers (unknown, no exit stamp): the capsules' last closed_at ends the window
    three_seeds(root)
    for seed in range(3):
        path = root / "runs" / "r1" / f"seed{seed}" / "run.json"
        record = json.loads(path.read_text(encoding="utf-8"))
        record.update(created_at=at(1.0).isoformat(), closed_at=at(2.5 + seed / 4).isoformat())
        path.write_text(json.dumps(record), encoding="utf-8")
    session, seen = metered(root, {"r1": 1.0}, {"r1": RunState(Liveness("unknown", "gone"), None)}, now=6.0)
    try:
        (run,) = results_view(session, seen).runs
    finally:
        session.close()
    assert (run.cost, run.wall_s, run.wall_source, run.finished_at) == (4.0, 7200.0, "capsules", at(3.0))


def test_a_finish_stamped_just_before_the_launch_record_is_a_zero_wall_and_a_skewed_clock_claims_none(
        tmp_path: Path) -> None:
    """The launch record is written after the launch returns and the box stamps its exit in whole seconds: a run
    shorter than that reads as finishing up to a few seconds before its launch. That is a zero-length window,
    never a negative wall time; a finish an hour before the launch is two clocks disagreeing, and no wall time
    or cost is claimed for it."""
    root = tmp_path / "proj"
    write_project(root)
    quick = RunState(Liveness("finished", "exit 0"), at(1.0) - timedelta(seconds=1))
    session, seen = metered(root, {"r1": 1.0}, {"r1": quick}, now=3.0)
    try:
        (run,) = results_view(session, seen).runs
    finally:
        session.close()
    assert (run.wall_s, run.wall_source, run.finished_at, run.cost) == (0.0, "launch", at(1.0), 0.0)
    skewed = RunState(Liveness("finished", "exit 0"), at(0.0))
    session, seen = metered(tmp_path / "proj", {"r1": 1.0}, {"r1": skewed}, now=3.0)
    try:
        (run,) = results_view(session, seen).runs
    finally:
        session.close()
    assert (run.wall_s, run.wall_source, run.cost) == (None, None, None)
    assert run.cost_note == "finish stamp before the launch: not costed"
