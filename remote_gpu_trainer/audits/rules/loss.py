"""The loss rows S70–S74 and the §3.2 rolling spike and divergence math they stand on (docs/log-signatures.md).

Why stateless: the caller replays the newest samples every call instead of keeping the window W between
calls, so a restart or a lost tick changes nothing.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import islice

from remote_gpu_trainer.audits.log.samples import Hit, Sample
from remote_gpu_trainer.audits.rules.common import (
    EVENT_LOOKBACK,
    MAX_REPLAY,
    event_window,
    finite_values,
    fmt_at,
    fmt_num,
    hit,
    latest_step,
    newest_first,
    tail_of,
)
from remote_gpu_trainer.audits.rules.signals import RunSignals

# ---- §3.2 rolling loss spike and divergence -------------------------------------------------------
SKIP_STEPS = 100  # the first steps are always noisy
WINDOW = 200  # W: the last 200 accepted finite losses
MIN_WINDOW = 50  # the rule is active once |W| ≥ 50
MAD_SCALE = 1.4826  # makes the MAD a consistent σ estimate for normal noise
SIGMA_FLOOR = 1e-12  # a constant window must not divide by zero
SPIKE_Z = 6.0
SPIKE_RATIO = 1.25
DIVERGE_RATIO = 5.0
DIVERGE_RUN = 20
DIVERGE_FIRST_RATIO = 10.0
TRANSIENT_STEPS = 50
GRAD_CONTEXT = 20  # grad-norms attached to a spike

BOUNDED_LOSSES = frozenset({"ce", "cross_entropy", "crossentropy", "nll", "bce", "bce_with_logits", "mse", "l2",
                            "l1", "mae", "huber", "smooth_l1", "dice", "kl", "kl_div"})


# ---- §3.2 spike math ---------------------------------------------------------------------------------

def robust_stats(window: Sequence[float]) -> tuple[float, float]:
    """(m, σ) of §3.2: the median and 1.4826·MAD + 1e-12, which one bad batch cannot move."""
    m = statistics.median(window)
    mad = statistics.median([abs(x - m) for x in window])
    return m, MAD_SCALE * mad + SIGMA_FLOOR


def spike_z(window: Sequence[float], x: float) -> float:
    """How many robust σ the value x lies above the window's median."""
    m, sigma = robust_stats(window)
    return (x - m) / sigma


def is_spike(window: Sequence[float], x: float) -> bool:
    """§3.2: z > 6 and x > 1.25·m; the ratio keeps a near-constant window from flagging tiny wobbles."""
    m, sigma = robust_stats(window)
    return (x - m) / sigma > SPIKE_Z and x > SPIKE_RATIO * m


@dataclass(frozen=True)
class LossPoint:
    """One loss sample as the spike math replays it: its step (when the log gave one), time and value."""

    step: int | None
    t: float
    value: float


@dataclass(frozen=True)
class Spike:
    """A loss sample far above its rolling window (§3.2), with the window's median, sigma and size, its z, and
    whether it proved transient."""

    point: LossPoint
    position: int  # index in the replayed points
    median: float
    sigma: float
    z: float
    window: int
    transient: bool | None = None  # None: fewer than 50 steps have passed


@dataclass(frozen=True)
class Divergence:
    """A run of high loss samples long enough to call the run diverging: where it began and the sample that completed
    it."""

    point: LossPoint  # the sample that completed the run
    position: int
    median: float
    first: LossPoint  # where the run of high samples began


def _drop_spikes(seed: Sequence[float]) -> list[float]:
    """A seed window without its own spikes: they would not have entered W when they happened."""
    if len(seed) < MIN_WINDOW:
        return list(seed)
    m, sigma = robust_stats(seed)
    return [x for x in seed if not ((x - m) / sigma > SPIKE_Z and x > SPIKE_RATIO * m)]


