"""Results first in `rgt --report` (docs/deliver.md §8): each run's numbers, wall time, cost and tracker link,
then the claims of EVIDENCE.json, gathered from the project's files, its launch records and its meter.

The numbers come from deliver/results.py (the capsules, read with json and csv only). This module adds what
only the project's state knows: when each run was launched and finished, and what its instance billed
meanwhile (services/meter.window_cost, the meter's own arithmetic clipped to the window). Runs that overlap on
one instance share each overlapping stretch equally (audits/meter.shared_pieces).

Built for the report only, never on the dashboard's refresh: reading every capsule each tick would cost the UI
for numbers it does not show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.meter import Interval, shared_pieces
from remote_gpu_trainer.clock import parse_iso
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.services.meter import window_cost
from remote_gpu_trainer.views import ResultsView, RunResultsView

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.catalogue.model import MetricRule
    from remote_gpu_trainer.deliver.results import CellResults
    from remote_gpu_trainer.services.overview import Observation
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import ClaimView, ResultRowView

EVIDENCE_NAME = "EVIDENCE.json"
RUNNING = ("running", "stalled")
# The launch record is written after the launch command returns and the box stamps its exit in whole seconds,
# so a run shorter than that latency can read as finishing a little before its launch. Within this slack the
# finish is the launch (a zero-length window); beyond it the two clocks disagree and no wall time is claimed.
LAUNCH_RECORD_SLACK_S = 5.0


@dataclass(frozen=True)
class RunWindow:
    """When a run ran: its launch (the launch record: instance and time) and its finish (the box's exit
    stamp, else the capsules' last `closed_at`); `wall` is what the report calls its wall time."""

    instance: str | None = None
    launched_at: datetime | None = None
    finished_at: datetime | None = None
    running: bool = False
    wall: tuple[datetime, datetime] | None = None
    wall_source: str | None = None


@dataclass
class RunCost:
    """A run's share of its instance's bill, summed over the pieces of its window."""

    total: float = 0.0
    currency: str = "USD"
    estimate: bool = False
    shared_with: set[str] = field(default_factory=set)
    note: str = ""
    costed: bool = True  # False: no figure, `note` says why


@dataclass(frozen=True)
class RunCapsules:
    """What one run's capsules say: its result rows, their cell count, their window and tracker links."""

    rows: tuple[ResultRowView, ...] = ()
    cells: int = 0
    window: tuple[datetime, datetime] | None = None
    trackers: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()


def results_view(session: Session, seen: Observation) -> ResultsView:
    """Every run of rgt.toml, and every run folder with capsules, with its results; then the claims."""
    root = session.project.root
    found = read_runs(root, session.project.audit.metrics) if (root / "runs").is_dir() else {}
    run_ids = sorted(set(session.project.runs) | set(found))
    windows = {run_id: run_window(session, run_id, found.get(run_id, RunCapsules()).window, seen)
               for run_id in run_ids}
    costs = run_costs(session, windows, seen.at)
    runs = tuple(_run_view(run_id, found.get(run_id, RunCapsules()), windows[run_id], costs.get(run_id))
                 for run_id in run_ids)
    claims, note = evidence_claims(root)
    return ResultsView(runs=runs, claims=claims, evidence_note=note)


def read_runs(root: Path, declared: Mapping[str, MetricRule]) -> dict[str, RunCapsules]:
    """Run id -> what its capsules under runs/ say (deliver/results.py, imported only when runs/ exists)."""
    from remote_gpu_trainer.deliver.results import (
        capsule_window,
        read_cells,
        result_rows,
        run_outcomes,
        tracker_urls,
    )

    cells = read_cells(root)
    by_run: dict[str, list[CellResults]] = {}
    for cell in cells:
        by_run.setdefault(cell.capsule.run_id, []).append(cell)
    rows = result_rows(cells, declared)
    found = {run_id: RunCapsules(rows.get(run_id, ()), len(group), capsule_window(group), tracker_urls(group))
             for run_id, group in by_run.items()}
    for run_dir in sorted((root / "runs").iterdir()):
        outcomes = run_outcomes(root, run_dir.name) if run_dir.is_dir() and not run_dir.is_symlink() else {}
        if outcomes:
            listed = tuple(f"{cell} {words}" for cell, words in sorted(outcomes.items()))
            found[run_dir.name] = replace(found.get(run_dir.name, RunCapsules()), left_out=listed)
    return found


def run_window(session: Session, run_id: str, capsules: tuple[datetime, datetime] | None,
               seen: Observation) -> RunWindow:
    launch = session.db.launch(run_id)
    launched = _stamp(launch.get("at")) if launch else None
    state = seen.run_states.get(run_id)
    running = state is not None and state.liveness.state in RUNNING
    finished = state.finished_at if state is not None and state.finished_at is not None else None
    finished = finished or (capsules[1] if capsules else None)
    if finished is not None and launched is not None and finished < launched:
        finished = launched if (launched - finished).total_seconds() <= LAUNCH_RECORD_SLACK_S else finished
    if capsules is not None:
        wall, source = capsules, "capsules"
    elif launched is not None and finished is not None and finished < launched:
        wall, source = None, None  # the box's clock and ours disagree by more than the slack
    elif launched is not None and (finished is not None or running):
        wall, source = (launched, finished or seen.at), "launch" if finished is not None else "running"
    else:
        wall, source = None, None
    return RunWindow(str(launch["instance"]) if launch else None, launched, finished, running, wall, source)


def run_costs(session: Session, windows: Mapping[str, RunWindow], now: datetime) -> dict[str, RunCost]:
    """Each launched run's share of what its instance billed from its launch to its finish (to now while it
    runs): every stretch covered by k runs of one instance is split equally among them."""
    costs: dict[str, RunCost] = {}
    on: dict[str, dict[str, Interval]] = {}
    for run_id, window in windows.items():
        if window.instance is None or window.launched_at is None:
            continue
        end = window.finished_at or (now if window.running else None)
        if end is None:
            costs[run_id] = RunCost(note="no finish time known (box and capsules silent)", costed=False)
        elif end < window.launched_at:
            costs[run_id] = RunCost(note="finish stamp before the launch: not costed", costed=False)
        else:
            on.setdefault(window.instance, {})[run_id] = Interval(window.launched_at, end)
    for instance, intervals in sorted(on.items()):
        try:
            currency = session.profile(instance).pricing.currency
        except (RgtError, KeyError):
            for run_id in intervals:
                costs[run_id] = RunCost(note=f"instance {instance} is no longer in rgt.toml: not costed",
                                        costed=False)
            continue
        for run_id in intervals:
            costs[run_id] = RunCost(currency=currency, note="still running: cost so far"
                                    if windows[run_id].running else "")
        for piece, covering in shared_pieces(intervals):
            billed = window_cost(session, instance, piece.start, piece.end)
            for run_id in covering:
                cost = costs[run_id]
                cost.total += billed.total / len(covering)
                cost.estimate = cost.estimate or billed.estimate or billed.unknown_price
                cost.shared_with.update(r for r in covering if r != run_id)
    return costs


def _run_view(run_id: str, capsules: RunCapsules, window: RunWindow, cost: RunCost | None) -> RunResultsView:
    costed = cost is not None and cost.costed
    note = cost.note if cost is not None else "never launched from this project: no cost recorded"
    if cost is not None and cost.shared_with:
        shared = ", ".join(sorted(cost.shared_with))
        note = "; ".join(filter(None, [note, f"instance shared with {shared}: overlapping time split equally"]))
    return RunResultsView(
        id=run_id, rows=capsules.rows, cells=capsules.cells,
        started_at=window.wall[0] if window.wall else window.launched_at,
        finished_at=window.wall[1] if window.wall and not window.running else window.finished_at,
        wall_s=(window.wall[1] - window.wall[0]).total_seconds() if window.wall else None,
        wall_source=window.wall_source, cost=cost.total if costed and cost is not None else None,
        currency=cost.currency if cost is not None else "USD",
        cost_estimate=bool(cost and costed and cost.estimate), cost_note=note,
        shared_with=tuple(sorted(cost.shared_with)) if cost is not None else (), trackers=capsules.trackers,
        left_out=capsules.left_out)


def evidence_claims(root: Path) -> tuple[tuple[ClaimView, ...], str]:
    """The claims of EVIDENCE.json as the Deliver panel shows them (services/deliver/claim_views.py: one reading
    and one inline form for both faces), or none and why."""
    from remote_gpu_trainer.services.deliver.claim_views import claim_views

    if not (root / EVIDENCE_NAME).exists() and not (root / EVIDENCE_NAME).is_symlink():
        return (), f"no {EVIDENCE_NAME}: no claims written yet"
    claims, problems = claim_views(root)
    if problems:
        return claims, "; ".join(problems)
    return claims, "" if claims else f"{EVIDENCE_NAME} holds no claims"


def _stamp(value: object) -> datetime | None:
    try:
        return parse_iso(str(value)) if value else None
    except ValueError:
        return None
