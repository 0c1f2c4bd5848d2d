"""What recovery did for a run, read back from the launch and event logs (docs/remote-ops.md §10.1): the restarts
made under the standing approval, what the boxes it rented billed, its events, and the view the report and the
dashboard show. Reads only, and imports nothing of the launch wing, so services/overview.py may use it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from remote_gpu_trainer.services import meter
from remote_gpu_trainer.services.recover.approval import check_approval
from remote_gpu_trainer.services.recover.checkpoint_home import age_s, home_copies, interval_s
from remote_gpu_trainer.services.watch.watched_state import launch_seq
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.views import RecoveryView

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState

RENTED = "rented"  # the step of a box rented by recovery: its meter counts toward max_spend
STARTED = "started"  # the step of a stopped box recovery started again: its meter from then counts toward max_spend
RENTING, STARTING = "renting", "starting"  # written before the provider call: it may have billed even if it failed
BILLED_STEPS = (RENTING, RENTED, STARTING, STARTED)
PREEMPTED = "preempted"  # the step that keeps a watcher's sight of the provider's preemption word for this launch


def restarts_used(session: Session, run_id: str, approval_seq: int | None) -> int:
    """Relaunches recovery made under this approval (each launch record marks its approval's event)."""
    if approval_seq is None:
        return 0
    return sum(1 for record in session.db.launch_history(run_id)
               if isinstance(record.detail.get("recover"), dict) and
               record.detail["recover"].get("approval") == approval_seq)


def spent(session: Session, run_id: str) -> float:
    """What the boxes recovery rented or started again for the run have billed so far, by their meters (none: 0):
    each from its `rented` or `started` event until now, or until the next such event under the same instance name
    (the name is reused when the provider took the box before, and its meter then also holds the first box's
    hours)."""
    rented = [event for event in session.db.events(run_id=run_id, kind=EventKind.RECOVER)
              if event.detail.get("step") in BILLED_STEPS and event.instance in session.project.instances]
    now = session.clock()
    total = 0.0
    for index, event in enumerate(rented):
        assert event.instance is not None
        later = [e.at for e in rented[index + 1:] if e.instance == event.instance]
        total += meter.window_cost(session, event.instance, event.at, later[0] if later else now).total
    return total


def seen_preempted(session: Session, run_id: str) -> str | None:
    """What a watcher saw the provider say of this launch's box, if it saw a preemption word (vast.ai's "outbid"):
    the word is gone once the box is back, and the job it killed left no exit code, so this record is what says why
    the run is dead."""
    after = launch_seq(session, run_id)
    return next((str(event.detail.get("evidence", "")) for event in
                 reversed(session.db.events(run_id=run_id, kind=EventKind.RECOVER))
                 if event.seq > after and event.detail.get("step") == PREEMPTED), None)


def rented_since_launch(session: Session, run_id: str) -> str:
    """The box recovery began to rent or start since the run's current launch ("" if none), counted from the step
    written before the provider call (a create that timed out may still have made a box): at most one per launch."""
    after = launch_seq(session, run_id)
    return next((str(event.detail.get("provider_id") or "a box") for event in
                 reversed(session.db.events(run_id=run_id, kind=EventKind.RECOVER))
                 if event.seq > after and event.detail.get("step") in BILLED_STEPS), "")


def history(session: Session, run_id: str) -> list[dict[str, object]]:
    """The run's recovery events, oldest first, as plain data (for the report and `rgt recover RUN`)."""
    return [{"seq": event.seq, "at": event.at.isoformat(), "actor": event.actor, "summary": event.summary,
             **json.loads(json.dumps(event.detail))}
            for event in session.db.events(run_id=run_id, kind=EventKind.RECOVER)]


def recovery_view(session: Session, run: RunConfig, state: RunState) -> RecoveryView | None:
    """The run's recovery as the report and the dashboard show it; None for a run without `recover` limits."""
    limits = run.recover
    if limits is None:
        return None
    check = check_approval(session, run, limits)
    found = session.db.events(run_id=run.id, kind=EventKind.RECOVER)
    last = next((event.summary for event in reversed(found) if event.detail.get("step") != "notified"), "")
    kept = home_copies(session, run.id)
    stalest = min(kept.values(), key=lambda copy: copy.box_mtime, default=None)
    now = session.clock()
    return RecoveryView(
        approved=check.ok, why_not=check.reason, restarts_used=restarts_used(session, run.id, check.seq),
        max_restarts=limits.max_restarts, spent=spent(session, run.id), max_spend=limits.max_spend,
        currency=session.profile(run.instance).pricing.currency, until=limits.until.isoformat(),
        checkpoint_age_s=state.newest_ckpt_age_s, last=last,
        home=f"{stalest.cell}/{stalest.path}" if stalest is not None else "",
        home_age_s=age_s(stalest, now) if stalest is not None else None, home_every_s=interval_s(session, run),
        home_cells=len(kept), cells=len(run.roster), preempted_seen=seen_preempted(session, run.id) or "")
