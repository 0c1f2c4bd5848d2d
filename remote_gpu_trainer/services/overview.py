"""The one data model every face renders (remote_gpu_trainer.views), in two steps that say what they do.

`observe()` looks at every box and keeps the record of what it saw: a snapshot when a box's state or price
changed (services/instances.py), a meter sample per METER_SAMPLE_S, the stateful run rules' findings.
`build()` only reads: the state the observation left, the local evidence, the checklist, and returns the
Overview (the one thing it may add is a hash-cache entry, a memo of a local file's hash by size and mtime).
If the TUI shows it, the report can print it: both take an Overview built here, and neither computes
anything of its own beyond layout.

What observe() writes is the record of watching (rgt was looking, the box said this), never a cost-affecting
action, so a `--read-only` session and `--report` record it too; in a project folder rgt may not write, the
state is a copy in memory (StateDB read_only) and what they record goes nowhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from remote_gpu_trainer.profiles import profile_age_text
from remote_gpu_trainer.providers.base import InstanceStatus
from remote_gpu_trainer.services import actions, box_layout, gate, instances, meter
from remote_gpu_trainer.services.audit import audit, checklist, findings
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence.verify import checkpoint_statuses
from remote_gpu_trainer.services.meter import MeterReading
from remote_gpu_trainer.services.watch import gpu_samples, recovery, run_logs
from remote_gpu_trainer.services.watch.checkpoint_cadence import cadence_view, run_cadence
from remote_gpu_trainer.services.watch.liveness import (
    WAITING_RUN,
    RunState,
    bounded_run_state,
    remember_look,
    settled_state,
)
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from remote_gpu_trainer.services.watch.watched_state import with_provider_word
from remote_gpu_trainer.text import money
from remote_gpu_trainer.views import (
    NO_AUDIT,
    AuditRow,
    AuditView,
    CheckpointView,
    GateView,
    InstanceView,
    LocationDriftView,
    Overview,
    RecoveryView,
    RunView,
)

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.liveness import Liveness
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.request_views import RequestView
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.state.db import StateDB

MAX_NOTES = 3  # other boxes' notes under the instances table
BUSY = ("running", "stalled")  # a run in one of these keeps its box from being idle


@dataclass(frozen=True)
class Observation:
    """What one look at every box found: the answers build() renders, and the meter as observe() read it."""

    at: datetime
    statuses: dict[str, InstanceStatus]
    run_states: dict[str, RunState]
    gpus: dict[str, str]
    readings: dict[str, MeterReading]
    boxes: dict[str, gate.BoxVerdict] = dataclasses.field(default_factory=dict)  # each gated box's teardown gate


async def observe_and_build(session: Session, wait_s: float | None = None) -> Overview:
    """Look at every box (recording what was seen), then build the Overview from the state that left."""
    return await build(session, await observe(session, wait_s))


async def observe(session: Session, wait_s: float | None = None, *, catch_up: bool = False) -> Observation:
    """Every box is asked at once, each within its own timeout; with `wait_s` (the dashboard) a box that has
    not answered by then shows what was last known, marked as waiting, while its question goes on for the
    next refresh; without it (a report) all answers are awaited, so a hung box costs its timeout once, not
    once per question. Records a meter sample per instance and runs the rules on fresh answers. With
    `catch_up` (a headless report) the logs' news is read meanwhile (run_logs.catch_up_logs), so the rules
    and the ETA judge each log as it is now."""
    now = session.clock()
    names = sorted(session.project.instances)
    run_ids = sorted(session.project.runs)
    # a watcher (wait_s) trusts a settled run's recent look; a report asks every box
    settled = {} if wait_s is None else {run_id: state for run_id in run_ids
                                         if (state := settled_state(session, run_id)) is not None}
    asked = [run_id for run_id in run_ids if run_id not in settled]
    (statuses, gpus, boxes), run_answers, _ = await asyncio.gather(
        _boxes(session, names, wait_s),
        session.answers({f"run:{run_id}": partial(bounded_run_state, session, run_id) for run_id in asked}, wait_s),
        run_logs.catch_up_logs(session) if catch_up else _nothing())
    run_states = {run_id: settled.get(run_id) or run_answers.get(f"run:{run_id}") or WAITING_RUN for run_id in run_ids}
    readings = await asyncio.to_thread(meter_readings, session, statuses, run_states)
    for run_id, state in run_states.items():
        if state is WAITING_RUN:
            continue
        state = run_states[run_id] = with_provider_word(session, run_id, state,
                                                                statuses.get(run_config(session, run_id).instance))
        if run_id not in settled:  # rules judge fresh answers only
            remember_look(session, run_id, state)
            await run_logs.evaluate_rules(session, run_id, state)
            recovery.refresh(session, run_id, state.liveness)  # .rgt/recovery/<run-id>.md, when it changed
    return Observation(now, statuses, run_states, gpus, readings, boxes)


async def _nothing() -> None:
    """The step observe() skips (no log to catch up), in its gather."""


async def _boxes(session: Session, names: list[str], wait_s: float | None
                 ) -> tuple[dict[str, InstanceStatus], dict[str, str], dict[str, gate.BoxVerdict]]:
    """Each box's status, then its GPU line and its teardown gate, which need the status and nothing of the
    runs: asked while the runs' liveness looks are still out, so the gate's reading of the evidence overlaps
    the wait for the boxes (issue 29: ~5 ms of a report). Each step waits at most `wait_s`, as before."""
    status_answers = await session.answers(
        {f"status:{name}": partial(instances.instance_status, session, name) for name in names}, wait_s)
    statuses = {name: status_answers.get(f"status:{name}") or instances.waiting_status(session, name)
                for name in names}
    gpu_answers, boxes = await asyncio.gather(
        session.answers({f"gpu:{name}": partial(gpu_samples.gpu_text, session, name, statuses[name]) for name in names},
                        wait_s),
        session.answers({name: partial(gate.teardown_verdict, session, name, statuses[name].provider_id)
                         for name in names if _gated(session, name, statuses[name].state)}, wait_s))
    gpus = {name: gpu_answers[f"gpu:{name}"] for name in names if f"gpu:{name}" in gpu_answers}
    return statuses, gpus, boxes


def _gated(session: Session, name: str, state: str) -> bool:
    """A box whose terminate needs the gate, and that is still there to tear down."""
    action = session.profile(name).action("terminate")
    return action is not None and action.needs_gate and state != "terminated"


def meter_readings(session: Session, statuses: dict[str, InstanceStatus],
                   run_states: dict[str, RunState]) -> dict[str, MeterReading]:
    """Each instance's meter, storing a sample when one is due. Run in a worker thread: the sample's write
    waits for SQLite's write lock while a log digest commits, which on the event loop was a late frame
    (docs/architecture.md §5), and reading every snapshot and gap is work no frame should wait for either."""
    readings = {}
    for name, status in statuses.items():
        reading = meter.meter_reading(session, name, latest_finish(states_on(session, name, run_states)))
        meter.sample_meter(session, name, status.state, reading.burn_per_hour, reading.total, reading.estimate)
        readings[name] = reading
    return readings


async def build(session: Session, seen: Observation) -> Overview:
    """The Overview from an observation and the state it left: reads only (the gate's inputs may seed the
    hash cache), records nothing."""
    views = instance_views(session, seen)
    # gathering the gate's inputs may hash files the cache does not know: never on the event loop
    audited = await asyncio.to_thread(audit.audit_view, session.project.root, session.db, seen.at)
    runs = await asyncio.to_thread(
        lambda: [run_view(session, run_id, seen.run_states[run_id], seen.statuses, audited)
                 for run_id in sorted(session.project.runs)])
    views = [with_cost_to_finish(i, runs) for i in views]
    runs = [dataclasses.replace(r, other_notes=other_notes(views, r.instance),
                                checklist_rows=checklist.panel_rows(r, audited)) for r in runs]
    runs = [with_box_gate(session, r, runs, seen) for r in runs]
    views = [with_instance_gate(i, runs, seen) for i in views]
    alerts = tuple(idle_burn_alerts(views, runs)) + tuple(f"▲ PRICE DRIFT {i.name}: {i.drift}" for i in views
                                                          if i.drift)
    return Overview(
        project=session.project.name, generated_at=seen.at, currency=views[0].currency if views else "USD",
        total=sum(i.cost_so_far for i in views), burn_per_hour=sum(i.burn_per_hour for i in views),
        instances=tuple(views), runs=tuple(runs), read_only=session.read_only, alerts=alerts, audit=audited,
        requests=inbox_requests(session),
    )


def inbox_requests(session: Session, decided: int = 10) -> tuple[RequestView, ...]:
    """The open requests of the approval inbox and the latest `decided` others, oldest first (services/inbox/):
    read from the database only, so looking costs no box a question."""
    rows = session.db.request_rows()
    if not rows:  # most projects: the inbox's model (and its views) load with the first request
        return ()
    from remote_gpu_trainer.services.inbox.model import RequestState, request_view

    open_rows = [r for r in rows if r.state in (RequestState.PENDING, RequestState.EXECUTING)]
    closed = [r for r in rows if r.state not in (RequestState.PENDING, RequestState.EXECUTING)][-decided:]
    return tuple(request_view(r) for r in sorted([*open_rows, *closed], key=lambda r: r.seq))


def instance_views(session: Session, seen: Observation) -> list[InstanceView]:
    """Every instance's row from one observation: what build() shows, and what `rgt status` lists."""
    return [_instance_view(session, name, status, seen) for name, status in seen.statuses.items()]


