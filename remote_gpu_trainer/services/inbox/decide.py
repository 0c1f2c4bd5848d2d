"""A person's decision on a request, and the execution it authorises.

Approval is bound to the plan the person was shown (its digest): the plan is computed again at that moment
(services/inbox/plans.py) and the request runs only if it is the same plan, the run was not relaunched since it
was filed, the gate is open and, for an irreversible action, the typed id is the box's. Otherwise nothing runs:
a changed plan goes back to pending with the new plan for the person to read, a relaunch refuses the request
for good. Execution goes through the same services as the person's own action (services/teardown.execute for a
stop or a teardown, which evaluates the gate once more with the approval), so the gate holds whichever face
approved.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from remote_gpu_trainer.errors import ConfigError, GateRefused, RgtError, VerbFailed
from remote_gpu_trainer.providers.base import Creatable
from remote_gpu_trainer.request_views import RequestPlan, RequestView
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.inbox.model import (
    RequestKind,
    RequestState,
    is_person,
    request_view,
    stored_request,
)
from remote_gpu_trainer.services.inbox.plans import plan_request
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.approvals import RequestRow, parse_id
from remote_gpu_trainer.text import price_text

# What a request reads when the face executing it went away mid-action (an agent's call cancelled, the server
# closed): the action stops there, but a provider call already sent may have acted, so the person is sent to look
# rather than told nothing happened. Never left `executing`, which no face could decide again.
INTERRUPTED = ("interrupted while it executed: the action may have reached the provider; `rgt status` and the "
               "provider's console say whether a box bills; file a new request if it is still needed")


class PlanChanged(ConfigError):
    """The plan is not the one the person was shown: nothing ran, the request is pending with the new plan."""


async def current_plan(session: Session, request: str, accept_loss: tuple[str, ...] = ()) -> RequestView:
    """The request with its plan computed now; a pending request whose plan changed keeps the new one (and the
    event log says so), so what a person reads is what an approval would be bound to. With `accept_loss` (a
    person about to give up those runs' results) the plan is shown as it would be approved, and not stored."""
    row = stored_request(session.db, request)
    if row.state != RequestState.PENDING:
        return request_view(row)
    fresh, _ = await plan_request(session, RequestKind(row.kind), row.run_id, row.instance, row.params, accept_loss)
    if accept_loss:
        return replace(request_view(row), plan=fresh)
    _store_if_changed(session, row, fresh, "rgt")
    refreshed = session.db.request_row(row.seq)
    assert refreshed is not None
    return request_view(refreshed)


def _store_if_changed(session: Session, row: RequestRow, fresh: RequestPlan, actor: str) -> bool:
    """Keep the new plan on a pending request whose plan changed; a read-only session only looks."""
    old = RequestPlan.from_dict(row.plan)
    if (old.digest == fresh.digest and old.blocked == fresh.blocked) or session.read_only:
        return False
    session.db.move_request(row.seq, (row.state,), RequestState.PENDING, plan=fresh.as_dict())
    events.request_moved(session.db, request=row.id, kind=row.kind, state=RequestState.PENDING, actor=actor,
                         run_id=row.run_id, instance=row.instance,
                         summary=f"{row.id} ({row.kind}): its plan changed since it was filed; pending again",
                         detail={"old_digest": old.digest, "digest": fresh.digest, "lines": list(fresh.lines)})
    return True


async def approve(session: Session, request: str, *, actor: str, shown_digest: str,
                  typed_id: str | None = None, accept_loss: tuple[str, ...] = ()) -> RequestView:
    """A person's approval of the plan they were shown; the action runs now, or nothing does (see the module).
    `accept_loss` (a teardown or stop only) names the runs whose results the person gives up, as `rgt down
    --accept-loss` does: their reasons stop blocking; no agent can pass it, since only a person approves."""
    session.require_writable("approving a request")
    if not is_person(actor):
        raise ConfigError("only a person approves a request: at a terminal (`rgt approve`) or in the TUI")
    row = stored_request(session.db, request)
    if row.state != RequestState.PENDING:
        raise ConfigError(f"{row.id} is {row.state}: only a pending request can be approved")
    if accept_loss and row.kind not in (RequestKind.TEARDOWN, RequestKind.STOP):
        raise ConfigError(f"{row.id} is a {row.kind}: accepting a loss is for a teardown or a stop")
    fresh, binding = await plan_request(session, RequestKind(row.kind), row.run_id, row.instance, row.params,
                                        accept_loss)
    stale = _stale(row, binding)
    if stale:
        return _refuse_stale(session, row, stale, actor)
    _store_if_changed(session, row, fresh, actor)
    if fresh.digest != shown_digest:
        raise PlanChanged(f"{row.id}: the plan changed since it was shown (new price, reasons or box); nothing ran "
                          "and it is pending: read the new plan and approve again")
    if fresh.blocked:
        raise VerbFailed(f"{row.id} cannot run now: {fresh.blocked[0]}"
                         + (f" (+{len(fresh.blocked) - 1} more)" if len(fresh.blocked) > 1 else "")
                         + "; it stays pending")
    if fresh.type_to_confirm is not None and (typed_id or "").strip() != fresh.type_to_confirm:
        raise ConfigError(f"{row.id}: the typed id {(typed_id or '').strip()!r} is not the box's "
                          f"{fresh.type_to_confirm!r}; nothing ran")
    return await _run(session, row, fresh, actor, typed_id=(typed_id or "").strip() or None, allowance=None,
                      accept_loss=accept_loss)


async def execute_within_allowance(session: Session, row: RequestRow, plan: RequestPlan, allowance: str,
                                   actor: str) -> RequestView:
    """A rent or resume an allowance let through as it was filed: the same execution, no keystroke."""
    return await _run(session, row, plan, actor, typed_id=None, allowance=allowance, accept_loss=())


def reject(session: Session, request: str, *, actor: str, note: str = "") -> RequestView:
    session.require_writable("rejecting a request")
    if not is_person(actor):
        raise ConfigError("only a person rejects a request")
    row = stored_request(session.db, request)
    if not session.db.move_request(row.seq, (RequestState.PENDING,), RequestState.REJECTED, decided_by=actor,
                                   outcome=note.strip() or "rejected"):
        raise ConfigError(f"{row.id} is {row.state}: only a pending request can be rejected")
    events.request_moved(session.db, request=row.id, kind=row.kind, state=RequestState.REJECTED, actor=actor,
                         run_id=row.run_id, instance=row.instance, summary=f"{row.id} ({row.kind}) rejected",
                         detail={"note": note.strip()})
    return _view(session, row.seq)


def _stale(row: RequestRow, binding: dict[str, Any]) -> str:
    """Why the request no longer speaks of the same launches or box (empty when it does)."""
    filed, now = row.binding, binding
    if filed.get("provider_id") != now.get("provider_id"):
        return (f"the box changed since it was filed ({filed.get('provider_id') or 'none'} then, "
                f"{now.get('provider_id') or 'none'} now)")
    then_launches, now_launches = filed.get("launches", {}), now.get("launches", {})
    moved = sorted(run for run in set(then_launches) | set(now_launches)
                   if then_launches.get(run) != now_launches.get(run))
    if moved:
        return f"run {', '.join(moved)} was launched again since it was filed"
    return ""


def _refuse_stale(session: Session, row: RequestRow, why: str, actor: str) -> RequestView:
    session.db.move_request(row.seq, (RequestState.PENDING,), RequestState.REFUSED, decided_by=actor,
                            outcome=f"refused: {why}; the agent must file a new request")
    events.request_moved(session.db, request=row.id, kind=row.kind, state=RequestState.REFUSED, actor=actor,
                         run_id=row.run_id, instance=row.instance,
                         summary=f"{row.id} ({row.kind}) refused at execution: {why}", detail={"why": why})
    raise VerbFailed(f"{row.id} refused: {why}; nothing ran (the agent must file a new request)")


async def _run(session: Session, row: RequestRow, plan: RequestPlan, actor: str, *, typed_id: str | None,
               allowance: str | None, accept_loss: tuple[str, ...]) -> RequestView:
    """Take the request (one face only), log the approval, execute, record the outcome."""
    taken = parse_id(allowance, "A") if allowance else None
    if not session.db.move_request(row.seq, (RequestState.PENDING,), RequestState.EXECUTING, decided_by=actor,
                                   allowance_seq=taken):
        raise ConfigError(f"{row.id} was decided elsewhere a moment ago")
    events.request_moved(session.db, request=row.id, kind=row.kind, state=RequestState.EXECUTING, actor=actor,
                         run_id=row.run_id, instance=row.instance,
                         summary=f"{row.id} ({row.kind}) approved" + (f" within {allowance}" if allowance else ""),
                         detail={"digest": plan.digest, "shown": list(plan.lines), "allowance": allowance,
                                 "filed_by": row.filed_by, "accepted_loss": list(accept_loss)})
    try:
        outcome = await _execute(session, row, plan, actor, typed_id, accept_loss)
    except asyncio.CancelledError:  # the face went away: the action stops here, and the request says so
        _finish(session, row, RequestState.FAILED, INTERRUPTED, actor)
        raise
    except GateRefused as exc:  # the gate's look at execution: nothing ran; the person may try again later
        return _finish(session, row, RequestState.PENDING, f"the gate refused at execution: {exc}", actor)
    except RgtError as exc:
        return _finish(session, row, RequestState.FAILED, str(exc), actor)
    return _finish(session, row, RequestState.DONE, outcome, actor)


def _finish(session: Session, row: RequestRow, state: RequestState, outcome: str, actor: str) -> RequestView:
    session.db.move_request(row.seq, (RequestState.EXECUTING,), state, outcome=outcome)
    events.request_moved(session.db, request=row.id, kind=row.kind, state=state, actor=actor, run_id=row.run_id,
                         instance=row.instance, summary=f"{row.id} ({row.kind}) {state}: {outcome}",
                         detail={"outcome": outcome})
    return _view(session, row.seq)


def _view(session: Session, seq: int) -> RequestView:
    found = session.db.request_row(seq)
    assert found is not None
    return request_view(found)


async def _execute(session: Session, row: RequestRow, plan: RequestPlan, actor: str, typed_id: str | None,
                   accept_loss: tuple[str, ...]) -> str:
    kind = RequestKind(row.kind)
    if kind in (RequestKind.TEARDOWN, RequestKind.STOP):
        assert row.instance is not None
        done = await teardown.execute(session, row.instance, typed_id, plan.lines, actor=actor,
                                      action_id="terminate" if kind == RequestKind.TEARDOWN else "stop",
                                      accept_loss=accept_loss)
        if not done.confirmed:
            raise VerbFailed(done.message)
        return done.message
    if kind == RequestKind.RENT:
        assert row.run_id is not None
        return await _rent(session, row.run_id, plan, actor)
    if kind == RequestKind.RESUME:
        assert row.run_id is not None
        from remote_gpu_trainer.services.launch.resume import resume_run

        detail = await resume_run(session, row.run_id, actor=actor)
        return f"resumed {row.run_id}: pid {detail.get('pid')}"
    if kind == RequestKind.RECOVER:
        assert row.run_id is not None
        return _approve_recovery(session, row.run_id, actor)
    return _decide_finding(session, row, actor)


async def _rent(session: Session, run_id: str, plan: RequestPlan, actor: str) -> str:
    """`rgt up RUN` on the person's (or the allowance's) word: the sim box from its profile, a cloud box through
    its launch plan at the price shown (services/launch/rent.launch refuses any other)."""
    from remote_gpu_trainer.services.instances import create_instance

    run = session.project.run(run_id)
    if isinstance(session.provider(run.instance), Creatable):
        status = await create_instance(session, run.instance, actor=actor)
        return f"{run.instance} is {status.state} ({status.provider_id})"
    from remote_gpu_trainer.services.launch import rent

    launch = await rent.plan_launch(session, run.instance)
    smoke = await rent.run_smoke(session.project, run)
    if not smoke.passed:
        raise VerbFailed(f"smoke gate failed: {smoke.summary()}; nothing was rented")
    created = await rent.launch(session, launch, run_id, price_text(plan.price_per_hour or launch.price),
                                smoke, actor=actor)
    return (f"rented {run.instance}: {launch.provider} {created.provider_id} ({created.state}); put "
            f"{rent.config_line(created.provider_id)} under [instances.{run.instance}]")


def _approve_recovery(session: Session, run_id: str, actor: str) -> str:
    """The person's approval of the limits the plan showed (the plan's digest was checked against them now)."""
    from remote_gpu_trainer.services.recover import approval

    limits = run_config(session, run_id).recover  # the plan's digest, checked just before, holds these limits
    if limits is None:
        raise VerbFailed(f"runs.{run_id}.recover is no longer set: nothing was approved")
    event = approval.approve(session, run_id, limits, actor)
    return f"recovery of {run_id} approved within its limits (event {event.seq})"


def _decide_finding(session: Session, row: RequestRow, actor: str) -> str:
    from remote_gpu_trainer.services.audit import findings

    params = row.params
    status = "acknowledged" if params.get("decision") == "acknowledge" else "waived"
    record = findings.set_status(session.db, str(params.get("finding")), status, note=str(params.get("note", "")),
                                 disclosure=str(params.get("disclosure", "")),
                                 scope=str(params.get("scope", "subject")), actor=actor)
    return f"{record.id} {record.status}"
