"""VERIFY section E, representation collapse: V20 output cosine, V21 real vs shuffled, V22 input spread,
V23 prediction diversity (docs/verify.md §2).

A collapsed model gives (nearly) the same output whatever the input, so its metric is a property of the data,
not of the model. V20 and V22 measure that on vectors; V21 and V23 on the saved per-item results.

Probe answers (stored per (check id, `capsule:<run>/<cell>`), read from ProjectEvidence.probes):

- V20 `rgt probe RUN V20`: `{"batch": B, "mean_cosine": c, "spread": s}` over B ≥ 16 distinct inputs, from
  `output_cosine_stats(outputs)`. V20 also runs without a probe when a test folder holds `outputs.npy` or
  `embeddings.npy` (one row per test item; read with allow_pickle=False, the first `max_items` rows).
- V22 `rgt probe RUN V22`: `{"batch": B, "mean_cosine": c, "spread_ratio": r}` on the raw input vectors, from
  `input_spread_stats(inputs)` (the same two numbers, on inputs).

The metric recomputation from per-item rows (`recompute`) lives here too: V21 scores each condition with it and
V29 re-derives metrics.json with it, so both agree on what a metric's aggregate means.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue.bootstrap import difference_ci, mean_ci
from remote_gpu_trainer.audits.catalogue.class_labels import label_counts, labels
from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    TestArtifacts,
    canonical_json,
    result,
)
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.audits.catalogue.smoke import (
    Issue,
    finish,
    judged_or_skipped,
    merge,
    numeric,
    probe_answer,
    probe_skip,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

OUTPUT_FILES = ("outputs.npy", "embeddings.npy")


# -- vector statistics (shared with the probe program) --------------------------------------------------------
def output_cosine_stats(outputs: np.ndarray) -> tuple[float, float]:
    """(c, spread) over B ≥ 2 rows flattened to [B, D]: c = mean off-diagonal cosine (two all-zero rows count as
    identical, cosine 1), spread = mean over features of the std across rows ÷ (mean |y| + 1e-12).
    O(B·D): the pairwise sum is |Σ u_i|² − Σ |u_i|² over the unit rows, never a B×B matrix."""
    import numpy as np

    data = np.asarray(outputs, dtype=np.float64)
    rows = data.reshape(data.shape[0], -1)
    if rows.shape[0] < 2:
        raise ValueError("need at least 2 rows")
    norms = np.linalg.norm(rows, axis=1)
    zero = int(np.count_nonzero(norms == 0))
    unit = rows[norms > 0] / norms[norms > 0, None]
    total = unit.sum(axis=0)
    pairs = float(total @ total) - unit.shape[0] + zero * (zero - 1)
    count = rows.shape[0] * (rows.shape[0] - 1)
    spread = float(rows.std(axis=0).mean() / (np.abs(rows).mean() + 1e-12))
    return pairs / count, spread


def input_spread_stats(inputs: np.ndarray) -> tuple[float, float]:
    """(c, r) on raw input vectors: the same mean off-diagonal cosine, and r = mean per-feature std ÷ mean |x|
    (src example: |x| ≈ 0.5, per-element std 0.0047, r ≈ 0.009)."""
    return output_cosine_stats(inputs)


# -- recomputing a metric from per-item rows ----------------------------------------------------------------
Computed = tuple[float | None, str]  # the value, or None with why it could not be computed


def recompute(metric: str, block: Mapping[str, Any], rows: pd.DataFrame) -> Computed:
    """A metrics.json block's value from result rows: `mean`/`median` of `column`, `pooled:<fn>` over all
    rows; `custom` cannot be recomputed here (no user hook)."""
    if rows.empty:
        return None, "no result rows"
    aggregate = str(block.get("aggregate") or "mean")
    if aggregate in ("mean", "median"):
        column = str(block.get("column") or metric)
        values, why = _finite_column(rows, column)
        if values is None:
            return None, why
        return (float(values.mean()) if aggregate == "mean" else float(values.median())), ""
    if aggregate.startswith("pooled:"):
        function = POOLED.get(aggregate.split(":", 1)[1])
        if function is None:
            return None, f"aggregate {aggregate!r}: no such registered function"
        return function(rows, block, metric)
    if aggregate == "custom":
        return None, "aggregate custom: no user hook to recompute it"
    return None, f"aggregate {aggregate!r} is not mean, median, pooled:<fn> or custom"


def _finite_column(rows: pd.DataFrame, column: str) -> tuple[pd.Series | None, str]:
    import numpy as np

    if column not in rows.columns:
        return None, f"column {column!r} missing from the results"
    values = numeric(rows, column)
    bad = int((~np.isfinite(values.to_numpy(dtype=float, na_value=np.nan))).sum())
    if bad:
        return None, f"column {column!r} has {bad} non-finite or non-numeric value{'s' if bad > 1 else ''}"
    return values, ""


def _labels(rows: pd.DataFrame, *columns: str) -> tuple[list[list[str]] | None, str]:
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        return None, f"column{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing from the results"
    if any(rows[c].isna().any() for c in columns):
        return None, f"empty values in {', '.join(columns)}"
    return [labels(rows[c]) for c in columns], ""


def _accuracy(rows: pd.DataFrame, block: Mapping[str, Any], metric: str) -> Computed:
    pairs, why = _labels(rows, "target", "pred")
    if pairs is None:
        return None, why
    return sum(t == p for t, p in zip(*pairs, strict=True)) / len(rows), ""


def _topk(rows: pd.DataFrame, block: Mapping[str, Any], metric: str) -> Computed:
    import numpy as np

    digits = re.findall(r"\d+", metric)
    k = int(block.get("k") or (digits[-1] if digits else 1))
    columns = [str(c) for c in rows.columns.tolist() if str(c).startswith("prob_")]
    targets, why = _labels(rows, "target")
    if targets is None or not columns:
        return None, why or "no prob_<class> columns in the results"
    probs = np.column_stack([numeric(rows, c).to_numpy(dtype=float) for c in columns])
    if not np.all(np.isfinite(probs)):
        return None, "non-finite prob_<class> values"
    names = np.array([c[len("prob_"):] for c in columns])
    top = names[np.argsort(-probs, axis=1, kind="stable")[:, :k]]
    return float(np.mean([t in row for t, row in zip(targets[0], top.tolist(), strict=True)])), ""


def _errors(rows: pd.DataFrame) -> tuple[np.ndarray | None, str]:
    target, why = _finite_column(rows, "target")
    pred, why_pred = _finite_column(rows, "pred")
    if target is None or pred is None:
        return None, why or why_pred
    return pred.to_numpy(dtype=float) - target.to_numpy(dtype=float), ""


def _regression(kind: str) -> Callable[[pd.DataFrame, Mapping[str, Any], str], Computed]:
    def compute(rows: pd.DataFrame, block: Mapping[str, Any], metric: str) -> Computed:
        import numpy as np

        errors, why = _errors(rows)
        if errors is None:
            return None, why
        if kind == "mae":
            return float(np.mean(np.abs(errors))), ""
        mse = float(np.mean(errors ** 2))
        return (math.sqrt(mse) if kind == "rmse" else mse), ""

    return compute


def _confusion(rows: pd.DataFrame) -> tuple[dict[str, tuple[int, int, int]] | None, str]:
    """Per class (tp, fp, fn): from `tp_<k>`/`fp_<k>`/`fn_<k>` columns summed over rows when present
    (segmentation), else from the target/pred labels."""
    tp_columns = [str(c) for c in rows.columns.tolist() if str(c).startswith("tp_")]
    if tp_columns:
        counts = {}
        for column in tp_columns:
            name = column[3:]
            sums = [numeric(rows, f"{kind}_{name}").sum() if f"{kind}_{name}" in rows.columns else math.nan
                    for kind in ("tp", "fp", "fn")]
            if any(math.isnan(s) for s in sums):
                return None, f"class {name}: tp_/fp_/fn_ columns incomplete or non-numeric"
            counts[name] = (int(sums[0]), int(sums[1]), int(sums[2]))
        return counts, ""
    pairs, why = _labels(rows, "target", "pred")
    if pairs is None:
        return None, why
    counts = {}
    for name in sorted(set(pairs[0]) | set(pairs[1])):
        tp = sum(t == name and p == name for t, p in zip(*pairs, strict=True))
        counts[name] = (tp, pairs[1].count(name) - tp, pairs[0].count(name) - tp)
    return counts, ""


def _f1_macro(rows: pd.DataFrame, block: Mapping[str, Any], metric: str) -> Computed:
    counts, why = _confusion(rows)
    if not counts:
        return None, why or "no classes"
    scores = [2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else 0.0 for tp, fp, fn in counts.values()]
    return sum(scores) / len(scores), ""


def _miou(rows: pd.DataFrame, block: Mapping[str, Any], metric: str) -> Computed:
    counts, why = _confusion(rows)
    ious = [tp / (tp + fp + fn) for tp, fp, fn in (counts or {}).values() if tp + fp + fn]
    if not ious:
        return None, why or "no class occurs"
    return sum(ious) / len(ious), ""


def _auroc(rows: pd.DataFrame, block: Mapping[str, Any], metric: str) -> Computed:
    """Binary AUROC as the Mann-Whitney statistic with average ranks for ties (score, else prob_1)."""
    import numpy as np
    from scipy.stats import rankdata

    column = "score" if "score" in rows.columns else "prob_1"
    scores, why = _finite_column(rows, column)
    targets, why_target = _labels(rows, "target")
    if scores is None or targets is None:
        return None, why or why_target
    positive = np.array([t in ("1", "True", "true") for t in targets[0]])
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if set(targets[0]) - {"0", "1", "True", "False", "true", "false"} or not n_pos or not n_neg:
        return None, "AUROC needs a binary target with both classes present"
    ranks = rankdata(scores.to_numpy(dtype=float))
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)), ""


POOLED: dict[str, Callable[[pd.DataFrame, Mapping[str, Any], str], Computed]] = {
    "accuracy": _accuracy, "topk": _topk, "mae": _regression("mae"), "mse": _regression("mse"),
    "rmse": _regression("rmse"), "f1_macro": _f1_macro, "auroc": _auroc, "miou_pooled": _miou,
}


def split_rows(test: TestArtifacts) -> pd.DataFrame | None:
    """The result rows of the split metrics.json reports (all rows when there is no `split` column)."""
    return test.split_results


# -- chance level -------------------------------------------------------------------------------------------
def chance_floor(project: ProjectEvidence, metric: str, rows: pd.DataFrame) -> tuple[float, bool] | None:
    """(floor, is_proportion) for a metric from the registry and the targets (docs/verify.md §6), or None when
    the registry gives none this code can compute from result rows."""
    rule = metric_registry.resolve(metric, project.metrics)
    kind = rule.chance if rule is not None else None
    constant = {"half": 0.5, "zero": 0.0, "one": 1.0}
    if kind in constant:
        return constant[kind], kind == "half"
    if kind is None or rows.empty or "target" not in rows.columns or rows["target"].isna().any():
        return None
    counts = label_counts(rows["target"])
    shares = sorted((count / len(rows) for count in counts.values()), reverse=True)
    if kind == "majority":
        return shares[0], True
    if kind == "top_k":
        digits = re.findall(r"\d+", metric)
        return min(1.0, (int(digits[-1]) if digits else 1) / len(shares)), True
    prevalence = counts.get("1", 0) / len(rows)
    if kind == "prevalence":
        return prevalence, True
    if kind == "f1_prevalence":
        return 2 * prevalence / (1 + prevalence), True
    if kind == "ln_classes" and len(shares) > 1:
        return math.log(len(shares)), False
    return None


def at_chance(value: float, floor: tuple[float, bool], n: int, relative: float, se_multiple: float) -> bool:
    """|m − floor| ≤ max(relative·|floor|, se_multiple·SE), SE = sqrt(p(1−p)/n) for proportions (V11)."""
    level, proportion = floor
    se = math.sqrt(level * (1 - level) / n) if proportion and n > 0 and 0 <= level <= 1 else 0.0
    return abs(value - level) <= max(relative * abs(level), se_multiple * se)


# -- V20 output_cosine --------------------------------------------------------------------------------------
def output_cosine(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Outputs that point the same way for every input: the model ignores its input."""
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        measured = cosine_measurements(project, capsule, params, notes)
        if not measured:
            continue
        issues = [issue for where, batch, c, s, _ in measured
                  if (issue := _cosine_issue(where, batch, c, s, params)) is not None]
        evidence = [ref for *_, ref in measured if ref is not None]
        finish(findings, subjects, capsule.subject, merge("V20", capsule.subject, issues, evidence=evidence))
    if not subjects:
        return probe_skip("V20", "output_cosine", project) if not notes else judged_or_skipped(
            "V20", "output_cosine", [], [], notes, "", kind="probe")
    return result("V20", "output_cosine", findings, subjects, kind="probe", note="; ".join(notes))


