"""EVIDENCE.json's scalar claims as reconcile reads them (docs/deliver.md §6): one per evidence row with a finite
number, the value exact in decimal as shown (value × display_scale), and the anchors that find it in a document
(its aliases, else the metric's first word); anchors several claims share are noted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from remote_gpu_trainer.audits.catalogue.reconcile.model import Note, ScalarClaim

NON_ALNUM = re.compile(r"[^0-9A-Za-z]+")


def scalar_claims(evidence: Mapping[str, Any], skipped: list[Note] | None = None) -> list[ScalarClaim]:
    """One claim per evidence row whose value converts to a finite number; other rows are not reconciled. A
    row whose value × display_scale is beyond a double (1e308 × 100) cannot be shown by any build either: it
    is skipped like a non-numeric row, with a `value_out_of_range` warning naming it appended to `skipped`."""
    found: list[ScalarClaim] = []
    claims = evidence.get("claims")
    for position, claim in enumerate(claims if isinstance(claims, list) else []):
        if not isinstance(claim, Mapping):
            continue
        claim_id = str(claim.get("id") or f"claims[{position}]")
        rows = claim.get("evidence")
        rows = rows if isinstance(rows, list) else []
        for index, row in enumerate(rows):
            scalar = _scalar(claim, row, f"{claim_id}#{index}" if len(rows) > 1 else claim_id, claim_id) \
                if isinstance(row, Mapping) else None
            if isinstance(scalar, Note):
                if skipped is not None:
                    skipped.append(scalar)
            elif scalar is not None:
                found.append(scalar)
    return found


def _scalar(claim: Mapping[str, Any], row: Mapping[str, Any], scalar_id: str,
            claim_id: str) -> ScalarClaim | Note | None:
    value, scale = _number(row.get("value")), _number(row.get("display_scale", 1) or 1)
    if value is None or scale is None:
        return None
    shown = float(value) * float(scale)
    if not math.isfinite(shown):
        return Note("value_out_of_range", (scalar_id,), detail=(
            f"value {value:g} × display_scale {scale:g} is beyond a double: skipped as non-numeric, not reconciled"))
    metric = str(row.get("metric") or claim.get("metric") or "")
    aliases = _aliases(row.get("aliases")) + _aliases(claim.get("aliases"))
    anchors = tuple(dict.fromkeys(aliases)) or _generic_anchor(metric)
    if not anchors:
        return None
    precision = row.get("precision")
    paper_anchor = claim.get("paper_anchor")
    return ScalarClaim(
        id=scalar_id, claim=claim_id, metric=metric, target=value * scale, shown=shown,
        precision=precision if isinstance(precision, int) and not isinstance(precision, bool) else None,
        anchors=anchors, generic=not aliases,
        paper_anchor=paper_anchor if isinstance(paper_anchor, str) and paper_anchor else None)


def _number(raw: Any) -> Decimal | None:
    """A finite number as an exact decimal of what JSON holds (`0.9123` stays 0.9123); None otherwise."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        as_float = float(raw)
    except ValueError:
        return None
    if not math.isfinite(as_float):
        return None
    if isinstance(raw, int):
        return Decimal(raw)
    try:
        return Decimal(raw.strip()) if isinstance(raw, str) else Decimal(repr(raw))
    except InvalidOperation:
        return Decimal(repr(as_float))


def _aliases(raw: Any) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return tuple(a.strip().lower() for a in items if isinstance(a, str) and a.strip())


def _generic_anchor(metric: str) -> tuple[str, ...]:
    """The first word with a letter in the metric key (`psnr_set5` → `psnr`): dataset qualifiers come later
    in the key and are never anchors."""
    word = next((w for w in NON_ALNUM.split(metric) if any(c.isalpha() for c in w)), "")
    return (word.lower(),) if word else ()


def anchor_index(claims: Sequence[ScalarClaim]) -> dict[str, list[ScalarClaim]]:
    """Every anchor with the claims that use it, in claim order."""
    index: dict[str, list[ScalarClaim]] = {}
    for claim in claims:
        for anchor in claim.anchors:
            index.setdefault(anchor, []).append(claim)
    return index


def ambiguous_anchors(index: Mapping[str, Sequence[ScalarClaim]]) -> list[Note]:
    """An anchor several claims with different targets share, one of them by the generic rule: a number after
    it cannot say which claim it shows, so it is accepted when it fits any of them."""
    notes = []
    for anchor, claims in index.items():
        if len(claims) >= 2 and len({c.target for c in claims}) >= 2 and any(c.generic for c in claims):
            notes.append(Note("ambiguous_anchor", tuple(c.id for c in claims), anchor=anchor))
    return notes
