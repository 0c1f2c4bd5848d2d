"""What the watcher rules read: one `RunSignals` snapshot of a run's process, host, metric and GPU facts.

Why one snapshot: the services gather facts every few seconds (liveness looks, cgroup files, `df`,
nvidia-smi samples, the parsed metric series) and hand them over in one `RunSignals`; each catalogue row
(docs/log-signatures.md §2 rows S58–S93, §3) is a small function of it, so a row can be tested with a
hand-built scenario. Every field is optional: a missing input means "unknown", never "bad".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import islice
from typing import Any

from remote_gpu_trainer.audits.gpu_health import GpuSample
from remote_gpu_trainer.audits.liveness import T_CKPT_S, T_LOG_S, Liveness, LivenessLook, classify
from remote_gpu_trainer.audits.log.samples import Sample

GPU_PERIOD_S = 15.0  # nvidia-smi cadence; also the spacing assumed for bare (untimed) GpuSamples


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

    Times are epoch seconds on one clock (the liveness look's `now`). `samples` may be long and may be per-key
    windows concatenated: only the order within one key matters. `series` (key → samples) is used instead
    when given, so a caller that already keeps per-key windows pays no grouping pass.
    """

    now: float = 0.0
    t_log: float = float(T_LOG_S)  # §3.1: max(15 min, 3 × p95 of gaps between log lines); see derive_t_log
    t_ckpt: float = float(T_CKPT_S)  # §3.1: 2 × the launch-to-first-checkpoint time
    started_at: float | None = None
    since: float | None = None  # event rows report only samples newer than this (None: the newest 50)
    # process (S58–S65)
    liveness: Liveness | None = None  # audits.liveness.classify of the same look
    exit_code: int | None = None
    exit_code_file_present: bool | None = None  # None: inferred from exit_code
    signal_sent_by_app: bool = False
    artifacts_present: bool | None = None  # the run's required artifacts (the wrapper's DONE)
    missing_artifacts: tuple[str, ...] = ()  # names, for the evidence
    log_tail: Sequence[str] = ()  # the last ≤ 200 lines of this run's log
    boot_id_changed: bool | None = None
    last_log_line_t: float | None = None
    newest_ckpt_mtime: float | None = None
    ckpt_interval_s: float | None = None  # the Young/Daly W (audits/checkpoint_cadence.py); S94 fires past 2 × W
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


def signals_from_look(look: LivenessLook, launched: bool = True, t_log: float = T_LOG_S,
                      t_ckpt: float = T_CKPT_S, **more: Any) -> RunSignals:
    """The process fields of RunSignals from one watcher's liveness look, classified the way the watcher does."""
    base = RunSignals(
        now=look.now, t_log=t_log, t_ckpt=t_ckpt, started_at=look.started_at,
        liveness=classify(look, launched, t_log, t_ckpt), exit_code=look.exit_code,
        artifacts_present=look.done if look.exit_code is not None else None,
        last_log_line_t=look.log_mtime, newest_ckpt_mtime=look.newest_ckpt_mtime)
    return replace(base, **more)


def derive_t_log(line_times: Sequence[float]) -> float:
    """T_log = max(15 min, 3 × p95 of the gaps between log lines): a slow logger gets a longer fuse (§3.1)."""
    times = list(islice(reversed(line_times), 1001))[::-1]
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False) if b >= a)
    if not gaps:
        return float(T_LOG_S)
    return max(float(T_LOG_S), 3 * gaps[math.ceil(0.95 * len(gaps)) - 1])