Measured = tuple[str, int, float, float, EvidenceRef | None]  # where, B, c, spread, file read


def cosine_measurements(project: ProjectEvidence, capsule: Capsule, params: Mapping[str, Any],
                        notes: list[str]) -> list[Measured]:
    """The probe's answer when there is one, else the stats of every saved outputs/embeddings file; a batch
    below min_batch, or a file that is not a numeric array, is noted and not judged."""
    minimum = int(params.get("min_batch", 16))
    answer = probe_answer(project, "V20", capsule)
    measured: list[Measured] = []
    if answer is not None:
        batch, c, s = (answer.get(k) for k in ("batch", "mean_cosine", "spread"))
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (batch, c, s)):
            notes.append(f"{capsule.key}: V20 probe answer lacks finite batch, mean_cosine, spread")
        else:
            measured.append(("probe", int(batch), float(c), float(s), None))  # type: ignore[arg-type]
    else:
        measured += _saved_outputs(project.root, capsule, int(params.get("max_items", 4096)), notes)
    kept = [m for m in measured if m[1] >= minimum]
    notes += [f"{capsule.key}: {m[0]} has {m[1]} inputs < {minimum}: not judged" for m in measured if m[1] < minimum]
    return kept


def _saved_outputs(root: Path, capsule: Capsule, limit: int, notes: list[str]) -> list[Measured]:
    import numpy as np

    measured: list[Measured] = []
    for test_id in sorted(capsule.tests):
        for name in OUTPUT_FILES:
            rel = f"{capsule.path}/test/{test_id}/{name}"
            path = root / rel
            if path.is_symlink() or not path.is_file():
                continue
            try:
                array = np.load(path, allow_pickle=False, mmap_mode="r")
                rows = np.asarray(array[:limit], dtype=np.float64)
                if rows.ndim < 1 or not np.all(np.isfinite(rows)):
                    raise ValueError("non-finite values")
                c, spread = output_cosine_stats(rows)
            except (ValueError, OSError, EOFError, TypeError, IndexError) as exc:
                notes.append(f"{rel}: not judged ({exc})")
                continue
            measured.append((rel, rows.shape[0], c, spread, EvidenceRef(rel)))
    return measured


