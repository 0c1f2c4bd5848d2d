"""The approval inbox's tables: an agent's requests, the allowances a person granted, and each use of one.

A request's row holds what was asked (kind, run or instance, why, the agent's parameters), the plan a person is
shown (services/inbox/plans.py) and the launch bindings it was filed under; its state moves only through
`move_request`, one compare-and-set, so two faces approving at once execute it once. Allowance uses are
append-only and a use is taken in the same transaction that sums the earlier ones, so two requests can never both
fit into the last of a total. Every move is also written to the event log by the service (state/events.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote_gpu_trainer.clock import iso_offset, parse_iso
from remote_gpu_trainer.state.store import Store


def request_id(seq: int) -> str:
    """The id a person types: Q for the question an agent asks."""
    return f"Q-{seq:06d}"


def allowance_id(seq: int) -> str:
    return f"A-{seq:06d}"


def parse_id(text: str, prefix: str) -> int | None:
    """`Q-000003`, `q-3` or `3` to 3; None for anything else."""
    body = text.strip().upper()
    if body.startswith(f"{prefix}-"):
        body = body[len(prefix) + 1:]
    return int(body) if body.isdigit() and len(body) <= 12 else None


@dataclass(frozen=True)
class RequestRow:
    """One stored request of the inbox: what an agent asked for, the plan a person was shown, the bindings it was
    filed under, and where its state stands."""

    seq: int
    filed_at: datetime
    kind: str
    filed_by: str
    run_id: str | None
    instance: str | None
    why: str
    params: dict[str, Any]
    plan: dict[str, Any]
    binding: dict[str, Any]
    state: str
    state_at: datetime
    decided_by: str | None
    outcome: str
    allowance_seq: int | None

    @property
    def id(self) -> str:
        return request_id(self.seq)


@dataclass(frozen=True)
class AllowanceRow:
    """One spending allowance a person granted: its price ceiling, total and expiry, its revocation, and what its
    uses have spent so far."""

    seq: int
    granted_at: datetime
    granted_by: str
    max_price_per_hour: float
    total: float
    expires_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None
    used: float  # the sum of its uses so far

    @property
    def id(self) -> str:
        return allowance_id(self.seq)


_REQUEST_COLUMNS = ("seq, filed_at, kind, filed_by, run_id, instance, why, params, plan, binding, state, state_at, "
                    "decided_by, outcome, allowance_id")


def _request(row: Sequence[Any]) -> RequestRow:
    return RequestRow(row[0], parse_iso(row[1]), row[2], row[3], row[4], row[5], row[6], json.loads(row[7]),
                      json.loads(row[8]), json.loads(row[9]), row[10], parse_iso(row[11]), row[12], row[13], row[14])


class ApprovalTables(Store):
    """The `agent_requests`, `allowances` and `allowance_uses` tables."""

    def add_request(self, *, kind: str, filed_by: str, run_id: str | None, instance: str | None, why: str,
                    params: dict[str, Any], plan: dict[str, Any], binding: dict[str, Any], state: str) -> RequestRow:
        now = self._now()
        with self._tx() as conn:
            cursor = conn.execute(
                f"INSERT INTO agent_requests ({_REQUEST_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "NULL, '', NULL)",
                (now, kind, filed_by, run_id, instance, why, _dump(params), _dump(plan), _dump(binding), state, now))
        seq = cursor.lastrowid
        assert seq is not None
        found = self.request_row(seq)
        assert found is not None
        return found

    def request_row(self, seq: int) -> RequestRow | None:
        row = self._one(f"SELECT {_REQUEST_COLUMNS} FROM agent_requests WHERE seq = ?", (seq,))
        return _request(row) if row is not None else None

    def request_rows(self, states: Sequence[str] | None = None) -> list[RequestRow]:
        """Every request (or those in `states`), oldest first."""
        if states is None:
            rows = self._all(f"SELECT {_REQUEST_COLUMNS} FROM agent_requests ORDER BY seq")
        else:
            marks = ", ".join("?" for _ in states)
            rows = self._all(f"SELECT {_REQUEST_COLUMNS} FROM agent_requests WHERE state IN ({marks}) ORDER BY seq",
                             tuple(states))
        return [_request(r) for r in rows]

    def count_requests(self, state: str) -> int:
        row = self._one("SELECT COUNT(*) FROM agent_requests WHERE state = ?", (state,))
        return int(row[0]) if row else 0

    def move_request(self, seq: int, from_states: Sequence[str], to_state: str, *, decided_by: str | None = None,
                     outcome: str | None = None, plan: dict[str, Any] | None = None,
                     allowance_seq: int | None = None) -> bool:
        """Move a request to `to_state` only if it is in one of `from_states` now: False when another face moved
        it first (the compare-and-set that keeps one approval from executing twice)."""
        sets = ["state = ?", "state_at = ?"]
        args: list[Any] = [to_state, self._now()]
        for column, value in (("decided_by", decided_by), ("outcome", outcome), ("allowance_id", allowance_seq)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if plan is not None:
            sets.append("plan = ?")
            args.append(_dump(plan))
        marks = ", ".join("?" for _ in from_states)
        with self._tx() as conn:
            cursor = conn.execute(f"UPDATE agent_requests SET {', '.join(sets)} WHERE seq = ? AND state IN ({marks})",
                                  (*args, seq, *from_states))
        return cursor.rowcount == 1

    def add_allowance(self, *, granted_by: str, max_price_per_hour: float, total: float,
                      expires_at: datetime) -> AllowanceRow:
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO allowances (granted_at, granted_by, max_price_per_hour, total, expires_at)"
                " VALUES (?, ?, ?, ?, ?)", (self._now(), granted_by, max_price_per_hour, total, iso_offset(expires_at)))
        seq = cursor.lastrowid
        assert seq is not None
        found = self.allowance_row(seq)
        assert found is not None
        return found

    def allowance_row(self, seq: int) -> AllowanceRow | None:
        rows = self._allowances("WHERE a.seq = ?", (seq,))
        return rows[0] if rows else None

    def allowance_rows(self) -> list[AllowanceRow]:
        return self._allowances("", ())

    def _allowances(self, where: str, args: Sequence[Any]) -> list[AllowanceRow]:
        rows = self._all(
            "SELECT a.seq, a.granted_at, a.granted_by, a.max_price_per_hour, a.total, a.expires_at, a.revoked_at,"
            " a.revoked_by, COALESCE((SELECT SUM(u.amount) FROM allowance_uses u WHERE u.allowance_seq = a.seq), 0)"
            f" FROM allowances a {where} ORDER BY a.seq", args)
        return [AllowanceRow(r[0], parse_iso(r[1]), r[2], float(r[3]), float(r[4]), parse_iso(r[5]),
                             parse_iso(r[6]) if r[6] else None, r[7], float(r[8])) for r in rows]

    def revoke_allowance(self, seq: int, revoked_by: str) -> bool:
        with self._tx() as conn:
            cursor = conn.execute("UPDATE allowances SET revoked_at = ?, revoked_by = ? WHERE seq = ? AND "
                                  "revoked_at IS NULL", (self._now(), revoked_by, seq))
        return cursor.rowcount == 1

    def take_allowance(self, allowance_seq: int, request_seq: int, amount: float) -> bool:
        """Record a use of `amount` only if the allowance is unrevoked and the uses so far plus `amount` fit its
        total, in one transaction: False when it does not fit (nothing written)."""
        with self._tx() as conn:
            row = conn.execute(
                "SELECT a.total, a.revoked_at, COALESCE((SELECT SUM(u.amount) FROM allowance_uses u"
                " WHERE u.allowance_seq = a.seq), 0) FROM allowances a WHERE a.seq = ?", (allowance_seq,)).fetchone()
            if row is None or row[1] is not None or float(row[2]) + amount > float(row[0]) + 1e-9:
                return False
            conn.execute("INSERT INTO allowance_uses (allowance_seq, request_seq, at, amount) VALUES (?, ?, ?, ?)",
                         (allowance_seq, request_seq, self._now(), amount))
        return True


def _dump(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
