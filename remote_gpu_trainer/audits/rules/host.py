"""The host rows S66–S69 (docs/log-signatures.md §2): cgroup memory, the OOM killer, full disks, CPU quota."""

from __future__ import annotations

from remote_gpu_trainer.audits.log.samples import Hit
from remote_gpu_trainer.audits.rules.common import fmt_dur, hit, newest_first
from remote_gpu_trainer.audits.rules.gpu_window import IDLE_UTIL, util_median
from remote_gpu_trainer.audits.rules.signals import DiskUsage, MemorySample, RunSignals
from remote_gpu_trainer.text import gib

# ---- rows: host ------------------------------------------------------------------------------------

def rule_s66(s: RunSignals) -> list[Hit]:
    """cgroup memory above 90 % of memory.max for ≥ 60 s: the OOM killer is next."""
    run: list[MemorySample] = []
    for m in newest_first(s.cgroup_memory):
        if m.max is None or m.max <= 0 or m.current <= 0.9 * m.max:
            break
        run.append(m)
    if len(run) < 2 or run[0].t - run[-1].t < 60:
        return []
    current, limit = run[0].current, run[0].max or 1
    return hit(s, "S66", f"cgroup memory at {current / limit:.0%} of memory.max ({current / 2**30:.1f} of "
                         f"{gib(limit)}) for {fmt_dur(run[0].t - run[-1].t)}")


def rule_s67(s: RunSignals) -> list[Hit]:
    """memory.events oom_kill rose since the last sample: the kernel killed a process of this cgroup."""
    if not s.oom_kill_delta or s.oom_kill_delta <= 0:
        return []
    return hit(s, "S67", f"memory.events oom_kill rose by {s.oom_kill_delta} since the last sample")


def _disk_findings(d: DiskUsage) -> tuple[list[str], bool]:
    found, critical = [], False
    for what, pct in (("bytes", d.bytes_used_pct), ("inodes", d.inodes_used_pct)):
        if pct is not None and pct >= 95:
            found.append(f"{what} {pct:.0f}% used on {d.mount}")
            critical = critical or pct >= 99
    if d.projected_ckpt_bytes is not None and d.free_bytes is not None and d.projected_ckpt_bytes > d.free_bytes:
        found.append(f"checkpoints still to write ({gib(d.projected_ckpt_bytes)}) exceed the "
                     f"{gib(d.free_bytes)} free on {d.mount}")
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
    return hit(s, "S68", "; ".join(found), "critical" if critical else None)


def rule_s69(s: RunSignals) -> list[Hit]:
    """More threads than the CPU quota while the GPU idles at 5–15 %: oversubscribed vCPU slice."""
    if s.cpu_quota is None or s.threads is None or s.threads <= s.cpu_quota:
        return []
    util = util_median(s)
    if util is None or not IDLE_UTIL <= util <= 15:
        return []
    return hit(s, "S69", f"{s.threads} torch/OMP threads on a {s.cpu_quota:g}-CPU quota (cpu.max) "
                         f"with GPU util median {util:.0f}%")
