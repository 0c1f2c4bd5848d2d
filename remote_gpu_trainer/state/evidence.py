"""What the gate compares with the files on disk: each verification's outcome and the manifest hash as the
builder printed it, with when it was built."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote_gpu_trainer.clock import parse_iso, utc_now
from remote_gpu_trainer.state.store import Store


@dataclass(frozen=True)
class VerificationRecord:
    """The outcome of one verification, as the gate compares it with the marker on disk."""

    at: datetime
    ok: bool
    manifest_sha256: str | None
    marker_sha256: str | None
    config_sha256: str | None
    config: dict[str, Any]
    errors: list[dict[str, Any]]
    files: list[dict[str, Any]]



class EvidenceTables(Store):
    """The `verification_records` and `run_records` tables."""

    # -- verification --------------------------------------------------------------------------
    def add_verification(self, run_id: str, ok: bool, manifest_sha256: str | None,
                         errors: list[dict[str, str]], files: list[dict[str, Any]], *,
                         marker_sha256: str | None = None, config_sha256: str | None = None,
                         config: dict[str, Any] | None = None) -> None:
        """One verification's outcome; a successful one names the marker bytes it wrote and the run
        configuration it was made under, so a forged or edited marker, or an edited rgt.toml, is noticed."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO verification_records (at, run_id, ok, manifest_sha256, errors, files, marker_sha256,"
                " config_sha256, config) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self._now(), run_id, int(ok), manifest_sha256, json.dumps(errors), json.dumps(files),
                 marker_sha256, config_sha256, json.dumps(config or {}, sort_keys=True)),
            )

    def last_verification(self, run_id: str) -> dict[str, Any] | None:
        record = self.last_verification_record(run_id)
        if record is None:
            return None
        return {"at": record.at, "ok": record.ok, "manifest_sha256": record.manifest_sha256,
                "errors": record.errors, "files": record.files}

    def last_verification_record(self, run_id: str) -> VerificationRecord | None:
        row = self._one(
            "SELECT at, ok, manifest_sha256, marker_sha256, config_sha256, config, errors, files"
            " FROM verification_records WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,),
        )
        if row is None:
            return None
        return VerificationRecord(at=parse_iso(row[0]), ok=bool(row[1]), manifest_sha256=row[2],
                                  marker_sha256=row[3], config_sha256=row[4], config=json.loads(row[5] or "{}"),
                                  errors=json.loads(row[6]), files=json.loads(row[7]))

    # -- run records: the manifest as built ----------------------------------------------------------
    def record_manifest(self, run_id: str, manifest_sha256: str, *, adopted_run_id: str | None = None) -> None:
        """The manifest's hash as the builder printed it (trust boundary 1), stamped with the real time in
        microseconds like the launch log: the gate asks whether the manifest was built after the last launch.
        `adopted_run_id` is given for a manifest adopted instead of built (docs/gate.md §2.1): the run id its
        bytes name, which the adoption binds to this run."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO run_records (run_id, manifest_sha256, manifest_built_at, adopted_run_id)"
                " VALUES (?, ?, ?, ?)"
                " ON CONFLICT(run_id) DO UPDATE SET manifest_sha256 = excluded.manifest_sha256,"
                " manifest_built_at = excluded.manifest_built_at, adopted_run_id = excluded.adopted_run_id",
                (run_id, manifest_sha256, utc_now().isoformat(timespec="microseconds"), adopted_run_id),
            )

    def adopted_run_id(self, run_id: str) -> str | None:
        """The run id the recorded manifest's bytes name when it was adopted (docs/gate.md §2.1), else None."""
        row = self._one("SELECT adopted_run_id FROM run_records WHERE run_id = ?", (run_id,))
        return str(row[0]) if row and row[0] is not None else None

    def manifest_built_at(self, run_id: str) -> datetime | None:
        row = self._one("SELECT manifest_built_at FROM run_records WHERE run_id = ?", (run_id,))
        return parse_iso(row[0]) if row and row[0] else None

    def recorded_manifest(self, run_id: str) -> str | None:
        row = self._one(
            "SELECT manifest_sha256 FROM run_records WHERE run_id = ?", (run_id,)
        )
        return str(row[0]) if row and row[0] else None
