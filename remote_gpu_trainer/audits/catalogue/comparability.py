"""Section A of the catalogue, comparability (docs/verify.md §2): is a run compared with its control on equal
terms? V01 one_variable_diff, V02 budget_parity, V03 trajectory_shape.

A difference between two numbers means something only when the runs behind them differ in the declared
variable and nothing else, had the same budget, and trained the way healthy runs do. These checks read the
configs and run records (V01, V02) and the training logs (V03) of the runs the project compares, never the
test numbers themselves (section B judges those).

The helpers `capsule_pairs`, `shared_targets`, `metric_direction` and `claims_touching` are shared with
statistics.py, which judges the same comparisons.
"""

from __future__ import annotations

import bisect
import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue.configs import flatten, is_number, matches, same_value
from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    CheckResult,
    Comparison,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    result,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.numbers import aggregate, seed_values

_PROV_KEYS = {  # _prov.<name> -> path under run.json provenance (docs/verify.md §2, V01)
    "code_commit": ("code", "commit"), "dirty_diff_sha256": ("code", "dirty_diff_sha256"),
    "data_sha256": ("data", "data_sha256"), "split_manifest_sha256": ("data", "split_manifest_sha256"),
    "env_lock_sha256": ("env_lock", "sha256"), "gpu": ("hardware", "gpu"), "gpu_count": ("hardware", "count"),
    "torch": ("hardware", "torch"),
}
_CRITICAL_KEYS = ("_prov.data_sha256", "_prov.split_manifest_sha256")
_LISTED = 5  # keys spelled out in a message before "and N more"


# -- shared helpers -------------------------------------------------------------------------------------------
def capsule_pairs(run: tuple[Capsule, ...], control: tuple[Capsule, ...]) -> list[tuple[Capsule, Capsule]]:
    """Run capsules paired with the control capsule of the same seed; when no seed matches, the first of each
    (so a comparison is judged even when the arms used different seeds)."""
    by_seed = {_seed_key(c): c for c in control if _seed_key(c) is not None}
    pairs = [(r, by_seed[key]) for r in run if (key := _seed_key(r)) is not None and key in by_seed]
    if not pairs and run and control:
        pairs = [(run[0], control[0])]
    return pairs


def _seed_key(capsule: Capsule) -> str | None:
    seed = capsule.seed
    return None if seed is None or isinstance(seed, Mapping | list) else repr(seed)


def shared_targets(project: ProjectEvidence, comparison: Comparison) -> list[tuple[str, str]]:
    """The (test, metric) pairs a comparison judges: the declared ones, else every one both runs report."""
    def reported(run_id: str) -> set[tuple[str, str]]:
        found = set()
        for capsule in project.run_capsules(run_id):
            for test in capsule.tests.values():
                blocks = (test.metrics or {}).get("metrics")
                found |= {(test.test_id, m) for m in (blocks if isinstance(blocks, Mapping) else {})}
        return found

    both = reported(comparison.run) & reported(comparison.control)
    return sorted((t, m) for t, m in both if comparison.test_id in (None, t) and comparison.metric in (None, m))


def metric_direction(project: ProjectEvidence, capsules: Iterable[Capsule], test_id: str, metric: str) -> str | None:
    """`max`, `min`, `monitor` or None: what metrics.json says, else the registry (docs/verify.md §6)."""
    blocks = (capsule.tests[test_id].metric_block(metric) if test_id in capsule.tests else None
              for capsule in capsules)
    return metric_registry.stated_or_registered(metric, (b.get("direction") for b in blocks if b is not None),
                                                project.metrics)


def claims_touching(project: ProjectEvidence, runs: Iterable[str]) -> tuple[str, ...]:
    """Every claim with an evidence row whose cells belong to one of `runs` (a finding rides with them)."""
    wanted = set(runs)
    return tuple(dict.fromkeys(n.claim for n in project.numbers
                               if n.claim is not None and any(c.split("/")[0] in wanted for c in n.cells)))


def record_refs(capsule: Capsule) -> list[EvidenceRef]:
    """The run.json and config.yaml a comparability finding rests on."""
    refs = []
    if capsule.run_record is not None:
        refs.append(EvidenceRef(f"{capsule.path}/run.json", capsule.run_record_sha256))
    if capsule.config is not None:
        refs.append(EvidenceRef(f"{capsule.path}/config.yaml", capsule.config_sha256))
    return refs


def fmt(value: float) -> str:
    """A number for a message: three significant digits, a real minus sign."""
    return f"{value:.3g}".replace("-", "−")


