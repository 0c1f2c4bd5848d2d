"""Watcher rules over a run's process, host, metric and GPU signals (log-signatures.md §2 rows S58–S93, §3).

Why one pure module: the services gather facts every few seconds (probe answers, cgroup files, `df`,
nvidia-smi samples, the parsed metric series) and hand them over in one `RunSignals`; each catalogue row is
a small function of that snapshot, so a row can be tested with a hand-built scenario and a caller can run
any subset. Nothing here does I/O or imports UI (DESIGN.md §2).

Why tail scans: a series can hold 100k samples and the rules run every few seconds, so every helper walks a
key's series from its newest end (or from its start for "first window" questions) and stops as soon as it
has what it needs. Samples are grouped by key once per `RunSignals`; only the order *within* a key matters,
so a caller may pass per-key windows concatenated (`samples`) or the mapping itself (`series`).

Why rows may stay silent: a rule fires only on positive evidence. A missing input (None, an empty series)
means "unknown", never "bad"; the alert layer must not raise an alarm out of a gap in what was gathered.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import islice
from typing import Any

from remote_gpu_trainer.audits.gpu_health import FAIL_BITS, HOT_C, SLOW_CLOCK_RATIO, GpuSample
from remote_gpu_trainer.audits.liveness import T_CKPT_S, T_LOG_S, Liveness, ProbeResult, classify
from remote_gpu_trainer.audits.log.samples import Hit, Sample
from remote_gpu_trainer.text import strip_ansi

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

# ---- how far the rules look ------------------------------------------------------------------------
EVENT_LOOKBACK = 50  # event rows (S70–S73) without `since`: the newest 50 samples of the key
MAX_REPLAY = 1000  # with `since`: at most this many new samples are judged per call
SCAN_CAP = 20_000  # no tail walk goes further back than this many samples of one key
STEP_SCAN = 2_000
REGRESSION_TAIL = 500

# ---- §3.4 GPU windows --------------------------------------------------------------------------------
GPU_PERIOD_S = 15.0  # nvidia-smi cadence; also the spacing assumed for bare (untimed) GpuSamples
GPU_WINDOW = 20  # 5 min of samples
GPU_TAIL = 240  # per GPU: 1 h of samples is the longest stretch any GPU row measures
MAX_GPUS = 16
IDLE_UTIL = 5.0
IDLE_FRACTION = 0.9
BUSY_UTIL = 90.0
ORPHAN_MIB = 1024.0

MTIME_SLACK_S = 1.0  # file mtimes and process start times come from clocks of different resolution

ROW_SEVERITY = {
    "S58": "error", "S59": "critical", "S60": "warn", "S61": "warn", "S62": "info", "S63": "warn",
    "S64": "critical", "S65": "error", "S66": "warn", "S67": "critical", "S68": "warn", "S69": "warn",
    "S70": "error", "S71": "warn", "S72": "error", "S73": "error", "S74": "warn", "S75": "warn",
    "S76": "warn", "S77": "warn", "S78": "error", "S79": "warn", "S80": "warn", "S81": "warn",
    "S82": "warn", "S83": "warn", "S84": "warn", "S85": "warn", "S86": "info", "S87": "warn",
    "S88": "critical", "S89": "warn", "S90": "warn", "S91": "warn", "S92": "error", "S93": "warn",
}
# S58 takes the severity of the row its exit status maps to
MAPPED_ROWS = {"S04": ("critical", "kernel OOM killer"), "S22": ("error", "native crash"),
               "S47": ("critical", "external stop: preemption, instance stop or scheduler limit")}

BOUNDED_LOSSES = frozenset({"ce", "cross_entropy", "crossentropy", "nll", "bce", "bce_with_logits", "mse", "l2",
                            "l1", "mae", "huber", "smooth_l1", "dice", "kl", "kl_div"})

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
# S55, the completion marker: input to `dead/incomplete` (§3.1), never proof of success on its own
_COMPLETION = re.compile(r"Training (?:completed|finished)|\bFINISHED\b|QUEUE DONE|"
                         r".Trainer\.fit. stopped: .max_(?:epochs|steps)=\d+. reached|Early stopping|"
                         r"Signaling Trainer to stop")
_WRAPPER_LINE = "== rgt:"  # the job wrapper's own markers follow the trainer's last line


# ---- inputs ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimedSave:
    """A path a log line claimed was saved (S56) or synced (S57), with what a check of it found (S64)."""

    path: str
    claim: str = "S56"
    exists: bool | None = None  # None: not checked yet
    size: int | None = None
    source_size: int | None = None  # for a copy: the size of its source
    load_ok: bool | None = None  # a safe load of the file (checkpoints only)


@dataclass(frozen=True)
class WatchedFile:
    """An entry script, config or queue file in use by a live process (S63)."""

    path: str
    mtime: float
    process_start: float  # start time of the live process that reads it


@dataclass(frozen=True)
class MemorySample:
    """cgroup v2 `memory.current` / `memory.max` (v1: usage / limit) at one instant; max None = unlimited."""

    t: float
    current: int
    max: int | None


@dataclass(frozen=True)
class DiskUsage:
    """`df -P` and `df -Pi` of the data or output mount, plus what the run's checkpoints will still need."""

    mount: str
    bytes_used_pct: float | None = None
    inodes_used_pct: float | None = None
    free_bytes: int | None = None
    projected_ckpt_bytes: int | None = None  # bytes the remaining checkpoint saves will write


@dataclass(frozen=True)
class GpuReading:
    """One GpuSample with the time it was taken: the GPU rows measure durations."""

    t: float
    gpu: GpuSample


@dataclass(frozen=True)
class ComputeApp:
    """One row of `nvidia-smi --query-compute-apps` (gpu_uuid mapped to the index by the caller)."""

    pid: int
    gpu_index: int
    used_mib: float | None = None


@dataclass(frozen=True)
class ComputeSnapshot:
    """Every compute process one query listed: an empty snapshot is evidence too (S91, S92)."""

    t: float
    apps: tuple[ComputeApp, ...] = ()


@dataclass(frozen=True)
class FinalMetric:
    """A final eval number as written (the text, so that 'byte-identical' means what it says, S84)."""

    run_id: str
    test_set: str
    name: str
    value: str