def _instance_view(session: Session, name: str, status: InstanceStatus, seen: Observation) -> InstanceView:
    reading = seen.readings[name]
    profile = session.profile(name)
    return InstanceView(
        name=name, provider=status.provider, id=status.provider_id, state=status.state,
        gpu=seen.gpus.get(name, status.gpu), price_per_hour=status.price_per_hour, price_source=status.price_source,
        billing=billing_text(status, walltime(session, name, seen.run_states)), cost_so_far=reading.total,
        burn_per_hour=reading.burn_per_hour, estimate=reading.estimate, verified_month=profile.oldest_verified(),
        stale=profile.is_stale(seen.at), currency=profile.pricing.currency,
        facts_age=profile_age_text(profile, seen.at.date()),
        drift=reading.drift.text if reading.drift is not None else "", since_finished=reading.since_finished,
        note="; ".join([str(status.detail.get("error", ""))[:300], *reading.notes()]).strip("; "),
    )


def walltime(session: Session, name: str, run_states: dict[str, RunState]) -> str | None:
    times = [s.walltime for rid, s in sorted(run_states.items())
             if run_config(session, rid).instance == name and s.walltime]
    return times[-1] if times else None


def run_view(session: Session, run_id: str, state: RunState, statuses: dict[str, InstanceStatus],
             audited: AuditView = NO_AUDIT) -> RunView:
    run = run_config(session, run_id)
    status = statuses[run.instance]
    files = checkpoint_statuses(session.project, run, session.db)
    view = gate.gate_view(session, run_id, status.provider_id, state.liveness.state)
    if view.open and not status.actable:  # nothing to act on: the plan agrees
        view = dataclasses.replace(view, open=False, reasons=(actions.state_reason(status.state),))
    items = checklist.evaluate(run_id, checklist.checklist_facts(run, view), session.db, audited)
    monitor = opened_monitor(session, run_id)
    progress = monitor.snapshot if monitor is not None else None
    running = state.liveness.state in ("running", "stalled")
    return RunView(
        id=run_id, instance=run.instance,
        evidence_state=evidence_state(session.db.launch(run_id) is not None, state.liveness, view,
                                      session.db.recorded_manifest(run_id), status.state),
        liveness=state.liveness.state, liveness_detail=state.liveness.detail,
        checkpoints=tuple(CheckpointView(f.path, f.bytes if f.sha256 else None, f.sha256 or None, f.status,
                                         f.detail) for f in files),
        gate=view, findings=findings.checklist_findings(run_id, items) + findings.log_findings(session, run_id)
        + audit.catalogue_findings(run_id, audited),
        checklist=tuple(items), log=box_layout.log_path(run),
        metric=f"{run.metric.name} ({run.metric.direction})" if run.metric else None,
        environment=_environment_audit(session.db, run_id),
        step=progress.step if progress else None,
        total_steps=progress.total_steps if progress else None,
        eta_s=progress.eta(session.clock().timestamp()) if progress and running else None,
        teardown=actions.action_view(session, run.instance, status, "terminate", view.reasons),
        stop=actions.action_view(session, run.instance, status, "stop", view.reasons),
        sentinel=state.sentinel or "",
        checkpoint_cadence=cadence_view(run_cadence(session, run_id, state, status.detail), state),
        location_drift=tuple(LocationDriftView(d.key, d.launched, d.now) for d in run.location_drift),
        recovery=_recovery(session, run, state),
    )


