"""Spending allowances: a person lets the agent's rents and resumes through within a price, a total and a time.

What counts against the total is what the request asked for: its price per hour times the hours it said it needs
(`hours`, 1 when it did not say). The total bounds what rgt lets an agent *start* without a keystroke; a box
keeps billing until a person ends it, and the meter, not the allowance, says what it cost (docs/agents.md).
An allowance never covers a teardown, a stop or a finding decision (model.ALLOWANCE_KINDS).
"""

from __future__ import annotations

import math
from datetime import timedelta

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.request_views import AllowanceView, RequestPlan
from remote_gpu_trainer.services.inbox.model import (
    ALLOWANCE_KINDS,
    RequestKind,
    allowance_view,
    counted_hours,
    is_person,
)
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.approvals import parse_id
from remote_gpu_trainer.text import money

CURRENCY = "USD"  # what `--max-price` and `--total` are in (the CLI and the TUI say $)
MAX_HOURS = 24 * 31.0  # an allowance is for a stretch of work, not a standing order


def grant(session: Session, *, actor: str, max_price_per_hour: float, total: float, hours: float) -> AllowanceView:
    """A person's grant; each figure must be a positive number (one-line error naming it otherwise)."""
    session.require_writable("granting an allowance")
    if not is_person(actor):
        raise ConfigError("only a person grants an allowance (at a terminal or in the TUI)")
    for name, value in (("--max-price", max_price_per_hour), ("--total", total), ("--hours", hours)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ConfigError(f"allowance: {name} must be a positive number, not {value!r}")
    if hours > MAX_HOURS:
        raise ConfigError(f"allowance: --hours {hours:g} is longer than {MAX_HOURS:g} h; grant a new one later")
    now = session.clock()
    row = session.db.add_allowance(granted_by=actor, max_price_per_hour=float(max_price_per_hour),
                                   total=float(total), expires_at=now + timedelta(hours=hours))
    events.allowance_changed(session.db, allowance=row.id, actor=actor,
                             summary=f"granted allowance {row.id}: up to {money(max_price_per_hour)}/h, "
                                     f"{money(total)} in all, for {hours:g} h",
                             detail={"max_price_per_hour": max_price_per_hour, "total": total, "hours": hours,
                                     "expires_at": row.expires_at.isoformat()})
    return allowance_view(row, now)


def revoke(session: Session, text: str, *, actor: str) -> AllowanceView:
    if not is_person(actor):
        raise ConfigError("only a person revokes an allowance")
    seq = parse_id(text, "A")
    row = session.db.allowance_row(seq) if seq is not None else None
    if row is None:
        raise ConfigError(f"no allowance {text.strip()} (`rgt approve --list` shows them)")
    if session.db.revoke_allowance(row.seq, actor):
        events.allowance_changed(session.db, allowance=row.id, actor=actor, summary=f"revoked allowance {row.id}",
                                 detail={})
    found = session.db.allowance_row(row.seq)
    assert found is not None
    return allowance_view(found, session.clock())


def allowances(session: Session) -> list[AllowanceView]:
    now = session.clock()
    return [allowance_view(row, now) for row in session.db.allowance_rows()]


def amount_of(plan: RequestPlan, hours: float) -> float | None:
    """What the request counts against an allowance: its price times the hours asked, at least an hour's. None
    (nothing an allowance can cover) for a price not known, not a number of dollars (an allowance is granted in
    CURRENCY; AutoDL bills in CNY) or below zero (a quote that would give money back to the total)."""
    price = plan.price_per_hour
    if price is None or plan.currency != CURRENCY or not math.isfinite(price) or price < 0:
        return None
    return price * counted_hours(hours)


def why_not_covered(session: Session, kind: RequestKind, plan: RequestPlan, hours: float) -> str:
    """Why no allowance lets this request through, in one line for the agent (empty when one might)."""
    if kind not in ALLOWANCE_KINDS:
        return f"a {kind} is never covered by an allowance: it waits for a person"
    active = [a for a in allowances(session) if a.active]
    if not active:
        return "no allowance is active: it waits for a person"
    amount = amount_of(plan, hours)
    if amount is None and plan.price_per_hour is not None and plan.currency != CURRENCY:
        return f"its price is in {plan.currency}, an allowance in {CURRENCY}: it waits for a person"
    if amount is None:
        return "its price is not known, so no allowance can cover it: it waits for a person"
    fitting = [a for a in active if plan.price_per_hour is not None and plan.price_per_hour <= a.max_price_per_hour]
    if not fitting:
        best = max(a.max_price_per_hour for a in active)
        return (f"its price {money(plan.price_per_hour, plan.currency)}/h is above every allowance's limit "
                f"(at most {money(best)}/h): it waits for a person")
    if all(a.left < amount for a in fitting):
        return (f"{money(amount, plan.currency)} asked does not fit what is left of an allowance "
                f"({money(max(a.left for a in fitting))}): it waits for a person")
    return ""


def take(session: Session, kind: RequestKind, plan: RequestPlan, hours: float, request_seq: int,
         request_id: str, actor: str) -> str | None:
    """The id of the allowance this request is counted against, or None: the first active allowance whose price
    limit it is within and whose total still fits it, taken in one transaction (state/approvals.py)."""
    amount = amount_of(plan, hours)
    if kind not in ALLOWANCE_KINDS or amount is None or plan.blocked:
        return None
    for allowance in allowances(session):
        if not allowance.active or plan.price_per_hour is None or plan.price_per_hour > allowance.max_price_per_hour:
            continue
        seq = parse_id(allowance.id, "A")
        if seq is not None and session.db.take_allowance(seq, request_seq, amount):
            events.allowance_changed(session.db, allowance=allowance.id, actor=actor,
                                     summary=f"{request_id} ({kind}) let through by {allowance.id}: "
                                             f"{money(amount, plan.currency)} counted",
                                     detail={"request": request_id, "amount": amount})
            return allowance.id
    return None
