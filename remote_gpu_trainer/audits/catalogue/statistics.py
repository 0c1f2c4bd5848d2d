"""Section B of the catalogue, seeds and statistics (docs/verify.md §2): is a reported difference larger than
the noise it was measured in? V04 seed_count, V05 variance_reported, V06 mde, V07 delta_vs_noise,
V08 baseline_draw, V09 multiple_comparisons.

V04, V05 and V09 judge each reported number (an EVIDENCE evidence row, or a run no claim cites); V06, V07 and
V08 judge each declared comparison on every (test, metric) it covers, one finding per pair listing them.
Bootstraps are vectorised numpy over a seeded generator (params `rng_seed`, `resamples`; the stream as
audits/catalogue/bootstrap.py draws it); V07 prepares every comparison's per-item difference first and resamples
them together, one index matrix per item count (audits/catalogue/paired_items.py).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from remote_gpu_trainer.audits.catalogue import paired_items
from remote_gpu_trainer.audits.catalogue.bootstrap import mean_ci
from remote_gpu_trainer.audits.catalogue.comparability import (
    claims_touching,
    fmt,
    fmt_signed,
    metric_direction,
    shared_targets,
)
from remote_gpu_trainer.audits.catalogue.load import cell_outcomes
from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    CheckResult,
    Comparison,
    EvidenceRef,
    Finding,
    Number,
    ProjectEvidence,
    result,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.numbers import SeedValue, iqm, mean, sample_std, seed_values

SINGLE_SEED = "single seed — no variance band; a delta inside run-to-run noise cannot be told from signal"
VARIANCE_TYPES = ("std_over_seeds", "ci95_bootstrap_items", "ci95_bootstrap_seeds", "iqm_ci95", "none")
_SEVERITY = ("info", "warn", "error")


@contextmanager
def _quiet() -> Iterator[None]:
    """scipy warns on degenerate samples (all-equal values); the checks handle those cases themselves."""
    import numpy as np

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _worst(severities: list[str]) -> str:
    return max(severities, key=_SEVERITY.index)


def _number_claims(number: Number) -> tuple[str, ...]:
    return (number.claim,) if number.claim else ()


# -- V04 seed_count -------------------------------------------------------------------------------------------
def check_seed_count(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V04: ≥ 3 seeds reported as mean ± sd, or ≥ 5 with IQM and a bootstrap CI in the high-variance regime."""
    if not project.numbers:
        return skipped("V04", "seed_count", "no reported numbers (no EVIDENCE.json claims, no metrics.json)")
    findings = [f for n in project.numbers if (f := _seed_finding(project, n, params)) is not None]
    unfinished = _unfinished_runs(project)
    return result("V04", "seed_count", findings + unfinished,
                  [n.subject for n in project.numbers] + [f.subject for f in unfinished])


def _unfinished_runs(project: ProjectEvidence) -> list[Finding]:
    """One info finding per run whose manifest records cells that failed or never started: their numbers are
    not among the seeds, and a reader of the run's mean must be told which cells it leaves out and why."""
    findings = []
    for run_id, manifest in sorted(project.manifests.items()):
        outcomes = cell_outcomes(manifest)
        if outcomes:
            listed = ", ".join(f"{cell} {words}" for cell, words in sorted(outcomes.items()))
            findings.append(Finding(
                "V04", f"run:{run_id}", "info", f"left out of seeds and means: {listed}",
                {"left_out": dict(sorted(outcomes.items()))}, (),
                f"{len(outcomes)} cell(s) of run {run_id} did not finish ({listed}) and are not in its numbers",
                integrity_class="qrp_tell"))
    return findings


