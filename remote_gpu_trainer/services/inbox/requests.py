"""Filing and reading requests: what an agent asks for, and what it reads back while it waits.

Filing computes the plan now (plans.py), records it with the launches it is bound to, and writes the event
before anything else; the request is `pending`. Only a rent or a resume that an active allowance covers runs at
once (decide.execute_within_allowance); everything else waits for a person. Filing never acts otherwise.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.request_views import RequestView
from remote_gpu_trainer.secret_shapes import secret_problem
from remote_gpu_trainer.services.inbox import allowances
from remote_gpu_trainer.services.inbox.decide import execute_within_allowance
from remote_gpu_trainer.services.inbox.model import (
    ALLOWANCE_KINDS,
    RequestKind,
    RequestState,
    request_view,
    stored_request,
)
from remote_gpu_trainer.services.inbox.plans import plan_request
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state import events

MAX_WHY = 2000  # a reason is a paragraph, not a document
MAX_WAIT_S = 600.0
POLL_S = 0.25
DECISIONS = ("acknowledge", "waive")


async def file_request(session: Session, kind: RequestKind, *, actor: str, why: str, run_id: str | None = None,
                       instance: str | None = None, params: dict[str, Any] | None = None) -> RequestView:
    """Record an agent's request; returns it `pending` (or `done`/`failed` when an allowance let it through)."""
    session.require_writable(f"filing a {kind} request")
    kind = RequestKind(kind)
    body = _checked(session, kind, why, run_id, instance, dict(params or {}))
    if kind in (RequestKind.RENT, RequestKind.RESUME, RequestKind.RECOVER):
        assert run_id is not None
        instance = session.project.run(run_id).instance
    plan, binding = await plan_request(session, kind, run_id, instance, body)
    row = session.db.add_request(kind=kind, filed_by=actor, run_id=run_id, instance=instance, why=why.strip(),
                                 params=body, plan=plan.as_dict(), binding=binding, state=RequestState.PENDING)
    hours = float(body.get("hours", 1.0))
    waiting = allowances.why_not_covered(session, kind, plan, hours)
    events.request_moved(session.db, request=row.id, kind=kind, state=RequestState.PENDING, actor=actor,
                         run_id=run_id, instance=instance,
                         summary=f"{row.id} filed: {kind} of {_subject(row.run_id, instance, body)}",
                         detail={"why": why.strip(), "params": body, "digest": plan.digest, "lines": list(plan.lines)})
    allowance = allowances.take(session, kind, plan, hours, row.seq, row.id, actor)
    if allowance is not None:
        return await execute_within_allowance(session, row, plan, allowance, f"{actor} (allowance {allowance})")
    view = request_view(row)
    return view if kind not in ALLOWANCE_KINDS else _noted(view, waiting)


def _noted(view: RequestView, waiting: str) -> RequestView:
    """The reason it waits, for the agent (not stored: it is true only now)."""
    return replace(view, outcome=waiting) if waiting and not view.outcome else view


def _subject(run_id: str | None, instance: str | None, params: dict[str, Any]) -> str:
    if run_id:
        return f"run {run_id}"
    return instance or str(params.get("finding", "?"))


def _checked(session: Session, kind: RequestKind, why: str, run_id: str | None, instance: str | None,
             params: dict[str, Any]) -> dict[str, Any]:
    """The request's parameters, each checked with a one-line error naming it; nothing is recorded otherwise."""
    if not why.strip():
        raise ConfigError(f"a {kind} request needs `why`: the person deciding reads it")
    texts = (("why", why), *((k, v) for k, v in params.items() if isinstance(v, str)))
    for key, value in texts:  # a note or a disclosure is shown to a person and logged, as `why` is: bounded alike
        if len(value) > MAX_WHY:
            raise ConfigError(f"`{key}` is {len(value)} characters; at most {MAX_WHY}")
    for key, value in texts:
        if secret_problem("text", value) is not None:  # the key is fixed: the value's shape decides
            raise ConfigError(f"the request's `{key}` looks like it holds a secret (a key or token): nothing was "
                              "filed; leave secrets out of requests")
    if kind in (RequestKind.RENT, RequestKind.RESUME):
        if not run_id or run_id not in session.project.runs:
            raise ConfigError(f"a {kind} request names a run of {session.project.file}: {run_id!r} is not one")
        hours = params.get("hours", 1.0)
        if not isinstance(hours, (int, float)) or isinstance(hours, bool) or not 0 < hours <= 24 * 31:
            raise ConfigError(f"`hours` must be a number of hours between 0 and {24 * 31}, not {hours!r}")
        return {"hours": float(hours)}
    if kind == RequestKind.RECOVER:
        if not run_id or run_id not in session.project.runs:
            raise ConfigError(f"a recover request names a run of {session.project.file}: {run_id!r} is not one")
        return {}
    if kind in (RequestKind.TEARDOWN, RequestKind.STOP):
        if not instance or instance not in session.project.instances:
            raise ConfigError(f"a {kind} request names an instance of {session.project.file}: {instance!r} is not one")
        return {}
    if params.get("decision") not in DECISIONS:
        raise ConfigError(f"a finding decision is one of {', '.join(DECISIONS)}, not {params.get('decision')!r}")
    if not str(params.get("note", "")).strip():
        raise ConfigError("a finding decision needs a note: why")
    if params["decision"] == "acknowledge" and not str(params.get("disclosure", "")).strip():
        raise ConfigError("acknowledging a finding needs a disclosure: the text that rides with the claims")
    scope = params.get("scope", "subject")
    if scope not in ("subject", "check"):
        raise ConfigError(f"a finding decision's scope is subject or check, not {scope!r}")
    return {key: str(params.get(key, "")) for key in ("finding", "decision", "note", "disclosure")} | {"scope": scope}


def list_requests(session: Session, states: Sequence[str] | None = None) -> list[RequestView]:
    return [request_view(row) for row in session.db.request_rows(states)]


def get_request(session: Session, request: str) -> RequestView:
    return request_view(stored_request(session.db, request))


def pending_count(session: Session) -> int:
    return session.db.count_requests(RequestState.PENDING)


async def wait_for_change(session: Session, ids: Sequence[str], wait_s: float) -> tuple[list[RequestView], bool]:
    """The requests `ids` once one of them is no longer pending, or when `wait_s` (at most MAX_WAIT_S) passed;
    the flag says whether it returned because the time ran out."""
    views = [get_request(session, ident) for ident in ids]
    deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
    while all(v.state == RequestState.PENDING for v in views) and views:
        if time.monotonic() >= deadline:
            return views, True
        await asyncio.sleep(POLL_S)
        views = [get_request(session, ident) for ident in ids]
    return views, False
