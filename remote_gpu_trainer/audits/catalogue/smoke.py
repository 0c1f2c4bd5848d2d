"""VERIFY section F, smoke-hidden failures: V24 bounded loss negative, V25 loss at chance, V26 stale checkpoint,
V27 train/eval parity (probe), V28 gradient coverage (probe) (docs/verify.md §2).

A smoke test passes on all of these: the code runs, the loss prints, a number comes out. Each check reads what
the run left on disk (train.csv, config.yaml, run.json, metrics.json) or a probe's JSON answer.

Probe answers (stored per (check id, `capsule:<run>/<cell>`), read from ProjectEvidence.probes):

- V27 `rgt probe RUN V27`: `{"shape_equal": bool, "allclose": bool, "train_mean": [per channel],
  "train_std": [...], "eval_mean": [...], "eval_std": [...], "model_training_in_eval": bool,
  "bn_untracked": [names of BatchNorm modules with num_batches_tracked == 0]}`; `parity_stats` computes the
  first six fields from the two input tensors as numpy arrays (channels on axis 1).
- V28 `rgt probe RUN V28`: `{"trainable": N, "covered": M, "dead": [names], "not_in_optimizer": [names]}`;
  `grad_coverage_stats` computes them from each trainable tensor's gradient (None when it got none).

This module also holds the small helpers every section module shares: one finding per subject (a finding
record is keyed by (check, subject), docs/verify.md §3, so a check with several things to say about one subject
says them in one finding, at the worst severity), flattened configs, probe answers, and the checkpoint
safe-load subprocess V32 uses.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.configs import flatten
from remote_gpu_trainer.audits.catalogue.load import finite
from remote_gpu_trainer.audits.catalogue.model import (
    SEVERITY_RANK,
    Capsule,
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    canonical_json,
    result,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.isolated.environment import isolated_environment

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PARITY_FLAGS = ("shape_equal", "allclose", "model_training_in_eval")  # a V27 answer has at least one


# -- shared helpers ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Issue:
    """One thing a check found about a subject; `merge` folds a subject's issues into its one finding."""

    severity: str
    message: str
    values: Mapping[str, Any] = field(default_factory=dict)


def merge(check: str, subject: str, issues: Sequence[Issue], *, evidence: Sequence[EvidenceRef] = (),
          integrity_class: str = "bug", fix: str | None = None) -> Finding | None:
    """The subject's one finding: the worst severity, every message (worst first), all values; None when the
    subject passed."""
    if not issues:
        return None
    ordered = sorted(issues, key=lambda issue: -SEVERITY_RANK[issue.severity])
    values: dict[str, Any] = {}
    for issue in ordered:
        values.update(issue.values)
    return Finding(check=check, subject=subject, severity=ordered[0].severity,
                   message="; ".join(dict.fromkeys(issue.message for issue in ordered)), values=values,
                   evidence=tuple(dict.fromkeys(evidence)), fix=fix if fix is not None else fix_text(check),
                   integrity_class=integrity_class)


def fix_text(check: str) -> str:
    spec = specs().get(check)
    return spec.fix if spec is not None else ""


def probe_answer(project: ProjectEvidence, check: str, capsule: Capsule) -> Mapping[str, Any] | None:
    answer = project.probes.get((check, capsule.subject))
    return answer if isinstance(answer, Mapping) else None


def probe_skip(check: str, name: str, project: ProjectEvidence) -> CheckResult:
    """No capsule has an answer: say which command would produce one (docs/verify.md §1)."""
    runs = sorted({c.run_id for c in project.capsules})
    if not runs:
        return skipped(check, name, "no capsules under runs/", kind="probe")
    return skipped(check, name, "; ".join(f"probe not run: rgt probe {run} {check}" for run in runs), kind="probe")


def run_value(capsule: Capsule, *keys: str) -> Any:
    """A value under run.json (`run_value(c, "training", "epochs")`), None when any step is absent."""
    node: Any = capsule.run_record
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def integer(value: Any) -> int | None:
    number = finite(value)
    return int(number) if number is not None and number == int(number) else None


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 timestamp with a zone (`Z` or an offset); None otherwise."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    import pandas as pd

    return pd.to_numeric(frame[column], errors="coerce")


def note_of(notes: Sequence[str]) -> str:
    return "; ".join(notes)


