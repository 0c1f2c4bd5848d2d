"""Where and when each run was launched: the latest launch per run (for re-attaching) and the append-only
launch log bound to the physical box (the gate covers every run ever launched on a box)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote_gpu_trainer.clock import parse_iso, utc_now
from remote_gpu_trainer.state.store import Store


@dataclass(frozen=True)
class LaunchRecord:
    """One launch of a run, from the append-only launch log: on which instance entry and physical box,
    when, and the run's configuration at the time (so a run removed from rgt.toml is still covered)."""

    seq: int
    run_id: str
    instance: str
    box: str | None
    at: datetime
    config: dict[str, Any]
    detail: dict[str, Any]



class LaunchTables(Store):
    """The `launches` and `launch_log` tables."""

    def record_launch(self, run_id: str, instance: str, detail: dict[str, Any], *, box: str | None = None,
                      config: dict[str, Any] | None = None) -> None:
        """The latest launch per run (for re-attaching) and, append-only, every launch with its box.

        The log's stamp is the real time with microseconds, like the marker's `verified_at_utc`, because
        the gate orders the two: a launch after the verification is not covered by it."""
        now = self._now()
        stamp = utc_now().isoformat(timespec="microseconds")
        with self._tx() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO launches (run_id, instance, at, detail) VALUES (?, ?, ?, ?)",
                (run_id, instance, now, json.dumps(detail, sort_keys=True)),
            )
            conn.execute(
                "INSERT INTO launch_log (run_id, instance, box, at, config, detail) VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, instance, box, stamp, json.dumps(config or {}, sort_keys=True),
                 json.dumps(detail, sort_keys=True)),
            )

    def launch(self, run_id: str) -> dict[str, Any] | None:
        row = self._one(
            "SELECT instance, at, detail FROM launches WHERE run_id = ?", (run_id,)
        )
        if row is None:
            return None
        detail = json.loads(row[2])
        detail.update({"instance": row[0], "at": row[1]})
        return dict(detail)

    def last_launch_config(self, run_id: str) -> dict[str, Any] | None:
        """The configuration the run's latest launch recorded (what that launch bound its files and
        processes to); None when it was never launched. A launch from before schema 2 recorded `{}`."""
        row = self._one("SELECT config FROM launch_log WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
                        (run_id,))
        return json.loads(row[0]) if row is not None else None

    def launch_history(self, run_id: str | None = None) -> list[LaunchRecord]:
        """Every launch ever recorded (of one run, or of all), oldest first."""
        query = "SELECT seq, run_id, instance, box, at, config, detail FROM launch_log"
        rows = self._all(query + (" WHERE run_id = ? ORDER BY seq" if run_id else " ORDER BY seq"),
                         (run_id,) if run_id else ())
        return [LaunchRecord(r[0], r[1], r[2], r[3], parse_iso(r[4]), json.loads(r[5]), json.loads(r[6]))
                for r in rows]