@dataclass(frozen=True)
class RunSignals:
    """Everything the rows read. Every field is optional: a caller fills in what it gathered.

    Times are epoch seconds on one clock (the probe's `now`). `samples` may be long and may be per-key
    windows concatenated: only the order within one key matters. `series` (key → samples) is used instead
    when given, so a caller that already keeps per-key windows pays no grouping pass.
    """

    now: float = 0.0
    t_log: float = float(T_LOG_S)  # §3.1: max(15 min, 3 × p95 of gaps between log lines); see derive_t_log
    t_ckpt: float = float(T_CKPT_S)  # §3.1: 2 × the launch-to-first-checkpoint time
    started_at: float | None = None
    since: float | None = None  # event rows report only samples newer than this (None: the newest 50)
    # process (S58–S65)
    liveness: Liveness | None = None  # audits.liveness.classify of the same probe
    exit_code: int | None = None
    exit_code_file_present: bool | None = None  # None: inferred from exit_code
    signal_sent_by_app: bool = False
    artifacts_present: bool | None = None  # the run's required artifacts (the wrapper's DONE)
    missing_artifacts: tuple[str, ...] = ()  # names, for the evidence
    log_tail: Sequence[str] = ()  # the last ≤ 200 lines of this run's log
    boot_id_changed: bool | None = None
    last_log_line_t: float | None = None
    newest_ckpt_mtime: float | None = None
    claimed_saves: Sequence[ClaimedSave] = ()
    watched_files: Sequence[WatchedFile] = ()
    relaunch_at: float | None = None  # when the run was relaunched (None: every sample is after it)
    relaunch_step_before: int | None = None  # the last step seen before the relaunch
    # host (S66–S69)
    cgroup_memory: Sequence[MemorySample] = ()
    oom_kill_delta: int | None = None  # rise of `oom_kill` in memory.events since the last sample
    disks: Sequence[DiskUsage] = ()
    cpu_quota: float | None = None  # CPUs granted by cpu.max (quota / period); None = no limit
    threads: int | None = None  # torch / OMP threads the trainer runs
    # metric (S70–S85)
    samples: Sequence[Sample] = ()
    series: Mapping[str, Sequence[Sample]] | None = None
    planned_steps: int | None = None
    warmup_steps: int = 0
    loss_kind: str | None = None  # ce, bce, mse, l1, huber, dice, kl, infonce, ...
    num_classes: int | None = None  # CE chance floor ln C
    batch_size: int | None = None  # InfoNCE chance floor ln B
    max_grad_norm: float | None = None
    schedule_configured: bool | None = None  # a per-step schedule (cosine, linear); False for StepLR & co
    overflow_steps: Sequence[int] = ()  # steps of S10 'skipping step' lines
    final_metrics: Sequence[FinalMetric] = ()
    other_run_final_metrics: Sequence[FinalMetric] = ()
    # gpu (S86–S93)
    gpu_samples: Sequence[GpuReading | GpuSample] = ()  # bare GpuSamples: taken every gpu_period, newest now
    gpu_period: float = GPU_PERIOD_S
    compute_apps: Sequence[ComputeSnapshot] = ()
    run_gpus: tuple[int, ...] | None = None  # GPU indices the run owns (None: every GPU seen)
    trainer_pids: tuple[int, ...] = ()  # the trainer and its ranks / children
    declared_gpus: int | None = None

    @cached_property
    def _by_key(self) -> Mapping[str, Sequence[Sample]]:
        if self.series is not None:
            return self.series
        grouped: dict[str, list[Sample]] = {}
        for sample in self.samples:
            grouped.setdefault(sample.key, []).append(sample)
        return grouped

    def of(self, key: str) -> Sequence[Sample]:
        """One key's samples, oldest first."""
        return self._by_key.get(key, ())

    def keys(self) -> Iterable[str]:
        return self._by_key.keys()


# ---- formatting ------------------------------------------------------------------------------------

def _num(x: float) -> str:
    """Two decimals for ordinary magnitudes, three significant digits for tiny or huge ones."""
    if not math.isfinite(x):
        return str(x)
    size = abs(x)
    if size >= 1e5 or (0 < size < 1e-2):
        return f"{x:.3g}"
    return f"{x:.2f}"


def _dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _at(sample: Sample | LossPoint) -> str:
    return f"step {sample.step}" if sample.step is not None else f"t={sample.t:.0f}"


def _hit(s: RunSignals, row: str, evidence: str, severity: str | None = None, detail: str = "") -> list[Hit]:
    return [Hit(signature=row, severity=severity or ROW_SEVERITY[row], evidence=evidence, t=s.now, detail=detail)]


# ---- series helpers --------------------------------------------------------------------------------

def _newest(seq: Sequence[Any], limit: int = SCAN_CAP) -> Iterator[Any]:
    """Items newest first, at most `limit` of them."""
    return islice(reversed(seq), limit)


def _finite_values(samples: Iterable[Sample]) -> list[float]:
    return [x.value for x in samples if math.isfinite(x.value)]


def _tail(seq: Sequence[Sample], n: int, finite: bool = True) -> list[Sample]:
    """The newest n samples (finite ones only by default), oldest first."""
    out = [x for x in islice((x for x in _newest(seq) if not finite or math.isfinite(x.value)), n)]
    out.reverse()
    return out


def _event_window(s: RunSignals, key: str) -> list[Sample]:
    """Samples an event row judges: those newer than `since`, or the newest EVENT_LOOKBACK; oldest first."""
    out = []
    for x in _newest(s.of(key), MAX_REPLAY if s.since is not None else EVENT_LOOKBACK):
        if s.since is not None and x.t <= s.since:
            break
        out.append(x)
    out.reverse()
    return out


def _age(s: RunSignals, t: float | None) -> float | None:
    return None if t is None else s.now - t


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class StepState:
    """The step counter (§3.3): its current value and when it first showed it."""

    step: int
    since: float


def step_state(s: RunSignals) -> StepState | None:
    """The highest step any key reached at its newest end, and the earliest time a sample showed it."""
    top: int | None = None
    for key in s.keys():
        for x in _newest(s.of(key), STEP_SCAN):
            if x.step is not None:
                top = x.step if top is None else max(top, x.step)
                break
    if top is None:
        return None
    since = math.inf
    for key in s.keys():
        for x in _newest(s.of(key), STEP_SCAN):
            if x.step is None:
                continue
            if x.step != top:
                break
            since = min(since, x.t)
    return StepState(top, since)


def _step_frozen_for(s: RunSignals) -> float | None:
    state = step_state(s)
    return None if state is None else s.now - state.since


def _latest_step(s: RunSignals, key: str) -> int | None:
    for x in _newest(s.of(key), STEP_SCAN):
        if x.step is not None:
            return int(x.step)
    state = step_state(s)
    return state.step if state else None