def judged_or_skipped(check: str, name: str, findings: list[Finding], subjects: list[str], notes: list[str],
                      why: str, *, kind: str = "auto") -> CheckResult:
    """`result` when any subject was judged, else `skipped` with the reasons each subject was not."""
    if not subjects and not findings:
        return skipped(check, name, note_of(notes) or why, kind=kind)
    return result(check, name, findings, subjects, kind=kind, note=note_of(notes))


def finish(findings: list[Finding], subjects: list[str], subject: str, finding: Finding | None) -> None:
    subjects.append(subject)
    if finding is not None:
        findings.append(finding)


def safe_load(path: Path, timeout: float) -> dict[str, Any]:
    """The load check's verdict on one file (isolated/load_check.py: torch.load weights_only=True in its own
    process), or a timeout or crash verdict of the same shape."""
    import subprocess
    import sys

    from remote_gpu_trainer.checkpoint_kinds import kind_of
    from remote_gpu_trainer.strict_json import loads_strict

    command = [sys.executable, "-I", "-m", "remote_gpu_trainer.isolated.load_check", str(path), "--accept-flat",
               *kind_of(path.name).argv()]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              env=isolated_environment(), start_new_session=True, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timeout", "detail": f"no verdict within {timeout:g} s"}
    except OSError as exc:
        return {"ok": False, "error": "probe_failed", "detail": str(exc)}
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        verdict = loads_strict(lines[-1])
    except (ValueError, IndexError):
        verdict = None
    failed = {"ok": False, "error": "probe_failed", "detail": f"exit {done.returncode}, no verdict"}
    return verdict if isinstance(verdict, dict) else failed


# -- loss type ----------------------------------------------------------------------------------------------
LOSS_NAMES = {
    "ce": "ce", "crossentropy": "ce", "categoricalcrossentropy": "ce", "softmaxcrossentropy": "ce",
    "bce": "bce", "binarycrossentropy": "bce", "bcewithlogits": "bce_logits",
    "binarycrossentropywithlogits": "bce_logits", "sigmoidbce": "bce_logits",
    "mse": "mse", "l2": "mse", "meansquarederror": "mse", "l1": "l1", "mae": "l1", "meanabsoluteerror": "l1",
    "huber": "huber", "smoothl1": "huber", "dice": "dice", "softdice": "dice", "focal": "focal",
    "sigmoidfocal": "focal", "kl": "kl", "kldiv": "kl", "kldivergence": "kl",
    "nll": "nll", "infonce": "infonce", "ntxent": "infonce", "contrastive": "infonce",
}
BOUNDED_LOSSES = {"ce", "bce", "bce_logits", "mse", "l1", "huber", "dice", "focal", "kl"}
_LOSS_KEYS = ("loss", "criterion")
_LOSS_NAME_KEYS = ("name", "type", "_target_", "class_path", "kind")


