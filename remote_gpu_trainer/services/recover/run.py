"""Recovering a preempted run on its own, within the limits a person approved (docs/remote-ops.md §10.1).

A watcher that sees a run preempted (the TUI, `rgt watch RUN`, the patrol `rgt watch --all`) calls `recover_run`.
It takes the run's lock (fsutil.run_lock: the same one pull, verify and teardown hold, so recovery never relaunches
onto a box being torn down or pulled from, and two watchers never recover one preemption twice), asks the box and
the provider again under it (the watcher's answer may be stale: another watcher may have recovered the run
meanwhile), decides (audits/recover.py), writes the decision to the event log, and only then acts:
- the preemption is what the box and the provider say now (a preemption word, exit 143 on an interruptible box), or
  what a watcher saw the provider say of this launch's box (ledger.seen_preempted: vast.ai's "outbid" is gone once the
  box is back, and the job it killed left no exit code);
- the provider is bringing the box back (vast.ai: stopped while it intends to run, the bid to win again): wait;
- the provider stopped the box and can start it again (a RunPod spot pod gone EXITED): it is started within the
  limits (services/recover/start_box.py), and a later look resumes the run there;
- the box came back and still holds the run: the run is relaunched there (`rgt run --resume`'s launch, marked in its
  launch record as a recovery under the approval, which is what restarts are counted from); `{resume}` in the
  command names the newest checkpoint of each cell (services/box_layout.resume_lines);
- the box is gone: a replacement is rented within the limits and the checkpoints kept home are pushed to it
  (services/recover/replace.py), then the run is relaunched there as above; a quote the limits refuse, or a box
  recovery cannot rent yet, is recorded and notified, and the run waits for a person (`rgt up`);
- a limit or the approval forbids it, or `rgt down` stopped or tore down the box since the launch (a person decided):
  nothing is done, the reason is recorded once and notified once.
Recovery never stops, terminates or deletes anything, and never calls services/teardown.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.preemption import SIGNAL_EXITS, is_preempted, preempted_word, provider_words
from remote_gpu_trainer.audits.recover import Decision, RecoveryFacts, Step, decide
from remote_gpu_trainer.errors import ConfigError, RgtError, VerbFailed
from remote_gpu_trainer.fsutil import run_locks
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.recover.approval import check_approval
from remote_gpu_trainer.services.recover.ledger import (
    PREEMPTED,
    rented_since_launch,
    restarts_used,
    seen_preempted,
    spent,
)
from remote_gpu_trainer.services.watch.liveness import RunState, run_state
from remote_gpu_trainer.services.watch.watched_state import put_down_since_launch, with_provider_word
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.providers.base import InstanceStatus
    from remote_gpu_trainer.services.session import Session

ACTOR = "rgt:recover"
DECIDED, LAUNCHING, LAUNCHED, FAILED = "decided", "launching", "launched", "failed"


@dataclass(frozen=True)
class Outcome:
    """What one call did for a run: the step decided, why, and whether the run was relaunched."""

    run_id: str
    step: Step
    reasons: tuple[str, ...]
    relaunched: bool = False

    def line(self) -> str:
        """One line for a watcher's output."""
        verb = "relaunched" if self.relaunched else str(self.step)
        return f"{self.run_id}: recovery {verb}: " + "; ".join(self.reasons)


async def recover_run(session: Session, run_id: str, seen: RunState | None = None) -> Outcome | None:
    """Recover the run if it is preempted and recovery may act. None when there is nothing to consider: no
    `recover` limits, a read-only session, a watcher's answer (`seen`) that is not a preemption, or a run that,
    asked again under the lock, is no longer preempted (another watcher relaunched it), or a run whose lock another
    rgt holds (a pull, a teardown, another watcher's recovery): this look is left to that one, and a patrol that looks
    every few minutes does not print a line for each wait."""
    run = run_config(session, run_id)
    if run.recover is None or session.read_only or (seen is not None and not _may_be_preempted(session, run, seen)):
        return None
    with contextlib.ExitStack() as stack:
        try:  # every run on the box: two runs' recoveries never rent or start two boxes for one preemption
            stack.enter_context(run_locks(session.project.state_dir, _runs_on_box(session, run), "recovering"))
        except VerbFailed:
            return None  # the holder (a pull, a teardown, another watcher's recovery) acts; the next look asks again
        try:
            return await _recover_locked(session, run)
        except (RgtError, OSError) as exc:  # a provider or a box that failed mid-way: said, never a watcher's crash
            return await _failed(session, run, f"recovery stopped: {escape_control(str(exc))}")


def _runs_on_box(session: Session, run: RunConfig) -> list[str]:
    """The runs rgt.toml puts on the run's instance (where their launches put them), the run itself included."""
    return [run.id, *(other for other in session.project.runs
                      if other != run.id and run_config(session, other).instance == run.instance)]


