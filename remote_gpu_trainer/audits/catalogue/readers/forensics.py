"""Tracker forensics on top of the readers: what differs between two runs' configs, and where a curve
peaked against where it ended (docs/verify.md §2, V01 and V03, on tracker runs).

`config_diff` flattens both configs to dotted keys (list items `a.0`) and drops the volatile keys V01
ignores (its `ignore` globs in assets/catalogue.toml, plus the trackers' own bookkeeping), so a W&B config and
an MLflow params folder of the same experiment compare key by key: int 1 equals float 1.0, a missing key
differs from `null`. `curve_peak` reads a train-shaped table: the best value by the metric's direction
(the registry's, or the one given), its step and epoch, the last value, and the gap between them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue import runner as catalogue
from remote_gpu_trainer.audits.catalogue.configs import flatten, matches, same_value
from remote_gpu_trainer.audits.catalogue.model import MetricRule

if TYPE_CHECKING:
    import pandas as pd

# Beyond V01's globs: the trackers' own keys and the times they stamp on a run.
TRACKER_VOLATILE = ("_wandb.*", "wandb_version", "*_time", "*_at", "*timestamp*", "output_dir", "logging_dir",
                    "run_name", "*.run_name")


class _Missing:
    """A key one config does not have: differs from every value, `null` included."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Difference:
    """One dotted config key whose value differs between two runs (MISSING on the side without it)."""

    key: str
    a: Any  # MISSING when run a has no such key
    b: Any


@dataclass(frozen=True)
class ConfigDiff:
    """How two runs' flattened configs differ, volatile keys dropped; V01 asks whether exactly one key varies."""

    differences: tuple[Difference, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.differences)

    @property
    def one_variable(self) -> bool:
        """Exactly one key differs: the comparison isolates one variable."""
        return len(self.differences) == 1


def default_ignore() -> tuple[str, ...]:
    """V01's ignore globs from the catalogue, with the trackers' volatile keys."""
    spec = catalogue.by_name("one_variable_diff")
    shipped = spec.params.get("ignore", []) if spec is not None else []
    return tuple(str(g) for g in shipped) + TRACKER_VOLATILE


def config_diff(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None,
                ignore: Iterable[str] | None = None) -> ConfigDiff:
    """Every non-volatile dotted key whose value differs between the two configs, in key order."""
    patterns = tuple(ignore) if ignore is not None else default_ignore()
    flat_a, flat_b = flatten(dict(a or {})), flatten(dict(b or {}))
    differences = []
    for key in sorted(set(flat_a) | set(flat_b)):
        if matches(key, patterns):
            continue
        value_a, value_b = flat_a.get(key, MISSING), flat_b.get(key, MISSING)
        if value_a is MISSING or value_b is MISSING or not same_value(value_a, value_b):
            differences.append(Difference(key, value_a, value_b))
    return ConfigDiff(tuple(differences))


@dataclass(frozen=True)
class CurvePeak:
    """Best and last of one curve. `gap` = |best − last|; `relative_gap` = gap / |best − first| as V03
    measures it (0 when the best is the first)."""

    metric: str
    direction: str  # max | min
    best: float
    best_step: int | None
    best_epoch: float | None
    last: float
    last_step: int | None
    last_epoch: float | None
    first: float
    gap: float
    relative_gap: float


def curve_peak(frame: pd.DataFrame | None, column: str, direction: str | None = None,
               declared: Mapping[str, MetricRule] | None = None) -> CurvePeak | None:
    """Peak and last of `column` by its direction; None when there is no such column, fewer than one
    finite value, or no max/min direction (a monitor metric has no peak)."""
    import pandas as pd

    way = metric_registry.to_short(direction) if direction else metric_registry.direction(column, declared)
    if frame is None or column not in frame.columns or way not in ("max", "min"):
        return None
    values = pd.to_numeric(frame[column], errors="coerce")
    keep = values.notna() & values.map(lambda v: math.isfinite(v))
    if not keep.any():
        return None
    rows = frame[keep].reset_index(drop=True)
    series = values[keep].reset_index(drop=True).astype(float)
    best_at = int(series.idxmax() if way == "max" else series.idxmin())
    best, last, first = float(series.iloc[best_at]), float(series.iloc[-1]), float(series.iloc[0])
    gap = abs(best - last)
    span = abs(best - first)
    return CurvePeak(metric=column, direction=way, best=best, best_step=_at(rows, "step", best_at, int),
                     best_epoch=_at(rows, "epoch", best_at, float), last=last,
                     last_step=_at(rows, "step", len(rows) - 1, int),
                     last_epoch=_at(rows, "epoch", len(rows) - 1, float), first=first, gap=gap,
                     relative_gap=gap / span if span > 0 else 0.0)


def _at(rows: pd.DataFrame, column: str, index: int, cast: Any) -> Any:
    """A row's step or epoch, None when the table has no such column or the cell is empty."""
    if column not in rows.columns:
        return None
    value = rows[column].iloc[index]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return cast(number) if math.isfinite(number) else None