def _recovery(session: Session, run: RunConfig, state: RunState) -> RecoveryView | None:
    """What recovery may still do for the run, and did (services/recover/ledger.py, loaded for such runs only)."""
    if run.recover is None:
        return None
    from remote_gpu_trainer.services.recover.ledger import recovery_view

    return recovery_view(session, run, state)


def box_gate_reasons(instance: str, run_id: str | None, runs: Sequence[RunView], seen: Observation) -> list[str]:
    """Every reason the box's teardown gate is closed besides `run_id`'s own evidence: the other runs on the box
    (their own gate, with their liveness), and what the box's verdict adds (a run only the launch log or the box's
    ledger knows, another project's run, a box that cannot be asked). The teardown plan judges the same runs
    through services/gate.box_verdict, so the dashboard, `--report`, the modal and `rgt down` agree."""
    reasons: list[str] = []
    for other in runs:
        if other.instance == instance and other.id != run_id:
            reasons.extend(f"{other.id}: {reason}" for reason in other.gate.reasons)
    verdict = seen.boxes.get(instance)
    if verdict is None:
        return [*reasons, "the box's gate is still being asked"] if instance in seen.statuses and _waiting(
            instance, seen) else reasons
    reasons.extend(reason for loss in verdict.beyond_runs for reason in loss.reasons)
    return [*verdict.fixed, *reasons]