def fmt_signed(value: float) -> str:
    return f"{value:+.3g}".replace("-", "−")


# -- flattening (V01, V02) ------------------------------------------------------------------------------------
def capsule_view(capsule: Capsule) -> dict[str, Any]:
    """What V01 compares: the flattened config plus the derived and provenance keys of docs/verify.md §2."""
    view = dict(capsule.flat_config)
    training = (capsule.run_record or {}).get("training")
    training = training if isinstance(training, Mapping) else {}
    factors = [training.get(k) for k in ("per_device_batch", "world_size", "grad_accum")]
    if all(is_number(f) for f in factors):
        view["_derived.effective_batch"] = math.prod(factors)
    if "steps" in training:
        view["_derived.total_steps"] = training["steps"]
    for name, path in _PROV_KEYS.items():
        node: Any = capsule.prov(*path[:-1])
        if isinstance(node, Mapping) and path[-1] in node:
            view[f"_prov.{name}"] = node[path[-1]]
    return view


def differing(run: Mapping[str, Any], control: Mapping[str, Any], ignore: Iterable[str]) -> dict[str, tuple]:
    """Keys whose values differ (missing counts as a value of its own), without the ignored ones."""
    patterns = list(ignore)
    found = {}
    for key in sorted(set(run) | set(control)):
        if matches(key, patterns):
            continue
        a, b = run.get(key, _MISSING), control.get(key, _MISSING)
        if a is _MISSING or b is _MISSING or not same_value(a, b):
            found[key] = (a, b)
    return found


class _Missing:
    def __repr__(self) -> str:
        return "missing"


_MISSING = _Missing()


def show(value: Any) -> str:
    """A config value as a message prints it: `null`, `missing`, long hashes shortened."""
    text = "null" if value is None else "missing" if value is _MISSING else str(value)
    return text if len(text) <= 24 else text[:12] + "…"


def _listed(items: list[str]) -> str:
    head = ", ".join(items[:_LISTED])
    return head + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


