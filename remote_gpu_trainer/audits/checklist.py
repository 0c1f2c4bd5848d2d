"""Automatic checklist answers: pure functions over facts the services gathered (docs/verify.md §4).

Each returns (status, note): `pass`, `findings` (the number needs a disclosure) or `skipped` (its inputs
are absent, with what is missing). The numbers themselves are judged by the VERIFY catalogue
(audits/catalogue/), whose checks follow these items in the checklist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ChecklistFacts:
    """The facts the automatic checklist items judge, gathered by the service so these functions stay pure: the
    gate's evidence verdict and the run's roster."""

    gate_evidence_ok: bool
    evidence_reasons: tuple[str, ...]
    roster: tuple[str, ...] = ()


Result = tuple[str, str]


def checkpoints_verified(facts: ChecklistFacts, item: Mapping[str, Any]) -> Result:
    if facts.gate_evidence_ok:
        return "pass", "PULL_VERIFIED.json matches the manifest and every local file"
    reason = facts.evidence_reasons[0] if facts.evidence_reasons else "not verified"
    return "findings", reason


CHECKS: dict[str, Callable[[ChecklistFacts, Mapping[str, Any]], Result]] = {
    "checkpoints_verified": checkpoints_verified,
}