def iqm_bootstrap_ci(values: list[float], resamples: int, rng_seed: int) -> tuple[float, float]:
    """95 % percentile-bootstrap CI of the IQM over seeds, one vectorised draw of resamples × seeds."""
    import numpy as np
    from scipy.stats import trim_mean

    x = np.asarray(values, dtype=float)
    index = np.random.default_rng(rng_seed).integers(0, len(x), size=(resamples, len(x)))
    lo, hi = np.percentile(trim_mean(x[index], 0.25, axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def _regime(number: Number, seeds: list[SeedValue], params: Mapping[str, Any]) -> str:
    """`high_variance` when declared (params `regime`, or the EVIDENCE row's `regime`) or the task is RL."""
    declared = number.stated.get("regime") or params.get("regime")
    tasks = {str((s.capsule.run_record or {}).get("task", "")).lower() for s in seeds}
    return "high_variance" if declared == "high_variance" or "rl" in tasks else "default"


def required_seeds(number: Number, seeds: list[SeedValue], params: Mapping[str, Any]) -> tuple[int, str]:
    """The seeds a number needs in its regime, and the regime: V04 judges by it and DELIVER's D3 disclosure
    ("n seeds, no CI") says the same thing in the caption."""
    regime = _regime(number, seeds, params)
    return int(params["min_seeds_high_variance"] if regime == "high_variance" else params["min_seeds"]), regime


def _seed_finding(project: ProjectEvidence, number: Number, params: Mapping[str, Any]) -> Finding | None:
    seeds = seed_values(project, number)
    values = [s.value for s in seeds]
    required, regime = required_seeds(number, seeds, params)
    unusable = [c for c in number.cells if c not in {s.capsule.key for s in seeds}]
    info: dict[str, Any] = {"seeds": len(values), "required": required, "regime": regime, "unusable": unusable}
    refs = tuple(s.ref for s in seeds)

    def finding(severity: str, message: str, disclosure: str = "", cls: str = "qrp_tell") -> Finding:
        return Finding("V04", number.subject, severity, message, info, refs, disclosure,
                       integrity_class=cls, claims=_number_claims(number))

    if not values:
        return finding("warn", f"no seed has a finite {number.metric} on {number.test_id} "
                               f"(cells: {', '.join(number.cells)})", cls="bug")
    if len(values) == 1:
        return finding("info", f"1 seed < {required} (regime {regime})", SINGLE_SEED)
    sd, centre = sample_std(values) or 0.0, mean(values)
    cv = sd / abs(centre) if centre else None
    info.update(mean=centre, sd=sd, cv=cv)
    if regime == "high_variance":
        lo, hi = iqm_bootstrap_ci(values, int(params["resamples"]), int(params["rng_seed"]))
        info.update(iqm=iqm(values), ci95=[lo, hi])
    suggest = regime == "default" and cv is not None and cv > float(params["cv_high_variance"])
    hint = (f"seed CV {cv:.1%} > {float(params['cv_high_variance']):.0%}: high_variance regime suggested "
            f"(≥ {int(params['min_seeds_high_variance'])} seeds, IQM with a 95 % bootstrap CI)") if suggest else ""
    info["suggested_regime"] = "high_variance" if suggest else None
    if len(values) < required:
        message = f"{len(values)} seeds < {required} (regime {regime})"
        return finding("warn", message + (f"; {hint}" if hint else ""), message)
    if hint:
        return finding("info", hint)
    if regime == "high_variance" and number.aggregate != "iqm_over_seeds":
        return finding("info", f"high_variance regime: report IQM {fmt(info['iqm'])} "
                               f"(95 % CI [{fmt(info['ci95'][0])}, {fmt(info['ci95'][1])}]) rather than the mean")
    return None


# -- V05 variance_reported ------------------------------------------------------------------------------------
def check_variance_reported(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V05: every EVIDENCE number carries n, seeds and a variance type; few items need few decimals. A row with
    no value yet (written by the user, not yet built by `rgt build evidence`) states no number to judge."""
    claimed = [n for n in project.numbers if n.claim is not None and n.stated.get("value") is not None]
    if not claimed:
        return skipped("V05", "variance_reported", "no EVIDENCE.json claims with a value (rgt build evidence "
                                                   "fills them)")
    findings = [f for n in claimed if (f := _variance_finding(project, n, params)) is not None]
    return result("V05", "variance_reported", findings, [n.subject for n in claimed])


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _variance_finding(project: ProjectEvidence, number: Number, params: Mapping[str, Any]) -> Finding | None:
    row = number.stated
    variance = row.get("variance")
    kind = variance.get("type") if isinstance(variance, Mapping) else None
    missing = [name for name, value in (("n", _whole(row.get("n"))), ("seeds", _whole(row.get("seeds"))),
                                        ("variance.type", kind)) if value is None]
    parts, severity = [], "info"
    if missing:
        parts.append("missing " + ", ".join(missing))
        severity = "warn"
    elif kind not in VARIANCE_TYPES:
        parts.append(f"variance.type {kind!r} is not one of {', '.join(VARIANCE_TYPES)}")
        severity = "warn"
    seeds = seed_values(project, number)
    n = _whole(row.get("n")) or next((s.test.n for s in seeds if s.test.n is not None), None)
    decimals = _whole(row.get("precision"))
    few, shown = int(params["false_precision_n"]), int(params["false_precision_decimals"])
    if n is not None and decimals is not None and n < few and decimals >= shown:
        parts.append(f"false precision; print n (n = {n} < {few} shown with {decimals} decimals)")
    if not parts:
        return None
    evidence = tuple(s.ref for s in seeds) + ((EvidenceRef(project.evidence_path, project.evidence_sha256),)
                                             if project.evidence_path else ())
    return Finding("V05", number.subject, severity, "; ".join(parts),
                   {"missing": missing, "variance_type": kind, "n": n, "precision": decimals}, evidence,
                   integrity_class="qrp_tell", claims=_number_claims(number))


# -- comparisons: arms ----------------------------------------------------------------------------------------
def arm(project: ProjectEvidence, run_id: str, test_id: str, metric: str) -> list[SeedValue]:
    """A run's finite per-seed values of one (test, metric), one per capsule."""
    cells = tuple(c.key for c in project.run_capsules(run_id))
    return seed_values(project, Number(subject="", claim=None, cells=cells, test_id=test_id, metric=metric))


def _pair_check(check: str, name: str, project: ProjectEvidence, params: Mapping[str, Any],
                judge: Any) -> CheckResult:
    """The loop V06–V08 share: per comparison, `judge(project, comparison, test, metric, params)` returns
    (severity, message part, values) or a string saying why that target was not judged."""
    if not project.comparisons:
        return skipped(check, name, "no comparisons declared (rgt.toml [[verify.compare]])")
    findings, subjects, notes = [], [], []
    for comparison in project.comparisons:
        targets = shared_targets(project, comparison)
        if not targets:
            notes.append(f"{comparison.subject}: no test/metric reported by both runs")
        parts: list[tuple[str, str, dict[str, Any], tuple[EvidenceRef, ...], str]] = []
        judged = False
        for test_id, metric in targets:
            verdict = judge(project, comparison, test_id, metric, params)
            if isinstance(verdict, str):
                notes.append(f"{comparison.subject} {test_id}/{metric}: {verdict}")
                continue
            judged = True
            if verdict is not None:
                parts.append(verdict)
        if judged:
            subjects.append(comparison.subject)
        if parts:
            findings.append(_pair_finding(check, project, comparison, parts))
    if not subjects:
        return skipped(check, name, "; ".join(notes))
    return result(check, name, findings, subjects, note="; ".join(notes))


def _pair_finding(check: str, project: ProjectEvidence, comparison: Comparison,
                  parts: list[tuple[str, str, dict[str, Any], tuple[EvidenceRef, ...], str]]) -> Finding:
    """One finding per pair: the worst severity, every target's message part and values."""
    severity = _worst([p[0] for p in parts])
    values = {key: v for p in parts for key, v in p[2].items()}
    evidence = tuple(dict.fromkeys(ref for p in parts for ref in p[3]))
    integrity = next((p[4] for p in parts if p[0] == severity), "negligence")
    return Finding(check, comparison.subject, severity, "; ".join(p[1] for p in parts), values, evidence,
                   integrity_class=integrity, claims=claims_touching(project, (comparison.run, comparison.control)))


def _sign(project: ProjectEvidence, comparison: Comparison, test_id: str, metric: str) -> float:
    """+1, or −1 for lower-is-better, so every delta here is an improvement of run over control."""
    capsules = [*project.run_capsules(comparison.run), *project.run_capsules(comparison.control)]
    return -1.0 if metric_direction(project, capsules, test_id, metric) == "min" else 1.0


# -- V06 mde --------------------------------------------------------------------------------------------------
def mde(sd: float, n_run: int, n_control: int, alpha: float = 0.05) -> tuple[float, float]:
    """(t, MDE) with MDE = t_{1−α/2, n1+n2−2} · sd · sqrt(1/n1 + 1/n2), which is the catalogue's
    t_{0.975, 2n−2} · sd · sqrt(2/n) when both arms have n seeds (sd 3.42, n = 3: t = 2.776, MDE = 7.75)."""
    from scipy.stats import t as student_t

    t = float(student_t.ppf(1 - alpha / 2, n_run + n_control - 2))
    return t, t * sd * math.sqrt(1 / n_run + 1 / n_control)


def check_mde(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V06: a difference below the minimum detectable effect is not evidence of no difference."""
    return _pair_check("V06", "mde", project, params, _judge_mde)


def _judge_mde(project: ProjectEvidence, comparison: Comparison, test_id: str, metric: str,
               params: Mapping[str, Any]) -> tuple | str | None:
    run, control = arm(project, comparison.run, test_id, metric), arm(project, comparison.control, test_id, metric)
    if len(run) < 2 or len(control) < 2:
        return f"needs ≥ 2 seeds per arm (run {len(run)}, control {len(control)})"
    a, b = [s.value for s in run], [s.value for s in control]
    sd = max(sample_std(a) or 0.0, sample_std(b) or 0.0)  # the noisier arm floors the MDE
    t, floor = mde(sd, len(a), len(b), float(params.get("alpha", 0.05)))
    delta = mean(a) - mean(b)
    key = f"{test_id}/{metric}"
    values = {key: {"delta": delta, "mde": floor, "t": t, "sd": sd, "n_run": len(a), "n_control": len(b)}}
    if abs(delta) >= floor:
        return None
    message = (f"underpowered — not evidence of no difference: {key} |Δ| = {fmt(abs(delta))} < MDE {fmt(floor)} "
               f"(sd {fmt(sd)}, {len(a)} vs {len(b)} seeds)")
    return "warn", message, values, tuple(s.ref for s in run + control), "negligence"


# -- V07 delta_vs_noise ---------------------------------------------------------------------------------------
def check_delta_vs_noise(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V07: per-item paired bootstrap when both arms have per-item results, else a test over seeds. Every
    comparison's per-item difference is prepared first, so the bootstraps run together (paired_items.py)."""
    targets = [(c, t, m) for c in project.comparisons for t, m in shared_targets(project, c)]
    prepared = paired_items.prepare(project, targets, lambda c, t, m: _sign(project, c, t, m))
    cis = paired_items.with_cis(prepared, int(params["resamples"]), int(params["rng_seed"]))

    def judge(project: ProjectEvidence, comparison: Comparison, test_id: str, metric: str,
              params: Mapping[str, Any]) -> tuple | str | None:
        items = prepared[(comparison.subject, test_id, metric)]
        if isinstance(items, paired_items.PairedItems):
            ci, p = cis.get((comparison.subject, test_id, metric), (None, None))
            return paired_items.judge(items, ci, p)
        sign = _sign(project, comparison, test_id, metric)
        seeds = _judge_seeds(project, comparison, test_id, metric, sign, params)
        return f"{seeds}; per-item: {items}" if isinstance(seeds, str) else seeds

    return _pair_check("V07", "delta_vs_noise", project, params, judge)


def bootstrap_mean_ci(d: Any, resamples: int, rng_seed: int) -> tuple[float, float]:
    """95 % percentile CI of mean(d) over `resamples` resamples of items (audits/catalogue/bootstrap.py)."""
    return mean_ci(d, resamples, rng_seed)


def _seed_test(run: list[SeedValue], control: list[SeedValue]) -> tuple[str, float]:
    """Paired t-test over seeds when both arms ran the same seed ids, else Welch; a NaN p (zero variance)
    reads as 1 when the arms are equal and 0 when they differ."""
    from scipy.stats import ttest_ind, ttest_rel

    run_seeds, control_seeds = {repr(s.capsule.seed): s for s in run}, {repr(s.capsule.seed): s for s in control}
    paired = (len(run_seeds) == len(run) and len(control_seeds) == len(control) and set(run_seeds) == set(control_seeds)
              and None not in {s.capsule.seed for s in run})
    with _quiet():
        if paired:
            order = sorted(run_seeds)
            p = float(ttest_rel([run_seeds[k].value for k in order], [control_seeds[k].value for k in order]).pvalue)
        else:
            p = float(ttest_ind([s.value for s in run], [s.value for s in control], equal_var=False).pvalue)
    if math.isnan(p):
        p = 1.0 if mean([s.value for s in run]) == mean([s.value for s in control]) else 0.0
    return ("paired t-test" if paired else "Welch t-test"), p


def _judge_seeds(project: ProjectEvidence, comparison: Comparison, test_id: str, metric: str, sign: float,
                 params: Mapping[str, Any]) -> tuple | str | None:
    run, control = arm(project, comparison.run, test_id, metric), arm(project, comparison.control, test_id, metric)
    if len(run) < 2 or len(control) < 2:
        return f"needs ≥ 2 seeds per arm for a test over seeds (run {len(run)}, control {len(control)})"
    method, p = _seed_test(run, control)
    a, b = [s.value for s in run], [s.value for s in control]
    delta, sd_a, sd_b = sign * (mean(a) - mean(b)), sample_std(a) or 0.0, sample_std(b) or 0.0
    overlap = abs(mean(a) - mean(b)) <= sd_a + sd_b
    alpha = float(params.get("alpha", 0.05))
    key = f"{test_id}/{metric}"
    noisy = p >= alpha or overlap
    values = {key: {"method": method, "delta": delta, "p": p, "bands_overlap": overlap, "n_run": len(a),
                    "n_control": len(b), "bold_allowed": not noisy}}
    if not noisy:
        return None
    why = [f"p = {fmt(p)} ≥ {alpha:g}"] if p >= alpha else []
    why += ["mean ± sd bands overlap"] if overlap else []
    return ("warn", f"inside seed noise: {key} Δ = {fmt_signed(delta)} ({method}, {len(a)} vs {len(b)} seeds; "
                    f"{', '.join(why)})", values, tuple(s.ref for s in run + control), "negligence")


# -- V08 baseline_draw ----------------------------------------------------------------------------------------
def check_baseline_draw(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V08: a single-seed arm against a multi-seed one is reported against the mean, best and worst draw;
    a claim citing one draw of a multi-seed run is flagged too."""
    pairs = _pair_check("V08", "baseline_draw", project, params, _judge_draw) if project.comparisons else None
    single = [n for n in project.numbers if n.claim is not None and len(n.cells) == 1]
    cites = [f for n in single if (f := _one_draw_finding(project, n)) is not None]
    if (pairs is None or pairs.status == "skipped") and not single:
        return pairs or skipped("V08", "baseline_draw", "no comparisons declared (rgt.toml [[verify.compare]]) "
                                                        "and no claim citing a single cell")
    findings = list(pairs.findings if pairs else ()) + cites
    subjects = list(pairs.subjects if pairs else ()) + [n.subject for n in single]
    return result("V08", "baseline_draw", findings, subjects, note=pairs.note if pairs else "")


def draw_deltas(probe: float, draws: list[float], sign: float = 1.0) -> dict[str, float]:
    """Δ of a single-seed probe against the baseline's mean, best and worst draw, as improvement (probe 49.12
    vs 42.63/49.30/47.26: +6.49 worst, +2.72 mean, −0.18 best)."""
    deltas = [sign * (probe - d) for d in draws]
    return {"worst": max(deltas), "mean": sign * (probe - mean(draws)), "best": min(deltas)}


def _judge_draw(project: ProjectEvidence, comparison: Comparison, test_id: str, metric: str,
                params: Mapping[str, Any]) -> tuple | str | None:
    run, control = arm(project, comparison.run, test_id, metric), arm(project, comparison.control, test_id, metric)
    if not ((len(run) == 1 and len(control) >= 2) or (len(control) == 1 and len(run) >= 2)):
        return f"applies to one single-seed arm against a multi-seed one (run {len(run)}, control {len(control)})"
    sign = _sign(project, comparison, test_id, metric)
    probe, draws, orient = (run[0], control, sign) if len(run) == 1 else (control[0], run, -sign)
    deltas = draw_deltas(probe.value, [d.value for d in draws], orient)
    if orient != sign:  # the multi-seed arm is the run: Δ is already run − control, its best draw the top Δ
        deltas = {"worst": deltas["best"], "mean": deltas["mean"], "best": deltas["worst"]}
    ranked = sorted(draws, key=lambda d: sign * d.value)
    best, worst = ranked[-1].capsule.key, ranked[0].capsule.key
    key = f"{test_id}/{metric}"
    disagree = len({math.copysign(1, v) if v else 0 for v in deltas.values()}) > 1
    values = {key: {"delta_worst": deltas["worst"], "delta_mean": deltas["mean"], "delta_best": deltas["best"],
                    "probe": probe.capsule.key, "best_draw": best, "worst_draw": worst, "draws": len(draws)}}
    message = (f"single-seed {probe.capsule.key} vs {len(draws)}-seed {draws[0].capsule.run_id} on {key}: "
               f"Δ {fmt_signed(deltas['worst'])} worst, {fmt_signed(deltas['mean'])} mean, "
               f"{fmt_signed(deltas['best'])} best (best draw {best}, worst draw {worst})")
    if disagree:
        message += "; the deltas disagree in sign: the result depends on which draw is compared"
    return ("warn" if disagree else "info"), message, values, tuple(s.ref for s in run + control), "negligence"


def _one_draw_finding(project: ProjectEvidence, number: Number) -> Finding | None:
    """A claim row citing one cell of a run that has several seeds on the same test and metric."""
    run_id = number.cells[0].split("/")[0]
    draws = arm(project, run_id, number.test_id, number.metric)
    if len(draws) < 2:
        return None
    return Finding("V08", number.subject, "warn",
                   f"claim cites only one draw ({number.cells[0]}) of {run_id}: {len(draws)} seeds exist",
                   {"cited": number.cells[0], "draws": [d.capsule.key for d in draws]},
                   tuple(d.ref for d in draws), integrity_class="negligence", claims=_number_claims(number))


# -- V09 multiple_comparisons ---------------------------------------------------------------------------------
def check_multiple_comparisons(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V09: how many configurations were evaluated for each claim, and the Bonferroni α that implies.

    A configuration is a run with a finite value of the claim row's metric on its test whose run.json
    `exp_id` equals the row's exp_id or extends it after a separator (`ours`, `ours-lr1e3`, `ours/trial7`),
    or whose run.json `sweep.id` equals the row's; per claim k is the largest such family over its rows,
    raised to `claims[].tried` when the user disclosed more."""
    claims = [c for c in (project.evidence or {}).get("claims", []) or []
              if isinstance(c, Mapping) and isinstance(c.get("id"), str)]
    if not claims:
        return skipped("V09", "multiple_comparisons", "no claims in EVIDENCE.json")
    findings = [f for c in claims if (f := _tried_finding(project, c, params)) is not None]
    return result("V09", "multiple_comparisons", findings, [f"claim:{c['id']}" for c in claims])


def _exp_id(capsule: Capsule | None) -> tuple[str | None, str | None]:
    record = (capsule.run_record or {}) if capsule is not None else {}
    sweep = record.get("sweep")
    sweep_id = sweep.get("id") if isinstance(sweep, Mapping) else record.get("sweep_id")
    exp = record.get("exp_id")
    return (exp if isinstance(exp, str) else None), (str(sweep_id) if sweep_id is not None else None)


def configurations(project: ProjectEvidence, number: Number) -> list[str]:
    """The runs counted as configurations evaluated for this evidence row (see check_multiple_comparisons)."""
    first = project.capsule(number.cells[0])
    exp, sweep = _exp_id(first)
    exp = number.stated.get("exp_id") if isinstance(number.stated.get("exp_id"), str) else exp
    exp = exp or number.cells[0].split("/")[0]
    family = []
    for run_id in dict.fromkeys(c.run_id for c in project.capsules):
        run_exp, run_sweep = _exp_id(project.run_capsules(run_id)[0])
        run_exp = run_exp or run_id
        related = run_exp == exp or any(run_exp.startswith(exp + sep) for sep in "-_/.") or \
            (sweep is not None and run_sweep == sweep)
        if related and arm(project, run_id, number.test_id, number.metric):
            family.append(run_id)
    return family


def _tried_finding(project: ProjectEvidence, claim: Mapping[str, Any], params: Mapping[str, Any]) -> Finding | None:
    rows = [n for n in project.numbers if n.claim == claim["id"]]
    families = [configurations(project, n) for n in rows]
    seen = max(families, key=len, default=[])
    tried = _whole(claim.get("tried"))
    k = max(len(seen), tried or 0)
    alpha, above = float(params.get("alpha", 0.05)), int(params.get("warn_above", 10))
    values = {"configurations": k, "seen": seen, "tried": tried, "bonferroni_alpha": alpha / k if k else alpha}
    refs = (EvidenceRef(project.evidence_path, project.evidence_sha256),) if project.evidence_path else ()
    subject = f"claim:{claim['id']}"
    if k > above:
        return Finding("V09", subject, "warn", f"{k} configurations evaluated for this claim: Bonferroni-adjusted "
                                               f"α = {alpha:g}/{k} = {alpha / k:.2g}", values, refs,
                       integrity_class="negligence", claims=(claim["id"],))
    if k > 1 and tried is None:
        return Finding("V09", subject, "info", f"{k} configurations evaluated for this claim ({', '.join(seen)}); "
                                               "claims[].tried not disclosed", values, refs,
                       integrity_class="negligence", claims=(claim["id"],))
    return None


CHECKS = {"V04": check_seed_count, "V05": check_variance_reported, "V06": check_mde, "V07": check_delta_vs_noise,
          "V08": check_baseline_draw, "V09": check_multiple_comparisons}
