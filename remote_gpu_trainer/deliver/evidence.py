"""EVIDENCE.json, the claims map (docs/deliver.md §2): the user writes what is claimed and where (the U fields),
`rgt build evidence` writes every number about it (the G fields). This module is the pure part: the check of
the user's fields, and the file with the generated fields laid into it in place.

The user's fields and their key order are kept byte for byte in meaning: a generated key already in an object
is replaced where it stands; a missing one is added where the format shows it (a claim's `disclosure`,
`findings` and `state` before its `evidence`, a row's fields after the user's, `generated_at` before
`claims`). Numbers are written at full precision (JSON floats are Python's repr), so the file is the
authority the documents are reconciled against.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID
from remote_gpu_trainer.errors import ConfigError

SCHEMA = "remote-gpu-trainer/EVIDENCE/v1"
FILE = "EVIDENCE.json"
AGGREGATES = ("mean_over_seeds", "iqm_over_seeds", "single")
CLAIM_FIELDS = ("disclosure", "findings", "state")  # generated per claim
MAX_PRECISION = 15
_CELL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class RowSpec:
    """One evidence row as the user wrote it, checked: what it aggregates and how it is shown."""

    claim: str
    index: int
    subject: str  # claim:<id>, or claim:<id>#<index> when the claim has several rows (as VERIFY names it)
    cells: tuple[str, ...]
    test_id: str
    metric: str
    aggregate: str
    precision: int | None
    display_scale: float
    figures: tuple[str, ...]
    tables: tuple[str, ...]


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of EVIDENCE.json as the user wrote it, checked: its id, where the paper quotes it, and its evidence
    rows."""

    id: str
    paper_anchor: str | None
    rows: tuple[RowSpec, ...]


def validate(evidence: Any) -> list[ClaimSpec]:
    """The user's fields, checked; the first problem is a ConfigError naming the claim and the key, so a bad
    file is refused before anything is computed or written."""
    if not isinstance(evidence, Mapping):
        raise ConfigError(f"{FILE}: not a JSON object")
    if evidence.get("schema") != SCHEMA:
        raise ConfigError(f"{FILE}: key schema: must be {SCHEMA!r}, not {evidence.get('schema')!r}")
    claims = evidence.get("claims")
    if not isinstance(claims, list):
        raise ConfigError(f"{FILE}: key claims: must be a list of claims")
    specs: list[ClaimSpec] = []
    seen: set[str] = set()
    for position, claim in enumerate(claims):
        spec = _claim(position, claim)
        if spec.id in seen:
            raise ConfigError(f"{FILE}: claim {spec.id}: key id: used by two claims (claims[{position}] repeats it)")
        seen.add(spec.id)
        specs.append(spec)
    return specs


def _claim(position: int, claim: Any) -> ClaimSpec:
    if not isinstance(claim, Mapping):
        raise ConfigError(f"{FILE}: claims[{position}]: not a JSON object")
    ident = claim.get("id")
    if not isinstance(ident, str) or not ident:
        raise ConfigError(f"{FILE}: claims[{position}]: key id: missing (every claim needs a stable id, e.g. "
                          "\"C1-main-psnr\")")
    if not SAFE_ID.match(ident):
        raise ConfigError(f"{FILE}: claim {ident!r}: key id: letters, digits, '.', '_' and '-' only")
    rows = claim.get("evidence", [])
    if not isinstance(rows, list):
        raise ConfigError(f"{FILE}: claim {ident}: key evidence: must be a list of rows")
    anchor = claim.get("paper_anchor")
    if anchor is not None and not isinstance(anchor, str):
        raise ConfigError(f"{FILE}: claim {ident}: key paper_anchor: must be a string")
    metric = claim.get("metric")
    specs = tuple(_row(ident, index, len(rows), row, metric) for index, row in enumerate(rows))
    return ClaimSpec(ident, anchor or None, specs)


def _row(claim: str, index: int, count: int, row: Any, claim_metric: Any) -> RowSpec:
    where = f"{FILE}: claim {claim} evidence[{index}]"
    if not isinstance(row, Mapping):
        raise ConfigError(f"{where}: not a JSON object")
    cells = row.get("cells")
    if not isinstance(cells, list) or not cells:
        raise ConfigError(f"{where}: key cells: must list the capsules <run>/<cell> it aggregates, one per seed")
    for cell in cells:
        if not isinstance(cell, str) or not _CELL.match(cell):
            raise ConfigError(f"{where}: key cells: {cell!r} is not a capsule <run>/<cell>")
    if len(set(cells)) != len(cells):
        raise ConfigError(f"{where}: key cells: lists a capsule twice")
    test_id = row.get("test_id")
    if not isinstance(test_id, str) or not SAFE_ID.match(test_id):
        raise ConfigError(f"{where}: key test_id: must name the test folder (test/<test_id>/) of the cells")
    metric = row.get("metric", claim_metric)
    if not isinstance(metric, str) or not metric.strip():
        raise ConfigError(f"{where}: key metric: missing (here or on the claim)")
    aggregate = row.get("aggregate", "mean_over_seeds")
    if aggregate not in AGGREGATES:
        raise ConfigError(f"{where}: key aggregate: {aggregate!r} is not one of {', '.join(AGGREGATES)}")
    if aggregate == "single" and len(cells) != 1:
        raise ConfigError(f"{where}: key aggregate: single takes one cell, not {len(cells)}")
    return RowSpec(claim, index, f"claim:{claim}#{index}" if count > 1 else f"claim:{claim}", tuple(cells), test_id,
                   metric, str(aggregate), _precision(where, row.get("precision")),
                   _scale(where, row.get("display_scale", 1)), _ids(where, row, "figures"), _ids(where, row, "tables"))


def _precision(where: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PRECISION:
        raise ConfigError(f"{where}: key precision: must be a whole number of decimals, 0 to {MAX_PRECISION}")
    return value


def _scale(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: key display_scale: must be a positive number (100 shows a fraction as %)")
    return float(value)


def _ids(where: str, row: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """Figure or table ids: folder names under figures/ or tables/, so nothing else can be named."""
    raw = row.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(i, str) and SAFE_ID.match(i) for i in raw):
        raise ConfigError(f"{where}: key {key}: must be a list of {key[:-1]} ids (folder names under {key}/)")
    return tuple(raw)


def filled(evidence: Mapping[str, Any], generated_at: str, rows: Mapping[tuple[int, int], Mapping[str, Any]],
           claims: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The file with its generated fields set: `rows[(claim, row)]` and `claims[claim]` hold them by position."""
    top = _laid(evidence, {"generated_at": generated_at}, before="claims")
    top["claims"] = [
        _laid({**claim, "evidence": [_laid(row, rows[(c, r)], before=None) for r, row in enumerate(claim["evidence"])]}
              if "evidence" in claim else claim, claims[c], before="evidence")
        for c, claim in enumerate(evidence["claims"])]
    return top


def _laid(obj: Mapping[str, Any], fields: Mapping[str, Any], *, before: str | None) -> dict[str, Any]:
    """`obj` with `fields` set: a key already there is replaced where it stands; the others go right before the
    key `before` (or at the end), in the order given."""
    fresh = [key for key in fields if key not in obj]
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == before:
            out.update({k: fields[k] for k in fresh})
        out[key] = fields[key] if key in fields else value
    for key in fresh:
        out.setdefault(key, fields[key])
    return out


def render(evidence: Mapping[str, Any]) -> bytes:
    """EVIDENCE.json's bytes: two-space indent, UTF-8 as written (never escaped), LF, a trailing newline."""
    return (json.dumps(evidence, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")

