"""Section C of the catalogue, metric sanity (docs/verify.md §2): is the number pointing the right way, above
its chance level, from the decisive split, and did the metric apply at all?

- V10 `metric_direction`: every metric key resolves in the registry (docs/verify.md §6); a direction a file
  writes that disagrees with it is an error; a claim resting on a `monitor` metric is a warning.
- V11 `chance_floor`: a reported number within max(2 % of the floor, 2 SE) of its chance floor carries no signal.
- V12 `decisive_split`: claimed numbers come from `test`; a shuffled control on `val` far below chance says the
  val baseline is an optimistic artifact.
- V13 `empty_or_zero`: `n == 0`, no metrics or zero scored items is "did not apply", never a gap of 0; every
  detection/segmentation/accuracy metric exactly 0 while the train loss fell means nothing was emitted.

The state database keeps one record per (check, subject), so each check returns at most one finding per subject
(the parts of a subject's finding are joined by `_one_per_subject`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.metric_registry import resolve, to_short
from remote_gpu_trainer.audits.catalogue.model import (
    Capsule,
    CheckResult,
    EvidenceRef,
    Finding,
    MetricRule,
    Number,
    ProjectEvidence,
    TestArtifacts,
    result,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.numbers import aggregate, seed_values

if TYPE_CHECKING:
    import pandas as pd

CLASS_KEYS = ("num_classes", "n_classes", "classes")
VOCAB_KEYS = ("vocab_size", "vocab", "n_vocab")
PROPORTION_KINDS = {"majority", "top_k", "half", "prevalence", "f1_prevalence"}
ZERO_FAMILY = {"map", "ap", "ap50", "ap75", "miou", "iou", "pixel_acc", "acc", "accuracy", "top1", "balanced_acc"}
NO_PREDICTIONS = ("no predictions emitted: check decode, class offset, score floor, object-to-frame ratio and "
                  "output stride")
WORDS = {"max": "higher_is_better", "min": "lower_is_better"}


# -- shared helpers ---------------------------------------------------------------------------------------------
def _claims_of(project: ProjectEvidence, capsule_key: str) -> tuple[str, ...]:
    """The claims whose evidence rows name this capsule: a capsule's finding rides with them."""
    return tuple(dict.fromkeys(n.claim for n in project.numbers if n.claim and capsule_key in n.cells))


def _metrics_ref(test: TestArtifacts) -> EvidenceRef:
    return EvidenceRef(test.metrics_path, test.metrics_sha256)


def _train_ref(project: ProjectEvidence, capsule: Capsule) -> EvidenceRef:
    rel = capsule.train_path or f"{capsule.path}/train.csv"
    return EvidenceRef(rel, capsule.files.get("train.csv") or _file_sha(project, rel))


def _evidence_ref(project: ProjectEvidence) -> EvidenceRef:
    return EvidenceRef(project.evidence_path or "EVIDENCE.json", project.evidence_sha256)


def _file_sha(project: ProjectEvidence, rel: str) -> str | None:
    """sha256 of a project file the check read, None when it is absent or outside the root."""
    from remote_gpu_trainer.audits.catalogue.load import file_sha256

    try:
        path = (project.root / rel).resolve()
        path.relative_to(project.root.resolve())
        return file_sha256(path) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (`model.num_classes`)."""
    if not isinstance(node, Mapping):
        return {prefix: node} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _config_count(config: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    """An int config value under any of `names` (last dotted component); a list counts its items."""
    for key, value in sorted(_flat(config).items()):
        if key.rsplit(".", 1)[-1].lower() not in names:
            continue
        if isinstance(value, list) and value:
            return len(value)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


# -- V10 metric_direction --------------------------------------------------------------------------------------
def metric_direction(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Every metric key in metrics.json and train.csv `val/` columns resolves to a direction, and a direction
    written next to it agrees with the registry; claims do not rest on monitor metrics."""
    findings: list[Finding] = []
    subjects: list[str] = []
    for capsule in project.capsules:
        keys = _capsule_keys(project, capsule)
        if keys:
            subjects.append(capsule.subject)
            findings += _capsule_direction(project, capsule, keys)
    for number in project.numbers:
        if number.claim is not None:
            subjects.append(number.subject)
            findings += _number_direction(project, number)
    if not subjects:
        return skipped("V10", "metric_direction", "no metrics.json metrics, train.csv val/ columns or EVIDENCE.json "
                                                  "numbers")
    return result("V10", "metric_direction", findings, subjects)


