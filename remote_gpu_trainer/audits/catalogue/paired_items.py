"""V07's per-item half (docs/verify.md §2): each arm's per-item values averaged over its capsules, the paired
difference of a comparison, and the bootstrap CI of its mean, for every comparison of the audit at once.

An arm is built once per (run, test, metric) however many comparisons name it (the control of nine comparisons
is read once, not nine times), in numpy: item ids are aligned by position when every file lists them in one
order (the usual case), else through a hash index; never a Python object per item. The CIs of all comparisons
are computed together by audits/catalogue/bootstrap.py's `mean_cis`: comparisons with the same number of items
share one resampling matrix, and each CI is the one it would have alone (same seed, same rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits.catalogue.bootstrap import mean_cis
from remote_gpu_trainer.audits.catalogue.comparability import fmt, fmt_signed
from remote_gpu_trainer.audits.catalogue.model import Capsule, Comparison, EvidenceRef, ProjectEvidence


@dataclass(frozen=True)
class Arm:
    """A run's per-item values of one (test, metric): ids in the first capsule's order, the mean over its
    capsules per item (NaN when any capsule's value is NaN), and the results files it read."""

    ids: Any
    values: Any
    refs: tuple[EvidenceRef, ...]


@dataclass(frozen=True)
class PairedItems:
    """A comparison's per-item difference (run − control, as improvement), or the verdict that ends it."""

    key: str
    metric: str
    refs: tuple[EvidenceRef, ...]
    finite: Any = None
    dropped: int = 0
    verdict: tuple | None = None


Prepared = dict[tuple[str, str, str], "PairedItems | str"]


def capsule_items(capsule: Capsule, test_id: str, metric: str) -> tuple[Any, Any] | str:
    """A capsule's (item ids, values) of one metric, or why there is none."""
    import pandas as pd

    test = capsule.tests.get(test_id)
    if test is None or test.results is None:
        return f"{capsule.path}/test/{test_id}/results.parquet|csv missing"
    block = test.metric_block(metric) or {}
    column = block.get("column")
    if not isinstance(column, str) or column not in test.results.columns:
        return f"{test.results_path} has no per-item column for {metric} (metrics.{metric}.column = {column!r})"
    id_column, value_column = test.results["item_id"], test.results[column]
    # string ids with none missing (the usual case) are taken as they are: astype(str) made the same strings
    plain = pd.api.types.is_string_dtype(id_column.dtype) and id_column.dtype != object and not id_column.hasnans
    ids = (id_column if plain else id_column.astype(str)).to_numpy(dtype=object)
    if len(set(ids.tolist())) != len(ids):  # a set of the strings: half the cost of pandas' duplicated here
        return f"{test.results_path}: item_id is not unique"
    if getattr(value_column.dtype, "kind", "O") in "biuf" and not pd.api.types.is_extension_array_dtype(value_column):
        return ids, value_column.to_numpy(dtype=float)  # plain numpy numbers: what to_numeric would give back
    return ids, pd.to_numeric(value_column, errors="coerce").to_numpy(dtype=float)


def positions(ids: Any, other: Any) -> Any | None:
    """Where each of `other`'s ids sits in `ids` (both unique), or None when the two sets differ."""
    import numpy as np
    import pandas as pd

    if len(ids) != len(other):
        return None
    if np.array_equal(ids, other):
        return np.arange(len(ids))
    found = pd.Index(ids).get_indexer(other)
    return None if (found < 0).any() else found


def build_arm(project: ProjectEvidence, run_id: str, test_id: str, metric: str) -> Arm | str:
    """The run's arm, or why it has none per item."""
    import numpy as np

    ids: Any = None
    rows, refs = [], []
    for capsule in project.run_capsules(run_id):
        found = capsule_items(capsule, test_id, metric)
        if isinstance(found, str):
            return found
        test = capsule.tests[test_id]
        refs.append(EvidenceRef(test.results_path or "", test.results_sha256))
        if ids is None:
            ids = found[0]
            rows.append(found[1])
            continue
        where = positions(ids, found[0])
        if where is None:
            return f"runs/{run_id}: item sets differ between its capsules"
        aligned = np.empty(len(ids))
        aligned[where] = found[1]
        rows.append(aligned)
    if ids is None:
        return f"runs/{run_id}: no capsules"
    return Arm(ids, np.mean(np.stack(rows), axis=0), tuple(refs))


def paired(run: Arm, control: Arm, sign: float, key: str, metric: str) -> PairedItems:
    """The per-item difference of two arms, or the error that the items differ or none is finite."""
    import numpy as np
    import pandas as pd

    refs = run.refs + control.refs
    where = positions(control.ids, run.ids)
    if where is None:
        shared = int((pd.Index(control.ids).get_indexer(run.ids) >= 0).sum()) if len(run.ids) else 0
        values = {key: {"method": "items", "run_items": len(run.ids), "control_items": len(control.ids),
                        "shared": shared, "bold_allowed": False}}
        return PairedItems(key, metric, refs, verdict=(
            "error", f"item sets differ on {key}: run {len(run.ids)} items, control {len(control.ids)}, "
                     f"{shared} shared", values, refs, "bug"))
    diff = sign * (run.values - control.values[where])
    finite = diff[np.isfinite(diff)]
    if len(finite) == 0:
        return PairedItems(key, metric, refs, verdict=(
            "error", f"no finite per-item {metric} on {key}", {key: {"method": "items", "dropped": len(diff)}},
            refs, "bug"))
    return PairedItems(key, metric, refs, finite=finite, dropped=len(diff) - len(finite))


def prepare(project: ProjectEvidence, targets: Iterable[tuple[Comparison, str, str]],
            sign: Callable[[Comparison, str, str], float]) -> Prepared:
    """Each (pair subject, test, metric) target's paired items, or why it has none per item; arms are built
    once per (run, test, metric)."""
    arms: dict[tuple[str, str, str], Arm | str] = {}

    def arm(run_id: str, test_id: str, metric: str) -> Arm | str:
        if (run_id, test_id, metric) not in arms:
            arms[(run_id, test_id, metric)] = build_arm(project, run_id, test_id, metric)
        return arms[(run_id, test_id, metric)]

    prepared: Prepared = {}
    for comparison, test_id, metric in targets:
        run = arm(comparison.run, test_id, metric)
        control = arm(comparison.control, test_id, metric) if isinstance(run, Arm) else run
        reason = run if isinstance(run, str) else control if isinstance(control, str) else None
        prepared[(comparison.subject, test_id, metric)] = reason if reason is not None else paired(
            run, control, sign(comparison, test_id, metric), f"{test_id}/{metric}", metric)  # type: ignore[arg-type]
    return prepared


def with_cis(prepared: Prepared, resamples: int, rng_seed: int
             ) -> dict[tuple[str, str, str], tuple[tuple[float, float], float]]:
    """The bootstrap CI and Wilcoxon p of every prepared difference, all computed in one pass each
    (bootstrap.mean_cis, wilcoxon_ps)."""
    keys = [k for k, p in prepared.items() if isinstance(p, PairedItems) and p.verdict is None]
    samples = [prepared[k].finite for k in keys]  # type: ignore[union-attr]
    return dict(zip(keys, zip(mean_cis(samples, resamples, rng_seed), wilcoxon_ps(samples), strict=True),
                    strict=True))


def wilcoxon_ps(samples: list[Any]) -> list[float]:
    """Wilcoxon's signed-rank p of each sample (1 when every difference is 0). Samples of one length over 50
    are tested in one scipy call along the last axis: scipy then takes the asymptotic test for each, the same
    arithmetic per row as a call per sample, so the same p (a test pins it); shorter ones, whose exact or
    permutation choice depends on ties in the whole input, are tested one by one."""
    import warnings

    import numpy as np
    from scipy.stats import wilcoxon

    ps = [1.0] * len(samples)
    groups: dict[int, list[int]] = {}
    for position, sample in enumerate(samples):
        if np.any(sample != 0):
            groups.setdefault(len(sample) if len(sample) > 50 else -1 - position, []).append(position)
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # degenerate samples: p NaN, as judged alone
        warnings.simplefilter("ignore")
        for positions in groups.values():
            stacked = np.stack([samples[i] for i in positions]) if len(positions) > 1 else samples[positions[0]]
            found = np.atleast_1d(wilcoxon(stacked, axis=-1).pvalue)
            for position, value in zip(positions, found.tolist(), strict=True):
                ps[position] = float(value)
    return ps


def judge(items: PairedItems, ci: tuple[float, float] | None, p: float | None = None) -> tuple | None:
    """V07's per-item verdict: a CI of the mean difference containing 0 warns (with Wilcoxon's p); `ci` is
    the target's from `with_cis` (None only for a target that ended with a verdict), `p` its `wilcoxon_ps`
    (computed here when not given)."""
    if items.verdict is not None:
        return items.verdict
    if ci is None:
        raise ValueError(f"{items.key}: no bootstrap CI was computed for this difference")
    finite, key = items.finite, items.key
    lo, hi = ci
    if p is None:
        p = wilcoxon_ps([finite])[0]
    delta = float(finite.mean())
    values = {key: {"method": "items", "delta": delta, "ci95": [lo, hi], "wilcoxon_p": p, "n": len(finite),
                    "dropped": items.dropped, "bold_allowed": not lo <= 0 <= hi}}
    if not lo <= 0 <= hi:
        return None
    return ("warn", f"inside sampling noise: {key} mean per-item Δ = {fmt_signed(delta)}, 95 % CI "
                    f"[{fmt(lo)}, {fmt(hi)}] contains 0 ({len(finite)} items, Wilcoxon p = {fmt(p)})",
            values, items.refs, "negligence")
