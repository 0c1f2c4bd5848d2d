"""Rows 5-6 of the environment audit (docs/remote-ops.md §4): the cgroup memory limit and the CPU quota."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.audits.env_audit.common import (
    FAIL,
    IDLE_MEMORY_RATIO,
    NO_LIMIT_BYTES,
    PASS,
    WARN,
    RunRequirements,
)
from remote_gpu_trainer.text import gib
from remote_gpu_trainer.views import AuditRow


def _cgroup(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    block = facts.get("cgroup")
    return block if isinstance(block, Mapping) else {}


def memory_limit_bytes(facts: Mapping[str, Any]) -> tuple[int | None, str]:
    """The effective limit (smallest over the cgroup chain, else host RAM) and where it came from."""
    raw = _cgroup(facts).get("memory_limits")
    limits = [int(v) for v in raw if isinstance(v, str) and v.strip().isdigit()] if isinstance(raw, list) else []
    limits = [v for v in limits if v < NO_LIMIT_BYTES]
    if limits:
        return min(limits), f"cgroup v{_cgroup(facts).get('version')} limit"
    host_kb = facts.get("mem_total_kb")
    if isinstance(host_kb, int) and host_kb > 0:
        return host_kb * 1024, "no cgroup limit; host RAM"
    return None, "limit unknown"


def _oom_kills(events: str) -> int | None:
    match = re.search(r"^oom_kill (\d+)$", events, re.M)
    return int(match.group(1)) if match else None


def memory_limit(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    limit, source = memory_limit_bytes(facts)
    current_raw = str(_cgroup(facts).get("memory_current", "")).strip()
    current = int(current_raw) if current_raw.isdigit() else None
    if limit is None:
        return AuditRow(5, "memory_limit", WARN, "memory limit unknown (no cgroup files, no /proc/meminfo)")
    detail = f"{source} {gib(limit)}" + (f", {gib(current)} in use" if current is not None else "")
    kills = _oom_kills(str(_cgroup(facts).get("memory_events", "")))
    if kills:
        detail += f", oom_kill {kills} so far"
    planned = None
    if req.workers is not None and req.worker_ram_bytes is not None:
        planned = (req.workers + 1) * req.worker_ram_bytes
        detail += f"; planned ({req.workers} workers + 1) × {gib(req.worker_ram_bytes)} = {gib(planned)}"
    if planned is not None and planned > limit:
        return AuditRow(5, "memory_limit", FAIL, detail + " exceeds the limit")
    if current is not None and current / limit > IDLE_MEMORY_RATIO:
        return AuditRow(5, "memory_limit", WARN, detail + f" ({current / limit:.0%} used before launch)")
    if planned is not None and planned == limit:
        return AuditRow(5, "memory_limit", WARN, detail + " (exactly the limit: no headroom)")
    return AuditRow(5, "memory_limit", PASS, detail)


def cpu_quota(facts: Mapping[str, Any]) -> float | None:
    """vCPUs granted by the CFS quota (smallest over the chain); None when there is no quota."""
    raw = _cgroup(facts).get("cpu_limits")
    quotas = []
    for value in raw if isinstance(raw, list) else []:
        parts = str(value).split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) > 0:
            quotas.append(int(parts[0]) / int(parts[1]))  # "max"/"-1" (no quota) are not digits
    return min(quotas) if quotas else None


def cpu_limit(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    nproc = facts.get("nproc")
    quota = cpu_quota(facts)
    if not isinstance(nproc, int) or nproc <= 0:
        return AuditRow(6, "cpu_limit", WARN, "nproc unknown" + (f"; quota {quota:g} vCPUs" if quota else ""))
    vcpus = quota if quota is not None else float(nproc)
    threads = max(1, math.floor(vcpus))
    detail = f"nproc {nproc}, " + (f"CPU quota {quota:g} vCPUs" if quota is not None else "no CPU quota")
    detail += f"; set OMP_NUM_THREADS={threads}"
    if nproc > 2 * vcpus:
        return AuditRow(6, "cpu_limit", WARN, detail + " (nproc > 2 × vCPUs: threads will oversubscribe)")
    return AuditRow(6, "cpu_limit", PASS, detail)
