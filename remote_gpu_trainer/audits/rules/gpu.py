"""The GPU rows S86–S93 (docs/log-signatures.md §2, §3.4): idle, hung, spinning, underfed, throttled, orphaned,
CPU-bound and mis-ranked GPUs, read from nvidia-smi readings and compute-process snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from remote_gpu_trainer.audits.gpu_health import FAIL_BITS, HOT_C, SLOW_CLOCK_RATIO
from remote_gpu_trainer.audits.log.samples import Hit
from remote_gpu_trainer.audits.rules.common import (
    fmt_dur,
    hit,
    is_alive,
    median_or_none,
    newest_first,
    step_frozen_for,
    step_state,
)
from remote_gpu_trainer.audits.rules.gpu_window import (
    BUSY_UTIL,
    GPU_TAIL,
    GPU_WINDOW,
    IDLE_UTIL,
    ORPHAN_MIB,
    all_idle,
    gpu_idle,
    gpu_tails,
    latest_snapshot,
    owned_gpus,
    recent_utils,
    trainer_apps,
)
from remote_gpu_trainer.audits.rules.signals import ComputeSnapshot, GpuReading, RunSignals
from remote_gpu_trainer.text import size_iec

# ---- rows: gpu -------------------------------------------------------------------------------------

def rule_s86(s: RunSignals) -> list[Hit]:
    """GPU idle while the step advances: the input pipeline starves it (info, warn after 15 min)."""
    idle, for_s = all_idle(s)
    frozen = step_frozen_for(s)
    if not idle or not is_alive(s) or frozen is None or frozen > s.t_log:
        return []
    severity = "warn" if for_s is not None and for_s >= 15 * 60 else None
    how_long = f" for {fmt_dur(for_s)}" if for_s is not None else ""
    return hit(s, "S86", f"GPU idle (≤ {IDLE_UTIL:g}% util){how_long} while the step advanced {fmt_dur(frozen)} ago: "
                         "CPU-bound input pipeline", severity)


def rule_s87(s: RunSignals) -> list[Hit]:
    """GPU idle, step frozen, process alive: hung (critical once frozen for 3 × T_log)."""
    idle, for_s = all_idle(s)
    state = step_state(s)
    if not idle or not is_alive(s) or state is None or s.now - state.since <= s.t_log:
        return []
    frozen = s.now - state.since
    severity = "critical" if frozen >= 3 * s.t_log else None
    return hit(s, "S87", f"GPU idle and step frozen at {state.step} for {fmt_dur(frozen)} while the process is alive",
               severity)


def rule_s88(s: RunSignals) -> list[Hit]:
    """Every GPU busy ≥ 90 % but the step frozen > T_log: ranks spinning in a desynchronised collective."""
    state = step_state(s)
    if not is_alive(s) or state is None or s.now - state.since <= s.t_log:
        return []
    tails = gpu_tails(s, GPU_WINDOW)
    owned = owned_gpus(s, tails)
    medians = [median_or_none(recent_utils(tails.get(i, []))) for i in owned]
    if not medians or any(m is None or m < BUSY_UTIL for m in medians):
        return []
    low = min(m for m in medians if m is not None)
    return hit(s, "S88", f"all {len(owned)} GPU(s) at ≥ {low:.0f}% util while the step is frozen at {state.step} "
                         f"for {fmt_dur(s.now - state.since)}: spinning collective")


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
    tails = gpu_tails(s)
    found = []
    for index in owned_gpus(s, tails):
        run = []
        for r in reversed(tails.get(index, [])):
            if not _underfed(r):
                break
            run.append(r)
        if run and run[0].t - run[-1].t >= 60:
            g = run[0].gpu
            found.append(f"GPU {index}: util {g.util_pct:.0f}% with SM clock {g.sm_clock_mhz or 0:.0f}/"
                         f"{g.max_sm_clock_mhz or 0:.0f} MHz and power {g.power_w or 0:.0f}/"
                         f"{g.power_limit_w or 0:.0f} W for {fmt_dur(run[0].t - run[-1].t)}")
    return hit(s, "S89", "; ".join(found)) if found else []


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
    tails = gpu_tails(s, 1)
    found = [f"GPU {i}: {why}" for i in owned_gpus(s, tails) if tails.get(i) and (why := _throttled(tails[i][-1]))]
    return hit(s, "S90", "; ".join(found)) if found else []


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
    tails = gpu_tails(s)
    snaps = list(newest_first(s.compute_apps, GPU_TAIL))[::-1]
    found = []
    for index in owned_gpus(s, tails):
        used = _stretch_start(tails.get(index, []), _holds_memory)
        empty = _stretch_start(snaps, _lists_none_on(index))
        if used is None or empty is None:
            continue
        held = min(used[1], empty[1]) - max(used[0], empty[0])
        if held >= 120:
            mib = tails[index][-1].gpu.memory_used_mib or 0
            found.append(f"GPU {index}: {size_iec(mib * (1 << 20), 1, 'GiB')} used with no compute process listed for "
                         f"{fmt_dur(held)}")
    return hit(s, "S91", "; ".join(found)) if found else []


def rule_s92(s: RunSignals) -> list[Hit]:
    """The trainer is not among the GPU's compute processes a minute after start, and the GPU is empty."""
    snap = latest_snapshot(s)
    if snap is None or not s.trainer_pids or s.started_at is None or not is_alive(s) or snap.t < s.started_at + 60:
        return []
    if trainer_apps(s, snap):
        return []
    tails = gpu_tails(s, 1)
    used = [r[-1].gpu.memory_used_mib or 0 for r in tails.values() if r]
    if any(mib > ORPHAN_MIB for mib in used):
        return []  # someone holds memory: a PID-namespace blind spot or a neighbour (S91), not proof of CPU
    pids = ", ".join(map(str, s.trainer_pids))
    return hit(s, "S92", f"trainer pid(s) {pids} absent from the compute processes {fmt_dur(snap.t - s.started_at)} "
                         f"after start and no GPU memory in use: training on CPU")


def _rank_layout(s: RunSignals, n: int) -> str | None:
    snap = latest_snapshot(s)
    if snap is None or (s.started_at is not None and snap.t < s.started_at + 60):
        return None
    apps = trainer_apps(s, snap)
    gpus = sorted({a.gpu_index for a in apps})
    if len(apps) >= 2 and len(gpus) == 1:
        return f"all {len(apps)} trainer processes on GPU {gpus[0]} ({n} declared)"
    if apps and len(gpus) < n:
        return f"{n} GPUs declared but trainer processes on only {len(gpus)} ({', '.join(map(str, gpus))})"
    return None


def _idle_ranks(s: RunSignals, n: int) -> str | None:
    tails = gpu_tails(s, GPU_WINDOW)
    owned = owned_gpus(s, tails)
    if s.run_gpus is None and len(owned) != n:
        return None  # which GPUs are the run's is unknown
    idle = [i for i in owned if gpu_idle(tails.get(i, []))]
    if idle and len(idle) < len(owned):
        return f"GPU(s) {', '.join(map(str, idle))} idle while {len(owned) - len(idle)} of {len(owned)} work"
    return None


def rule_s93(s: RunSignals) -> list[Hit]:
    """Fewer GPUs working than declared, or every rank on one GPU: a bare python launch or RANK used as device."""
    n = s.declared_gpus
    if n is None or n < 2 or not is_alive(s):
        return []
    text = _rank_layout(s, n) or _idle_ranks(s, n)
    return hit(s, "S93", text) if text else []