def _waiting(instance: str, seen: Observation) -> bool:
    status = seen.statuses[instance]
    return status.state != "terminated"


def with_box_gate(session: Session, run: RunView, runs: Sequence[RunView], seen: Observation) -> RunView:
    """The run's teardown and stop controls decided for the whole box (its gate stays the run's own)."""
    status = seen.statuses.get(run.instance)
    if status is None or not _gated(session, run.instance, status.state):
        return run
    extra = tuple(box_gate_reasons(run.instance, run.id, runs, seen))
    reasons = (*run.gate.reasons, *extra)
    # the modal takes the names of the other runs at risk once this run's own results are home; giving up the
    # run's own unverified results is `rgt down --accept-loss` at a terminal (docs/gate.md §7.2)
    names = box_at_risk(run.instance, runs, seen) if run.gate.open else ()
    return dataclasses.replace(
        run, teardown=actions.action_view(session, run.instance, status, "terminate", reasons, names),
        stop=actions.action_view(session, run.instance, status, "stop", reasons, names))


def box_at_risk(instance: str, runs: Sequence[RunView], seen: Observation) -> tuple[str, ...]:
    """The names `--accept-loss` (and the modal's field) takes for this box: its verdict's, then each run on it
    whose own gate is closed."""
    verdict = seen.boxes.get(instance)
    names = [loss.name for loss in verdict.beyond_runs] if verdict is not None else []
    names.extend(r.id for r in runs if r.instance == instance and not r.gate.open and r.id not in names)
    return tuple(names)


def with_instance_gate(view: InstanceView, runs: Sequence[RunView], seen: Observation) -> InstanceView:
    """The instance's teardown gate, for `--report` and `rgt status`: closed while any run on it, or anything
    the box's verdict names, is not home."""
    verdict = seen.boxes.get(view.name)
    if verdict is None:
        return view
    reasons = [f"{r.id}: {reason}" for r in runs if r.instance == view.name for reason in r.gate.reasons]
    reasons.extend(reason for reason in box_gate_reasons(view.name, None, runs, seen) if reason not in reasons)
    return dataclasses.replace(view, gate_open=not reasons, gate_reasons=tuple(reasons),
                               at_risk=box_at_risk(view.name, runs, seen))


def billing_text(status: InstanceStatus, walltime: str | None = None) -> str:
    """What is being paid for right now, in words; a batch job's walltime where there is one."""
    if walltime is not None:
        return f"allocation · walltime {walltime}"
    if status.state in ("running", "pending", "stopping", "terminating"):
        return "compute" if status.price_per_hour else "no meter"
    if status.state == "stopped":
        return "storage only" if status.storage_per_hour else "nothing"
    if status.state == "terminated":
        return "nothing"
    return "unknown (last known rate)"


def evidence_state(launched: bool, liveness: Liveness, view: GateView, manifest: str | None,
                   instance_state: str) -> str:
    """The run's rung on the evidence ladder (docs/gate.md §8), each entered on its own evidence."""
    if instance_state == "terminated" and view.evidence_ok:
        return "torn_down"
    if view.evidence_ok:
        return "pull_verified"
    if manifest is not None:
        return "hash_verified"
    if not launched:
        return "planned_not_started"
    if liveness.state == "finished":
        return "trained"
    if liveness.state == "dead":
        return "failed"
    if liveness.state == "unknown":
        return "unknown"
    return "launched"


def with_cost_to_finish(instance: InstanceView, runs: list[RunView]) -> InstanceView:
    """What finishing the training still costs on this box: the longest ETA of its runs × its burn rate."""
    etas = [r.eta_s for r in runs if r.instance == instance.name and r.eta_s is not None]
    if not etas:
        return instance
    eta = max(etas)
    return dataclasses.replace(instance, eta_s=eta, cost_to_finish=cost_to_finish(instance.burn_per_hour, eta))