def _alive(s: RunSignals) -> bool:
    return s.liveness is not None and s.liveness.state in ("running", "stalled")


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
    step: int | None
    t: float
    value: float


@dataclass(frozen=True)
class Spike:
    point: LossPoint
    position: int  # index in the replayed points
    median: float
    sigma: float
    z: float
    window: int
    transient: bool | None = None  # None: fewer than 50 steps have passed


@dataclass(frozen=True)
class Divergence:
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
    for back, x in enumerate(_newest(loss)):
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
    for x in _newest(s.of("grad_norm")):
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


# ---- GPU helpers -----------------------------------------------------------------------------------

def _gpu_tails(s: RunSignals, limit: int = GPU_TAIL) -> dict[int, list[GpuReading]]:
    """The newest `limit` readings per GPU the run owns, oldest first; bare samples get times from the cadence."""
    owned = set(s.run_gpus) if s.run_gpus is not None else None
    seen: dict[int, int] = {}
    out: dict[int, list[GpuReading]] = {}
    for item in _newest(s.gpu_samples, limit * MAX_GPUS):
        sample = item.gpu if isinstance(item, GpuReading) else item
        n = seen.get(sample.index, 0)
        seen[sample.index] = n + 1
        if (owned is not None and sample.index not in owned) or n >= limit:
            continue
        t = item.t if isinstance(item, GpuReading) else s.now - n * s.gpu_period
        out.setdefault(sample.index, []).append(GpuReading(t, sample))
    for readings in out.values():
        readings.reverse()
    return out


def _owned(s: RunSignals, tails: Mapping[int, Sequence[GpuReading]]) -> list[int]:
    return sorted(s.run_gpus) if s.run_gpus is not None else sorted(tails)


def _utils(readings: Sequence[GpuReading]) -> list[float]:
    return [r.gpu.util_pct for r in readings[-GPU_WINDOW:] if r.gpu.util_pct is not None]


def _is_idle_reading(r: GpuReading) -> bool:
    return r.gpu.util_pct is not None and r.gpu.util_pct <= IDLE_UTIL


def gpu_idle(readings: Sequence[GpuReading]) -> bool:
    """§3.4: a full 20-sample window with util ≤ 5 % in ≥ 90 % of it (one busy blip is allowed)."""
    window = readings[-GPU_WINDOW:]
    return len(window) == GPU_WINDOW and sum(map(_is_idle_reading, window)) >= IDLE_FRACTION * GPU_WINDOW


def _idle_since(readings: Sequence[GpuReading]) -> float | None:
    """Start of the longest trailing stretch that is ≥ 90 % idle."""
    busy, start = 0, None
    for n, r in enumerate(reversed(readings), 1):
        busy += not _is_idle_reading(r)
        if busy <= (1 - IDLE_FRACTION) * n:
            start = r.t
    return start


def _all_idle(s: RunSignals) -> tuple[bool, float | None]:
    """Every owned GPU idle (§3.4), and for how long the shortest of them has been."""
    tails = _gpu_tails(s)
    owned = _owned(s, tails)
    if not owned or not all(gpu_idle(tails.get(i, [])) for i in owned):
        return False, None
    starts = [_idle_since(tails[i]) for i in owned]
    known = [t for t in starts if t is not None]
    return True, (s.now - max(known)) if known else None


def _util_median(s: RunSignals) -> float | None:
    """Median util over the last window of every owned GPU: the 'GPU util median' of §3.1."""
    tails = _gpu_tails(s, GPU_WINDOW)
    values = [u for i in _owned(s, tails) for u in _utils(tails.get(i, []))]
    return _median(values)


def _latest_snapshot(s: RunSignals) -> ComputeSnapshot | None:
    return s.compute_apps[-1] if s.compute_apps else None


def _trainer_apps(s: RunSignals, snap: ComputeSnapshot) -> list[ComputeApp]:
    if not s.trainer_pids:
        return list(snap.apps)
    pids = set(s.trainer_pids)
    return [a for a in snap.apps if a.pid in pids]


# ---- §3.1 liveness, refined ------------------------------------------------------------------------

def effective_liveness(s: RunSignals) -> Liveness | None:
    """`classify` with what §3.1 adds and a probe cannot see: a step advance or a busy GPU is progress.

    classify() judges `stalled` from log and checkpoint mtimes only; the spec also requires no step advance
    for > T_log and a GPU util median < 5 %. Unknown GPU data keeps classify's word (CPU runs can stall too).
    """
    live = s.liveness
    if live is None or live.state != "stalled":
        return live
    frozen = _step_frozen_for(s)
    if frozen is not None and frozen <= s.t_log:
        return Liveness("running", f"quiet: log silent but the step advanced {_dur(frozen)} ago")
    util = _util_median(s)
    if util is not None and util >= IDLE_UTIL:
        return Liveness("running", f"quiet: log silent but GPU util median {util:.0f}%")
    return live


def _progress_age(s: RunSignals) -> float | None:
    """Seconds since the last progress: a new log line or a step advance, whichever is newer."""
    ages = [a for a in (_age(s, s.last_log_line_t), _step_frozen_for(s)) if a is not None]
    return min(ages) if ages else None


def _exit_file_present(s: RunSignals) -> bool:
    return s.exit_code_file_present if s.exit_code_file_present is not None else s.exit_code is not None


def _last_trainer_line(lines: Sequence[str]) -> str:
    """The last non-blank line the trainer wrote (bars redraw with \\r; the wrapper's markers come after)."""
    for raw in reversed(lines):
        line = strip_ansi(raw).split("\r")[-1].strip()
        if line and not line.startswith(_WRAPPER_LINE):
            return line
    return ""


# ---- rows: proc ------------------------------------------------------------------------------------

def rule_s58(s: RunSignals) -> list[Hit]:
    """Killed by a signal: the exit status names the row (137 → S04, 139 → S22, 143 → S47)."""
    code = s.exit_code
    if code in (137, -9):
        tail = list(s.log_tail)[-200:]
        if any(_TRACEBACK.search(strip_ansi(line)) for line in tail):
            return []  # the traceback names a better row
        row, why = "S04", f"exit {code} (SIGKILL) with no Traceback in the last {len(tail)} log lines"
    elif code in (139, -11):
        row, why = "S22", f"exit {code} (SIGSEGV)"
    elif code in (143, -15) and not s.signal_sent_by_app:
        row, why = "S47", f"exit {code} (SIGTERM) that rgt did not send"
    else:
        return []
    severity, cause = MAPPED_ROWS[row]
    return _hit(s, "S58", f"{why}: {row}, {cause}", severity, detail=row)


