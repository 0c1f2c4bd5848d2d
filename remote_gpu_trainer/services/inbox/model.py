"""The inbox's vocabulary (kinds, states, who acts) and the view of a stored request (views.py).

An actor is `agent:<client name>` for an agent's tool call and `person:<terminal>` for a person at a keyboard
(`person:tui` in the TUI, `person:/dev/pts/3` at a terminal): every request, approval and action the inbox causes
is in the event log under one of these.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.request_views import AllowanceView, RequestPlan, RequestView
from remote_gpu_trainer.state.approvals import AllowanceRow, RequestRow, allowance_id, parse_id
from remote_gpu_trainer.state.db import StateDB


class RequestKind(StrEnum):
    RENT = "rent"  # rent (or start) the run's box: `rgt up RUN`
    STOP = "stop"  # stop the box (reversible where the profile says so), behind the gate
    TEARDOWN = "teardown"  # terminate the box, behind the gate, with its id typed
    RESUME = "resume"  # relaunch a preempted run on its still-billing box: `rgt run RUN --resume`
    FINDING = "finding_decision"  # acknowledge or waive a VERIFY finding with the agent's note and disclosure
    RECOVER = "recover"  # approve runs.<id>.recover, the limits recovery acts within (never through an allowance)


class RequestState(StrEnum):
    PENDING = "pending"  # waiting for a person (or for the gate to open)
    EXECUTING = "executing"  # approved; the action is under way
    DONE = "done"  # the action ran
    FAILED = "failed"  # the action ran and failed (its error in `outcome`)
    REFUSED = "refused"  # never executed: the run was relaunched or the box changed since it was filed
    REJECTED = "rejected"  # a person said no (the note in `outcome`)


ALLOWANCE_KINDS = (RequestKind.RENT, RequestKind.RESUME)  # what an allowance may cover; never teardown or stop
# what an allowance counts is at least this many hours: `hours` is the agent's word, and a box bills until a person
# ends it, so an agent asking for 1e-9 h must not rent a $0.89/h box on a penny's allowance (docs/agents.md §4.4)
MIN_COUNTED_HOURS = 1.0
_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_TERMINAL = re.compile(r"[A-Za-z0-9._/-]{1,60}")


def agent_actor(client_name: str | None) -> str:
    """`agent:<name>`: the MCP client's own name, reduced to a safe word (it is text from outside)."""
    name = _NAME.sub("-", (client_name or "").strip())[:40].strip("-")
    return f"agent:{name or 'unknown'}"


def person_actor(terminal: str) -> str:
    """`person:tui`, or `person:/dev/pts/3`: the terminal a person typed at."""
    clean = terminal.strip()
    return f"person:{clean if _TERMINAL.fullmatch(clean) else 'terminal'}"


def counted_hours(hours: float) -> float:
    """The hours an allowance counts for a request that asked for `hours`: never fewer than MIN_COUNTED_HOURS."""
    return max(hours, MIN_COUNTED_HOURS)


def is_person(actor: str) -> bool:
    return actor.startswith("person:")


def request_seq(text: str) -> int:
    """The number in a request id a person typed; a one-line error naming it otherwise."""
    seq = parse_id(text, "Q")
    if seq is None:
        raise ConfigError(f"{text!r} is not a request id (they look like Q-000003; `rgt approve --list` shows them)")
    return seq


def request_view(row: RequestRow) -> RequestView:
    return RequestView(
        id=row.id, kind=row.kind, state=row.state, filed_at=row.filed_at, filed_by=row.filed_by, run_id=row.run_id,
        instance=row.instance, why=row.why, params=dict(row.params), plan=RequestPlan.from_dict(row.plan),
        state_at=row.state_at, decided_by=row.decided_by, outcome=row.outcome,
        allowance=allowance_id(row.allowance_seq) if row.allowance_seq is not None else None)


def allowance_view(row: AllowanceRow, now: datetime) -> AllowanceView:
    active = row.revoked_at is None and now < row.expires_at and row.used < row.total
    return AllowanceView(id=row.id, granted_at=row.granted_at, granted_by=row.granted_by,
                         max_price_per_hour=row.max_price_per_hour, total=row.total, used=row.used,
                         expires_at=row.expires_at, revoked_at=row.revoked_at, active=active)


def stored_request(db: StateDB, text: str) -> RequestRow:
    row = db.request_row(request_seq(text))
    if row is None:
        raise ConfigError(f"no request {text.strip()} in this project (`rgt approve --list` shows them)")
    return row