def loss_names(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The loss kinds config.yaml declares under `loss`/`criterion` (or their `name`/`type`/`_target_`),
    e.g. `CrossEntropyLoss` -> ce, `torch.nn.BCEWithLogitsLoss` -> bce_logits, `ce+dice` -> ce, dice."""
    found: list[str] = []
    for key, value in flatten(config or {}).items():
        parts = key.split(".")
        named = parts[-1] in _LOSS_KEYS or (len(parts) > 1 and parts[-2] in _LOSS_KEYS
                                            and parts[-1] in _LOSS_NAME_KEYS)
        if named and isinstance(value, str):
            found += [LOSS_NAMES.get(_loss_word(part), "?") for part in value.split("+")]
    return tuple(dict.fromkeys(found))


def _loss_word(text: str) -> str:
    word = re.sub(r"[^a-z0-9]", "", text.rsplit(".", 1)[-1].lower())
    return word[:-4] if word.endswith("loss") and len(word) > 4 else word


def loss_columns(train: pd.DataFrame) -> list[str]:
    """train.csv columns holding a loss (`loss`, `train/loss`, `val_loss`), never `loss_scale`."""
    return [str(c) for c in train.columns.tolist()
            if str(c).lower() == "loss" or str(c).lower().endswith(("/loss", "_loss"))]


# -- V24 bounded_loss_negative ------------------------------------------------------------------------------
def bounded_loss_negative(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """A loss that is bounded below by 0 went negative: the loss math is wrong, whatever the curve looks like."""
    tolerance, critical_below = float(params.get("tolerance", 1e-6)), float(params.get("critical_below", -1e3))
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        names = loss_names(capsule.config)
        if not names or not set(names) <= BOUNDED_LOSSES:
            notes.append(f"{capsule.key}: no bounded loss type in config.yaml (loss/criterion)")
            continue
        if capsule.train is None or not loss_columns(capsule.train):
            notes.append(f"{capsule.key}: no loss column in train.csv")
            continue
        issues = [issue for column in loss_columns(capsule.train)
                  if (issue := _negative_loss(capsule.train, column, tolerance, critical_below)) is not None]
        evidence = [EvidenceRef(capsule.train_path or f"{capsule.path}/train.csv")]
        finish(findings, subjects, capsule.subject,
               merge("V24", capsule.subject, issues, evidence=evidence))
    return judged_or_skipped("V24", "bounded_loss_negative", findings, subjects, notes, "no capsules")


def _negative_loss(train: pd.DataFrame, column: str, tolerance: float, critical_below: float) -> Issue | None:
    values = numeric(train, column)
    low = values[values < -tolerance]
    if low.empty:
        return None
    worst = float(low.min())
    step = train.loc[low.idxmin(), "step"] if "step" in train.columns else None
    facts = {f"{column}.min": worst, f"{column}.negative_rows": int(low.size), f"{column}.step": _plain(step)}
    if worst < critical_below:
        return Issue("critical", f"invalid loss math (targets outside [0,1], weight multiplied into target, sign "
                                 f"error, log of ≤ 0): {column} reaches {worst:g}", facts)
    return Issue("error", f"bounded loss is negative: {column} reaches {worst:g} "
                          f"({int(low.size)} logged value{'s' if low.size > 1 else ''} < 0)", facts)


def _plain(value: Any) -> Any:
    number = finite(value) if not isinstance(value, str) else None
    return value if number is None else (int(number) if number == int(number) else number)


# -- V25 loss_at_chance -------------------------------------------------------------------------------------
_CLASS_KEYS = ("num_classes", "n_classes", "nclasses", "classes", "num_labels", "n_class")


def loss_at_chance(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Long enough into training, the loss still sits at its value for a model that learned nothing."""
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        floor, why = loss_floor(capsule)
        if floor is None:
            notes.append(f"{capsule.key}: {why}")
            continue
        tail, why = _loss_tail(capsule, params)
        if tail is None:
            notes.append(f"{capsule.key}: {why}")
            continue
        issues = []
        relative = float(params.get("relative", 0.02))
        if abs(tail - floor) <= relative * abs(floor):
            issues.append(Issue("error", f"not learning: mean loss of the last {int(params.get('last', 50))} "
                                         f"logged steps {tail:.4g} is within {relative:.0%} of chance {floor:.4g} "
                                         "(run the overfit-one-batch test)",
                                {"mean_loss": tail, "chance": floor}))
        evidence = [EvidenceRef(capsule.train_path or f"{capsule.path}/train.csv")]
        finish(findings, subjects, capsule.subject, merge("V25", capsule.subject, issues, evidence=evidence))
    return judged_or_skipped("V25", "loss_at_chance", findings, subjects, notes, "no capsules")


def loss_floor(capsule: Capsule) -> tuple[float | None, str]:
    """The loss of a model that learned nothing: CE/NLL ≈ ln C, InfoNCE ≈ ln B (docs/verify.md §6)."""
    names = loss_names(capsule.config)
    task = str(run_value(capsule, "task") or "").lower()
    if "infonce" in names:
        batch = integer(run_value(capsule, "training", "per_device_batch"))
        if batch is None or batch < 2:
            return None, "InfoNCE loss without run.json training.per_device_batch"
        return math.log(batch), ""
    if not ({"ce", "nll"} & set(names) or (not names and "class" in task)):
        return None, "no loss with a known chance level (cross-entropy, NLL, InfoNCE)"
    classes = class_count(capsule)
    if classes is None or classes < 2:
        return None, "number of classes unknown (config num_classes or a target column)"
    return math.log(classes), ""


def class_count(capsule: Capsule) -> int | None:
    """C from config.yaml (`num_classes` and kin), else the distinct targets of the test results."""
    for key, value in capsule.flat_config.items():
        if key.split(".")[-1] in _CLASS_KEYS and (count := integer(value)) is not None:
            return count
    targets: set[Any] = set()
    for test in capsule.tests.values():
        if test.results is not None and "target" in test.results.columns:
            column = test.results["target"].dropna()  # distinct values first: a set of 1,000 items cost more
            targets |= set(column.tolist() if column.dtype == object else column.unique().tolist())
    return len(targets) or None


def _loss_tail(capsule: Capsule, params: Mapping[str, Any]) -> tuple[float | None, str]:
    """Mean loss of the last `last` logged steps, once training is past max(min_steps, min_fraction·planned)."""
    train = capsule.train
    if train is None or "step" not in train.columns or not loss_columns(train):
        return None, "no step and loss columns in train.csv"
    import numpy as np

    column = "loss" if "loss" in train.columns else loss_columns(train)[0]
    steps, losses = capsule.train_numbers("step"), capsule.train_numbers(column)  # numpy, shared with V03, V24
    planned = integer(run_value(capsule, "training", "steps")) or 0
    needed = max(float(params.get("min_steps", 500)), float(params.get("min_fraction", 0.1)) * planned)
    steps = steps[~np.isnan(steps)]
    if not steps.size or float(steps.max()) < needed:
        return None, f"training not past {needed:g} steps yet"
    finite_losses = losses[np.isfinite(losses)]
    tail = finite_losses[max(0, finite_losses.size - int(params.get("last", 50))):]
    if not tail.size or int(params.get("last", 50)) <= 0:
        return None, f"no finite {column} values in train.csv"
    return float(tail.mean()), ""


# -- V26 stale_checkpoint -----------------------------------------------------------------------------------
def stale_checkpoint(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """The reported number came from an older model than the run says: copied metrics, another checkpoint's
    hash, or a checkpoint from beyond the run's own training or from before it started."""
    copies = _copied_metrics(project)
    findings: list[Finding] = []
    subjects: list[str] = []
    for capsule in project.capsules:
        if capsule.run_record is None and not capsule.tests:
            continue
        issues = copies.get(capsule.key, []) + _checkpoint_hash_issues(capsule)
        issues += _checkpoint_age_issues(project.root, capsule)
        evidence = [EvidenceRef(t.metrics_path, t.metrics_sha256) for t in capsule.tests.values()]
        if capsule.run_record_sha256:
            evidence.append(EvidenceRef(f"{capsule.path}/run.json", capsule.run_record_sha256))
        finish(findings, subjects, capsule.subject, merge("V26", capsule.subject, issues, evidence=evidence))
    return judged_or_skipped("V26", "stale_checkpoint", findings, subjects, [], "no capsules with run.json or tests")


def _copied_metrics(project: ProjectEvidence) -> dict[str, list[Issue]]:
    """(a) Capsules with different provenance_hash whose metric blocks are byte-identical (canonical JSON)."""
    groups: dict[bytes, list[tuple[Capsule, str]]] = {}
    for capsule in project.capsules:
        for test in capsule.tests.values():
            blocks = (test.metrics or {}).get("metrics")
            if capsule.provenance_hash and isinstance(blocks, Mapping) and blocks:
                groups.setdefault(canonical_json(blocks), []).append((capsule, test.test_id))
    issues: dict[str, list[Issue]] = {}
    for members in groups.values():
        if len({capsule.provenance_hash for capsule, _ in members}) < 2:
            continue
        for capsule, test_id in members:
            others = sorted(f"{c.key} ({t})" for c, t in members
                            if c.provenance_hash != capsule.provenance_hash)
            issues.setdefault(capsule.key, []).append(Issue(
                "critical", f"test {test_id}: metrics byte-identical to {', '.join(others)} although the "
                            "provenance_hash differs (a stale result copied, not a new evaluation)",
                {f"{test_id}.identical_to": others}))
    return issues


def _checkpoint_hash_issues(capsule: Capsule) -> list[Issue]:
    """(b) metrics.json.checkpoint_sha256 against run.json.checkpoints.<used>.sha256."""
    used = {str(row.get("test_id")): str(row.get("checkpoint") or "best")
            for row in run_value(capsule, "tests") or [] if isinstance(row, Mapping)}
    issues = []
    for test in capsule.tests.values():
        stated = (test.metrics or {}).get("checkpoint_sha256")
        name = used.get(test.test_id, "best")
        recorded = run_value(capsule, "checkpoints", name, "sha256")
        if isinstance(stated, str) and isinstance(recorded, str) and stated != recorded:
            issues.append(Issue("critical", f"test {test.test_id}: evaluated a different checkpoint "
                                            f"({stated[:12]}…, run.json {name} is {recorded[:12]}…)",
                                {f"{test.test_id}.checkpoint_sha256": stated, f"{test.test_id}.expected": recorded}))
    return issues


def _checkpoint_age_issues(root: Path, capsule: Capsule) -> list[Issue]:
    """(c) A checkpoint epoch beyond training.epochs, or a checkpoint file older than the run's created_at."""
    checkpoints = run_value(capsule, "checkpoints")
    epochs = integer(run_value(capsule, "training", "epochs"))
    created = parse_time(run_value(capsule, "created_at"))
    issues = []
    for name, entry in (checkpoints or {}).items() if isinstance(checkpoints, Mapping) else ():
        if not isinstance(entry, Mapping):
            continue
        epoch = integer(entry.get("epoch"))
        if epoch is not None and epochs is not None and epoch > epochs:
            issues.append(Issue("critical", f"checkpoint {name} is from epoch {epoch} > training.epochs {epochs}",
                                {f"{name}.epoch": epoch, "training.epochs": epochs}))
        mtime = _mtime(root, capsule, entry.get("path"))
        if mtime is not None and created is not None and mtime < created.timestamp():
            issues.append(Issue("critical", f"checkpoint {name} was written before the run started "
                                            f"({datetime.fromtimestamp(mtime, created.tzinfo).isoformat()} "
                                            f"< created_at {run_value(capsule, 'created_at')})",
                                {f"{name}.mtime": mtime}))
    return issues


def _mtime(root: Path, capsule: Capsule, rel: Any) -> float | None:
    """The checkpoint file's mtime, only for a relative path inside the capsule that is a regular file."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in rel.split("/"):
        return None
    path = root / capsule.path / rel
    try:
        return path.lstat().st_mtime if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


# -- V27 train_eval_parity (probe) --------------------------------------------------------------------------
def parity_stats(train: np.ndarray, eval_: np.ndarray, rtol: float = 1e-4, atol: float = 1e-5) -> dict[str, Any]:
    """The numeric fields of V27's probe answer from the same items built by the train path (augmentation
    off) and the eval path: shape equality, allclose, and per-channel mean/std (channels on axis 1)."""
    import numpy as np

    same = train.shape == eval_.shape
    return {"shape_equal": bool(same),
            "allclose": bool(same and np.allclose(train, eval_, rtol=rtol, atol=atol)),
            **{f"{side}_{stat}": values for side, array in (("train", train), ("eval", eval_))
               for stat, values in zip(("mean", "std"), _channel_stats(array), strict=True)}}


def _channel_stats(array: np.ndarray) -> tuple[list[float], list[float]]:
    import numpy as np

    data = np.asarray(array, dtype=np.float64)
    channels = np.moveaxis(data, 1, 0).reshape(data.shape[1], -1) if data.ndim >= 2 else data.reshape(1, -1)
    return channels.mean(axis=1).tolist(), channels.std(axis=1).tolist()


def train_eval_parity(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """The model saw other inputs in training than in evaluation (scale, channel order, normalisation), or was
    evaluated in train mode, or with BatchNorm statistics never tracked."""
    findings: list[Finding] = []
    subjects: list[str] = []
    for capsule in project.capsules:
        answer = probe_answer(project, "V27", capsule)
        if answer is None or not any(isinstance(answer.get(k), bool) for k in PARITY_FLAGS):
            continue
        issues = _parity_issues(answer, float(params.get("mean_shift", 0.1)))
        finish(findings, subjects, capsule.subject, merge("V27", capsule.subject, issues))
    if not subjects:
        return probe_skip("V27", "train_eval_parity", project)
    return result("V27", "train_eval_parity", findings, subjects, kind="probe")


def _parity_issues(answer: Mapping[str, Any], mean_shift: float) -> list[Issue]:
    issues = []
    if answer.get("shape_equal") is False:
        issues.append(Issue("error", "train/eval input mismatch: the two paths build tensors of different shape"))
    elif answer.get("allclose") is False:
        issues.append(Issue("error", "train/eval input mismatch: the same items differ between the train and "
                                     "the eval path (not allclose)"))
    shifted = _shifted_channels(answer, mean_shift)
    if shifted:
        issues.append(Issue("error", f"train/eval input mismatch (scale, RGB/BGR, normalisation): channel mean "
                                     f"shifts by more than {mean_shift:g}·std in channel "
                                     f"{', '.join(str(c) for c, _ in shifted)}",
                            {"mean_shift": {str(c): d for c, d in shifted}}))
    if answer.get("model_training_in_eval") is True:
        issues.append(Issue("error", "model.training is True during evaluation (model.eval() not called)"))
    untracked = [str(n) for n in answer.get("bn_untracked") or [] if isinstance(answer.get("bn_untracked"), list)]
    if untracked:
        issues.append(Issue("error", f"BatchNorm with num_batches_tracked == 0 after training: "
                                     f"{', '.join(untracked[:10])}", {"bn_untracked": untracked}))
    return issues


def _shifted_channels(answer: Mapping[str, Any], mean_shift: float) -> list[tuple[int, float]]:
    """Channels whose |train mean − eval mean| exceeds mean_shift × the train-path std."""
    columns = [answer.get(key) for key in ("train_mean", "train_std", "eval_mean")]
    if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns if isinstance(c, list)}) != 1:
        return []
    shifted = []
    for index, (t_mean, t_std, e_mean) in enumerate(zip(*columns, strict=True)):
        values = [finite(t_mean), finite(t_std), finite(e_mean)]
        if None in values:
            continue
        delta = abs(float(values[0]) - float(values[2]))  # type: ignore[arg-type]
        if delta > mean_shift * abs(float(values[1])):  # type: ignore[arg-type]
            shifted.append((index, delta))
    return shifted


# -- V28 grad_coverage (probe) ------------------------------------------------------------------------------
def grad_coverage_stats(grads: Mapping[str, np.ndarray | None], optimizer_names: set[str]) -> dict[str, Any]:
    """V28's probe answer from one backward pass: `grads` maps every tensor with requires_grad to its
    `.grad` as numpy (None when it got none); a tensor is covered when its grad is finite and not all zero."""
    import numpy as np

    dead = [name for name, grad in grads.items()
            if grad is None or not np.all(np.isfinite(grad)) or not np.any(grad)]
    return {"trainable": len(grads), "covered": len(grads) - len(dead), "dead": sorted(dead),
            "not_in_optimizer": sorted(set(grads) - optimizer_names)}


def grad_coverage(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Trainable tensors that get no gradient, or that the optimizer never steps, do not learn."""
    frozen = [str(p) for p in params.get("expect_frozen", []) or []]
    minimum = float(params.get("min_coverage", 0.95))
    findings: list[Finding] = []
    subjects: list[str] = []
    notes: list[str] = []
    for capsule in project.capsules:
        answer = probe_answer(project, "V28", capsule)
        if answer is None:
            continue
        trainable, covered = integer(answer.get("trainable")), integer(answer.get("covered"))
        if trainable is None or covered is None:
            notes.append(f"{capsule.key}: probe answer lacks integer trainable/covered")
            continue
        issues = _coverage_issues(answer, trainable, covered, frozen, minimum)
        finish(findings, subjects, capsule.subject, merge("V28", capsule.subject, issues))
    if not subjects:
        return probe_skip("V28", "grad_coverage", project) if not notes else skipped(
            "V28", "grad_coverage", note_of(notes), kind="probe")
    return result("V28", "grad_coverage", findings, subjects, kind="probe", note=note_of(notes))


def _coverage_issues(answer: Mapping[str, Any], trainable: int, covered: int, frozen: list[str],
                     minimum: float) -> list[Issue]:
    def names(key: str) -> list[str]:
        raw = answer.get(key)
        listed = [str(n) for n in raw] if isinstance(raw, list) else []
        return [n for n in listed if not any(fnmatch.fnmatchcase(n, pattern) for pattern in frozen)]

    dead = names("dead")
    excluded = len(answer.get("dead") or []) - len(dead) if isinstance(answer.get("dead"), list) else 0
    total = trainable - excluded
    issues = []
    if total > 0 and covered / total < minimum:
        issues.append(Issue("error", f"gradient coverage {covered}/{total} = {covered / total:.2f} < {minimum:g}; "
                                     f"dead tensors: {', '.join(dead[:20]) or '(not listed)'}",
                            {"covered": covered, "trainable": total, "dead": dead}))
    missing = names("not_in_optimizer")
    if missing:
        issues.append(Issue("error", f"optimizer param groups miss {len(missing)} trainable parameter"
                                     f"{'s' if len(missing) > 1 else ''}: {', '.join(missing[:20])}",
                            {"not_in_optimizer": missing}))
    return issues


CHECKS = {
    "V24": bounded_loss_negative,
    "V25": loss_at_chance,
    "V26": stale_checkpoint,
    "V27": train_eval_parity,
    "V28": grad_coverage,
}
