"""One alert per signature row and run (docs/log-signatures.md §1 Alerts): repeats bump a counter, only a worse
severity alerts again, so a crash loop printing the same error a million times notifies once."""

from __future__ import annotations

from dataclasses import dataclass, replace

from remote_gpu_trainer.audits.log.samples import Hit, severity_rank


@dataclass(frozen=True)
class LedgerEntry:
    """What the UI shows for one row of one run: how bad, how often, the first and latest evidence."""

    signature: str
    severity: str  # the worst seen so far
    count: int
    first_t: float
    last_t: float
    first_evidence: str
    last_evidence: str
    line_no: int | None  # of the first hit
    detail: str  # of the hit that set the severity


class FindingsLedger:
    """One active alert per row for one run (§1 Alerts): repeats bump a counter, only escalation re-alerts.

    It holds one entry per row id, so a crash loop printing the same error a million times costs one entry.
    """

    def __init__(self) -> None:
        self._entries: dict[str, LedgerEntry] = {}

    def add(self, hit: Hit) -> bool:
        """Record a hit; True when the UI should notify (first hit of its row, or a worse severity than before)."""
        old = self._entries.get(hit.signature)
        if old is None:
            self._entries[hit.signature] = LedgerEntry(
                hit.signature, hit.severity, 1, hit.t, hit.t, hit.evidence, hit.evidence, hit.line_no, hit.detail
            )
            return True
        worse = severity_rank(hit.severity) > severity_rank(old.severity)
        self._entries[hit.signature] = replace(
            old,
            severity=hit.severity if worse else old.severity,
            detail=hit.detail if worse else old.detail,
            count=old.count + 1,
            last_t=max(old.last_t, hit.t),
            last_evidence=hit.evidence,
        )
        return worse

    def restore(self, entry: LedgerEntry) -> None:
        """Put back an entry kept across a restart, count and all, so nothing re-notifies or recounts."""
        self._entries[entry.signature] = entry

    def get(self, signature: str) -> LedgerEntry | None:
        return self._entries.get(signature)

    def entries(self) -> list[LedgerEntry]:
        """Entries in order of first appearance."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
