"""The approval inbox's views (services/inbox/): a request's plan, the request as every face shows it, an allowance.

Data only, like views.py (which holds the other views and imports these for the Overview): no I/O, no services,
no Textual. services/inbox/plans.py builds a plan, services/inbox/model.py the views from stored rows; the Approvals
screen, `rgt approve`, the agent's `rgt_requests` and the report lay them out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class RequestPlan:
    """What a person is shown before approving an agent's request, and what the approval is bound to.

    `lines` are the screen (what, why, the price, what it destroys, what keeps billing, the gate's reasons now);
    `material` are the facts whose change sends an approval back (price, destroys, keeps billing, the reasons,
    the box's id), without the figures that move every second (money spent so far), so `digest` is stable while
    nothing that matters changed. `blocked` are the reasons it cannot execute now (the gate is closed): the
    request waits, pending, until they are gone."""

    lines: tuple[str, ...]
    material: tuple[str, ...]
    price_per_hour: float | None = None
    currency: str = "USD"
    irreversible: bool = False
    type_to_confirm: str | None = None  # the instance id a person types for an irreversible action
    blocked: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.material).encode()).hexdigest()[:16]

    def as_dict(self) -> dict[str, object]:
        return {"lines": list(self.lines), "material": list(self.material), "price_per_hour": self.price_per_hour,
                "currency": self.currency, "irreversible": self.irreversible,
                "type_to_confirm": self.type_to_confirm, "blocked": list(self.blocked), "digest": self.digest}

    @staticmethod
    def from_dict(body: dict[str, object]) -> RequestPlan:
        def strings(key: str) -> tuple[str, ...]:
            value = body.get(key)
            return tuple(str(v) for v in value) if isinstance(value, list) else ()

        price = body.get("price_per_hour")
        confirm = body.get("type_to_confirm")
        return RequestPlan(lines=strings("lines"), material=strings("material"),
                           price_per_hour=float(price) if isinstance(price, (int, float)) else None,
                           currency=str(body.get("currency") or "USD"), irreversible=bool(body.get("irreversible")),
                           type_to_confirm=str(confirm) if confirm else None, blocked=strings("blocked"))


@dataclass(frozen=True)
class RequestView:
    """One request of the inbox as every face shows it (the Approvals panel, `rgt approve --list`, the agent's
    `rgt_requests`, the report)."""

    id: str
    kind: str
    state: str
    filed_at: datetime
    filed_by: str
    run_id: str | None
    instance: str | None
    why: str
    params: dict[str, object]
    plan: RequestPlan
    state_at: datetime
    decided_by: str | None
    outcome: str
    allowance: str | None

    @property
    def subject(self) -> str:
        """What it acts on, in words: `run r1 on box` or `box`."""
        if self.run_id and self.instance:
            return f"run {self.run_id} on {self.instance}"
        return self.instance or self.run_id or str(self.params.get("finding", ""))

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "kind": self.kind, "state": self.state, "filed_at": self.filed_at.isoformat(),
                "filed_by": self.filed_by, "run": self.run_id, "instance": self.instance, "why": self.why,
                "params": dict(self.params), "plan": self.plan.as_dict(), "state_at": self.state_at.isoformat(),
                "decided_by": self.decided_by, "outcome": self.outcome, "allowance": self.allowance}


@dataclass(frozen=True)
class AllowanceView:
    """A spending allowance a person granted: rents and resumes within it go through without a keystroke."""

    id: str
    granted_at: datetime
    granted_by: str
    max_price_per_hour: float
    total: float
    used: float
    expires_at: datetime
    revoked_at: datetime | None
    active: bool

    @property
    def left(self) -> float:
        return max(0.0, self.total - self.used)

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "granted_at": self.granted_at.isoformat(), "granted_by": self.granted_by,
                "max_price_per_hour": self.max_price_per_hour, "total": self.total, "used": round(self.used, 6),
                "left": round(self.left, 6), "expires_at": self.expires_at.isoformat(),
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None, "active": self.active}