async def _recover_locked(session: Session, run: RunConfig) -> Outcome | None:
    facts = await gather_facts(session, run)
    decision = decide(facts)
    if decision.step == Step.NONE:
        return None
    if decision.step == Step.RENT:
        return await _rent_and_resume(session, run, facts, decision)
    if decision.step == Step.START_BOX:
        return await _start_box(session, run, facts, decision)
    fresh = _record(session, run, decision)
    if decision.step == Step.RESUME_HERE:
        return await _resume_here(session, run, facts)
    if fresh and decision.step == Step.REFUSED:
        await _notify(session, run, f"rgt: {run.id} was preempted and is not recovered",
                      "\n".join(decision.reasons))
    return Outcome(run.id, decision.step, decision.reasons)


async def gather_facts(session: Session, run: RunConfig) -> RecoveryFacts:
    """The box and the provider asked now, the approval and the counts read from the event and launch logs."""
    from remote_gpu_trainer.services.recover.start_box import startable

    assert run.recover is not None
    status = await instance_status(session, run.instance)
    state = with_provider_word(session, run.id, await run_state(session, run.id), status)
    approval = check_approval(session, run, run.recover)
    return RecoveryFacts(
        run_id=run.id, preempted=_preempted(session, run, state), limits=run.recover, approval=approval,
        restarts_used=restarts_used(session, run.id, approval.seq), spent=spent(session, run.id),
        now=session.clock(), box_state=box_state(status), box_holds_run=state.liveness.state != "unknown",
        box_startable=startable(session, run.instance),
        put_down=put_down_since_launch(session, run.id, run.instance), rented=rented_since_launch(session, run.id),
        box_reclaimed=status.state == "unknown" and preempted_word(provider_words(status.detail)) is not None)


def _may_be_preempted(session: Session, run: RunConfig, seen: RunState) -> bool:
    """A watcher's answer worth a look under the lock: preempted, or dead after this launch's box was seen so."""
    return is_preempted(seen.liveness) or _remembered(session, run, seen)


def box_state(status: InstanceStatus) -> str:
    """The box's state as recovery reads it: `resuming` for a box stopped while its provider intends it to run
    (vast.ai's outbid instance, which comes back by itself on the same GPU when the bid wins again)."""
    api = status.detail.get("api")
    intends = api.get("intended_status") if isinstance(api, dict) else None
    return "resuming" if status.state == "stopped" and intends == "running" else status.state


def _preempted(session: Session, run: RunConfig, state: RunState) -> bool:
    """Preempted now (the evidence then kept for this launch, once), or preempted as a watcher saw it before."""
    if is_preempted(state.liveness):
        if seen_preempted(session, run.id) is None:
            events.recover_step(session.db, run_id=run.id, instance=run.instance, step=PREEMPTED, actor=ACTOR,
                                summary=f"recovery of {run.id}: {escape_control(state.liveness.detail)}",
                                detail={"evidence": state.liveness.detail})
        return True
    return _remembered(session, run, state)


def _remembered(session: Session, run: RunConfig, state: RunState) -> bool:
    """Dead after a watcher saw this launch's box preempted, with no exit code or the signal's (137, 143): any other
    exit is the job's own, and a person reads its log."""
    return state.liveness.state == "dead" and state.exit_code in SIGNAL_EXITS \
        and seen_preempted(session, run.id) is not None


def _record(session: Session, run: RunConfig, decision: Decision) -> bool:
    """The decision in the event log, before anything is done; a refusal or a wait the last decision already said
    is not written again (a patrol looks every few minutes). True when it was written."""
    detail = {"decision": str(decision.step), "reasons": list(decision.reasons)}
    last = next((event for event in reversed(session.db.events(run_id=run.id, kind=EventKind.RECOVER))
                 if event.detail.get("step") == DECIDED), None)
    if decision.step != Step.RESUME_HERE and last is not None and \
            {key: last.detail.get(key) for key in detail} == detail:
        return False
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step=DECIDED, actor=ACTOR,
                        summary=f"recovery of {run.id}: {decision.step}: " + "; ".join(decision.reasons),
                        detail=detail)
    return True