# -- V01 one_variable_diff ------------------------------------------------------------------------------------
def check_one_variable_diff(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V01: a run and its control may differ only in the declared `vary` keys (docs/verify.md §2)."""
    name = "one_variable_diff"
    if not project.comparisons:
        return skipped("V01", name, "no comparisons declared (rgt.toml [[verify.compare]])")
    findings: list[Finding] = []
    subjects: list[str] = []
    missing: list[str] = []
    for comparison in project.comparisons:
        pairs, why = _judgeable_pairs(project, comparison)
        if why:
            missing.append(why)
            continue
        subjects.append(comparison.subject)
        finding = _diff_finding(project, comparison, pairs, params)
        if finding is not None:
            findings.append(finding)
    if not subjects:
        return skipped("V01", name, "; ".join(missing))
    return result("V01", name, findings, subjects, note="; ".join(missing))


def _judgeable_pairs(project: ProjectEvidence, comparison: Comparison) -> tuple[list[tuple[Capsule, Capsule]], str]:
    """The capsule pairs of a comparison, or why it cannot be judged (a missing run, config or run.json)."""
    for run_id in (comparison.run, comparison.control):
        if not project.run_capsules(run_id):
            return [], f"{comparison.subject}: runs/{run_id}/ has no capsule"
    pairs = capsule_pairs(project.run_capsules(comparison.run), project.run_capsules(comparison.control))
    for capsule in {c.key: c for pair in pairs for c in pair}.values():
        if capsule.config is None:
            return [], f"{comparison.subject}: {capsule.path}/config.yaml missing or unreadable"
        if capsule.run_record is None:
            return [], f"{comparison.subject}: {capsule.path}/run.json missing or unreadable"
    return pairs, ""


def _covered(key: str, vary: Iterable[str]) -> bool:
    """A declared `vary` entry covers a key equal to it, below it (`model` covers `model.width`) or globbed."""
    return any(key == v or key.startswith(v + ".") or fnmatch.fnmatchcase(key, v) for v in vary)


def _diff_finding(project: ProjectEvidence, comparison: Comparison, pairs: list[tuple[Capsule, Capsule]],
                  params: Mapping[str, Any]) -> Finding | None:
    """One finding for the pair: the union of differing keys over its capsule pairs against `vary`."""
    diff: dict[str, tuple] = {}
    for run, control in pairs:
        for key, pair in differing(capsule_view(run), capsule_view(control), params.get("ignore", ())).items():
            diff.setdefault(key, pair)
    vary = list(comparison.vary)
    extra = [k for k in diff if not _covered(k, vary)]
    unchanged = [v for v in vary if not any(_covered(k, [v]) for k in diff)]
    if not extra and not unchanged:
        return None
    protocol = list(params.get("eval_protocol", ()))
    critical = [k for k in extra if k in _CRITICAL_KEYS or matches(k, protocol)]
    parts, disclosure = [], []
    if extra:
        shown = [f"{k} (run={show(diff[k][0])}, control={show(diff[k][1])})" for k in extra]
        parts.append("confounded: also differs in " + _listed(shown))
        disclosure.append("confounded: also differs in " + _listed(extra))
    if critical:
        parts.append("touches data, split or eval protocol: " + _listed(critical))
    if unchanged:
        parts.append("declared variable unchanged: " + ", ".join(unchanged))
        disclosure.append("declared variable unchanged: " + ", ".join(unchanged))
    if len(diff) >= 2:
        parts.append("run one-axis intermediates before attributing the win")
    values = {"differs": {k: {"run": show(a), "control": show(b)} for k, (a, b) in diff.items()},
              "extra": extra, "unchanged": unchanged, "vary": vary, "critical": critical,
              "pairs": [f"{r.key}~{c.key}" for r, c in pairs]}
    return Finding(
        check="V01", subject=comparison.subject, severity="error" if critical or unchanged else "warn",
        message="; ".join(parts), values=values, disclosure="; ".join(disclosure),
        evidence=tuple(ref for pair in pairs for c in pair for ref in record_refs(c)),
        integrity_class="bug" if unchanged else "negligence",
        claims=claims_touching(project, (comparison.run, comparison.control)))


# -- V02 budget_parity ----------------------------------------------------------------------------------------
def check_budget_parity(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V02: every cell feeding one table or figure had the same budget except the declared axis, and no cell
    got a rescue knob the others did not; a reproduced baseline below its published value is cite-only."""
    name = "budget_parity"
    groups = _budget_groups(project)
    published = [n for n in project.numbers if _finite(n.stated.get("published")) is not None]
    if not groups and not published:
        return skipped("V02", name, "no table/figure inputs in EVIDENCE.json and no comparisons declared "
                                    "(rgt.toml [[verify.compare]]) with two cells that have config.yaml and "
                                    "run.json, and no published values")
    findings: list[Finding] = []
    subjects: list[str] = []
    for subject, capsules in groups:
        subjects.append(subject)
        finding = _parity_finding(project, subject, capsules, params)
        if finding is not None:
            findings.append(finding)
    for number in published:
        subjects.append(number.subject)
        finding = _published_finding(project, number, params)
        if finding is not None:
            findings.append(finding)
    return result("V02", name, findings, subjects)


def _budget_groups(project: ProjectEvidence) -> list[tuple[str, list[Capsule]]]:
    """The cells of each table and figure EVIDENCE.json names (by its rows' `tables`/`figures`); without
    any, each declared comparison's run and control. Capsules without config or run.json are left out: a
    missing record is not a different budget."""
    named: dict[str, list[str]] = {}
    for number in project.numbers:
        for kind in ("table", "figure"):
            idents = number.stated.get(kind + "s")
            for ident in idents if isinstance(idents, list) else []:
                named.setdefault(f"{kind}:{ident}", []).extend(number.cells)
    groups = [(subject, [c for k in dict.fromkeys(keys) if (c := project.capsule(k)) is not None])
              for subject, keys in sorted(named.items())]
    if not groups:
        groups = [(c.subject, [*project.run_capsules(c.run), *project.run_capsules(c.control)])
                  for c in project.comparisons]
    usable = [(s, [c for c in caps if c.config is not None and c.run_record is not None]) for s, caps in groups]
    return [(s, caps) for s, caps in usable if len(caps) >= 2]


def budget_view(capsule: Capsule) -> dict[str, Any]:
    """V01's view plus the run record's epochs and sweep record (`_run.epochs`, `_run.sweep.*`)."""
    view = capsule_view(capsule)
    record = capsule.run_record or {}
    training = record.get("training")
    if isinstance(training, Mapping) and "epochs" in training:
        view["_run.epochs"] = training["epochs"]
    view.update(flatten(record.get("sweep"), "_run.sweep") if isinstance(record.get("sweep"), Mapping) else {})
    return view


def _per_run(capsules: list[Capsule], views: list[dict[str, Any]], key: str) -> dict[str, list[str]]:
    """Each run's distinct shown values of `key` across its capsules."""
    found: dict[str, list[str]] = {}
    for capsule, view in zip(capsules, views, strict=True):
        shown = show(view.get(key, _MISSING))
        bucket = found.setdefault(capsule.run_id, [])
        if shown not in bucket:
            bucket.append(shown)
    return dict(sorted(found.items()))


def _all_same(views: list[dict[str, Any]], key: str) -> bool:
    first = views[0].get(key, _MISSING)
    return all(same_value(first, v.get(key, _MISSING)) or (first is _MISSING and v.get(key, _MISSING) is _MISSING)
               for v in views[1:])


def _special_run(per_run: dict[str, list[str]], controls: set[str]) -> str | None:
    """The one run whose rescue-knob value differs from what every other run shares. With two runs only the
    non-control one can be the special case (a control is the reference, never the treated arm)."""
    if len(per_run) == 2:
        treated = [r for r in per_run if r not in controls]
        return treated[0] if len(treated) == 1 else None
    for run_id, values in per_run.items():
        others = {tuple(v) for r, v in per_run.items() if r != run_id}
        if len(others) == 1 and tuple(values) not in others:
            return run_id
    return None


def _parity_finding(project: ProjectEvidence, subject: str, capsules: list[Capsule],
                    params: Mapping[str, Any]) -> Finding | None:
    views = [_without_ignored(budget_view(c), params) for c in capsules]
    runs = {c.run_id for c in capsules}
    axis = [v for comp in project.comparisons if comp.run in runs and comp.control in runs for v in comp.vary]
    controls = {comp.control for comp in project.comparisons if comp.run in runs and comp.control in runs}
    every = {k for v in views for k in v}  # each key judged once (was once per view holding it)
    keys = sorted(k for k in every if not _covered(k, axis) and not _all_same(views, k))
    rescue = [k for k in keys if matches(k, params.get("rescue", ()))]
    budget = [k for k in keys if k not in rescue and matches(k, params.get("budget", ()))]
    unequal = {k: _per_run(capsules, views, k) for k in budget}
    special = {k: run for k in rescue if (run := _special_run(_per_run(capsules, views, k), controls))}
    if not unequal and not special:
        return None
    parts = [f"unequal budget: {k} differs (" + "; ".join(f"{r}={'/'.join(v)}" for r, v in per.items()) + ")"
             for k, per in unequal.items()]
    for run_id in dict.fromkeys(special.values()):
        knobs = [k for k, r in special.items() if r == run_id]
        parts.append(f"special treatment of {run_id}: {', '.join(knobs)}")
    return Finding(
        check="V02", subject=subject, severity="warn", message="; ".join(parts),
        values={"unequal": unequal, "special": special, "axis": axis},
        disclosure="; ".join(p.split(" (")[0] for p in parts),
        evidence=tuple(ref for c in capsules for ref in record_refs(c)), integrity_class="qrp_tell",
        claims=claims_touching(project, runs))


def _without_ignored(view: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    ignore = list(params.get("ignore", ()))
    return {k: v for k, v in view.items() if not matches(k, ignore)}


def _finite(value: Any) -> float | None:
    return float(value) if is_number(value) and math.isfinite(float(value)) else None


def _published_finding(project: ProjectEvidence, number: Any, params: Mapping[str, Any]) -> Finding | None:
    """A reproduced baseline below its published value (EVIDENCE row `published`) less the tolerance."""
    published = _finite(number.stated.get("published"))
    seeds = seed_values(project, number)
    value = aggregate(number, [s.value for s in seeds])
    if published is None or value is None:
        return None
    tolerance = float(params.get("published_tolerance", 0.01))
    sign = -1.0 if metric_direction(project, [s.capsule for s in seeds], number.test_id, number.metric) == "min" \
        else 1.0
    bound = published - sign * tolerance * abs(published)  # the worst reproduction still within tolerance
    if sign * value >= sign * bound:
        return None
    word = "above" if sign < 0 else "below"
    return Finding(
        check="V02", subject=number.subject, severity="warn",
        message=f"reproduced {fmt(value)} {word} published {fmt(published)} beyond {tolerance:.0%} "
                f"(bound {fmt(bound)}): row cite-only",
        values={"reproduced": value, "published": published, "tolerance": tolerance, "cite_only": True},
        evidence=tuple(s.ref for s in seeds), integrity_class="qrp_tell",
        claims=(number.claim,) if number.claim else ())


# -- V03 trajectory_shape -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Trajectory:
    """One capsule's validation curve in "higher is better" units, and its grad-norm spike ratio."""

    capsule: Capsule
    column: str
    best_epoch: float
    last_epoch: float
    first: float
    best: float
    final: float
    slope: float  # (final - first) per epoch, oriented
    spike_ratio: float | None  # grad-norm P99 / median of its rolling median

    @property
    def gap(self) -> float:
        """|best - final| / |best - first|; 0 when the best is the first value."""
        return 0.0 if self.best == self.first else abs(self.best - self.final) / abs(self.best - self.first)


def check_trajectory_shape(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V03: an early peak that declines, or a run never better than its first epoch with grad-norm spikes, is
    not a result; otherwise say how the run's curve sits against its control's (docs/verify.md §2)."""
    name = "trajectory_shape"
    groups = _trajectory_groups(project)
    findings: list[Finding] = []
    subjects: list[str] = []
    missing: list[str] = []
    curves: dict[str, Trajectory] = {}
    for capsule, metric in groups:
        curve, why = trajectory(project, capsule, metric, params)
        if curve is None:
            missing.append(why)
            continue
        curves[capsule.key] = curve
        subjects.append(capsule.subject)
        finding = _curve_finding(project, curve, params)
        if finding is not None:
            findings.append(finding)
    flagged = {f.subject for f in findings}
    for comparison in project.comparisons:
        finding = _shape_finding(project, comparison, curves, flagged)
        if finding is not None:
            subjects.append(comparison.subject)
            findings.append(finding)
    if not subjects:
        return skipped("V03", name, "; ".join(missing) or "no capsule with train.csv")
    return result("V03", name, findings, subjects, note="; ".join(missing))


def _trajectory_groups(project: ProjectEvidence) -> list[tuple[Capsule, str | None]]:
    """The capsules of every compared run with the comparison's metric; without comparisons, every capsule."""
    if not project.comparisons:
        return [(c, None) for c in project.capsules]
    chosen: dict[str, tuple[Capsule, str | None]] = {}
    for comparison in project.comparisons:
        for run_id in (comparison.run, comparison.control):
            for capsule in project.run_capsules(run_id):
                chosen.setdefault(capsule.key, (capsule, comparison.metric))
    return list(chosen.values())


def _curve_metric(capsule: Capsule, metric: str | None) -> tuple[str | None, str | None]:
    """The `val/<m>` column to read and the metric's direction word from run.json `selection`."""
    selection = (capsule.run_record or {}).get("selection")
    selection = selection if isinstance(selection, Mapping) else {}
    columns = [str(c) for c in capsule.train.columns.tolist()] if capsule.train is not None else []
    name = metric or selection.get("criterion")
    column = f"val/{name}" if name and f"val/{name}" in columns else None
    if column is None and metric is None:
        column = next((c for c in columns if c.startswith("val/")), None)
    return column, metric_registry.to_short(selection.get("direction"))


def trajectory(project: ProjectEvidence, capsule: Capsule, metric: str | None,
               params: Mapping[str, Any]) -> tuple[Trajectory | None, str]:
    """The capsule's curve, or why there is none (no train.csv, no val column, no direction, too few rows)."""
    import numpy as np

    if capsule.train is None:
        return None, f"{capsule.path}/train.csv missing or unreadable"
    column, selected = _curve_metric(capsule, metric)
    if column is None:
        return None, f"{capsule.path}/train.csv has no val/{metric or '<metric>'} column"
    direction = metric_registry.direction(column, project.metrics) or selected
    if direction not in ("max", "min"):
        return None, f"{capsule.path}/train.csv: direction of {column} unknown"
    frame = capsule.train
    x_name = "epoch" if "epoch" in frame.columns else "step"
    x, y = capsule.train_numbers(x_name), capsule.train_numbers(column)
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 2:
        return None, f"{capsule.path}/train.csv: fewer than 2 finite {column} rows"
    x, y = x[keep], (y[keep] if direction == "max" else -y[keep])
    best = int(np.argmax(y))
    span = float(x[-1] - x[0]) or 1.0
    return Trajectory(capsule, column, float(x[best]), float(x[-1]), float(y[0]), float(y[best]), float(y[-1]),
                      float(y[-1] - y[0]) / span, _spike_ratio(capsule, int(params.get("grad_window", 20)))), ""


def _spike_ratio(capsule: Capsule, window: int) -> float | None:
    """grad-norm P99 over the median of its rolling median (None without a usable grad_norm column)."""
    import numpy as np

    if capsule.train is None or "grad_norm" not in capsule.train.columns:
        return None
    grad = capsule.train_numbers("grad_norm")
    grad = grad[np.isfinite(grad)]
    if len(grad) < 2:
        return None
    baseline = float(np.median(rolling_median(grad, window)))
    return float(np.percentile(grad, 99)) / baseline if baseline > 0 else None


def rolling_median(values: Any, window: int) -> Any:
    """pandas' `rolling(window, min_periods=1).median()` in numpy: the first window − 1 medians over the values
    so far, then one per full window (a Series and a rolling object per capsule cost more than the medians)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    window = max(1, window)
    head: list[float] = []
    seen: list[float] = []
    for value in values[:window - 1].tolist():  # the growing windows: a sorted list, no numpy call each
        bisect.insort(seen, value)
        middle = len(seen) // 2
        head.append(seen[middle] if len(seen) % 2 else (seen[middle - 1] + seen[middle]) / 2)
    full = np.median(sliding_window_view(values, window), axis=1) if len(values) >= window else np.empty(0)
    return np.concatenate([np.asarray(head, dtype=float), full])


def _curve_finding(project: ProjectEvidence, curve: Trajectory, params: Mapping[str, Any]) -> Finding | None:
    capsule = curve.capsule
    values = {"column": curve.column, "best_epoch": curve.best_epoch, "last_epoch": curve.last_epoch,
              "gap": curve.gap, "spike_ratio": curve.spike_ratio}
    evidence = (EvidenceRef(capsule.train_path or f"{capsule.path}/train.csv", capsule.files.get("train.csv")),)
    claims = claims_touching(project, [capsule.run_id])
    spike = float(params.get("grad_spike", 10.0))
    if curve.best == curve.first and curve.spike_ratio is not None and curve.spike_ratio >= spike:
        return Finding("V03", capsule.subject, "error",
                       f"training instability — rerun the identical config: {curve.column} never better than "
                       f"epoch {fmt(curve.best_epoch)}, grad-norm P99 = {fmt(curve.spike_ratio)} × rolling median",
                       values, evidence, integrity_class="bug", claims=claims)
    early = curve.best_epoch <= float(params.get("early_fraction", 0.3)) * curve.last_epoch
    if early and curve.gap > float(params.get("gap", 0.05)):
        return Finding("V03", capsule.subject, "warn",
                       f"early peak then decline: reproduce before reporting ({curve.column} best at epoch "
                       f"{fmt(curve.best_epoch)} of {fmt(curve.last_epoch)}, gap {fmt(curve.gap)})",
                       values, evidence, integrity_class="negligence", claims=claims)
    return None


def _shape_finding(project: ProjectEvidence, comparison: Comparison, curves: Mapping[str, Trajectory],
                   flagged: set[str]) -> Finding | None:
    """`info` naming the shape class of run against control, when neither arm's curve was flagged."""
    arms = [[curves[c.key] for c in project.run_capsules(r) if c.key in curves]
            for r in (comparison.run, comparison.control)]
    if not arms[0] or not arms[1] or any(t.capsule.subject in flagged for arm in arms for t in arm):
        return None
    (run_final, run_slope), (ctrl_final, ctrl_slope) = [
        (sum(t.final for t in arm) / len(arm), sum(t.slope for t in arm) / len(arm)) for arm in arms]
    plateau = "better" if run_final > ctrl_final else "worse" if run_final < ctrl_final else "equal"
    slope = "shallower" if abs(run_slope) < abs(ctrl_slope) else "steeper" if abs(run_slope) > abs(ctrl_slope) \
        else "equal"
    shape = f"{plateau} plateau, {slope} slope"
    tail = "; consistent with a real effect" if plateau == "better" else ""
    column = arms[0][0].column
    return Finding("V03", comparison.subject, "info",
                   f"shape: {shape} than control on {column}{tail}",
                   {"shape": shape, "run_final": run_final, "control_final": ctrl_final, "run_slope": run_slope,
                    "control_slope": ctrl_slope},
                   tuple(EvidenceRef(t.capsule.train_path or "", t.capsule.files.get("train.csv"))
                         for arm in arms for t in arm),
                   integrity_class="negligence", claims=claims_touching(project, (comparison.run, comparison.control)))


CHECKS = {"V01": check_one_variable_diff, "V02": check_budget_parity, "V03": check_trajectory_shape}