def _capsule_keys(project: ProjectEvidence, capsule: Capsule) -> list[tuple[str, Any, EvidenceRef]]:
    """(metric key, the direction written beside it or None, the file it is in)."""
    keys: list[tuple[str, Any, EvidenceRef]] = []
    for test in capsule.tests.values():
        blocks = (test.metrics or {}).get("metrics")
        for name, block in blocks.items() if isinstance(blocks, Mapping) else ():
            written = block.get("direction") if isinstance(block, Mapping) else None
            keys.append((str(name), written, _metrics_ref(test)))
    if capsule.train is not None:
        ref = _train_ref(project, capsule)
        keys += [(str(col), None, ref) for col in capsule.train.columns if str(col).lower().startswith("val/")]
    return keys


def _disagreement(name: str, written: Any, rule: MetricRule) -> str | None:
    """Why a written direction contradicts the registry's, or None when it agrees (or says nothing)."""
    if written is None or rule.direction == "monitor":
        return None
    short = to_short(written)
    if short is None:
        return f"{name} direction {written!r} is not max/min/higher_is_better/lower_is_better"
    if short != rule.direction:
        return f"{name} written {written}, registry {WORDS[rule.direction]}"
    return None


def _capsule_direction(project: ProjectEvidence, capsule: Capsule,
                       keys: list[tuple[str, Any, EvidenceRef]]) -> list[Finding]:
    unknown: list[str] = []
    disagree: list[str] = []
    refs: list[EvidenceRef] = []
    for name, written, ref in keys:
        rule = resolve(name, project.metrics)
        why = f"{name} (in {ref.path.rsplit('/', 1)[-1]})" if rule is None else _disagreement(name, written, rule)
        if why is not None:
            (unknown if rule is None else disagree).append(why)
            refs.append(ref)
    findings = []
    claims = _claims_of(project, capsule.key)
    evidence = tuple(dict.fromkeys(refs))
    if unknown:
        findings.append(Finding("V10", capsule.subject, "error",
                                f"unknown metric direction: {', '.join(sorted(set(unknown)))}; declare it once in "
                                "rgt.toml [metrics]", {"unknown": sorted(set(unknown))}, evidence, claims=claims))
    if disagree:
        findings.append(Finding("V10", capsule.subject, "error",
                                f"direction disagrees with the registry: {', '.join(sorted(set(disagree)))}",
                                {"disagree": sorted(set(disagree))}, evidence, claims=claims))
    return findings


def _number_direction(project: ProjectEvidence, number: Number) -> list[Finding]:
    rule = resolve(number.metric, project.metrics)
    claims = (number.claim,) if number.claim else ()
    ref = (_evidence_ref(project),)
    if rule is None:
        return [Finding("V10", number.subject, "error", f"unknown metric direction: {number.metric}; declare it "
                        "once in rgt.toml [metrics]", {"unknown": [number.metric]}, ref, claims=claims)]
    if rule.direction == "monitor":
        return [Finding("V10", number.subject, "warn", f"{number.metric} is a monitor metric, not an objective",
                        {"metric": number.metric, "direction": "monitor"}, ref, claims=claims)]
    why = _disagreement(number.metric, number.stated.get("direction"), rule)
    if why is None:
        return []
    return [Finding("V10", number.subject, "error", f"direction disagrees with the registry: {why}",
                    {"disagree": [why]}, ref, claims=claims)]


# -- chance floors (V11, V12) ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FloorInputs:
    """What a chance floor is computed from: the test's targets, the run's config, the item count."""

    targets: pd.Series | None
    config: Mapping[str, Any]
    n: int | None


@dataclass(frozen=True)
class Floor:
    """A metric's chance floor from the registry: its value and the kind of chance level it comes from (a proportion
    kind also has a standard error)."""

    value: float
    kind: str

    @property
    def proportion(self) -> bool:
        return self.kind in PROPORTION_KINDS


def floor_inputs(capsule: Capsule, test: TestArtifacts) -> FloorInputs:
    """The `target` column of the test's per-item rows (those of the metrics' split when a `split` column says)."""
    frame = test.results
    targets = None
    if frame is not None and "target" in frame.columns:
        rows = frame[frame["split"] == test.split] if "split" in frame.columns and test.split else frame
        targets = rows["target"].dropna()
    n = test.n if test.n is not None else (len(frame) if frame is not None else None)
    return FloorInputs(targets, capsule.config or {}, n)


