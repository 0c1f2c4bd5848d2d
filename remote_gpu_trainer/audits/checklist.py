"""Automatic checklist answers: pure functions over facts the services gathered (docs/verify.md §4).

Each returns (status, note): `pass`, `findings` (the number needs a disclosure) or `skipped` (its inputs
are absent, with what is missing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remote_gpu_trainer.strict_json import loads_strict


@dataclass(frozen=True)
class ChecklistFacts:
    gate_evidence_ok: bool
    evidence_reasons: tuple[str, ...]
    roster: tuple[str, ...]
    metric_name: str | None
    metric_direction: str | None
    # cell -> (bytes of the local metrics file or None, whether that exact file was hash-verified)
    metric_files: Mapping[str, tuple[bytes | None, bool]] = field(default_factory=dict)


Result = tuple[str, str]


def checkpoints_verified(facts: ChecklistFacts, item: Mapping[str, Any]) -> Result:
    if facts.gate_evidence_ok:
        return "pass", "PULL_VERIFIED.json matches the manifest and every local file"
    reason = facts.evidence_reasons[0] if facts.evidence_reasons else "not verified"
    return "findings", reason


def seed_count(facts: ChecklistFacts, item: Mapping[str, Any]) -> Result:
    wanted = int(item.get("min_seeds", 3))
    seeds = len(facts.roster)
    if seeds >= wanted:
        return "pass", f"{seeds} seeds"
    return "findings", f"{seeds} seed{'s' if seeds != 1 else ''} < {wanted}: no variance band"


def metric_direction(facts: ChecklistFacts, item: Mapping[str, Any]) -> Result:
    if facts.metric_name and facts.metric_direction in ("min", "max"):
        word = "lower" if facts.metric_direction == "min" else "higher"
        return "pass", f"{facts.metric_name}: {word} is better"
    return "findings", "no metric declared in rgt.toml (runs.<id>.metric)"


def numbers_reread(facts: ChecklistFacts, item: Mapping[str, Any]) -> Result:
    if not facts.metric_name:
        return "skipped", "no metric declared"
    values = []
    for cell in facts.roster:
        data, verified = facts.metric_files.get(cell, (None, False))
        if data is None:
            return "skipped", f"{cell}: no local metrics file yet (pull first)"
        if not verified:
            return "findings", f"{cell}: metrics file is not the hash-verified copy"
        try:
            parsed = loads_strict(data)
        except ValueError as exc:
            return "findings", f"{cell}: metrics file does not parse: {exc}"
        value = parsed.get(facts.metric_name) if isinstance(parsed, dict) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return "findings", f"{cell}: {facts.metric_name} missing or not a finite number"
        values.append(f"{cell}={value:.4g}")
    return "pass", ", ".join(values)


CHECKS: dict[str, Callable[[ChecklistFacts, Mapping[str, Any]], Result]] = {
    "checkpoints_verified": checkpoints_verified,
    "seed_count": seed_count,
    "metric_direction": metric_direction,
    "numbers_reread": numbers_reread,
}