def _death_cause(s: RunSignals) -> str:
    if s.boot_id_changed:
        return "reboot (boot_id changed)"
    if s.oom_kill_delta:
        return f"oom (oom_kill rose by {s.oom_kill_delta})"
    return "killed (no reboot or OOM kill recorded)"


def rule_s59(s: RunSignals) -> list[Hit]:
    """Dead without an exit-code file: the wrapper itself was killed, so the cause is read around it."""
    if s.liveness is None or s.liveness.state != "dead" or _exit_file_present(s):
        return []
    cause = _death_cause(s)
    log_age = _age(s, s.last_log_line_t)
    last = f" (last log line {_dur(log_age)} ago)" if log_age is not None else ""
    return _hit(s, "S59", f"the job is gone{last} and its wrapper wrote no exit code; cause: {cause}",
                detail=cause.split(" ")[0])


def rule_s60(s: RunSignals) -> list[Hit]:
    """Finished in words (exit 0 or a completion last line) but the required artifacts are missing."""
    live = s.liveness
    if live is None or live.state != "dead":
        return []
    missing = s.artifacts_present is False or (s.artifacts_present is None and live.detail.startswith("incomplete"))
    last = _last_trainer_line(s.log_tail)
    says_done = s.exit_code == 0 or bool(_COMPLETION.search(last))
    if not (missing and says_done):
        return []
    claim = "exit 0" if s.exit_code == 0 else f"last line {last[:80]!r}"
    names = f" ({', '.join(s.missing_artifacts[:5])})" if s.missing_artifacts else ""
    return _hit(s, "S60", f"{claim} but required artifacts are missing{names}: incomplete", detail="incomplete")


def rule_s61(s: RunSignals) -> list[Hit]:
    """Stalled (§3.1): alive, no progress for > T_log, stale checkpoint, idle GPU; critical at 3 × T_log."""
    live = effective_liveness(s)
    if live is None or live.state != "stalled":
        return []
    quiet = _progress_age(s)
    parts = [f"alive but no progress for {_dur(quiet)} (T_log {_dur(s.t_log)})" if quiet is not None
             else f"alive but silent ({live.detail})"]
    state = step_state(s)
    if state is not None:
        parts.append(f"step frozen at {state.step}")
    ckpt = _age(s, s.newest_ckpt_mtime)
    parts.append(f"newest checkpoint {_dur(ckpt)} old" if ckpt is not None else "no checkpoint yet")
    util = _util_median(s)
    if util is not None:
        parts.append(f"GPU util median {util:.0f}%")
    severity = "critical" if quiet is not None and quiet >= 3 * s.t_log else "warn"
    return _hit(s, "S61", ", ".join(parts), severity)


def rule_s62(s: RunSignals) -> list[Hit]:
    """Running but quiet: no log line for > T_log while checkpoints or the step counter move (buffered stdout)."""
    live = effective_liveness(s)
    if live is None or live.state != "running":
        return []
    log_age = _age(s, s.last_log_line_t)
    quiet = log_age > s.t_log if log_age is not None else live.detail.startswith("quiet")
    if not quiet:
        return []
    ckpt = _age(s, s.newest_ckpt_mtime)
    frozen = _step_frozen_for(s)
    moving = []
    if ckpt is not None and ckpt <= s.t_ckpt:
        moving.append(f"newest checkpoint {_dur(ckpt)} old")
    if frozen is not None and frozen <= s.t_log:
        moving.append(f"step advanced {_dur(frozen)} ago")
    if not moving and live is s.liveness and ckpt is None and live.detail.startswith("quiet"):
        moving.append("checkpoints fresh (probe)")  # classify saw fresh checkpoints the caller did not pass
    if not moving:
        return []
    silent = f"no log line for {_dur(log_age)}" if log_age is not None else "log silent"
    return _hit(s, "S62", f"{silent} (T_log {_dur(s.t_log)}) while {' and '.join(moving)}", detail="quiet")


def rule_s63(s: RunSignals) -> list[Hit]:
    """A file the live process reads was modified after it started (bash re-reads scripts by offset)."""
    edited = [f for f in s.watched_files if f.mtime > f.process_start + MTIME_SLACK_S]
    if not edited:
        return []
    text = "; ".join(f"{f.path} modified {_dur(f.mtime - f.process_start)} after its process started"
                     for f in edited[:3])
    more = f" (+{len(edited) - 3} more)" if len(edited) > 3 else ""
    return _hit(s, "S63", text + more)


def _save_problem(c: ClaimedSave) -> str | None:
    if c.exists is False:
        return "absent"
    if c.size == 0:
        return "size 0"
    if c.size is not None and c.source_size is not None and c.size != c.source_size:
        return f"size {c.size} ≠ source {c.source_size}"
    if c.load_ok is False:
        return "fails a safe load"
    return None