def cost_to_finish(burn_per_hour: float, eta_s: float) -> float:
    """The money the remaining training costs at the current burn rate (burn × ETA)."""
    return burn_per_hour * eta_s / 3600


def other_notes(instances: list[InstanceView], own: str) -> tuple[str, ...]:
    """Why other boxes read unknown (e.g. "no answer within 20 s"): their rows have no room to say."""
    return tuple(f"{i.name}: {i.note}" for i in instances
                 if i.state == "unknown" and i.note and i.name != own)[:MAX_NOTES]


def idle_billing(instances: list[InstanceView], runs: list[RunView]) -> list[tuple[InstanceView, RunView]]:
    """The boxes idle and billing, each with its first ended run: burn > 0, a run on it finished or dead, and
    none running or stalled. The one rule behind the dashboard's $ BURN alert and the patrol's exit 1."""
    found = []
    for instance in instances:
        if instance.burn_per_hour <= 0:
            continue
        idle = [r for r in runs if r.instance == instance.name and r.liveness in ("finished", "dead")]
        busy = [r for r in runs if r.instance == instance.name and r.liveness in BUSY]
        if idle and not busy:
            found.append((instance, idle[0]))
    return found


def states_on(session: Session, instance: str, run_states: dict[str, RunState]) -> list[RunState]:
    """The observed states of the runs on `instance` (where their launch put them, else rgt.toml)."""
    return [state for run_id, state in sorted(run_states.items())
            if run_id in session.project.runs and run_config(session, run_id).instance == instance]


def latest_finish(states: Sequence[RunState]) -> datetime | None:
    """When the last of these runs ended (the meter's "since it finished" and the idle time start there)."""
    finished = [s.finished_at for s in states if s.finished_at is not None]
    return max(finished) if finished else None


def idle_seconds(burn_per_hour: float, states: Sequence[RunState], now: datetime) -> float | None:
    """How long a billing box has had no run running or stalled: since the latest end of its runs (`states`).
    None while one is busy, while it bills nothing, or when no run on it recorded an end. The one idle time
    `rgt status`, the A screen and the patrol's line print."""
    if burn_per_hour <= 0 or any(s.liveness.state in BUSY for s in states):
        return None
    ended = latest_finish(states)
    return max(0.0, (now - ended).total_seconds()) if ended is not None else None


def next_step(run: RunView) -> str:
    """What an ended run needs next: "teardown" once the gate is open, "verify" when every checkpoint is
    here, else "pull"."""
    here = run.checkpoints and all(c.status not in ("pending", "missing") for c in run.checkpoints)
    return "teardown" if run.gate.open else ("verify" if here else "pull")


def box_next_step(run: RunView, runs: Sequence[RunView]) -> tuple[RunView, str]:
    """What the box `run` is on needs next, and for which run: the run's own step until its gate opens, then the
    first other run on the same box that is still busy ("watch") or whose results are not home yet (its pull or
    verify). Teardown decides per box (`rgt down` refuses while any run on it holds unverified results), so
    teardown is never the next step while a sibling's is something else."""
    step = next_step(run)
    if step != "teardown":
        return run, step
    for other in runs:
        if other.instance != run.instance or other.id == run.id:
            continue
        if other.liveness in BUSY:
            return other, "watch"
        if other.liveness in ("finished", "dead") and next_step(other) != "teardown":
            return other, next_step(other)
    return run, "teardown"


_STEP_KEYS = {"teardown": "teardown (t)", "verify": "verify (v)", "pull": "pull (p) → verify (v)", "watch": "watch"}


def idle_burn_alerts(instances: list[InstanceView], runs: list[RunView]) -> list[str]:
    """A finished or dead job on a box that still bills: one line with the money and the next step (for the box:
    a sibling run's pull before its teardown)."""
    alerts = []
    for instance, run in idle_billing(instances, runs):
        target, step = box_next_step(run, runs)
        whose = f" of run {target.id} (n: next run)" if target.id != run.id else ""
        alerts.append(f"$ BURN {instance.name}: job {run.liveness}, box still billing "
                      f"{money(instance.burn_per_hour)}/h ({money(instance.since_finished)} since it finished) "
                      f"→ next: {_STEP_KEYS[step]}{whose}")
    return alerts


def _environment_audit(db: StateDB, run_id: str) -> tuple[AuditRow, ...]:
    """The run's last phase-0 audit as stored, for the dashboard and the report."""
    record = db.last_audit(run_id, "env")
    return tuple(AuditRow(**row) for row in record[1]) if record else ()
