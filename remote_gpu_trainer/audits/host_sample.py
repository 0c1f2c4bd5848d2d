"""One host sample from the box, parsed strictly (docs/remote-ops.md §11): what remote/mem_monitor.py's
`sample` mode printed, as the inputs of the host and GPU run rules.

A hostile or broken box prints anything: a line that does not parse is dropped, counts are capped, and a
field that is absent stays unknown. Times stay the box's (the caller maps them onto its own clock).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from remote_gpu_trainer.audits.gpu_health import GpuParseError, GpuSample, parse_gpu_samples
from remote_gpu_trainer.audits.rules.signals import ComputeApp, DiskUsage, MemorySample

MAX_ROWS = 2000  # TSV rows per sample
MAX_GPUS = 64
MAX_APPS = 1024
MAX_PIDS = 4096


@dataclass(frozen=True)
class ClaimCheck:
    """What the box said of one claimed save: it exists (any candidate path) and its size."""

    exists: bool
    size: int


@dataclass(frozen=True)
class HostSample:
    """The host facts one watcher tick gathered; every field but `now` may be unknown."""

    now: float
    trainer_pids: tuple[int, ...] = ()  # the job wrapper's process tree
    memory: MemorySample | None = None  # the job's cgroup at `now`
    oom_kill: int | None = None  # the cgroup's oom_kill count
    oom_base: int | None = None  # the count at the memory monitor's first row (the launch)
    disks: tuple[DiskUsage, ...] = ()
    claims: tuple[ClaimCheck | None, ...] = ()  # in the order asked
    gpus: tuple[GpuSample, ...] = ()
    apps: tuple[ComputeApp, ...] | None = None  # None: nvidia-smi absent or silent
    tsv_memory: tuple[MemorySample, ...] = ()  # the memory TSV's rows since the last offset
    tsv_offset: int | None = None


def _int(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() and len(text) <= 20 else None


def _float(text: str | None) -> float | None:
    try:
        value = float((text or "").strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _disk(fields: list[str], mounts: Sequence[str]) -> DiskUsage | None:
    numbers = [_int(f) for f in fields]
    if len(numbers) != 7 or any(n is None for n in numbers):
        return None
    index, total, avail, used, inodes, ifree, _dev = (n or 0 for n in numbers)
    if index >= len(mounts):
        return None
    pct = 100.0 * used / (used + avail) if used + avail > 0 else None
    ipct = 100.0 * (inodes - ifree) / inodes if inodes > 0 and ifree <= inodes else None
    return DiskUsage(mount=mounts[index], bytes_used_pct=pct if total > 0 else None, inodes_used_pct=ipct,
                     free_bytes=avail)


def _apps(rows: list[str], uuid_rows: list[str]) -> tuple[ComputeApp, ...] | None:
    """`pid, gpu_uuid, used_memory` rows mapped to GPU indices by `index, uuid` rows."""
    index_of: dict[str, int] = {}
    for row in uuid_rows[:MAX_GPUS]:
        index, _, uuid = (p.strip() for p in row.partition(","))
        if _int(index) is not None and uuid:
            index_of[uuid] = int(index)
    if not index_of:
        return None
    apps = []
    for row in rows[:MAX_APPS]:
        parts = [p.strip() for p in row.split(",")]
        pid = _int(parts[0]) if len(parts) == 3 else None
        if pid is None or parts[1] not in index_of:
            continue
        apps.append(ComputeApp(pid=pid, gpu_index=index_of[parts[1]], used_mib=_float(parts[2])))
    return tuple(apps)


def _tsv(head: str, rows: list[str]) -> tuple[MemorySample, ...]:
    """The rows' cgroup memory, located by the header's column names."""
    names = head.split("\t")
    try:
        t_col, cur_col, max_col = names.index("t"), names.index("cg_current_bytes"), names.index("cg_max_bytes")
    except ValueError:
        return ()
    out = []
    for row in rows[-MAX_ROWS:]:
        cols = row.split("\t")
        if len(cols) != len(names):
            continue
        t, current, limit = _float(cols[t_col]), _int(cols[cur_col]), _int(cols[max_col])
        if t is not None and current is not None:
            out.append(MemorySample(t=t, current=current, max=limit))
    return tuple(out)


def parse_host_sample(text: str, mounts: Sequence[str], claims: int) -> HostSample | None:
    """The sample's KEY=VALUE lines; None when it carries no time (not an answer of this program).
    `mounts` are the paths asked for, in order; `claims` how many claimed saves were asked about."""
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {"DISK": [], "CLAIM": [], "GPU": [], "GPUMAP": [], "APP": [], "TSV": []}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in multi:
            if len(multi[key]) < MAX_ROWS:
                multi[key].append(value)
        else:
            single[key] = value
    now = _float(single.get("NOW"))
    if now is None:
        return None
    pids = [_int(p) for p in single.get("PIDS", "").split()[:MAX_PIDS]]
    current, limit = _int(single.get("CG_CURRENT")), _int(single.get("CG_MAX"))
    checks: list[ClaimCheck | None] = [None] * claims
    for row in multi["CLAIM"]:
        index, exists, size = ([_int(f) for f in row.split()] + [None, None, None])[:3]
        if index is not None and index < claims and exists in (0, 1) and size is not None:
            checks[index] = ClaimCheck(exists=exists == 1, size=size)
    try:
        gpus = tuple(parse_gpu_samples("\n".join(multi["GPU"][:MAX_GPUS])))
    except GpuParseError:
        gpus = ()
    return HostSample(
        now=now, trainer_pids=tuple(p for p in pids if p is not None),
        memory=MemorySample(now, current, limit) if current is not None else None,
        oom_kill=_int(single.get("CG_OOM")), oom_base=_int(single.get("OOM_BASE")),
        disks=tuple(d for row in multi["DISK"] if (d := _disk(row.split(), mounts)) is not None),
        claims=tuple(checks), gpus=gpus, apps=_apps(multi["APP"], multi["GPUMAP"]),
        tsv_memory=_tsv(single.get("TSV_HEAD", ""), multi["TSV"]), tsv_offset=_int(single.get("TSV_OFFSET")))
