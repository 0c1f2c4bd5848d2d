"""The claim ladder (docs/deliver.md §2): planned → evaluated → pull_verified → audited → paper_supported.

Each step is entered on its own evidence, never inferred from the step before: every source cell evaluated
(its metrics.json holds the metric, in bytes a pull of rgt brought: a file written here is no measurement and
stays `planned`), every source run pull-verified (its PULL_VERIFIED.json is the one the last recorded
verification wrote), every VERIFY check answered by an audit newer than those verifications with each finding
touching the claim dispositioned, and the claim quoted consistently in the document its `paper_anchor` names.
The first step whose evidence is missing stops the ladder there, and says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

STATES = ("planned", "evaluated", "pull_verified", "audited", "paper_supported")


@dataclass(frozen=True)
class ClaimEvidence:
    """The evidence of each step for one claim, as the services found it. Each `…` field that is not empty
    (or not None) says why its step is not reached."""

    rows: int  # evidence rows the claim has
    missing_cells: tuple[str, ...] = ()  # source cells whose metrics.json lacks the metric
    unpulled: tuple[str, ...] = ()  # `<paths> (<why>)` of source files no pull of rgt brought (not evidence)
    unverified: Mapping[str, str] = field(default_factory=dict)  # source run -> why it is not pull-verified
    audit_gap: str | None = None  # why no audit covers the claim's capsules (None: one does)
    open_findings: tuple[str, ...] = ()  # ids of open findings touching the claim
    not_quoted: str | None = None  # why the claim is not quoted consistently where its paper_anchor says


@dataclass(frozen=True)
class Ladder:
    """Where a claim stands on the ladder, and why it did not climb to the next step (None at the top)."""

    state: str
    stopped: str | None  # why the next step was not entered; None at the top


def climb(evidence: ClaimEvidence) -> Ladder:
    """The highest state whose own evidence and every step's below it hold."""
    reasons = (_evaluated(evidence), _pull_verified(evidence), _audited(evidence), evidence.not_quoted)
    for state, reason in zip(STATES, reasons, strict=False):
        if reason:
            return Ladder(state, reason)
    return Ladder(STATES[-1], None)


def _evaluated(evidence: ClaimEvidence) -> str | None:
    if evidence.rows == 0:
        return "no evidence rows: nothing is measured yet"
    if evidence.missing_cells:
        return f"not evaluated: no metrics.json value in {', '.join(evidence.missing_cells)}"
    if evidence.unpulled:  # a file written here is no measurement of a run: nothing was evaluated
        return f"not evaluated: not pulled by rgt: {'; '.join(evidence.unpulled)}"
    return None


def _pull_verified(evidence: ClaimEvidence) -> str | None:
    if not evidence.unverified:
        return None
    return "not pull-verified: " + "; ".join(f"run {run}: {why}" for run, why in sorted(evidence.unverified.items()))


def _audited(evidence: ClaimEvidence) -> str | None:
    if evidence.audit_gap:
        return evidence.audit_gap
    if evidence.open_findings:
        return (f"open finding{'s' if len(evidence.open_findings) > 1 else ''} "
                f"{', '.join(evidence.open_findings)}: acknowledge, waive or fix (rgt finding ID)")
    return None