def _classes(inputs: FloorInputs) -> int | None:
    """C from the config (num_classes / n_classes / classes), else the distinct targets."""
    configured = _config_count(inputs.config, CLASS_KEYS)
    if configured is not None:
        return configured
    return int(inputs.targets.nunique()) if inputs.targets is not None and len(inputs.targets) else None


def _positive_rate(inputs: FloorInputs) -> float | str:
    targets = inputs.targets
    if targets is None or not len(targets):
        return "needs a `target` column in the per-item results"
    values = set(targets.unique().tolist())
    if not values <= {0, 1}:  # True, False, 0.0 and 1.0 hash equal to these
        return "target is not binary (0/1)"
    return float((targets == 1).mean())


def _numeric_targets(inputs: FloorInputs) -> list[float] | str:
    import pandas as pd

    if inputs.targets is None or not len(inputs.targets):
        return "needs a `target` column in the per-item results"
    numeric = pd.to_numeric(inputs.targets, errors="coerce")
    if numeric.isna().any():
        return "target is not numeric"
    return [float(v) for v in numeric]


def _majority(metric: str, inputs: FloorInputs) -> float | str:
    if inputs.targets is not None and len(inputs.targets):
        return float(inputs.targets.value_counts(normalize=True).max())
    classes = _config_count(inputs.config, CLASS_KEYS)
    return 1.0 / classes if classes else "needs a `target` column or num_classes in the config"


def _top_k(metric: str, inputs: FloorInputs) -> float | str:
    match = re.search(r"(?:top|@)[-_]?(\d+)", metric.lower())
    classes = _classes(inputs)
    if match is None:
        return f"no k in the metric name {metric!r}"
    if not classes:
        return "needs num_classes in the config or a `target` column"
    return min(1.0, int(match.group(1)) / classes)


def _from_prevalence(metric: str, inputs: FloorInputs) -> float | str:
    return _positive_rate(inputs)


def _f1_prevalence(metric: str, inputs: FloorInputs) -> float | str:
    p = _positive_rate(inputs)
    return p if isinstance(p, str) else 2 * p / (1 + p)


def _ln_classes(metric: str, inputs: FloorInputs) -> float | str:
    classes = _classes(inputs)
    return math.log(classes) if classes and classes > 1 else "needs num_classes in the config or a `target` column"


def _target_variance(metric: str, inputs: FloorInputs) -> float | str:
    """Predict-the-mean: MSE = variance (ddof 0), RMSE = its root, MAE = mean absolute deviation."""
    values = _numeric_targets(inputs)
    if isinstance(values, str):
        return values
    centre = math.fsum(values) / len(values)
    variance = math.fsum((v - centre) ** 2 for v in values) / len(values)
    short = resolve(metric)
    key = short.key if short is not None else metric
    if key == "mse":
        return variance
    if key == "rmse":
        return math.sqrt(variance)
    if key == "mae":
        return math.fsum(abs(v - centre) for v in values) / len(values)
    return f"no predict-the-mean floor for {key} from a scalar target"


def _vocab(metric: str, inputs: FloorInputs) -> float | str:
    size = _config_count(inputs.config, VOCAB_KEYS)
    rule = resolve(metric)
    key = rule.key if rule is not None else metric
    if size is None:
        return "needs vocab_size in the config"
    if key in {"perplexity", "ppl"}:
        return float(size)
    if key == "bpd":
        return math.log2(size)
    return f"no uniform-guess floor for {key}"


FLOORS: dict[str, Callable[[str, FloorInputs], float | str]] = {
    "majority": _majority, "top_k": _top_k, "prevalence": _from_prevalence, "f1_prevalence": _f1_prevalence,
    "ln_classes": _ln_classes, "target_variance": _target_variance, "vocab": _vocab,
    "half": lambda m, i: 0.5, "zero": lambda m, i: 0.0, "one": lambda m, i: 1.0,
    "psnr_mean_image": lambda m, i: "the mean-image PSNR needs the images, not per-item rows",
    "background": lambda m, i: "the all-background floor needs the target masks, not per-item rows",
}


def chance_floor(metric: str, rule: MetricRule, inputs: FloorInputs) -> Floor | str:
    """The registry's chance floor for `metric`, or why it cannot be computed here."""
    if rule.chance is None:
        return f"{metric} has no chance level in the registry"
    compute = FLOORS.get(rule.chance)
    if compute is None:
        return f"unknown chance kind {rule.chance!r}"
    value = compute(metric, inputs)
    return value if isinstance(value, str) else Floor(value, rule.chance)