async def _rent_and_resume(session: Session, run: RunConfig, facts: RecoveryFacts, decision: Decision) -> Outcome:
    """Quote; rent within the limits and push the checkpoints kept home (services/recover/replace.py); relaunch. A
    quote the limits refuse is recorded as the decision (once, however often a watcher looks) and notified."""
    from remote_gpu_trainer.services.recover.replace import quote_replacement, rent_quoted

    quoted, refused = await quote_replacement(session, run, facts)
    if refused or quoted is None:
        refusal = Decision(Step.REFUSED, (*decision.reasons, *refused))
        if _record(session, run, refusal):
            await _notify(session, run, f"rgt: {run.id} was preempted and is not recovered", "\n".join(refused))
        return Outcome(run.id, Step.REFUSED, refusal.reasons)
    _record(session, run, decision)
    try:
        await rent_quoted(session, run, facts, quoted)
    except (RgtError, ConfigError, OSError) as exc:
        return await _failed(session, run, f"renting a replacement failed: {escape_control(str(exc))}")
    rented = session.instance(run.instance).id or "?"
    await _notify(session, run, f"rgt: recovery of {run.id} rented {rented}",
                  f"{escape_control(quoted.text)}; it bills until `rgt down`; to name it in rgt.toml: "
                  f"id = \"{rented}\" under [instances.{run.instance}]")
    return await _resume_here(session, run, facts)


async def _start_box(session: Session, run: RunConfig, facts: RecoveryFacts, decision: Decision) -> Outcome:
    """Start the box its provider stopped, within the limits (services/recover/start_box.py); the run is relaunched by
    a later look once the box answers. A refusal is recorded as the decision (once) and notified."""
    from remote_gpu_trainer.services.recover.start_box import start_stopped

    provider_id = session.provider(run.instance).provider_id(session.instance(run.instance))
    _record(session, run, decision)
    try:
        refused = await start_stopped(session, run, facts, provider_id)
    except (RgtError, ConfigError, OSError) as exc:
        return await _failed(session, run, f"starting {provider_id} again failed: {escape_control(str(exc))}")
    if refused:
        refusal = Decision(Step.REFUSED, (*decision.reasons, *refused))
        if _record(session, run, refusal):
            await _notify(session, run, f"rgt: {run.id} was preempted and is not recovered", "\n".join(refused))
        return Outcome(run.id, Step.REFUSED, refusal.reasons)
    await _notify(session, run, f"rgt: {run.id} was preempted: its box is starting again",
                  f"{provider_id} ({run.instance}) was stopped by its provider and started within the limits")
    return Outcome(run.id, Step.START_BOX, (f"started {provider_id} again: the run resumes there once it answers",))


async def _failed(session: Session, run: RunConfig, reason: str) -> Outcome:
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step=FAILED, actor=ACTOR,
                        summary=f"recovery of {run.id}: {reason}", detail={"error": reason})
    await _notify(session, run, f"rgt: recovering {run.id} failed", reason)
    return Outcome(run.id, Step.REFUSED, (reason,))


async def _resume_here(session: Session, run: RunConfig, facts: RecoveryFacts) -> Outcome:
    """Relaunch the run on its box, recorded as restart N under the approval."""
    restart = facts.restarts_used + 1
    assert run.recover is not None
    standing = check_approval(session, run, run.recover)  # asked again: a rent may have taken minutes
    if not standing.ok or standing.seq != facts.approval.seq:
        return await _failed(session, run, f"the approval no longer stands: {standing.reason or 'another one'}")
    mark: dict[str, object] = {"approval": facts.approval.seq, "restart": restart}
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step=LAUNCHING, actor=ACTOR,
                        summary=f"recovery of {run.id}: relaunching on {run.instance} (restart {restart})",
                        detail=mark)
    try:
        await launch_run(session, run.id, actor=ACTOR, resume=True, recover=mark)
    except (RgtError, ConfigError, OSError) as exc:
        return await _failed(session, run, f"the relaunch failed: {escape_control(str(exc))}")
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step=LAUNCHED, actor=ACTOR,
                        summary=f"recovery of {run.id}: relaunched on {run.instance} (restart {restart})",
                        detail=mark)
    await _notify(session, run, f"rgt: {run.id} was preempted and relaunched",
                  f"restart {restart} of {facts.limits.max_restarts if facts.limits else '?'} on {run.instance}")
    return Outcome(run.id, Step.RESUME_HERE, (f"relaunched on {run.instance}, restart {restart}",), relaunched=True)


async def _notify(session: Session, run: RunConfig, title: str, body: str) -> None:
    """Through `[notify]` (services/fleet/notify.py's channels), when the project has one; a channel that cannot be
    read is recorded, never raised: recovery's record stands whether or not a message went out."""
    from remote_gpu_trainer.services.fleet.notify import channels, send

    try:
        found = channels(session.project.root, session.project.notify)
        if found is None:
            return
        delivery = await send(found, escape_control(title), escape_control(body, keep_newlines=True))
        outcome: dict[str, object] = {"taken": delivery.taken, "unconfirmed": delivery.unconfirmed}
    except ConfigError as exc:
        outcome = {"error": str(exc)}
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step="notified", actor=ACTOR,
                        summary=f"recovery of {run.id}: notified: {title}", detail={"title": title, **outcome})
