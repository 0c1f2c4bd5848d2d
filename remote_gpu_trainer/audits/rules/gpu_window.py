"""The GPU windows of §3.4 (docs/log-signatures.md): per-GPU tails of nvidia-smi readings, idleness, and the
compute-process snapshots; shared by the GPU rows and by the process and host rows that ask "is the GPU busy?".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from remote_gpu_trainer.audits.rules.common import median_or_none, newest_first
from remote_gpu_trainer.audits.rules.signals import ComputeApp, ComputeSnapshot, GpuReading, RunSignals

# ---- §3.4 GPU windows --------------------------------------------------------------------------------
GPU_WINDOW = 20  # 5 min of samples
GPU_TAIL = 240  # per GPU: 1 h of samples is the longest stretch any GPU row measures
MAX_GPUS = 16
IDLE_UTIL = 5.0
IDLE_FRACTION = 0.9
BUSY_UTIL = 90.0
ORPHAN_MIB = 1024.0


# ---- GPU helpers -----------------------------------------------------------------------------------

def gpu_tails(s: RunSignals, limit: int = GPU_TAIL) -> dict[int, list[GpuReading]]:
    """The newest `limit` readings per GPU the run owns, oldest first; bare samples get times from the cadence."""
    owned = set(s.run_gpus) if s.run_gpus is not None else None
    seen: dict[int, int] = {}
    out: dict[int, list[GpuReading]] = {}
    for item in newest_first(s.gpu_samples, limit * MAX_GPUS):
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


def owned_gpus(s: RunSignals, tails: Mapping[int, Sequence[GpuReading]]) -> list[int]:
    return sorted(s.run_gpus) if s.run_gpus is not None else sorted(tails)


def recent_utils(readings: Sequence[GpuReading]) -> list[float]:
    return [r.gpu.util_pct for r in readings[-GPU_WINDOW:] if r.gpu.util_pct is not None]


def is_idle_reading(r: GpuReading) -> bool:
    return r.gpu.util_pct is not None and r.gpu.util_pct <= IDLE_UTIL


def gpu_idle(readings: Sequence[GpuReading]) -> bool:
    """§3.4: a full 20-sample window with util ≤ 5 % in ≥ 90 % of it (one busy blip is allowed)."""
    window = readings[-GPU_WINDOW:]
    return len(window) == GPU_WINDOW and sum(map(is_idle_reading, window)) >= IDLE_FRACTION * GPU_WINDOW


def _idle_since(readings: Sequence[GpuReading]) -> float | None:
    """Start of the longest trailing stretch that is ≥ 90 % idle."""
    busy, start = 0, None
    for n, r in enumerate(reversed(readings), 1):
        busy += not is_idle_reading(r)
        if busy <= (1 - IDLE_FRACTION) * n:
            start = r.t
    return start


def all_idle(s: RunSignals) -> tuple[bool, float | None]:
    """Every owned GPU idle (§3.4), and for how long the shortest of them has been."""
    tails = gpu_tails(s)
    owned = owned_gpus(s, tails)
    if not owned or not all(gpu_idle(tails.get(i, [])) for i in owned):
        return False, None
    starts = [_idle_since(tails[i]) for i in owned]
    known = [t for t in starts if t is not None]
    return True, (s.now - max(known)) if known else None


def util_median(s: RunSignals) -> float | None:
    """Median util over the last window of every owned GPU: the 'GPU util median' of §3.1."""
    tails = gpu_tails(s, GPU_WINDOW)
    values = [u for i in owned_gpus(s, tails) for u in recent_utils(tails.get(i, []))]
    return median_or_none(values)


def latest_snapshot(s: RunSignals) -> ComputeSnapshot | None:
    return s.compute_apps[-1] if s.compute_apps else None


def trainer_apps(s: RunSignals, snap: ComputeSnapshot) -> list[ComputeApp]:
    if not s.trainer_pids:
        return list(snap.apps)
    pids = set(s.trainer_pids)
    return [a for a in snap.apps if a.pid in pids]