def standard_error(floor: Floor, n: int | None) -> float:
    """SE = sqrt(p(1 − p)/n) with p = floor for proportion metrics; 0 otherwise (or without n)."""
    if not floor.proportion or not n or not 0.0 <= floor.value <= 1.0:
        return 0.0
    return math.sqrt(floor.value * (1.0 - floor.value) / n)


# -- V11 chance_floor ------------------------------------------------------------------------------------------
def chance_floor_check(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Flag a number when |m − floor| ≤ max(relative·|floor|, se_multiple·SE): it carries no signal."""
    if not project.numbers:
        return skipped("V11", "chance_floor", "no reported numbers (metrics.json or EVIDENCE.json)")
    findings: list[Finding] = []
    subjects: list[str] = []
    not_judged: list[str] = []
    for number in project.numbers:
        outcome = _judge_chance(project, number, params)
        if isinstance(outcome, str):
            not_judged.append(f"{number.subject}: {outcome}")
            continue
        subjects.append(number.subject)
        if outcome is not None:
            findings.append(outcome)
    note = "not judged: " + "; ".join(not_judged) if not_judged else ""
    if not subjects:
        return skipped("V11", "chance_floor", note)
    return result("V11", "chance_floor", findings, subjects, note=note)


def _judge_chance(project: ProjectEvidence, number: Number, params: Mapping[str, Any]) -> Finding | str | None:
    """A finding when the number is at chance, None when it is clear of it, or why it was not judged."""
    rule = resolve(number.metric, project.metrics)
    if rule is None:
        return f"{number.metric} is not in the metric registry (V10)"
    values = seed_values(project, number)
    value = aggregate(number, [s.value for s in values])
    if value is None:
        return "no finite value in its metrics.json files"
    first = values[0]
    inputs = floor_inputs(first.capsule, first.test)
    floor = chance_floor(number.metric, rule, inputs)
    if isinstance(floor, str):
        return floor
    n = inputs.n
    se = standard_error(floor, n)
    tolerance = max(float(params.get("relative", 0.02)) * abs(floor.value),
                    float(params.get("se_multiple", 2.0)) * se)
    if abs(value - floor.value) > tolerance:
        return None
    refs = tuple(dict.fromkeys([s.ref for s in values] + ([EvidenceRef(first.test.results_path,
                                                                       first.test.results_sha256)]
                                                          if first.test.results_path else [])))
    detail = f"{number.metric} = {value:.4g}, floor {floor.value:.4g} ({floor.kind}) ± {tolerance:.2g}"
    return Finding("V11", number.subject, "error", f"metric at chance: carries no signal ({detail})",
                   {"metric": number.metric, "value": value, "floor": floor.value, "chance": floor.kind,
                    "tolerance": tolerance, "se": se, "n": n}, refs,
                   disclosure=f"metric at chance: {detail}",
                   claims=(number.claim,) if number.claim else ())


# -- V12 decisive_split ----------------------------------------------------------------------------------------
def decisive_split(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Claimed numbers come from the test split; a shuffled control on val far below chance is an artifact."""
    findings: list[Finding] = []
    subjects: list[str] = []
    for number in project.numbers:
        if number.claim is None:
            continue
        splits = _number_splits(project, number)
        if not splits:
            continue
        subjects.append(number.subject)
        other = sorted(s for s in splits if s != "test")
        if other:
            refs = tuple(s.ref for s in seed_values(project, number)) or (_evidence_ref(project),)
            findings.append(Finding("V12", number.subject, "warn", f"{'/'.join(other)}-split number "
                                    "(the decisive number is the test split's)", {"splits": sorted(splits)}, refs,
                                    disclosure=f"{'/'.join(other)}-split number", claims=(number.claim,)))
    for capsule in project.capsules:
        for test in capsule.tests.values():
            if test.split == "val" and test.results is not None and "condition" in test.results.columns:
                subjects.append(capsule.subject)
                findings += _shuffled_below_chance(project, capsule, test, params)
    if not subjects:
        return skipped("V12", "decisive_split", "no EVIDENCE.json number with a split and no val test with a "
                                                "`condition` column")
    return result("V12", "decisive_split", findings, subjects)


def _number_splits(project: ProjectEvidence, number: Number) -> set[str]:
    """The split the EVIDENCE row states and the split of every metrics.json it rests on."""
    splits = {s.test.split for s in seed_values(project, number) if s.test.split}
    stated = number.stated.get("split")
    return splits | ({stated} if isinstance(stated, str) else set())


def _shuffled_below_chance(project: ProjectEvidence, capsule: Capsule, test: TestArtifacts,
                           params: Mapping[str, Any]) -> list[Finding]:
    """A `condition == "shuffled"` control on val whose mean is below chance by more than se_multiple·SE."""
    frame = test.results
    assert frame is not None
    shuffled = frame[frame["condition"] == "shuffled"]
    blocks = (test.metrics or {}).get("metrics")
    findings = []
    for name, block in blocks.items() if isinstance(blocks, Mapping) and len(shuffled) else ():
        rule = resolve(str(name), project.metrics)
        column = block.get("column", name) if isinstance(block, Mapping) else name
        if rule is None or rule.direction != "max" or column not in frame.columns:
            continue
        floor = chance_floor(str(name), rule, floor_inputs(capsule, test))
        if isinstance(floor, str) or not floor.proportion:
            continue
        value = float(shuffled[column].astype(float).mean())
        se = standard_error(floor, len(shuffled))
        if floor.value - value > float(params.get("se_multiple", 2.0)) * se:
            findings.append(Finding(
                "V12", capsule.subject, "warn", "val baseline optimistic artifact; re-run on test "
                f"(shuffled {name} = {value:.4g} on val, chance {floor.value:.4g}, SE {se:.2g})",
                {"metric": str(name), "shuffled": value, "floor": floor.value, "se": se, "n": len(shuffled)},
                (_metrics_ref(test), EvidenceRef(test.results_path or "", test.results_sha256)),
                claims=_claims_of(project, capsule.key)))
    return findings


# -- V13 empty_or_zero -----------------------------------------------------------------------------------------
def empty_or_zero(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """A metric that did not apply is never a gap of 0; all-zero task metrics while loss fell: nothing emitted."""
    findings: list[Finding] = []
    subjects: list[str] = []
    for capsule in project.capsules:
        tests = [t for t in capsule.tests.values() if t.metrics is not None
                 and t.metrics.get("metric_applicability") != "not_applicable"]
        if not tests:
            continue
        subjects.append(capsule.subject)
        claims = _claims_of(project, capsule.key)
        for test in tests:
            empty = _why_empty(test)
            if empty:
                findings.append(Finding("V13", capsule.subject, "error", f"metric did not apply: test "
                                        f"{test.test_id} has {empty} (never report it as a gap of 0)",
                                        {f"{test.test_id}.empty": empty}, (_metrics_ref(test),), claims=claims))
            elif _all_zero(project, test) and _loss_fell(capsule):
                findings.append(Finding("V13", capsule.subject, "error", f"{NO_PREDICTIONS} (test {test.test_id})",
                                        {f"{test.test_id}.all_zero": _zero_names(project, test)},
                                        (_metrics_ref(test), _train_ref(project, capsule)), claims=claims))
    if not subjects:
        return skipped("V13", "empty_or_zero", "no readable metrics.json with applicable metrics")
    return result("V13", "empty_or_zero", findings, subjects)


def _why_empty(test: TestArtifacts) -> str | None:
    """`n == 0`, an empty `metrics` object, zero scored items (a `scored` field or an empty results table)."""
    body = test.metrics or {}
    blocks = body.get("metrics")
    if body.get("n") == 0:
        return "n == 0"
    if not isinstance(blocks, Mapping) or not blocks:
        return "empty metrics"
    if body.get("scored") == 0 or body.get("n_scored") == 0 or (test.results is not None and len(test.results) == 0):
        return "0 scored"
    return None


def _zero_names(project: ProjectEvidence, test: TestArtifacts) -> list[str]:
    blocks = (test.metrics or {}).get("metrics")
    names = []
    for name in blocks if isinstance(blocks, Mapping) else {}:
        rule = resolve(str(name), project.metrics)
        if rule is not None and rule.key in ZERO_FAMILY:
            names.append(str(name))
    return sorted(names)


def _all_zero(project: ProjectEvidence, test: TestArtifacts) -> bool:
    """Every mAP / mIoU / label-accuracy metric of the test is exactly 0 (at least one present)."""
    names = _zero_names(project, test)
    return bool(names) and all(test.metric_value(name) == 0.0 for name in names)


def _loss_fell(capsule: Capsule) -> bool:
    """The last logged train loss is below the first."""
    frame = capsule.train
    if frame is None or "loss" not in frame.columns:
        return False
    import pandas as pd

    losses = pd.to_numeric(frame["loss"], errors="coerce").dropna()
    return len(losses) >= 2 and float(losses.iloc[-1]) < float(losses.iloc[0])


CHECKS = {"V10": metric_direction, "V11": chance_floor_check, "V12": decisive_split, "V13": empty_or_zero}