def replay_loss(seed: Sequence[float], points: Sequence[LossPoint]) -> tuple[list[Spike], list[Divergence]]:
    """Run §3.2 over `points` starting from the window `seed`: spikes stay out of W, a divergence clears it.

    Stateless by design: the caller replays the newest samples every call instead of keeping W between
    calls, so a restart or a lost tick changes nothing.
    """
    window: deque[float] = deque(_drop_spikes(seed)[-WINDOW:], maxlen=WINDOW)
    stats: tuple[float, float] | None = None
    spikes: list[Spike] = []
    divergences: list[Divergence] = []
    run_start: tuple[int, LossPoint] | None = None
    for position, p in enumerate(points):
        if len(window) < MIN_WINDOW:
            window.append(p.value)
            stats, run_start = None, None
            continue
        if stats is None:
            stats = robust_stats(window)
        m, sigma = stats
        if m > 0 and p.value > DIVERGE_RATIO * m:
            run_start = run_start or (position, p)
            if position - run_start[0] + 1 >= DIVERGE_RUN:
                divergences.append(Divergence(p, position, m, run_start[1]))
                window.clear()
                stats, run_start = None, None
                continue
        else:
            run_start = None
        z = (p.value - m) / sigma
        if z > SPIKE_Z and p.value > SPIKE_RATIO * m:
            spikes.append(Spike(p, position, m, sigma, z, len(window)))
        else:
            window.append(p.value)
            stats = None
    return [replace(sp, transient=_transient(sp, points)) for sp in spikes], divergences


def _transient(spike: Spike, points: Sequence[LossPoint]) -> bool | None:
    """Back below 1.25·m within 50 steps (or 50 samples when steps are unknown)?"""
    limit = SPIKE_RATIO * spike.median
    for offset, p in enumerate(points[spike.position + 1:], 1):
        if spike.point.step is not None and p.step is not None:
            beyond = p.step - spike.point.step > TRANSIENT_STEPS
        else:
            beyond = offset > TRANSIENT_STEPS
        if beyond:
            return False
        if p.value < limit:
            return True
    return None


def _skip_steps(s: RunSignals) -> int:
    return max(SKIP_STEPS, s.warmup_steps)


def _warm_start(loss: Sequence[Sample], skip: int) -> int:
    """Index in the loss series of the first sample past the skipped steps (the ordinal when steps are unknown)."""
    for i, x in enumerate(loss):
        if (x.step if x.step is not None else i) >= skip:
            return i
    return len(loss)


def _recent_losses(s: RunSignals) -> tuple[list[LossPoint], int]:
    """The newest finite post-warmup losses (oldest first) and how many of them are new, i.e. reportable."""
    loss = s.of("loss")
    start = _warm_start(loss, _skip_steps(s))
    points: list[LossPoint] = []
    new, counting = 0, s.since is not None
    for back, x in enumerate(newest_first(loss)):
        if len(loss) - 1 - back < start:
            break
        if not math.isfinite(x.value):
            continue
        if counting and s.since is not None and x.t > s.since and new < MAX_REPLAY:
            new += 1
        else:
            counting = False
        points.append(LossPoint(x.step, x.t, x.value))
        if not counting and len(points) >= WINDOW + max(new, EVENT_LOOKBACK):
            break
    points.reverse()
    return points, new if s.since is not None else min(EVENT_LOOKBACK, len(points))


def _first_window_median(s: RunSignals) -> float | None:
    """Median of the first W after warmup: the reference for 'loss ≥ 10 × where it started'."""
    loss = s.of("loss")
    start = _warm_start(loss, _skip_steps(s))
    first: list[float] = []
    for x in islice(loss, start, None):
        if math.isfinite(x.value):
            first.append(x.value)
            if len(first) == WINDOW:
                break
    return statistics.median(first) if len(first) >= MIN_WINDOW else None


def loss_events(s: RunSignals) -> tuple[list[Spike], list[Divergence], list[LossPoint]]:
    """Spikes and divergences among the new samples, and the points they were judged on."""
    points, new = _recent_losses(s)
    replay_len = min(len(points), max(new, EVENT_LOOKBACK))
    replayed = points[len(points) - replay_len:]
    spikes, divergences = replay_loss([p.value for p in points[:len(points) - replay_len]], replayed)
    first_new = len(replayed) - new
    return ([x for x in spikes if x.position >= first_new], [d for d in divergences if d.position >= first_new],
            replayed)


def _grad_context(s: RunSignals, point: LossPoint) -> str:
    """What the 20 grad-norms before a spike say: a rise points at LR/optimizer state, none at the batch."""
    before = []
    for x in newest_first(s.of("grad_norm")):
        earlier = x.step < point.step if x.step is not None and point.step is not None else x.t < point.t
        if earlier and math.isfinite(x.value):
            before.append(x.value)
            if len(before) == GRAD_CONTEXT:
                break
    if len(before) < 10:
        return ""
    before.reverse()
    base = statistics.median(before[:10])
    recent = statistics.fmean(before[-5:])
    if base > 0 and recent > 2 * base:
        return f"grad-norm rose {recent / base:.1f}× over the {len(before)} logged steps before: LR/optimizer state"
    return f"grad-norm flat over the {len(before)} logged steps before: a bad batch (offer a replay)"


