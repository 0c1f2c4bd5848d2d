"""What reconcile reads and finds (docs/deliver.md §6): a document and a document it could not read, a claim's
scalar value and its anchors, the number read after an anchor, and the drifts, coarse quotes, notes and missing
claims that make up `reconcile.json` (ReconcileReport).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class Document:
    """One document as read: its project-relative path (posix) and text; sha256 of its bytes when known."""

    path: str
    text: str
    sha256: str | None = None


@dataclass(frozen=True)
class DocumentProblem:
    """A configured document that could not be reconciled: unreadable, missing, or outside the project."""

    path: str
    message: str


@dataclass(frozen=True)
class ScalarClaim:
    """One EVIDENCE evidence row with a numeric value: the number documents must show.

    `id` is the claim id, with `#<row>` appended when the claim has several rows (as VERIFY names numbers).
    `target` is value × display_scale, exact in decimal; `shown` is the same product in float, the value the
    build's formatter (`f"{v:.{p}f}"`) renders, so an `expected` string is what `rgt build` would write."""

    id: str
    claim: str
    metric: str
    target: Decimal
    shown: float
    precision: int | None
    anchors: tuple[str, ...]
    generic: bool  # the anchor is the metric's first word, not a declared alias
    paper_anchor: str | None = None


@dataclass(frozen=True)
class Drift:
    """A number beside an anchor that no claim sharing the anchor is consistent with. The nearest candidate
    gives `metric`, `authoritative` and `expected`; `claim_ids` lists every candidate, nearest first."""

    doc: str
    line: int
    col: int  # 1-based column of the number in the document's own line
    claim_ids: tuple[str, ...]
    metric: str
    authoritative: float
    expected: str  # the authoritative value at the decimals the document wrote
    reported: float
    reported_text: str
    decimals: int
    context: str
    #: `inconsistent` (the number is not the value at the decimals written) or `coarser_than_precision` (it
    #: rounds correctly but has fewer decimals than the claim's precision, and no approximate mark: `expected`
    #: is then the value at that precision)
    reason: str = "inconsistent"
    precision: int | None = None  # the claim's precision (declared, else DISPLAY_PRECISION) for a coarse drift


@dataclass(frozen=True)
class CoarseQuote:
    """A number that rounds correctly but says less than the claim's precision, in a sentence that marks it
    approximate (`about 31` for 31.42): not a drift, and it covers the claim, but it is reported so a reader
    can see where the documents round. `expected` is the value at `precision`; `marker` the word or sign."""

    doc: str
    line: int
    col: int
    claim_ids: tuple[str, ...]
    metric: str
    authoritative: float
    expected: str
    reported: float
    reported_text: str
    decimals: int
    precision: int
    marker: str
    context: str


@dataclass(frozen=True)
class Note:
    """A warning (`ambiguous_anchor`, `value_out_of_range`) or an info (`anchor_without_number`). `detail` says
    in words what a `value_out_of_range` row holds. (A quote coarser than the claim's precision, once the info
    `coarser_than_declared`, is now a drift or a CoarseQuote.)"""

    kind: str
    claim_ids: tuple[str, ...] = ()
    anchor: str = ""
    doc: str = ""
    line: int = 0
    col: int = 0
    reported: float | None = None
    decimals: int | None = None
    precision: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Missing:
    """A claim no document shows consistently: `warn` when it has a paper anchor (it is asserted somewhere),
    else `info`."""

    claim_id: str
    claim: str
    metric: str
    authoritative: float
    severity: str
    paper_anchor: str | None = None


@dataclass(frozen=True)
class Reading:
    """The number found after one anchor occurrence."""

    doc: str
    line: int
    col: int
    anchor: str
    text: str
    value: Decimal
    decimals: int
    context: str
    lead: str = ""  # the text between the anchor and the number, as a reader sees it (approximate marks)


@dataclass(frozen=True)
class ReconcileReport:
    """The answer `reconcile.json` holds. `problems` are inputs that could not be read (exit 2)."""

    drifts: tuple[Drift, ...] = ()
    warnings: tuple[Note, ...] = ()
    infos: tuple[Note, ...] = ()
    missing_from_docs: tuple[Missing, ...] = ()
    coverage: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    claims: tuple[ScalarClaim, ...] = ()
    documents: tuple[str, ...] = ()
    problems: tuple[DocumentProblem, ...] = ()
    mode: str = "rounding"
    coarse_quotes: tuple[CoarseQuote, ...] = ()

    @property
    def exit_code(self) -> int:
        """2 when an input was unreadable or there was nothing to reconcile (the answer would be incomplete
        or empty, so it takes precedence), 1 on any drift, else 0. A status, never a block."""
        if self.problems or not self.claims:
            return 2
        return 1 if self.drifts else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "remote-gpu-trainer/RECONCILE/v1", "mode": self.mode, "exit_code": self.exit_code,
            "documents": list(self.documents), "scalar_claims": len(self.claims),
            "drifts": [asdict(d) for d in self.drifts],
            "coarse_quotes": [asdict(q) for q in self.coarse_quotes],
            "warnings": [_note_dict(n) for n in self.warnings],
            "infos": [_note_dict(n) for n in self.infos],
            "missing_from_docs": [asdict(m) for m in self.missing_from_docs],
            "coverage": {claim: list(where) for claim, where in self.coverage.items()},
            "problems": [asdict(p) for p in self.problems],
        }

    def to_json(self) -> str:
        """The text of `reconcile.json`: stable key order, LF, trailing newline."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"


NOTE_FIELDS = {
    "ambiguous_anchor": ("kind", "claim_ids", "anchor"),
    "value_out_of_range": ("kind", "claim_ids", "detail"),
    "anchor_without_number": ("kind", "claim_ids", "anchor", "doc", "line", "col"),
}


def _note_dict(note: Note) -> dict[str, Any]:
    """A note with the fields its kind uses, so reconcile.json says only what was found."""
    body = asdict(note)
    return {key: body[key] for key in NOTE_FIELDS.get(note.kind, tuple(body))}
