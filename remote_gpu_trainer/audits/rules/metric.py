"""The metric rows S75–S85 (docs/log-signatures.md §2): gradients, fp16 scaling, LR schedules, eval sanity,
collapse, preference/RL training and throughput, read from the parsed metric series.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from itertools import islice
from typing import Any

from remote_gpu_trainer.audits.log.samples import Hit, Sample
from remote_gpu_trainer.audits.rules.common import (
    SCAN_CAP,
    finite_values,
    fmt_at,
    fmt_dur,
    fmt_num,
    hit,
    is_alive,
    newest_first,
    step_state,
    tail_of,
)
from remote_gpu_trainer.audits.rules.loss import MIN_WINDOW, WINDOW
from remote_gpu_trainer.audits.rules.signals import RunSignals


def _early_epochs(series: Sequence[Sample]) -> list[Sample]:
    """Samples of epochs 1–2 (epoch ≤ 2 covers 0-based, 1-based and fractional counters)."""
    out = []
    for x in islice(series, SCAN_CAP):
        if x.epoch is None:
            continue
        if x.epoch > 2:
            break
        out.append(x)
    return out


def _rolling_ratios(values: Sequence[float], width: int = WINDOW, minimum: int = 10) -> list[float]:
    """Each value over the median of up to `width` values before it (sorted window kept by bisect)."""
    ordered: list[float] = []
    ratios = []
    for i, v in enumerate(values):
        if len(ordered) >= minimum:
            mid = len(ordered) // 2
            med = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
            if med > 0:
                ratios.append(v / med)
        bisect.insort(ordered, v)
        if i >= width:
            del ordered[bisect.bisect_left(ordered, values[i - width])]
    return ratios


def rule_s75(s: RunSignals) -> list[Hit]:
    """Early instability: over epochs 1–2 the P99 of grad-norm / rolling median reaches 10."""
    early = [x for x in _early_epochs(s.of("grad_norm")) if math.isfinite(x.value)]
    ratios = _rolling_ratios([x.value for x in early])
    if len(ratios) < MIN_WINDOW:
        return []
    ordered = sorted(ratios)
    p99 = ordered[math.ceil(0.99 * len(ordered)) - 1]
    if p99 < 10:
        return []
    return hit(s, "S75", f"grad-norm P99 over epochs 1–2 is {p99:.1f} × its rolling median "
                         f"({len(early)} samples, peak ratio {ordered[-1]:.1f})")


def rule_s76(s: RunSignals) -> list[Hit]:
    """Clipping on ≥ 90 % of the last 200 logged steps: clipping hides an LR or init problem."""
    if s.max_grad_norm is None or s.max_grad_norm <= 0:
        return []
    values = finite_values(tail_of(s.of("grad_norm"), WINDOW))
    if len(values) < MIN_WINDOW:
        return []
    clipped = sum(v >= s.max_grad_norm for v in values)
    if clipped < 0.9 * len(values):
        return []
    return hit(s, "S76", f"grad_norm ≥ max_norm {fmt_num(s.max_grad_norm)} on {clipped} of the last "
                         f"{len(values)} logged steps ({clipped / len(values):.0%})")


def rule_s77(s: RunSignals) -> list[Hit]:
    """Grad-norm below 1e-8 for 100 consecutive samples while the loss stays flat: nothing trains."""
    tiny: list[Sample] = []
    for x in newest_first(s.of("grad_norm")):
        if not (math.isfinite(x.value) and x.value < 1e-8):
            break
        tiny.append(x)
        if len(tiny) == 100:
            break
    if len(tiny) < 100:
        return []
    start = tiny[-1]
    loss = []
    for x in newest_first(s.of("loss")):
        inside = x.step >= start.step if x.step is not None and start.step is not None else x.t >= start.t
        if not inside:
            break
        if math.isfinite(x.value):
            loss.append(x.value)
    if len(loss) < 2:
        return []
    spread, level = max(loss) - min(loss), abs(statistics.median(loss))
    if spread > 0.01 * max(level, 1e-12):
        return []
    return hit(s, "S77", f"grad_norm < 1e-8 for the last 100 samples (since {fmt_at(start)}) while the loss stayed "
                         f"at {fmt_num(statistics.median(loss))} (range {fmt_num(spread)})")


def _skips_in_last_100(s: RunSignals) -> tuple[int, str] | None:
    """Skipped fp16 steps in the last 100 steps: S10 lines when known, else loss-scale halvings."""
    state = step_state(s)
    latest = max([*([state.step] if state else []), *s.overflow_steps], default=None)
    if s.overflow_steps and latest is not None:
        return sum(1 for st in s.overflow_steps if st > latest - 100), "overflow lines"
    scales = tail_of(s.of("loss_scale"), 100)
    if latest is not None and all(x.step is not None for x in scales):
        scales = [x for x in scales if x.step is not None and x.step > latest - 100]
    if len(scales) < 2:
        return None
    return sum(1 for a, b in zip(scales, scales[1:], strict=False) if b.value < a.value), "loss-scale halvings"


def rule_s78(s: RunSignals) -> list[Hit]:
    """fp16 stuck in overflow: loss scale ≤ 1, or more than 10 skipped steps in the last 100."""
    newest = tail_of(s.of("loss_scale"), 1)
    if newest and newest[0].value <= 1:
        return hit(s, "S78", f"fp16 loss scale is {fmt_num(newest[0].value)} at {fmt_at(newest[0])} (≤ 1)")
    skips = _skips_in_last_100(s)
    if skips is None or skips[0] <= 10:
        return []
    return hit(s, "S78", f"{skips[0]} skipped steps within the last 100 steps ({skips[1]})")


def rule_s79(s: RunSignals) -> list[Hit]:
    """A schedule is configured but the logged LR has not changed for 3 logging intervals after warmup."""
    if not s.schedule_configured:
        return []
    after = [x for x in tail_of(s.of("lr"), 4)
             if (x.step is not None and x.step >= s.warmup_steps) or (x.step is None and s.warmup_steps == 0)]
    if len(after) < 4 or any(x.value != after[0].value for x in after):
        return []
    last = after[-1]
    if s.planned_steps and last.step is not None and last.step >= s.planned_steps:
        return []  # the schedule is over
    return hit(s, "S79", f"lr constant at {after[0].value:g} for 3 logging intervals "
                         f"({fmt_at(after[0])} to {fmt_at(last)}) although a schedule is configured")


def _train_keys(name: str) -> tuple[str, ...]:
    if name == "loss":
        return ("loss",)
    return (name, f"train_{name}", f"train/{name}", f"{name}_epoch", f"train_{name}_epoch")


def _not_after(x: Sample, ref: Sample) -> bool:
    if x.step is not None and ref.step is not None:
        return x.step <= ref.step
    return x.t <= ref.t


def _counterparts(evals: Sequence[Sample], train: Sequence[Sample]) -> list[tuple[Sample, Sample]]:
    """Each eval (newest first) with the newest train sample not after it, one backward walk of the train series."""
    pairs = []
    walker = newest_first(train)
    current = next(walker, None)
    for ev in evals:
        while current is not None and not _not_after(current, ev):
            current = next(walker, None)
        if current is None:
            break
        pairs.append((ev, current))
    return pairs


def rule_s80(s: RunSignals) -> list[Hit]:
    """The val metric equals the train metric to 1e-12 on 3 evaluations in a row: 'val' runs on training data."""
    for key in sorted(k for k in s.keys() if k.startswith("val/")):
        name = key[4:]
        evals = list(newest_first(s.of(key), 3))
        if len(evals) < 3:
            continue
        for train_key in _train_keys(name):
            pairs = _counterparts(evals, s.of(train_key))
            if len(pairs) == 3 and all(abs(ev.value - tr.value) <= 1e-12 for ev, tr in pairs):
                return hit(s, "S80", f"{key} equals {train_key} on the last 3 evaluations "
                                     f"(latest {fmt_num(evals[0].value)} at {fmt_at(evals[0])})")
    return []


COLLAPSE_KEYS = ("unique_pred_count", "pred_hist_bins", "output_cosine")


def _epoch_one_value(series: Sequence[Sample]) -> Sample | None:
    """The last value reported within epoch 1 (or the first value when no epoch is known)."""
    found = None
    for x in islice(series, SCAN_CAP):
        if x.epoch is not None and x.epoch > 1:
            break
        if x.epoch is None and found is not None:
            break
        found = x
    return found


def rule_s81(s: RunSignals) -> list[Hit]:
    """End of epoch 1: one predicted value, a single-bin prediction histogram, or near-identical outputs."""
    found = []
    for name in COLLAPSE_KEYS:
        for key in (name, f"val/{name}"):
            x = _epoch_one_value(s.of(key))
            if x is None or not math.isfinite(x.value):
                continue
            if name == "unique_pred_count" and x.value == 1:
                found.append(f"{key} = 1")
            elif name == "pred_hist_bins" and x.value == 1:
                found.append(f"{key} = 1 (single-bin prediction histogram)")
            elif name == "output_cosine" and x.value >= 0.98:
                found.append(f"{key} = {x.value:.3f} (≥ 0.98)")
    if not found:
        return []
    return hit(s, "S81", "at the end of epoch 1: " + "; ".join(found) + ": representation collapse")


_DETECT_NAMES = ("map", "map50", "map_50", "map50-95", "map_50_95", "miou", "mean_iou")
_LABEL_ACC_NAMES = ("acc", "accuracy", "label_acc")


def _eval_groups(s: RunSignals, names: Sequence[str], count: int) -> list[dict[str, Sample]]:
    """The newest `count` evaluations of the given val metrics, grouped by (step, epoch, t), newest first."""
    groups: dict[tuple[Any, ...], dict[str, Sample]] = {}
    for name in names:
        for x in newest_first(s.of(f"val/{name}"), count):
            when = (x.step, x.epoch) if x.step is not None or x.epoch is not None else (x.t,)
            groups.setdefault(when, {})[name] = x
    ordered = sorted(groups.values(), key=lambda g: max(x.t for x in g.values()), reverse=True)
    return ordered[:count]


def rule_s82(s: RunSignals) -> list[Hit]:
    """mAP / mIoU (and label accuracy) exactly 0 on two evaluations in a row while the train loss falls."""
    groups = _eval_groups(s, _DETECT_NAMES + _LABEL_ACC_NAMES, 2)
    if len(groups) < 2 or not all(any(n in g for n in _DETECT_NAMES) for g in groups):
        return []
    if any(x.value != 0 for g in groups for x in g.values()):
        return []
    older = min(groups[1].values(), key=lambda x: x.t)
    before = finite_values(islice((x for x in newest_first(s.of("loss")) if _not_after(x, older)), 20))
    now = finite_values(tail_of(s.of("loss"), 20))
    if not before or not now or statistics.median(now) >= 0.99 * statistics.median(before):
        return []
    names = ", ".join(f"val/{n}" for n in sorted(groups[0]))
    return hit(s, "S82", f"{names} exactly 0 on the last 2 evaluations while the train loss fell from "
                         f"{fmt_num(statistics.median(before))} to {fmt_num(statistics.median(now))}")


_REWARD_KEYS = ("reward", "rewards/mean", "env/reward_mean", "reward_mean")
_KL_KEYS = ("kl", "objective/kl", "kl_div")


def _after_warmup(s: RunSignals, key: str, n: int) -> list[Sample]:
    return [x for x in tail_of(s.of(key), n)
            if (x.step is not None and x.step >= s.warmup_steps) or (x.step is None and s.warmup_steps == 0)]


def _jump(values: Sequence[float]) -> float | None:
    """z of the newest value against the ≥ 20 before it (mean and stdev: a jump, not a robust test)."""
    if len(values) < 21:
        return None
    history = values[:-1]
    sd = statistics.stdev(history)
    return (values[-1] - statistics.fmean(history)) / sd if sd > 0 else None


def _dpo_flat(s: RunSignals) -> str | None:
    margins = _after_warmup(s, "rewards/margins", 5)
    accuracies = _after_warmup(s, "rewards/accuracies", 5)
    if len(margins) < 5 or len(accuracies) < 5:
        return None
    if all(abs(x.value) <= 0.01 for x in margins) and all(abs(x.value - 0.5) <= 0.05 for x in accuracies):
        return (f"DPO rewards/margins {fmt_num(margins[-1].value)} and rewards/accuracies "
                f"{fmt_num(accuracies[-1].value)} flat for the last 5 logs after warmup")
    return None


def _reward_hack(s: RunSignals) -> str | None:
    for rk in _REWARD_KEYS:
        z_reward = _jump(finite_values(tail_of(s.of(rk), 51)))
        if z_reward is None or z_reward <= 3:
            continue
        for kk in _KL_KEYS:
            z_kl = _jump(finite_values(tail_of(s.of(kk), 51)))
            if z_kl is not None and z_kl > 3:
                return f"{rk} jumped {z_reward:.1f}σ together with a {kk} spike of {z_kl:.1f}σ"
    return None


def rule_s83(s: RunSignals) -> list[Hit]:
    """Preference/RL training not learning (flat DPO rewards) or gaming the reward (reward and KL jump)."""
    text = _dpo_flat(s) or _reward_hack(s)
    return hit(s, "S83", text) if text else []


def rule_s84(s: RunSignals) -> list[Hit]:
    """A final eval number byte-identical to another run's on the same test set: a stale checkpoint evaluated."""
    others = {(m.test_set, m.name, m.value): m.run_id for m in s.other_run_final_metrics}
    same = [(m, others[(m.test_set, m.name, m.value)]) for m in s.final_metrics
            if (m.test_set, m.name, m.value) in others and others[(m.test_set, m.name, m.value)] != m.run_id]
    if not same:
        return []
    m, other = same[0]
    return hit(s, "S84", f"{m.name} on {m.test_set} is {m.value}, byte-identical to run {other}")


def rule_s85(s: RunSignals) -> list[Hit]:
    """Throughput below half the run's median for ≥ 5 min while the process is alive."""
    if not is_alive(s):
        return []
    series = tail_of(s.of("throughput"), 1000)
    if not series:
        return []
    unit = series[-1].unit
    values = [x for x in series if x.unit == unit]
    median = statistics.median([x.value for x in values])
    slow: list[Sample] = []
    for x in reversed(values):
        if x.value >= 0.5 * median:
            break
        slow.append(x)
    if len(slow) < 2 or slow[0].t - slow[-1].t < 300:
        return []
    label = f" {unit}" if unit else ""
    return hit(s, "S85", f"throughput {fmt_num(slow[0].value)}{label} below half the run's median "
                         f"{fmt_num(median)}{label} for {fmt_dur(slow[0].t - slow[-1].t)}")