def _cosine_issue(where: str, batch: int, c: float, spread: float, params: Mapping[str, Any]) -> Issue | None:
    values = {"batch": batch, "mean_cosine": c, "spread": spread}
    if c >= float(params.get("critical_cosine", 0.98)) and spread < float(params.get("spread", 0.02)):
        return Issue("critical", f"outputs identical across inputs: mean cosine {c:.3f} over {batch} inputs, "
                                 f"spread {spread:.3g} ({where})", values)
    if c >= float(params.get("warn_cosine", 0.95)):
        return Issue("warn", f"outputs nearly parallel across inputs: mean cosine {c:.3f} over {batch} inputs, "
                             f"spread {spread:.3g} ({where})", values)
    return None


# -- V21 real_vs_shuffled -----------------------------------------------------------------------------------
def real_vs_shuffled(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """A model that scores the same with another item's conditioning does not use the conditioning."""
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        issues: list[Issue] = []
        judged = []
        for test in capsule.tests.values():
            rows = split_rows(test)
            if rows is None or "condition" not in rows.columns:
                continue
            real = rows[rows["condition"].astype(str) == "real"]
            shuffled = rows[rows["condition"].astype(str) == "shuffled"]
            if real.empty or shuffled.empty or not (test.metrics or {}).get("metrics"):
                notes.append(f"{test.metrics_path}: no metrics, or no real and shuffled rows")
                continue
            judged.append(EvidenceRef(test.results_path or "", test.results_sha256))
            issues += _shuffle_issues(project, test, real, shuffled, params)
        if judged:
            finish(findings, subjects, capsule.subject, merge("V21", capsule.subject, issues, evidence=judged))
    return judged_or_skipped("V21", "real_vs_shuffled", findings, subjects, notes,
                             "no results with condition real and shuffled")


def _shuffle_issues(project: ProjectEvidence, test: TestArtifacts, real: pd.DataFrame, shuffled: pd.DataFrame,
                    params: Mapping[str, Any]) -> list[Issue]:
    blocks = (test.metrics or {}).get("metrics")
    issues = []
    for metric, block in (blocks or {}).items() if isinstance(blocks, Mapping) else ():
        if not isinstance(block, Mapping):
            continue
        value_real, _ = recompute(metric, block, real)
        value_shuffled, _ = recompute(metric, block, shuffled)
        if value_real is None or value_shuffled is None:
            continue
        where = f"{test.test_id}/{metric}"
        values = {f"{where}.real": value_real, f"{where}.shuffled": value_shuffled}
        if value_real == value_shuffled:
            issues.append(Issue("critical", f"{where}: real == shuffled bit-for-bit ({value_real:.6g}): the "
                                            "output ignores its conditioning", values))
            continue
        interval = _paired_interval(real, shuffled, str(block.get("column") or metric), params)
        if interval is not None and interval[0] <= 0 <= interval[1]:
            issues.append(Issue("error", f"{where}: real − shuffled 95 % CI [{interval[0]:.4g}, {interval[1]:.4g}] "
                                         "contains 0", {**values, f"{where}.ci95": list(interval)}))
        floor = chance_floor(project, metric, real)
        relative, se = float(params.get("chance_relative", 0.02)), float(params.get("chance_se_multiple", 2.0))
        if floor is not None and all(at_chance(v, floor, n, relative, se)
                                     for v, n in ((value_real, len(real)), (value_shuffled, len(shuffled)))):
            issues.append(Issue("error", f"{where}: real {value_real:.4g} and shuffled {value_shuffled:.4g} are both "
                                         f"at chance ({floor[0]:.4g})", {**values, f"{where}.chance": floor[0]}))
    return issues


def _paired_interval(real: pd.DataFrame, shuffled: pd.DataFrame, column: str,
                     params: Mapping[str, Any]) -> tuple[float, float] | None:
    """Percentile bootstrap CI of mean(real − shuffled) over items, paired by item_id when both conditions
    hold the same ids, else each condition resampled on its own; None without a finite per-item column."""

    a, _ = _finite_column(real, column)
    b, _ = _finite_column(shuffled, column)
    if a is None or b is None or int(params.get("resamples", 10000)) < 1:
        return None
    seed = int(params.get("rng_seed", 0))
    resamples = int(params.get("resamples", 10000))
    ids_a, ids_b = real["item_id"].astype(str).tolist(), shuffled["item_id"].astype(str).tolist()
    if len(set(ids_a)) == len(ids_a) and len(set(ids_b)) == len(ids_b) and set(ids_a) == set(ids_b):
        diff = (a.set_axis(ids_a).sort_index() - b.set_axis(ids_b).sort_index()).to_numpy()
        return mean_ci(diff, resamples, seed)
    return difference_ci(a.to_numpy(dtype=float), b.to_numpy(dtype=float), resamples, seed)


# -- V22 input_spread ---------------------------------------------------------------------------------------
def input_spread(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Inputs that are nearly one vector plus noise: the model cannot tell items apart (standardise per feature
    with train statistics). Also says where a collapse lives: inside the model, or upstream of it."""
    findings: list[Finding] = []
    subjects: list[str] = []
    for capsule in project.capsules:
        answer = probe_answer(project, "V22", capsule)
        c, r = (answer.get(k) for k in ("mean_cosine", "spread_ratio")) if answer is not None else (None, None)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (c, r)):
            continue
        finish(findings, subjects, capsule.subject,
               merge("V22", capsule.subject, _input_issues(project, capsule, float(c), float(r), params)))  # type: ignore[arg-type]
    upstream = _upstream_collapse(project, params)
    if upstream is not None:
        finish(findings, subjects, "project", upstream)
    if not subjects:
        return probe_skip("V22", "input_spread", project)
    return result("V22", "input_spread", findings, subjects, kind="probe")


def _input_issues(project: ProjectEvidence, capsule: Capsule, c: float, r: float,
                  params: Mapping[str, Any]) -> list[Issue]:
    values = {"input_cosine": c, "spread_ratio": r}
    if c >= float(params.get("cosine", 0.98)) and r < float(params.get("spread", 0.02)):
        return [Issue("warn", f"input dominated by a sample-invariant offset (cosine {c:.3f}, spread ratio {r:.3g}); "
                              "standardise per feature with train statistics stored in the checkpoint", values)]
    outputs = [m[2] for m in cosine_measurements(project, capsule, specs_params("V20"), [])]
    if outputs and max(outputs) >= float(params.get("output_cosine", 0.98)):
        return [Issue("info", f"low input cosine {c:.3f} with output cosine {max(outputs):.3f}: the collapse is "
                              "inside the model", {**values, "output_cosine": max(outputs)})]
    return []


def specs_params(check: str) -> Mapping[str, Any]:
    spec = specs().get(check)
    return spec.params if spec is not None else {}


def _upstream_collapse(project: ProjectEvidence, params: Mapping[str, Any]) -> Finding | None:
    """The same collapse signature in ≥ 2 runs with different architecture keys: the cause is upstream of
    the architecture (data, inputs, loss), so changing the model will not fix it."""
    import fnmatch

    patterns = [str(p) for p in params.get("architecture_keys", [])]
    architectures: dict[str, set[bytes]] = {}
    for capsule in project.capsules:
        if not _collapsed(project, capsule, params):
            continue
        arch = {k: v for k, v in capsule.flat_config.items()
                if any(fnmatch.fnmatchcase(k, p) for p in patterns)}
        if arch:
            architectures.setdefault(capsule.run_id, set()).add(canonical_json(arch))
    kinds = set().union(*architectures.values()) if architectures else set()
    if len(architectures) < 2 or len(kinds) < 2:
        return None
    runs = sorted(architectures)
    return merge("V22", "project", [Issue("warn", f"cause is upstream of the architecture: the same collapse "
                                                  f"signature in runs {', '.join(runs)} with different "
                                                  "architecture keys", {"runs": runs})])


def _collapsed(project: ProjectEvidence, capsule: Capsule, params: Mapping[str, Any]) -> bool:
    """The V20/V21/V11 signature: outputs identical, real == shuffled, or a test metric at chance."""
    v20 = specs_params("V20")
    if any(c >= float(v20.get("critical_cosine", 0.98)) and s < float(v20.get("spread", 0.02))
           for _, _, c, s, _ in cosine_measurements(project, capsule, v20, [])):
        return True
    relative, se = float(params.get("chance_relative", 0.02)), float(params.get("chance_se_multiple", 2.0))
    for test in capsule.tests.values():
        rows = split_rows(test)
        if rows is None:
            continue
        if "condition" in rows.columns:
            real = rows[rows["condition"].astype(str) == "real"]
            shuffled = rows[rows["condition"].astype(str) == "shuffled"]
            if not real.empty and not shuffled.empty and any(
                    i.severity == "critical" for i in _shuffle_issues(project, test, real, shuffled,
                                                                       {"resamples": 0})):
                return True
            rows = real if not real.empty else rows
        for metric in ((test.metrics or {}).get("metrics") or {}):
            value, floor = test.metric_value(metric), chance_floor(project, metric, rows)
            if value is not None and floor is not None and at_chance(value, floor, len(rows), relative, se):
                return True
    return False


# -- V23 prediction_diversity -------------------------------------------------------------------------------
def prediction_diversity(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """A classifier that predicts one class for (nearly) every test item."""
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        issues, judged = [], []
        for test in capsule.tests.values():
            rows = split_rows(test)
            if rows is None or "pred" not in rows.columns:
                continue
            if "condition" in rows.columns:
                rows = rows[rows["condition"].astype(str) != "shuffled"]
            preds = rows["pred"].dropna()
            if len(preds) < 2 or not _discrete(preds):
                notes.append(f"{test.metrics_path}: predictions are not class labels (or fewer than 2)")
                continue
            judged.append(EvidenceRef(test.results_path or "", test.results_sha256))
            issue = _diversity_issue(test.test_id, label_counts(preds), rows, params)
            issues += [issue] if issue is not None else []
        if judged:
            finish(findings, subjects, capsule.subject, merge("V23", capsule.subject, issues, evidence=judged))
    return judged_or_skipped("V23", "prediction_diversity", findings, subjects, notes,
                             "no classification results (pred column)")


def _discrete(values: pd.Series) -> bool:
    """Class labels: strings, bools or integers (floats only when all are whole numbers)."""
    import numpy as np

    if values.dtype == object or values.dtype == bool:
        return True
    numbers = values.to_numpy(dtype=float)
    return bool(np.all(np.isfinite(numbers)) and np.all(numbers == np.round(numbers)))


def _diversity_issue(test_id: str, counts: Counter[str], rows: pd.DataFrame,
                     params: Mapping[str, Any]) -> Issue | None:
    predicted = sum(counts.values())
    top, top_count = max(counts.items(), key=lambda item: item[1])
    targets = label_counts(rows["target"].dropna()) if "target" in rows.columns else Counter()
    total = sum(targets.values())
    target_share = max(targets.values(), default=0) / total if total else None
    values = {f"{test_id}.distinct_pred": len(counts), f"{test_id}.top_share": top_count / predicted,
              f"{test_id}.top_target_share": target_share}
    if len(counts) == 1 and (target_share is None or target_share < 1.0):
        return Issue("critical", f"test {test_id}: every item predicted as class {top} ({predicted} items)", values)
    if top_count / predicted >= float(params.get("dominant_share", 0.95)) and target_share is not None \
            and target_share < float(params.get("target_share", 0.5)):
        return Issue("warn", f"test {test_id}: class {top} is {top_count / predicted:.1%} of predictions while no "
                             f"class is more than {target_share:.1%} of targets", values)
    return None


CHECKS = {
    "V20": output_cosine,
    "V21": real_vs_shuffled,
    "V22": input_spread,
    "V23": prediction_diversity,
}
