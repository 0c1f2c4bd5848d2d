"""A number read in a document against the claims sharing its anchor (docs/deliver.md §6): consistent at the
decimals written (or exactly), coarser than the claim's precision (a drift, or a coarse quote when the sentence
marks it approximate), or a drift; and `reconcile`, every document against every scalar claim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

from remote_gpu_trainer.audits.catalogue.reconcile.claims import ambiguous_anchors, anchor_index, scalar_claims
from remote_gpu_trainer.audits.catalogue.reconcile.model import (
    CoarseQuote,
    Document,
    DocumentProblem,
    Drift,
    Missing,
    Note,
    Reading,
    ReconcileReport,
    ScalarClaim,
)
from remote_gpu_trainer.audits.catalogue.reconcile.text import WINDOW, readings

MODES = ("rounding", "exact")
#: the decimals a claim without a declared `precision` is shown with: the build's formatter's default
#: (deliver/disclosure.py DEFAULT_PRECISION; audits may not import deliver, a test holds the two equal)
DISPLAY_PRECISION = 2
#: the words and signs that mark a number as approximate when they stand between the anchor and the number
#: (`PSNR of about 31`, `accuracy ~0.97`, `PSNR $\approx$ 31`); in LaTeX `~` is a space, `\approx`/`\sim` the mark
APPROXIMATE = re.compile(r"(?<![A-Za-z])(?:about|around|roughly|approximately|approx\.?|circa)(?![A-Za-z])"
                         r"|[~≈∼≃]|\\(?:approx|sim)(?![A-Za-z])", re.IGNORECASE)


def consistent(reported: Decimal, decimals: int, target: Decimal, mode: str = "rounding") -> bool:
    """Whether a number written with `decimals` decimals shows `target`.

    `rounding`: |r − t| ≤ ½·10^−d + 1e-9·max(1, |t|), in exact decimal arithmetic, so both neighbours of a
    half-way target pass (0.125 may read 0.12 or 0.13: rounding half-even or half-up are both honest) and
    anything a decimal further off is stale. `exact`: math.isclose at rtol 1e-9 (the upstream behaviour)."""
    if mode == "exact":
        return math.isclose(float(reported), float(target), rel_tol=1e-9, abs_tol=0.0)
    tolerance = Decimal("0.5").scaleb(-decimals) + Decimal("1e-9") * max(Decimal(1), abs(target))
    return abs(reported - target) <= tolerance


def expected_text(claim: ScalarClaim, decimals: int) -> str:
    """The claim at `decimals` as the build's formatter writes it: the float it holds, rounded half-even on
    its exact binary value, which is what `f"{v:.{d}f}"` does (decimals < 0: to tens, hundreds, ...)."""
    with localcontext() as context:
        context.prec = 1500  # every digit of a double (309 before the point) to DECIMALS_MAX decimals
        rounded = Decimal(claim.shown).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)
    return format(rounded, "f") if decimals >= 0 else str(rounded)


def precision_of(claim: ScalarClaim) -> int:
    """The decimals a claim is shown with: its declared `precision`, else what the build shows (two)."""
    return DISPLAY_PRECISION if claim.precision is None else claim.precision


def coarse(reported: Decimal, decimals: int, claim: ScalarClaim) -> bool:
    """Whether a number consistent with `claim` says less than the claim's precision: fewer decimals than
    precision_of(claim), and not the value itself (`1` for 1.0 and `0.5` for 0.5 say all there is to say)."""
    exact = abs(reported - claim.target) <= Decimal("1e-9") * max(Decimal(1), abs(claim.target))
    return decimals < precision_of(claim) and not exact


def approximate_marker(lead: str) -> str | None:
    """The word or sign between an anchor and its number that marks the number approximate, if any."""
    found = APPROXIMATE.search(lead)
    return found.group() if found else None


@dataclass
class _Tally:
    """What reconcile accumulates over every document: the drifts, coarse quotes and notes, and where each claim was
    quoted."""

    drifts: list[Drift] = field(default_factory=list)
    coarse_quotes: list[CoarseQuote] = field(default_factory=list)
    infos: list[Note] = field(default_factory=list)
    coverage: dict[str, list[str]] = field(default_factory=dict)

    def cover(self, claims: Iterable[ScalarClaim], where: str) -> None:
        for claim in claims:
            if where not in self.coverage[claim.id]:
                self.coverage[claim.id].append(where)


def _judge(reading: Reading, candidates: Sequence[ScalarClaim], mode: str, tally: _Tally) -> None:
    """One reading against the claims sharing its anchor: covered by every claim it shows at that claim's
    precision; else, when it rounds correctly to some but with fewer decimals than their precision, a coarse
    quote if the sentence marks it approximate and a `coarser_than_precision` drift if not; else a drift."""
    fits = [c for c in candidates if consistent(reading.value, reading.decimals, c.target, mode)]
    where = f"{reading.doc}:{reading.line}"
    rough = [c for c in fits if mode == "rounding" and coarse(reading.value, reading.decimals, c)]
    full = [c for c in fits if c not in rough]
    if full:
        tally.cover(full, where)
        return
    if rough:
        ranked = sorted(rough, key=lambda c: abs(reading.value - c.target))
        nearest, precision = ranked[0], precision_of(ranked[0])
        marker = approximate_marker(reading.lead)
        if marker is not None:
            tally.cover(rough, where)
            tally.coarse_quotes.append(CoarseQuote(
                doc=reading.doc, line=reading.line, col=reading.col, claim_ids=tuple(c.id for c in ranked),
                metric=nearest.metric, authoritative=float(nearest.target),
                expected=expected_text(nearest, precision), reported=float(reading.value),
                reported_text=reading.text, decimals=reading.decimals, precision=precision, marker=marker,
                context=reading.context))
            return
        others = [c for c in candidates if c not in rough]
        ranked += sorted(others, key=lambda c: abs(reading.value - c.target))
        tally.drifts.append(Drift(
            doc=reading.doc, line=reading.line, col=reading.col, claim_ids=tuple(c.id for c in ranked),
            metric=nearest.metric, authoritative=float(nearest.target),
            expected=expected_text(nearest, precision), reported=float(reading.value),
            reported_text=reading.text, decimals=reading.decimals, context=reading.context,
            reason="coarser_than_precision", precision=precision))
        return
    ranked = sorted(candidates, key=lambda c: abs(reading.value - c.target))
    nearest = ranked[0]
    tally.drifts.append(Drift(
        doc=reading.doc, line=reading.line, col=reading.col, claim_ids=tuple(c.id for c in ranked),
        metric=nearest.metric, authoritative=float(nearest.target),
        expected=expected_text(nearest, reading.decimals), reported=float(reading.value),
        reported_text=reading.text, decimals=reading.decimals, context=reading.context))


def reconcile(evidence: Mapping[str, Any], documents: Sequence[Document], *, problems: Sequence[DocumentProblem] = (),
              window: int = WINDOW, mode: str = "rounding") -> ReconcileReport:
    """Every document against every scalar claim of EVIDENCE.json; the answer `reconcile.json` holds."""
    if mode not in MODES:
        raise ValueError(f"reconcile mode {mode!r} is not one of {', '.join(MODES)}")
    out_of_range: list[Note] = []
    claims = scalar_claims(evidence, out_of_range)
    index = anchor_index(claims)
    tally = _Tally(coverage={c.id: [] for c in claims})
    for doc in documents:
        for anchor, line, col, reading in readings(doc, index, window):
            if reading is None:
                tally.infos.append(Note("anchor_without_number", tuple(c.id for c in index[anchor]), anchor,
                                        doc.path, line, col))
                continue
            _judge(reading, index[anchor], mode, tally)
    covered = {claim for claim, where in tally.coverage.items() if where}
    missing = tuple(
        Missing(c.id, c.claim, c.metric, float(c.target), "warn" if c.paper_anchor else "info", c.paper_anchor)
        for c in claims if c.id not in covered)
    return ReconcileReport(
        drifts=tuple(tally.drifts), coarse_quotes=tuple(tally.coarse_quotes),
        warnings=(*out_of_range, *ambiguous_anchors(index)), infos=tuple(tally.infos),
        missing_from_docs=missing, coverage={k: tuple(v) for k, v in tally.coverage.items()},
        claims=tuple(claims), documents=tuple(d.path for d in documents), problems=tuple(problems), mode=mode)