def rule_s64(s: RunSignals) -> list[Hit]:
    """A path a log line claimed was saved or copied does not hold what was claimed."""
    bad = [(c, p) for c in s.claimed_saves if (p := _save_problem(c)) is not None]
    if not bad:
        return []
    text = "; ".join(f"{c.path} ({c.claim} claim): {p}" for c, p in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return _hit(s, "S64", f"{len(bad)} claimed save(s) fail the check: {text}{more}")


def _first_step_after(s: RunSignals, at: float | None) -> Sample | None:
    """The earliest stepped sample at or after `at` (every key), or the series' first when `at` is None."""
    best: Sample | None = None
    for key in s.keys():
        candidate: Sample | None = None
        if at is None:
            candidate = next((x for x in islice(s.of(key), STEP_SCAN) if x.step is not None), None)
        else:
            for x in _newest(s.of(key)):
                if x.t < at:
                    break
                if x.step is not None:
                    candidate = x
        if candidate is not None and (best is None or candidate.t < best.t):
            best = candidate
    return best


def _step_drop(s: RunSignals) -> tuple[str, int, Sample] | None:
    """Within one key's recent samples, a step below the highest seen before it (a second run appended)."""
    for key in sorted(s.keys()):
        top: int | None = None
        for x in _tail(s.of(key), REGRESSION_TAIL, finite=False):
            if x.step is None or x.approx_step:
                continue
            if top is not None and x.step < top:
                return key, top, x
            top = x.step if top is None else max(top, x.step)
    return None


def rule_s65(s: RunSignals) -> list[Hit]:
    """The step counter went backwards: after a relaunch (resume ignored) or inside one log (two runs)."""
    if s.relaunch_step_before is not None:
        first = _first_step_after(s, s.relaunch_at)
        if first is not None and first.step is not None and first.step < s.relaunch_step_before:
            return _hit(s, "S65", f"first step after the relaunch is {first.step}, below step "
                                  f"{s.relaunch_step_before} reached before it: saved state not restored")
    drop = _step_drop(s)
    if drop is None:
        return []
    key, top, x = drop
    return _hit(s, "S65", f"step of {key!r} fell from {top} to {x.step}: a second run appended to this log?")


# ---- rows: host ------------------------------------------------------------------------------------

def rule_s66(s: RunSignals) -> list[Hit]:
    """cgroup memory above 90 % of memory.max for ≥ 60 s: the OOM killer is next."""
    run: list[MemorySample] = []
    for m in _newest(s.cgroup_memory):
        if m.max is None or m.max <= 0 or m.current <= 0.9 * m.max:
            break
        run.append(m)
    if len(run) < 2 or run[0].t - run[-1].t < 60:
        return []
    current, limit, gib = run[0].current, run[0].max or 1, 1024 ** 3
    return _hit(s, "S66", f"cgroup memory at {current / limit:.0%} of memory.max ({current / gib:.1f} of "
                          f"{limit / gib:.1f} GiB) for {_dur(run[0].t - run[-1].t)}")


def rule_s67(s: RunSignals) -> list[Hit]:
    """memory.events oom_kill rose since the last sample: the kernel killed a process of this cgroup."""
    if not s.oom_kill_delta or s.oom_kill_delta <= 0:
        return []
    return _hit(s, "S67", f"memory.events oom_kill rose by {s.oom_kill_delta} since the last sample")


def _disk_findings(d: DiskUsage) -> tuple[list[str], bool]:
    found, critical = [], False
    for what, pct in (("bytes", d.bytes_used_pct), ("inodes", d.inodes_used_pct)):
        if pct is not None and pct >= 95:
            found.append(f"{what} {pct:.0f}% used on {d.mount}")
            critical = critical or pct >= 99
    if d.projected_ckpt_bytes is not None and d.free_bytes is not None and d.projected_ckpt_bytes > d.free_bytes:
        gib = 1024 ** 3
        found.append(f"checkpoints still to write ({d.projected_ckpt_bytes / gib:.1f} GiB) exceed the "
                     f"{d.free_bytes / gib:.1f} GiB free on {d.mount}")
    return found, critical


def rule_s68(s: RunSignals) -> list[Hit]:
    """A data/output mount at ≥ 95 % bytes or inodes (critical ≥ 99 %), or too small for the coming saves."""
    found, critical = [], False
    for d in s.disks:
        more, crit = _disk_findings(d)
        found += more
        critical = critical or crit
    if not found:
        return []
    return _hit(s, "S68", "; ".join(found), "critical" if critical else None)


def rule_s69(s: RunSignals) -> list[Hit]:
    """More threads than the CPU quota while the GPU idles at 5–15 %: oversubscribed vCPU slice."""
    if s.cpu_quota is None or s.threads is None or s.threads <= s.cpu_quota:
        return []
    util = _util_median(s)
    if util is None or not IDLE_UTIL <= util <= 15:
        return []
    return _hit(s, "S69", f"{s.threads} torch/OMP threads on a {s.cpu_quota:g}-CPU quota (cpu.max) "
                          f"with GPU util median {util:.0f}%")


# ---- rows: metric ----------------------------------------------------------------------------------

def rule_s70(s: RunSignals) -> list[Hit]:
    """A parsed train loss is nan or inf."""
    bad = [x for x in _event_window(s, "loss") if not math.isfinite(x.value)]
    if not bad:
        return []
    first = bad[0]
    more = f" ({len(bad)} non-finite values among the newest loss samples)" if len(bad) > 1 else ""
    return _hit(s, "S70", f"loss is {first.value} at {_at(first)}{more}")


def rule_s71(s: RunSignals) -> list[Hit]:
    """Rolling spike (§3.2): the newest spike, how far above the window, whether it passed, and the grad-norms."""
    spikes, _, _ = loss_events(s)
    if not spikes:
        return []
    sp = spikes[-1]
    text = (f"loss {_num(sp.point.value)} at {_at(sp.point)} is {sp.z:.1f}σ above the median {_num(sp.median)} "
            f"of the last {sp.window} samples")
    if len(spikes) > 1:
        text += f" ({len(spikes)} spikes among the newest samples)"
    notes = ["transient" if sp.transient else ""] + [_grad_context(s, sp.point)]
    return _hit(s, "S71", text, detail="; ".join(n for n in notes if n))


def rule_s72(s: RunSignals) -> list[Hit]:
    """Divergence (§3.2): 20 consecutive losses above 5·m, or a loss ≥ 10 × the first window's median."""
    _, divergences, replayed = loss_events(s)
    if divergences:
        d = divergences[-1]
        return _hit(s, "S72", f"{DIVERGE_RUN} consecutive losses above 5 × the median {_num(d.median)} "
                              f"(from {_at(d.first)} to {_at(d.point)}, latest {_num(d.point.value)})")
    first = _first_window_median(s)
    if first is None or first <= 0 or not replayed:
        return []
    latest = replayed[-1]
    if latest.value < DIVERGE_FIRST_RATIO * first:
        return []
    return _hit(s, "S72", f"loss {_num(latest.value)} at {_at(latest)} is {latest.value / first:.1f} × the "
                          f"first-window median {_num(first)} (≥ {DIVERGE_FIRST_RATIO:g} ×)")


def rule_s73(s: RunSignals) -> list[Hit]:
    """A negative value of a loss that cannot be negative: the loss math is wrong (critical below −1e3)."""
    kind = (s.loss_kind or "").lower()
    if kind not in BOUNDED_LOSSES:
        return []
    negative = [x for x in _event_window(s, "loss") if math.isfinite(x.value) and x.value < 0]
    if not negative:
        return []
    worst = min(negative, key=lambda x: x.value)
    severity = "critical" if worst.value < -1e3 else None
    return _hit(s, "S73", f"{kind} loss is {_num(worst.value)} at {_at(worst)}: a {kind} loss is never negative",
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
    step = _latest_step(s, "loss")
    if floor is None or step is None:
        return []
    after = max(500, 0.1 * s.planned_steps) if s.planned_steps else 500
    recent = _finite_values(_tail(s.of("loss"), EVENT_LOOKBACK))
    if step < after or not recent:
        return []
    level = statistics.median(recent)
    if abs(level - floor[0]) > 0.02 * floor[0]:
        return []
    return _hit(s, "S74", f"loss median {_num(level)} over the last {len(recent)} samples at step {step} is within "
                          f"2% of the chance floor {floor[1]} = {_num(floor[0])}")


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
    return _hit(s, "S75", f"grad-norm P99 over epochs 1–2 is {p99:.1f} × its rolling median "
                          f"({len(early)} samples, peak ratio {ordered[-1]:.1f})")


def rule_s76(s: RunSignals) -> list[Hit]:
    """Clipping on ≥ 90 % of the last 200 logged steps: clipping hides an LR or init problem."""
    if s.max_grad_norm is None or s.max_grad_norm <= 0:
        return []
    values = _finite_values(_tail(s.of("grad_norm"), WINDOW))
    if len(values) < MIN_WINDOW:
        return []
    clipped = sum(v >= s.max_grad_norm for v in values)
    if clipped < 0.9 * len(values):
        return []
    return _hit(s, "S76", f"grad_norm ≥ max_norm {_num(s.max_grad_norm)} on {clipped} of the last "
                          f"{len(values)} logged steps ({clipped / len(values):.0%})")


def rule_s77(s: RunSignals) -> list[Hit]:
    """Grad-norm below 1e-8 for 100 consecutive samples while the loss stays flat: nothing trains."""
    tiny: list[Sample] = []
    for x in _newest(s.of("grad_norm")):
        if not (math.isfinite(x.value) and x.value < 1e-8):
            break
        tiny.append(x)
        if len(tiny) == 100:
            break
    if len(tiny) < 100:
        return []
    start = tiny[-1]
    loss = []
    for x in _newest(s.of("loss")):
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
    return _hit(s, "S77", f"grad_norm < 1e-8 for the last 100 samples (since {_at(start)}) while the loss stayed "
                          f"at {_num(statistics.median(loss))} (range {_num(spread)})")


def _skips_in_last_100(s: RunSignals) -> tuple[int, str] | None:
    """Skipped fp16 steps in the last 100 steps: S10 lines when known, else loss-scale halvings."""
    state = step_state(s)
    latest = max([*([state.step] if state else []), *s.overflow_steps], default=None)
    if s.overflow_steps and latest is not None:
        return sum(1 for st in s.overflow_steps if st > latest - 100), "overflow lines"
    scales = _tail(s.of("loss_scale"), 100)
    if latest is not None and all(x.step is not None for x in scales):
        scales = [x for x in scales if x.step is not None and x.step > latest - 100]
    if len(scales) < 2:
        return None
    return sum(1 for a, b in zip(scales, scales[1:], strict=False) if b.value < a.value), "loss-scale halvings"


def rule_s78(s: RunSignals) -> list[Hit]:
    """fp16 stuck in overflow: loss scale ≤ 1, or more than 10 skipped steps in the last 100."""
    newest = _tail(s.of("loss_scale"), 1)
    if newest and newest[0].value <= 1:
        return _hit(s, "S78", f"fp16 loss scale is {_num(newest[0].value)} at {_at(newest[0])} (≤ 1)")
    skips = _skips_in_last_100(s)
    if skips is None or skips[0] <= 10:
        return []
    return _hit(s, "S78", f"{skips[0]} skipped steps within the last 100 steps ({skips[1]})")


def rule_s79(s: RunSignals) -> list[Hit]:
    """A schedule is configured but the logged LR has not changed for 3 logging intervals after warmup."""
    if not s.schedule_configured:
        return []
    after = [x for x in _tail(s.of("lr"), 4)
             if (x.step is not None and x.step >= s.warmup_steps) or (x.step is None and s.warmup_steps == 0)]
    if len(after) < 4 or any(x.value != after[0].value for x in after):
        return []
    last = after[-1]
    if s.planned_steps and last.step is not None and last.step >= s.planned_steps:
        return []  # the schedule is over
    return _hit(s, "S79", f"lr constant at {after[0].value:g} for 3 logging intervals "
                          f"({_at(after[0])} to {_at(last)}) although a schedule is configured")


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
    walker = _newest(train)
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
        evals = list(_newest(s.of(key), 3))
        if len(evals) < 3:
            continue
        for train_key in _train_keys(name):
            pairs = _counterparts(evals, s.of(train_key))
            if len(pairs) == 3 and all(abs(ev.value - tr.value) <= 1e-12 for ev, tr in pairs):
                return _hit(s, "S80", f"{key} equals {train_key} on the last 3 evaluations "
                                      f"(latest {_num(evals[0].value)} at {_at(evals[0])})")
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
    return _hit(s, "S81", "at the end of epoch 1: " + "; ".join(found) + ": representation collapse")


_DETECT_NAMES = ("map", "map50", "map_50", "map50-95", "map_50_95", "miou", "mean_iou")
_LABEL_ACC_NAMES = ("acc", "accuracy", "label_acc")


def _eval_groups(s: RunSignals, names: Sequence[str], count: int) -> list[dict[str, Sample]]:
    """The newest `count` evaluations of the given val metrics, grouped by (step, epoch, t), newest first."""
    groups: dict[tuple[Any, ...], dict[str, Sample]] = {}
    for name in names:
        for x in _newest(s.of(f"val/{name}"), count):
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
    before = _finite_values(islice((x for x in _newest(s.of("loss")) if _not_after(x, older)), 20))
    now = _finite_values(_tail(s.of("loss"), 20))
    if not before or not now or statistics.median(now) >= 0.99 * statistics.median(before):
        return []
    names = ", ".join(f"val/{n}" for n in sorted(groups[0]))
    return _hit(s, "S82", f"{names} exactly 0 on the last 2 evaluations while the train loss fell from "
                          f"{_num(statistics.median(before))} to {_num(statistics.median(now))}")


_REWARD_KEYS = ("reward", "rewards/mean", "env/reward_mean", "reward_mean")
_KL_KEYS = ("kl", "objective/kl", "kl_div")


def _after_warmup(s: RunSignals, key: str, n: int) -> list[Sample]:
    return [x for x in _tail(s.of(key), n)
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
        return (f"DPO rewards/margins {_num(margins[-1].value)} and rewards/accuracies "
                f"{_num(accuracies[-1].value)} flat for the last 5 logs after warmup")
    return None


def _reward_hack(s: RunSignals) -> str | None:
    for rk in _REWARD_KEYS:
        z_reward = _jump(_finite_values(_tail(s.of(rk), 51)))
        if z_reward is None or z_reward <= 3:
            continue
        for kk in _KL_KEYS:
            z_kl = _jump(_finite_values(_tail(s.of(kk), 51)))
            if z_kl is not None and z_kl > 3:
                return f"{rk} jumped {z_reward:.1f}σ together with a {kk} spike of {z_kl:.1f}σ"
    return None


def rule_s83(s: RunSignals) -> list[Hit]:
    """Preference/RL training not learning (flat DPO rewards) or gaming the reward (reward and KL jump)."""
    text = _dpo_flat(s) or _reward_hack(s)
    return _hit(s, "S83", text) if text else []


def rule_s84(s: RunSignals) -> list[Hit]:
    """A final eval number byte-identical to another run's on the same test set: a stale checkpoint evaluated."""
    others = {(m.test_set, m.name, m.value): m.run_id for m in s.other_run_final_metrics}
    same = [(m, others[(m.test_set, m.name, m.value)]) for m in s.final_metrics
            if (m.test_set, m.name, m.value) in others and others[(m.test_set, m.name, m.value)] != m.run_id]
    if not same:
        return []
    m, other = same[0]
    return _hit(s, "S84", f"{m.name} on {m.test_set} is {m.value}, byte-identical to run {other}")


def rule_s85(s: RunSignals) -> list[Hit]:
    """Throughput below half the run's median for ≥ 5 min while the process is alive."""
    if not _alive(s):
        return []
    series = _tail(s.of("throughput"), 1000)
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
    return _hit(s, "S85", f"throughput {_num(slow[0].value)}{label} below half the run's median "
                          f"{_num(median)}{label} for {_dur(slow[0].t - slow[-1].t)}")


# ---- rows: gpu -------------------------------------------------------------------------------------

def rule_s86(s: RunSignals) -> list[Hit]:
    """GPU idle while the step advances: the input pipeline starves it (info, warn after 15 min)."""
    idle, for_s = _all_idle(s)
    frozen = _step_frozen_for(s)
    if not idle or not _alive(s) or frozen is None or frozen > s.t_log:
        return []
    severity = "warn" if for_s is not None and for_s >= 15 * 60 else None
    how_long = f" for {_dur(for_s)}" if for_s is not None else ""
    return _hit(s, "S86", f"GPU idle (≤ {IDLE_UTIL:g}% util){how_long} while the step advanced {_dur(frozen)} ago: "
                          "CPU-bound input pipeline", severity)


def rule_s87(s: RunSignals) -> list[Hit]:
    """GPU idle, step frozen, process alive: hung (critical once frozen for 3 × T_log)."""
    idle, for_s = _all_idle(s)
    state = step_state(s)
    if not idle or not _alive(s) or state is None or s.now - state.since <= s.t_log:
        return []
    frozen = s.now - state.since
    severity = "critical" if frozen >= 3 * s.t_log else None
    return _hit(s, "S87", f"GPU idle and step frozen at {state.step} for {_dur(frozen)} while the process is alive",
                severity)


def rule_s88(s: RunSignals) -> list[Hit]:
    """Every GPU busy ≥ 90 % but the step frozen > T_log: ranks spinning in a desynchronised collective."""
    state = step_state(s)
    if not _alive(s) or state is None or s.now - state.since <= s.t_log:
        return []
    tails = _gpu_tails(s, GPU_WINDOW)
    owned = _owned(s, tails)
    medians = [_median(_utils(tails.get(i, []))) for i in owned]
    if not medians or any(m is None or m < BUSY_UTIL for m in medians):
        return []
    low = min(m for m in medians if m is not None)
    return _hit(s, "S88", f"all {len(owned)} GPU(s) at ≥ {low:.0f}% util while the step is frozen at {state.step} "
                          f"for {_dur(s.now - state.since)}: spinning collective")


def _below(value: float | None, reference: float | None, ratio: float) -> bool:
    """value < ratio × reference, false when either is unknown (or the reference is 0)."""
    return value is not None and reference is not None and reference > 0 and value < ratio * reference


def _underfed(r: GpuReading) -> bool:
    g = r.gpu
    if g.util_pct is None or g.util_pct < BUSY_UTIL:
        return False
    return _below(g.sm_clock_mhz, g.max_sm_clock_mhz, SLOW_CLOCK_RATIO) or _below(g.power_w, g.power_limit_w, 0.5)


def rule_s89(s: RunSignals) -> list[Hit]:
    """util ≥ 90 % but SM clock < 70 % of max or power < 50 % of limit for 60 s: busy counter, starving GPU."""
    tails = _gpu_tails(s)
    found = []
    for index in _owned(s, tails):
        run = []
        for r in reversed(tails.get(index, [])):
            if not _underfed(r):
                break
            run.append(r)
        if run and run[0].t - run[-1].t >= 60:
            g = run[0].gpu
            found.append(f"GPU {index}: util {g.util_pct:.0f}% with SM clock {g.sm_clock_mhz or 0:.0f}/"
                         f"{g.max_sm_clock_mhz or 0:.0f} MHz and power {g.power_w or 0:.0f}/"
                         f"{g.power_limit_w or 0:.0f} W for {_dur(run[0].t - run[-1].t)}")
    return _hit(s, "S89", "; ".join(found)) if found else []


def _throttled(r: GpuReading) -> str | None:
    g = r.gpu
    bits = [name for bit, name in FAIL_BITS.items() if g.throttle_reasons is not None and g.throttle_reasons & bit]
    if bits:
        hot = f" at {g.temperature_c:.0f} °C" if g.temperature_c is not None else ""
        return " + ".join(bits) + f" active{hot}"
    if g.temperature_c is not None and g.temperature_c >= HOT_C and \
            _below(g.sm_clock_mhz, g.max_sm_clock_mhz, SLOW_CLOCK_RATIO):
        return f"{g.temperature_c:.0f} °C with SM clock {g.sm_clock_mhz or 0:.0f}/{g.max_sm_clock_mhz or 0:.0f} MHz"
    return None


def rule_s90(s: RunSignals) -> list[Hit]:
    """Thermal or power throttle on the newest sample: hot with slow clocks, or a slowdown/brake bit set."""
    tails = _gpu_tails(s, 1)
    found = [f"GPU {i}: {why}" for i in _owned(s, tails) if tails.get(i) and (why := _throttled(tails[i][-1]))]
    return _hit(s, "S90", "; ".join(found)) if found else []


def _stretch_start(items: Sequence[Any], holds: Callable[[Any], bool]) -> tuple[float, float] | None:
    """(oldest t, newest t) of the trailing stretch where `holds` is true."""
    newest = oldest = None
    for item in reversed(items):
        if not holds(item):
            break
        newest = item.t if newest is None else newest
        oldest = item.t
    return None if newest is None or oldest is None else (oldest, newest)


def _holds_memory(r: GpuReading) -> bool:
    return r.gpu.memory_used_mib is not None and r.gpu.memory_used_mib > ORPHAN_MIB


def _lists_none_on(index: int) -> Callable[[ComputeSnapshot], bool]:
    return lambda snap: all(a.gpu_index != index for a in snap.apps)


def rule_s91(s: RunSignals) -> list[Hit]:
    """> 1 GiB of GPU memory in use with no compute process listed for ≥ 120 s: orphan context or PID blind spot."""
    if not s.compute_apps:
        return []
    tails = _gpu_tails(s)
    snaps = list(_newest(s.compute_apps, GPU_TAIL))[::-1]
    found = []
    for index in _owned(s, tails):
        used = _stretch_start(tails.get(index, []), _holds_memory)
        empty = _stretch_start(snaps, _lists_none_on(index))
        if used is None or empty is None:
            continue
        held = min(used[1], empty[1]) - max(used[0], empty[0])
        if held >= 120:
            mib = tails[index][-1].gpu.memory_used_mib or 0
            found.append(f"GPU {index}: {mib / 1024:.1f} GiB used with no compute process listed for {_dur(held)}")
    return _hit(s, "S91", "; ".join(found)) if found else []


def rule_s92(s: RunSignals) -> list[Hit]:
    """The trainer is not among the GPU's compute processes a minute after start, and the GPU is empty."""
    snap = _latest_snapshot(s)
    if snap is None or not s.trainer_pids or s.started_at is None or not _alive(s) or snap.t < s.started_at + 60:
        return []
    if _trainer_apps(s, snap):
        return []
    tails = _gpu_tails(s, 1)
    used = [r[-1].gpu.memory_used_mib or 0 for r in tails.values() if r]
    if any(mib > ORPHAN_MIB for mib in used):
        return []  # someone holds memory: a PID-namespace blind spot or a neighbour (S91), not proof of CPU
    pids = ", ".join(map(str, s.trainer_pids))
    return _hit(s, "S92", f"trainer pid(s) {pids} absent from the compute processes {_dur(snap.t - s.started_at)} "
                          f"after start and no GPU memory in use: training on CPU")


def _rank_layout(s: RunSignals, n: int) -> str | None:
    snap = _latest_snapshot(s)
    if snap is None or (s.started_at is not None and snap.t < s.started_at + 60):
        return None
    apps = _trainer_apps(s, snap)
    gpus = sorted({a.gpu_index for a in apps})
    if len(apps) >= 2 and len(gpus) == 1:
        return f"all {len(apps)} trainer processes on GPU {gpus[0]} ({n} declared)"
    if apps and len(gpus) < n:
        return f"{n} GPUs declared but trainer processes on only {len(gpus)} ({', '.join(map(str, gpus))})"
    return None


def _idle_ranks(s: RunSignals, n: int) -> str | None:
    tails = _gpu_tails(s, GPU_WINDOW)
    owned = _owned(s, tails)
    if s.run_gpus is None and len(owned) != n:
        return None  # which GPUs are the run's is unknown
    idle = [i for i in owned if gpu_idle(tails.get(i, []))]
    if idle and len(idle) < len(owned):
        return f"GPU(s) {', '.join(map(str, idle))} idle while {len(owned) - len(idle)} of {len(owned)} work"
    return None


def rule_s93(s: RunSignals) -> list[Hit]:
    """Fewer GPUs working than declared, or every rank on one GPU: a bare python launch or RANK used as device."""
    n = s.declared_gpus
    if n is None or n < 2 or not _alive(s):
        return []
    text = _rank_layout(s, n) or _idle_ranks(s, n)
    return _hit(s, "S93", text) if text else []


# ---- registry --------------------------------------------------------------------------------------

RULES: dict[str, Callable[[RunSignals], list[Hit]]] = {
    "S58": rule_s58, "S59": rule_s59, "S60": rule_s60, "S61": rule_s61, "S62": rule_s62, "S63": rule_s63,
    "S64": rule_s64, "S65": rule_s65, "S66": rule_s66, "S67": rule_s67, "S68": rule_s68, "S69": rule_s69,
    "S70": rule_s70, "S71": rule_s71, "S72": rule_s72, "S73": rule_s73, "S74": rule_s74, "S75": rule_s75,
    "S76": rule_s76, "S77": rule_s77, "S78": rule_s78, "S79": rule_s79, "S80": rule_s80, "S81": rule_s81,
    "S82": rule_s82, "S83": rule_s83, "S84": rule_s84, "S85": rule_s85, "S86": rule_s86, "S87": rule_s87,
    "S88": rule_s88, "S89": rule_s89, "S90": rule_s90, "S91": rule_s91, "S92": rule_s92, "S93": rule_s93,
}


def evaluate(signals: RunSignals, only: Collection[str] | None = None) -> list[Hit]:
    """Every row (or the named ones) over one snapshot, in row order. Unknown row ids are a caller bug."""
    if only is not None:
        unknown = sorted(set(only) - set(RULES))
        if unknown:
            raise ValueError(f"unknown rule id(s): {', '.join(unknown)}")
    hits: list[Hit] = []
    for row, rule in RULES.items():
        if only is None or row in only:
            hits += rule(signals)
    return hits


def signals_from_probe(probe: ProbeResult, launched: bool = True, t_log: float = T_LOG_S,
                       t_ckpt: float = T_CKPT_S, **more: Any) -> RunSignals:
    """The process fields of RunSignals from one watcher probe, classified the way the watcher does."""
    base = RunSignals(
        now=probe.now, t_log=t_log, t_ckpt=t_ckpt, started_at=probe.started_at,
        liveness=classify(probe, launched, t_log, t_ckpt), exit_code=probe.exit_code,
        artifacts_present=probe.done if probe.exit_code is not None else None,
        last_log_line_t=probe.log_mtime, newest_ckpt_mtime=probe.newest_ckpt_mtime)
    return replace(base, **more)


def derive_t_log(line_times: Sequence[float]) -> float:
    """T_log = max(15 min, 3 × p95 of the gaps between log lines): a slow logger gets a longer fuse (§3.1)."""
    times = list(_newest(line_times, 1001))[::-1]
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False) if b >= a)
    if not gaps:
        return float(T_LOG_S)
    return max(float(T_LOG_S), 3 * gaps[math.ceil(0.95 * len(gaps)) - 1])
