"""The generated fields of an EVIDENCE.json evidence row (docs/verify.md §5.4, docs/deliver.md §2): what
`rgt build evidence` writes and what V29 recomputes, from this one function, so the build and the audit can
never compute two numbers for one row.

A row names its capsules (`cells`, one per seed), a test and a metric; everything else about the number is read
from those capsules' `test/<test_id>/metrics.json`: the value at full precision (aggregated as the row says), the
direction (metrics.json, else the metric registry), the split and n the files state, how many seeds gave a
value, the variance over them, and the sha256 of every file used. A row with a cell that gave no value has no
value at all (null), never a mean over the cells that happened to be there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.audits.catalogue.comparability import metric_direction
from remote_gpu_trainer.audits.catalogue.generated_row import (
    GENERATED_ROW_FIELDS,
    NO_VARIANCE,
    STD_OVER_SEEDS,
    GeneratedRow,
)
from remote_gpu_trainer.audits.catalogue.load import finite
from remote_gpu_trainer.audits.catalogue.metric_registry import DIRECTION_WORDS
from remote_gpu_trainer.audits.catalogue.model import EvidenceRef, Number, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.numbers import SeedValue, aggregate, sample_std, seed_values
from remote_gpu_trainer.audits.catalogue.smoke import Issue


def generate_row(project: ProjectEvidence, number: Number) -> GeneratedRow:
    """The row's generated fields from its capsules' metrics.json files, as read by audits/catalogue/load.py."""
    used = seed_values(project, number)
    found = {v.capsule.key for v in used}
    missing = tuple(cell for cell in number.cells if cell not in found)
    values = [v.value for v in used]
    value = aggregate(number, values) if values and not missing else None
    capsules = [v.capsule for v in used] or [c for c in (project.capsule(k) for k in number.cells) if c is not None]
    short = metric_direction(project, capsules, number.test_id, number.metric)
    return GeneratedRow(
        value=value, direction=DIRECTION_WORDS.get(short, short) if short is not None else None,
        split=_common([v.test.split for v in used]), n=_common([v.test.n for v in used]), seeds=len(values),
        variance=_variance(number, values) if value is not None else None,
        sources=tuple({"path": v.test.metrics_path, "sha256": v.test.metrics_sha256} for v in used),
        missing=missing, unit=_unit(used, number.metric), used=tuple(used))


def _common(values: list[Any]) -> Any:
    """The one value every file states; None when they state none or disagree."""
    distinct = set(values)
    return values[0] if len(distinct) == 1 and None not in distinct else None


def _variance(number: Number, values: list[float]) -> dict[str, Any]:
    """Sample std over the seeds; a single seed (or a `single` row) has no variance band."""
    std = sample_std(values) if number.aggregate != "single" else None
    return {"type": STD_OVER_SEEDS, "value": std} if std is not None else {"type": NO_VARIANCE, "value": None}


def _unit(used: list[SeedValue], metric: str) -> str | None:
    """The unit the first metrics.json states for the metric (`dB`); only the inline form prints it."""
    for seed in used:
        block = seed.test.metric_block(metric)
        unit = block.get("unit") if block is not None else None
        if isinstance(unit, str) and unit.strip():
            return unit.strip()
    return None


def field_differences(stated: Mapping[str, Any], generated: GeneratedRow,
                      close: Any) -> list[tuple[str, Any, Any]]:
    """(field, what the row says, what the files give) for every generated field other than `value` that the
    row holds and that does not recompute; `close(a, b)` compares two floats. A field the row does not hold
    was never generated, so it is not judged (V05 asks for it)."""
    derived = generated.fields()
    found: list[tuple[str, Any, Any]] = []
    for name in ("direction", "split", "n", "seeds"):
        if name in stated and (stated[name] != derived[name] or isinstance(stated[name], bool)):
            found.append((name, stated[name], derived[name]))
    if "variance" in stated and not _same_variance(stated["variance"], derived["variance"], close):
        found.append(("variance", stated["variance"], derived["variance"]))
    if "sources" in stated:
        found += _source_differences(stated["sources"], derived["sources"])
    return found


def _same_variance(said: Any, derived: Mapping[str, Any] | None, close: Any) -> bool:
    if derived is None or not isinstance(said, Mapping):
        return said == derived
    if said.get("type") != derived["type"] or set(said) != set(derived):
        return False
    a, b = said.get("value"), derived["value"]
    if a is None or b is None:
        return a is None and b is None
    return isinstance(a, int | float) and not isinstance(a, bool) and math.isfinite(a) and close(float(a), b)


def _source_differences(said: Any, derived: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    """`sources[i].sha256` when the same file is listed with another hash, else `sources` when the files differ."""
    entries = said if isinstance(said, list) else None
    paths = [e.get("path") if isinstance(e, Mapping) else None for e in entries or []]
    if entries is None or paths != [d["path"] for d in derived]:
        return [("sources", said, derived)]
    return [(f"sources[{i}].sha256", e.get("sha256"), d["sha256"])
            for i, (e, d) in enumerate(zip(entries, derived, strict=True)) if e.get("sha256") != d["sha256"]]


# -- V29: a row against what would be generated now -------------------------------------------------------
def differs(recomputed: float, stored: float, tolerance: tuple[float, float]) -> bool:
    """V29's one comparison of a recomputed number with a stored one (absolute + relative tolerance)."""
    return abs(recomputed - stored) > tolerance[0] + tolerance[1] * abs(stored)


def row_issues(project: ProjectEvidence, number: Number,
               tolerance: tuple[float, float]) -> tuple[list[Issue], list[EvidenceRef]] | None:
    """V29 on an EVIDENCE row: every generated field it holds must be what `rgt build evidence` computes now; a
    field that is not was edited by hand or went stale. None when the row holds no generated field (nothing
    was generated to judge)."""
    row = number.stated
    if not any(name in row for name in GENERATED_ROW_FIELDS):
        return None
    generated = generate_row(project, number)
    stated = finite(row.get("value"))
    issues: list[Issue] = []
    if stated is not None:
        found = [v.capsule.key for v in generated.used]
        issues += _evidence_issues(number.cells, found, aggregate(number, [v.value for v in generated.used]),
                                   stated, tolerance)
    elif "value" in row and (row["value"] is not None or generated.value is not None):
        issues.append(_field_issue("value", row["value"], generated.value))

    def close(said: float, derived: float) -> bool:  # the tolerance `value` is judged with
        return not differs(derived, said, tolerance)

    issues += [_field_issue(name, said, derived) for name, said, derived in field_differences(row, generated, close)]
    return issues, [v.ref for v in generated.used]


def _field_issue(name: str, said: Any, derived: Any) -> Issue:
    return Issue("critical", f"evidence field {name} not generated from artifacts: EVIDENCE says {said!r}, the "
                             f"metrics.json files give {derived!r} (rgt build evidence writes it)",
                 {f"{name}.stated": said, f"{name}.recomputed": derived})


def _evidence_issues(cells: tuple[str, ...], found: list[str], recomputed: float | None, stated: float,
                     tolerance: tuple[float, float]) -> list[Issue]:
    missing = [cell for cell in cells if cell not in found]
    if missing:
        return [Issue("critical", f"evidence value not generated from artifacts: no metrics.json value in "
                                  f"{', '.join(missing)}", {"stated": stated, "missing_cells": missing})]
    if recomputed is not None and differs(recomputed, stated, tolerance):
        return [Issue("critical", f"evidence value not generated from artifacts: EVIDENCE says {stated!r}, the "
                                  f"metrics.json files give {recomputed!r}",
                      {"stated": stated, "recomputed": recomputed})]
    return []
