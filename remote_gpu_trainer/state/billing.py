"""What the meter is computed from: instance snapshots (state and rates, written when they change) and meter
samples (the burn and the cost so far, at most every 30 seconds while someone watches)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote_gpu_trainer.clock import iso_offset, parse_iso
from remote_gpu_trainer.state.store import Store


@dataclass(frozen=True)
class Snapshot:
    """An instance's state and rates at one moment, written when they change: the meter bills each snapshot's rates
    until the next one."""

    at: datetime
    instance: str
    provider: str
    provider_id: str | None
    state: str
    price_per_hour: float | None
    price_source: str
    storage_per_hour: float | None



class BillingTables(Store):
    """The `instance_snapshots` and `meter_samples` tables."""

    def add_snapshot(self, snapshot: Snapshot, detail: dict[str, Any] | None = None) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO instance_snapshots (at, instance, provider, provider_id, state, price_per_hour,"
                " price_source, storage_per_hour, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (iso_offset(snapshot.at), snapshot.instance, snapshot.provider, snapshot.provider_id,
                 snapshot.state, snapshot.price_per_hour, snapshot.price_source, snapshot.storage_per_hour,
                 json.dumps(detail or {}, sort_keys=True)),
            )

    def snapshots(self, instance: str) -> list[Snapshot]:
        rows = self._all(
            "SELECT at, instance, provider, provider_id, state, price_per_hour, price_source,"
            " storage_per_hour FROM instance_snapshots WHERE instance = ? ORDER BY seq",
            (instance,),
        )
        return [Snapshot(parse_iso(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7]) for r in rows]

    def last_snapshot(self, instance: str) -> Snapshot | None:
        row = self._one(
            "SELECT at, instance, provider, provider_id, state, price_per_hour, price_source,"
            " storage_per_hour FROM instance_snapshots WHERE instance = ? ORDER BY seq DESC LIMIT 1",
            (instance,),
        )
        if row is None:
            return None
        return Snapshot(parse_iso(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], row[7])

    # -- meter samples -------------------------------------------------------------------------
    def add_meter_sample(self, instance: str, state: str, burn_per_hour: float, cost_so_far: float,
                         estimate: bool = False) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO meter_samples (at, instance, state, burn_per_hour, cost_so_far, estimate)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (self._now(), instance, state, burn_per_hour, cost_so_far, int(estimate)),
            )

    def last_meter_sample_at(self, instance: str) -> datetime | None:
        row = self._one(
            "SELECT at FROM meter_samples WHERE instance = ? ORDER BY seq DESC LIMIT 1", (instance,)
        )
        return parse_iso(row[0]) if row else None

    def meter_sample_count(self, instance: str) -> int:
        row = self._one("SELECT COUNT(*) FROM meter_samples WHERE instance = ?", (instance,))
        return int(row[0]) if row else 0