# ---- rows: metric ----------------------------------------------------------------------------------

def rule_s70(s: RunSignals) -> list[Hit]:
    """A parsed train loss is nan or inf."""
    bad = [x for x in event_window(s, "loss") if not math.isfinite(x.value)]
    if not bad:
        return []
    first = bad[0]
    more = f" ({len(bad)} non-finite values among the newest loss samples)" if len(bad) > 1 else ""
    return hit(s, "S70", f"loss is {first.value} at {fmt_at(first)}{more}")


def rule_s71(s: RunSignals) -> list[Hit]:
    """Rolling spike (§3.2): the newest spike, how far above the window, whether it passed, and the grad-norms."""
    spikes, _, _ = loss_events(s)
    if not spikes:
        return []
    sp = spikes[-1]
    text = (f"loss {fmt_num(sp.point.value)} at {fmt_at(sp.point)} is {sp.z:.1f}σ above the median "
            f"{fmt_num(sp.median)} of the last {sp.window} samples")
    if len(spikes) > 1:
        text += f" ({len(spikes)} spikes among the newest samples)"
    notes = ["transient" if sp.transient else ""] + [_grad_context(s, sp.point)]
    return hit(s, "S71", text, detail="; ".join(n for n in notes if n))


def rule_s72(s: RunSignals) -> list[Hit]:
    """Divergence (§3.2): 20 consecutive losses above 5·m, or a loss ≥ 10 × the first window's median."""
    _, divergences, replayed = loss_events(s)
    if divergences:
        d = divergences[-1]
        return hit(s, "S72", f"{DIVERGE_RUN} consecutive losses above 5 × the median {fmt_num(d.median)} "
                             f"(from {fmt_at(d.first)} to {fmt_at(d.point)}, latest {fmt_num(d.point.value)})")
    first = _first_window_median(s)
    if first is None or first <= 0 or not replayed:
        return []
    latest = replayed[-1]
    if latest.value < DIVERGE_FIRST_RATIO * first:
        return []
    return hit(s, "S72", f"loss {fmt_num(latest.value)} at {fmt_at(latest)} is {latest.value / first:.1f} × the "
                         f"first-window median {fmt_num(first)} (≥ {DIVERGE_FIRST_RATIO:g} ×)")


def rule_s73(s: RunSignals) -> list[Hit]:
    """A negative value of a loss that cannot be negative: the loss math is wrong (critical below −1e3)."""
    kind = (s.loss_kind or "").lower()
    if kind not in BOUNDED_LOSSES:
        return []
    negative = [x for x in event_window(s, "loss") if math.isfinite(x.value) and x.value < 0]
    if not negative:
        return []
    worst = min(negative, key=lambda x: x.value)
    severity = "critical" if worst.value < -1e3 else None
    return hit(s, "S73", f"{kind} loss is {fmt_num(worst.value)} at {fmt_at(worst)}: a {kind} loss is never negative",
               severity)


def _chance_floor(s: RunSignals) -> tuple[float, str] | None:
    kind = (s.loss_kind or "").lower()
    if kind in ("ce", "cross_entropy", "crossentropy", "nll") and s.num_classes and s.num_classes >= 2:
        return math.log(s.num_classes), f"ln {s.num_classes}"
    if kind == "infonce" and s.batch_size and s.batch_size >= 2:
        return math.log(s.batch_size), f"ln {s.batch_size}"
    return None


def rule_s74(s: RunSignals) -> list[Hit]:
    """Well into training the loss sits at chance (CE ln C, InfoNCE ln B): nothing is being learned."""
    floor = _chance_floor(s)
    step = latest_step(s, "loss")
    if floor is None or step is None:
        return []
    after = max(500, 0.1 * s.planned_steps) if s.planned_steps else 500
    recent = finite_values(tail_of(s.of("loss"), EVENT_LOOKBACK))
    if step < after or not recent:
        return []
    level = statistics.median(recent)
    if abs(level - floor[0]) > 0.02 * floor[0]:
        return []
    return hit(s, "S74", f"loss median {fmt_num(level)} over the last {len(recent)} samples at step {step} is within "
                         f"2% of the chance floor {floor[1]} = {fmt_num(floor[0])}")
