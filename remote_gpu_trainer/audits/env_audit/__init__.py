"""Phase-0 environment audit (remote-ops.md §4): pure rows from the probe's facts and the run's needs.

The facts are the parsed JSON object that remote/env_probe.sh printed (raw command outputs); this module
parses them and applies the table's thresholds, one function per row. It runs nothing and reads nothing,
so every threshold can be tested at its boundary with constructed facts. A `fail` row becomes a finding
that must be acknowledged before `run`; nothing here blocks anything (only teardown is gated).

Rows whose inputs are not in the facts or the requirements (3, 4, 12, 15 when the caller has no estimate)
come back `skipped` with what is missing, never silently absent: the table always has sixteen rows.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits import gpu_health

PROBE_VERSION = "rgt-env-probe/1"

PASS, WARN, FAIL, SKIPPED = "pass", "warn", "fail", "skipped"
_RANK = {PASS: 0, SKIPPED: 0, WARN: 1, FAIL: 2}

USE_WARN_PCT = 85.0
USE_FAIL_PCT = 95.0
BUDGET_PASS_RATIO = 0.8
SCRATCH_RESERVE_BYTES = 2 * 1024**3  # "+ 2 GB" of the checkpoint budget, read as GiB (the larger reserve)
TOP_K_CAP = 3
EXPORT_PER_TEST_CAP = 100
IDLE_MEMORY_RATIO = 0.9
NO_LIMIT_BYTES = 2**60  # cgroup v1 reports "no limit" as a page-rounded 2^63
GPU_BUSY_RATIO = 0.05
CACHE_SHARE_OF_SCRATCH = 0.30
CAPPED_TIER_BYTES = 16 * 1024**3  # *(proposed)*: a filesystem this small is a capped tier (e.g. 5 GB overlay)
CLOCK_SKEW_S = 60.0
HOLDER_MIN_AGE_S = 120
DELAYED_FSTYPES = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse", "fuseblk")
KNOWN_GPU_DAEMONS = frozenset({"nvidia-persistenced", "nvidia-persiste", "nv-hostengine", "dcgm-exporter",
                               "dcgmi", "nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"})


@dataclass(frozen=True)
class AuditRow:
    """One row of the §4 table: `id` is the table's row number, `check` a stable slug."""

    id: int
    check: str
    status: str  # pass | warn | fail | skipped
    detail: str


@dataclass(frozen=True)
class RunRequirements:
    """What the run needs; None means "not known", which skips the rows that depend on it."""

    gpus: int = 0                           # 0 = CPU run
    gpu_name: str | None = None             # substring of the product name, case-insensitive
    gpu_memory_mib: float | None = None     # per GPU
    needs_torch: bool = True
    ckpt_bytes: int | None = None           # one checkpoint
    kept: int | None = None                 # checkpoints alive at once: see kept_checkpoints()
    data_cache_bytes: int = 0
    log_bytes: int = 0
    workers: int | None = None              # data-loader workers
    worker_ram_bytes: int | None = None     # per worker (the main process counts as one more)
    export_files: int | None = None         # see export_file_count()
    ckpt_tier_survives: bool | None = None  # the profile's answer for the checkpoint dir's mount
    expected_durable_mount: str | None = None
    root_is_ephemeral: bool | None = None   # None: an overlay root is ephemeral, any other root is not
    unprobeable_clocks: Mapping[str, str | None] | None = None  # row 15: name -> the user's answer (None: unknown)
    own_pids: frozenset[int] = frozenset()
    known_daemons: frozenset[str] = KNOWN_GPU_DAEMONS
    capped_tier_bytes: int = CAPPED_TIER_BYTES
    interpreter_why: str = ""               # row 8: why the probe ran this interpreter (see run_interpreter)


# ---- which interpreter row 8 runs ---------------------------------------------------------------

# python, python3, python3.11, python3.13t (free-threaded), with or without a directory in front
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*t?)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_ENV_OPTIONS_WITH_VALUE = frozenset({"-u", "--unset", "-C", "--chdir"})


@dataclass(frozen=True)
class Interpreter:
    """The interpreter the torch row runs and why that one, said in the row so a reader knows whose torch it saw."""

    path: str
    why: str


def run_interpreter(command: str, python: str, *, explicit: bool, run_id: str = "<id>") -> Interpreter:
    """`runs.<id>.python` when rgt.toml sets it; else the command's own first word when that is a python
    (a torch check of python3 says nothing about the conda env the command runs); else `python`.

    Launchers (torchrun, accelerate, bash, deepspeed) hide the interpreter they start, so for those the
    configured default is checked and the row says so rather than guessing.
    """
    if explicit:
        return Interpreter(python, f"runs.{run_id}.python in rgt.toml")
    word, why_not = command_program(command)
    if word is not None and is_python(word):
        return Interpreter(word, "the command's interpreter")
    if word is not None:
        why_not = f"the command starts with {word}, not a python"
    return Interpreter(python, f"{why_not}: checked the default; set runs.{run_id}.python to choose")


def is_python(word: str) -> bool:
    return _PYTHON_NAME.fullmatch(word.rsplit("/", 1)[-1]) is not None


def command_program(command: str) -> tuple[str | None, str]:
    """The program the command's first simple command runs, past `VAR=value` prefixes and `env [options]`;
    or (None, why) when the command cannot be read that way."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as exc:
        return None, f"the command cannot be split into words ({exc})"
    rest = _past_prefixes(words)
    if not rest or not rest[0] or set(rest[0]) <= set("();<>|&"):
        return None, "the command has no program word"
    return rest[0], ""


def _past_prefixes(words: list[str]) -> list[str]:
    """Drop leading assignments, then `env` with its options and assignments (GNU env's spellings)."""
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    if i < len(words) and words[i].rsplit("/", 1)[-1] == "env":
        i += 1
        while i < len(words) and (words[i].startswith("-") or _ASSIGNMENT.match(words[i])):
            i += 2 if words[i] in _ENV_OPTIONS_WITH_VALUE else 1
    return words[i:]


def kept_checkpoints(concurrent_cells: int, top_k: int, *, pruning: bool = True, queued_cells: int = 0) -> int:
    """Checkpoints on disk at once: best + resume anchor + top-k (≤ 3) per running cell, or per queued
    cell when pruning is off (nothing is ever deleted, so every cell's set accumulates)."""
    per_cell = 2 + min(max(top_k, 0), TOP_K_CAP)
    cells = concurrent_cells if pruning else max(queued_cells, concurrent_cells)
    return per_cell * cells


def export_file_count(required_files: int, tests: Iterable[tuple[int, int, int]]) -> int:
    """Files an export writes: required files + Σ min(100, N_test) × conditions × roles (row 4)."""
    return required_files + sum(min(EXPORT_PER_TEST_CAP, n) * conditions * roles for n, conditions, roles in tests)


def audit_environment(facts: Mapping[str, Any], req: RunRequirements) -> list[AuditRow]:
    """All sixteen rows, in table order."""
    if facts.get("version") != PROBE_VERSION:
        raise ValueError(f"environment facts have version {facts.get('version')!r}, expected {PROBE_VERSION!r}")
    rows: list[Callable[[Mapping[str, Any], RunRequirements], AuditRow]] = [
        disk_bytes, disk_inodes, checkpoint_budget, export_inodes, memory_limit, cpu_limit, gpus, torch_sees_gpus,
        hidden_caches, same_filesystem, durable_mount, checkpoints_survive, gpu_health_row, vram_holders,
        unprobeable_clocks, baseline]
    return [row(facts, req) for row in rows]


def worst(rows: Iterable[AuditRow]) -> str:
    return max((r.status for r in rows), key=lambda s: _RANK[s], default=PASS)


# ---- parsing helpers ------------------------------------------------------------------------------

@dataclass(frozen=True)
class DfRow:
    target: str
    total: int | None  # None where df printed "-" (inodes not reported)
    used: int | None
    avail: int | None

    def used_pct(self) -> float | None:
        """What df's Use% is before rounding up: used / (used + avail), so root-reserved blocks count as full."""
        if self.used is None or self.avail is None or self.used + self.avail <= 0:
            return None
        return 100.0 * self.used / (self.used + self.avail)


def _result(value: Any) -> tuple[int, str] | None:
    if isinstance(value, Mapping) and isinstance(value.get("rc"), int) and isinstance(value.get("out"), str):
        return value["rc"], value["out"]
    return None


def _first_line(text: str, default: str = "") -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), default)[:200]


def _int_or_none(token: str) -> int | None:
    return int(token) if token.isdigit() else None


def parse_df(text: str) -> DfRow:
    """The data line of `df --output=target,<3 numbers>,pcent PATH`; the target may contain spaces."""
    lines = [line for line in text.splitlines()[1:] if line.strip()]
    if not lines:
        raise ValueError(f"df printed no data line: {_first_line(text, 'nothing')!r}")
    parts = lines[-1].rsplit(None, 4)
    if len(parts) != 5:
        raise ValueError(f"df line has {len(parts)} fields: {lines[-1]!r}")
    target, total, used, avail, _pct = parts
    return DfRow(target=target.strip(), total=_int_or_none(total), used=_int_or_none(used),
                 avail=_int_or_none(avail))


_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_findmnt(text: str) -> dict[str, str] | None:
    """The top mount (last line) of `findmnt -n -P -o TARGET,FSTYPE,SOURCE -T PATH`, \\xHH decoded."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    pairs = {key: _unescape(value) for key, value in _PAIR.findall(lines[-1])}
    return pairs or None


def _unescape(value: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)


def _mount(value: Any) -> dict[str, str] | None:
    result = _result(value)
    return parse_findmnt(result[1]) if result and result[0] == 0 else None


def _disk(facts: Mapping[str, Any], role: str) -> Mapping[str, Any]:
    disks = facts.get("disks")
    block = disks.get(role) if isinstance(disks, Mapping) else None
    return block if isinstance(block, Mapping) else {}


def _df_of(facts: Mapping[str, Any], role: str, kind: str) -> tuple[DfRow | None, str]:
    """(row, "") or (None, why): `kind` is "bytes" or "inodes"."""
    result = _result(_disk(facts, role).get(kind))
    if result is None:
        return None, "not in the probe output"
    rc, out = result
    if rc == 124:
        return None, "df timed out (hung mount?)"
    if rc != 0:
        return None, f"df failed: {_first_line(out, f'exit {rc}')}"
    try:
        return parse_df(out), ""
    except ValueError as exc:
        return None, str(exc)


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _use_status(pct: float) -> str:
    if pct >= USE_FAIL_PCT:
        return FAIL
    return WARN if pct >= USE_WARN_PCT else PASS


def _roles(facts: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(role, str(_disk(facts, role).get("path", "?"))) for role in ("scratch", "durable")]


# ---- rows 1-4: space ------------------------------------------------------------------------------

def disk_bytes(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    statuses, parts = [], []
    for role, path in _roles(facts):
        row, why = _df_of(facts, role, "bytes")
        if row is None or row.used_pct() is None:
            statuses.append(FAIL)
            parts.append(f"{role} {path}: {why or 'size not reported'}")
            continue
        pct = row.used_pct()
        assert pct is not None
        statuses.append(_use_status(pct))
        parts.append(f"{role} {path} on {row.target}: {pct:.1f}% used, {_gb(row.avail or 0)} free")
    return AuditRow(1, "disk_bytes", _worst(statuses), "; ".join(parts))


def disk_inodes(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    statuses, parts = [], []
    for role, path in _roles(facts):
        row, why = _df_of(facts, role, "inodes")
        if row is None:
            statuses.append(FAIL)
            parts.append(f"{role} {path}: {why}")
            continue
        pct = row.used_pct()
        if pct is None:
            statuses.append(WARN)
            parts.append(f"{role} {path} on {row.target}: inodes not reported (-)")
            continue
        statuses.append(_use_status(pct))
        parts.append(f"{role} {path} on {row.target}: {pct:.1f}% of inodes used, {row.avail:,} free")
    return AuditRow(2, "disk_inodes", _worst(statuses), "; ".join(parts))


def checkpoint_budget(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    """B = ckpt_bytes × kept + data cache + logs + 2 GB against what the durable mount has free."""
    if req.ckpt_bytes is None or req.kept is None:
        return AuditRow(3, "checkpoint_budget", SKIPPED, "no checkpoint size estimate or kept count")
    row, why = _df_of(facts, "durable", "bytes")
    if row is None or row.avail is None:
        return AuditRow(3, "checkpoint_budget", FAIL, f"durable free space unknown: {why or 'not reported'}")
    need = req.ckpt_bytes * req.kept + req.data_cache_bytes + req.log_bytes + SCRATCH_RESERVE_BYTES
    detail = (f"B = {_gb(req.ckpt_bytes)} × {req.kept} + scratch {_gb(need - req.ckpt_bytes * req.kept)} "
              f"= {_gb(need)} vs {_gb(row.avail)} free on {row.target}")
    if need <= BUDGET_PASS_RATIO * row.avail:
        return AuditRow(3, "checkpoint_budget", PASS, detail)
    if need <= row.avail:
        return AuditRow(3, "checkpoint_budget", WARN, detail + " (over 80% of it)")
    return AuditRow(3, "checkpoint_budget", FAIL, detail + " (does not fit)")


def export_inodes(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    if req.export_files is None:
        return AuditRow(4, "export_inodes", SKIPPED, "no export file count (required files and tests unknown)")
    row, why = _df_of(facts, "durable", "inodes")
    if row is None:
        return AuditRow(4, "export_inodes", FAIL, f"durable inodes unknown: {why}")
    if row.avail is None:
        return AuditRow(4, "export_inodes", WARN, f"{row.target}: inodes not reported (-)")
    detail = f"{req.export_files:,} files vs {row.avail:,} free inodes on {row.target}"
    if req.export_files < BUDGET_PASS_RATIO * row.avail:
        return AuditRow(4, "export_inodes", PASS, detail)
    if req.export_files < row.avail:
        return AuditRow(4, "export_inodes", WARN, detail + " (over 80% of them)")
    return AuditRow(4, "export_inodes", FAIL, detail + " (does not fit)")


# ---- rows 5-6: cgroup limits ----------------------------------------------------------------------

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
    detail = f"{source} {_gb(limit)}" + (f", {_gb(current)} in use" if current is not None else "")
    kills = _oom_kills(str(_cgroup(facts).get("memory_events", "")))
    if kills:
        detail += f", oom_kill {kills} so far"
    planned = None
    if req.workers is not None and req.worker_ram_bytes is not None:
        planned = (req.workers + 1) * req.worker_ram_bytes
        detail += f"; planned ({req.workers} workers + 1) × {_gb(req.worker_ram_bytes)} = {_gb(planned)}"
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


# ---- rows 7-8: GPUs and torch ---------------------------------------------------------------------

def gpu_inventory(facts: Mapping[str, Any]) -> tuple[list[gpu_health.GpuInfo] | None, str]:
    """(GPUs, "") or (None, why): None with a why that starts "no GPU" is the no-GPU state."""
    if not facts.get("nvidia_smi"):
        return None, "no GPU: nvidia-smi missing"
    result = _result(facts.get("gpus"))
    if result is None:
        return None, "GPU query missing from the probe output"
    rc, out = result
    if rc != 0:
        health = gpu_health.nvidia_smi_failed(rc, out)
        prefix = "no GPU: " if health.overall == gpu_health.NO_GPU else ""
        return None, prefix + "; ".join(health.notes)
    try:
        found = gpu_health.parse_gpu_inventory(out)
    except gpu_health.GpuParseError as exc:
        return None, str(exc)
    return (found, "") if found else (None, "no GPU: nvidia-smi lists none")


def _meets(gpu: gpu_health.GpuInfo, req: RunRequirements) -> bool:
    if req.gpu_name and req.gpu_name.lower() not in gpu.name.lower():
        return False
    return req.gpu_memory_mib is None or (gpu.memory_total_mib or 0) >= req.gpu_memory_mib


def gpus(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    found, why = gpu_inventory(facts)
    if found is None:
        no_gpu = why.startswith("no GPU")
        if req.gpus <= 0:
            return AuditRow(7, "gpus", PASS if no_gpu else WARN, "no GPU (CPU run)" if no_gpu else why)
        return AuditRow(7, "gpus", FAIL, f"{why}; the run wants {req.gpus} GPU(s)")
    names = ", ".join(sorted({g.name for g in found}))
    memory = ", ".join(sorted({f"{(g.memory_total_mib or 0) / 1024:.0f} GiB" for g in found}))
    detail = f"{len(found)}× {names} ({memory}), driver {found[0].driver_version or '?'}"
    if req.gpus <= 0:
        return AuditRow(7, "gpus", PASS, detail + " (CPU run)")
    suitable = [g for g in found if _meets(g, req)]
    if len(suitable) < req.gpus:
        wanted = f"{req.gpus}" + (f"× {req.gpu_name}" if req.gpu_name else "") + (
            f" with ≥ {req.gpu_memory_mib:g} MiB" if req.gpu_memory_mib else "")
        return AuditRow(7, "gpus", FAIL, f"{detail}; the run wants {wanted}: {len(suitable)} qualify")
    busy = [g for g in found if g.memory_total_mib and g.memory_used_mib is not None
            and g.memory_used_mib > GPU_BUSY_RATIO * g.memory_total_mib]
    if busy:
        used = ", ".join(f"GPU {g.index} {g.memory_used_mib:.0f}/{g.memory_total_mib:.0f} MiB" for g in busy)
        return AuditRow(7, "gpus", WARN, f"{detail}; memory already in use before launch: {used}")
    return AuditRow(7, "gpus", PASS, detail)


def torch_facts(facts: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The interpreter's RGT_TORCH answer, or (None, why)."""
    result = _result(facts.get("torch"))
    python = str(_args(facts).get("python", "?"))
    if result is None:
        return None, "torch check missing from the probe output"
    rc, out = result
    if rc == 127:
        return None, f"interpreter {python} not found (exit 127)"
    if rc == 126:
        return None, f"interpreter {python} is not executable (exit 126)"
    if rc == 124:
        return None, f"{python} timed out importing torch"
    for line in reversed(out.splitlines()):
        if line.startswith("RGT_TORCH="):
            try:
                parsed = json.loads(line.removeprefix("RGT_TORCH="))
            except (ValueError, RecursionError):  # a probe answer nested 100,000 deep is no answer
                break
            if isinstance(parsed, dict):
                return parsed, ""
    return None, f"{python} exited {rc}: {_first_line(out, 'no output')}"


def _args(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    block = facts.get("args")
    return block if isinstance(block, Mapping) else {}


def torch_sees_gpus(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    info, why = torch_facts(facts)
    if info is None:
        return AuditRow(8, "torch", FAIL, why + (f" ({req.interpreter_why})" if req.interpreter_why else ""))
    checked = _interpreter_label(facts, info, req)
    if "error" in info:
        status = FAIL if req.needs_torch or req.gpus > 0 else PASS
        return AuditRow(8, "torch", status, f"{checked}: torch not importable: {info['error']}")
    raw_count = info.get("count")
    count = raw_count if isinstance(raw_count, int) else 0
    caps = ", ".join(".".join(str(x) for x in c) for c in info.get("capability") or [])
    detail = (f"{checked}: torch {info.get('torch')} (CUDA {info.get('cuda') or 'none'}), "
              f"cuda.is_available() {bool(info.get('available'))}, {count} device(s)"
              + (f", capability {caps}" if caps else ""))
    if req.gpus <= 0:
        return AuditRow(8, "torch", PASS, detail + " (CPU run)")
    if info.get("available") and count >= req.gpus:
        return AuditRow(8, "torch", PASS, detail)
    return AuditRow(8, "torch", FAIL, f"{detail}; the run wants {req.gpus}")


def _interpreter_label(facts: Mapping[str, Any], info: Mapping[str, Any], req: RunRequirements) -> str:
    """`python3 (/usr/bin/python3.11, Python 3.11.2) [why]`: the word the probe ran, what it resolved to,
    and why that interpreter, since a torch version means nothing without whose it is."""
    ran = str(_args(facts).get("python", "?"))
    parts = []
    executable, version = info.get("executable"), info.get("python")
    if isinstance(executable, str) and executable and executable != ran:
        parts.append(executable)
    if isinstance(version, str) and version:
        parts.append(f"Python {version}")
    label = f"{ran} ({', '.join(parts)})" if parts else ran
    return f"{label} [{req.interpreter_why}]" if req.interpreter_why else label


# ---- rows 9-12: caches and filesystems ------------------------------------------------------------

def _du_bytes(value: Any) -> tuple[int | None, bool]:
    """(bytes, complete): du's total even when it exited 1 on an unreadable subdirectory."""
    result = _result(value)
    if result is None:
        return None, False
    rc, out = result
    match = re.match(r"^(\d+)\s", out)
    return (int(match.group(1)) if match else None), rc == 0


def hidden_caches(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    caches = facts.get("caches")
    if not isinstance(caches, list):
        return AuditRow(9, "hidden_caches", WARN, "cache sizes missing from the probe output")
    if not caches:
        return AuditRow(9, "hidden_caches", PASS, "no hidden caches found")
    total, parts, capped, partial = 0, [], [], []
    for cache in caches:
        if not isinstance(cache, Mapping):
            continue
        size, complete = _du_bytes(cache.get("du"))
        total += size or 0
        path = str(cache.get("path"))
        resolved = str(cache.get("resolved", path))
        where = path if resolved == path else f"{path} → {resolved}"
        parts.append(f"{where} {_gb(size) if size is not None else '?'}")
        if not complete:
            partial.append(path)
        df = _result(cache.get("df"))
        fs = parse_df(df[1]) if df and df[0] == 0 else None
        if fs is not None and fs.total is not None and fs.total <= req.capped_tier_bytes:
            capped.append(f"{path} on {fs.target} ({_gb(fs.total)} filesystem)")
    scratch, _ = _df_of(facts, "scratch", "bytes")
    detail = f"{_gb(total)} in caches: " + ", ".join(parts)
    if partial:
        detail += f" (du incomplete for {', '.join(partial)})"
    warnings = []
    if capped:
        warnings.append("on a capped tier: " + "; ".join(capped))
    if scratch is not None and scratch.total and total > CACHE_SHARE_OF_SCRATCH * scratch.total:
        warnings.append(f"over 30% of {scratch.target} ({_gb(scratch.total)})")
    if warnings:
        return AuditRow(9, "hidden_caches", WARN, detail + "; " + "; ".join(warnings) + " (never auto-deleted)")
    return AuditRow(9, "hidden_caches", PASS, detail)


def same_filesystem(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    """Equal device ids, and also the same mount: rename(2) fails with EXDEV across two bind mounts of one
    filesystem even though stat shows the same device."""
    pairs = facts.get("same_fs")
    if not isinstance(pairs, list) or not pairs:
        return AuditRow(10, "same_filesystem", SKIPPED, "no staging/final directory pairs given")
    statuses, parts = [], []
    for pair in pairs:
        if not isinstance(pair, Mapping):
            continue
        name = f"{pair.get('staging')} → {pair.get('final')}"
        dev_s, dev_f = pair.get("staging_dev"), pair.get("final_dev")
        mount_s, mount_f = _mount(pair.get("staging_mount")), _mount(pair.get("final_mount"))
        target_s = mount_s.get("TARGET") if mount_s else None
        target_f = mount_f.get("TARGET") if mount_f else None
        if not isinstance(dev_s, int) or not isinstance(dev_f, int):
            statuses.append(WARN)
            parts.append(f"{name}: could not stat")
        elif dev_s != dev_f:
            statuses.append(FAIL)
            parts.append(f"{name}: different filesystems (device {dev_s} on {target_s or '?'} vs "
                         f"{dev_f} on {target_f or '?'}): rename is not atomic")
        elif target_s and target_f and target_s != target_f:
            statuses.append(FAIL)
            parts.append(f"{name}: same filesystem but different mounts ({target_s} vs {target_f}): "
                         "rename fails across mounts")
        else:
            statuses.append(PASS)
            parts.append(f"{name}: same filesystem (device {dev_s})")
    return AuditRow(10, "same_filesystem", _worst(statuses), "; ".join(parts))


def durable_mount(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    path = str(_disk(facts, "durable").get("path", _args(facts).get("durable", "?")))
    write = facts.get("durable_write")
    write = write if isinstance(write, Mapping) else {}
    mount = _mount(_disk(facts, "durable").get("mount"))
    if not (write.get("written") and write.get("read_back")):
        error = str(write.get("error") or "").strip() or "read back differs"
        return AuditRow(11, "durable_mount", FAIL, f"{path}: write/read test failed: {_first_line(error)}")
    if mount is None:
        return AuditRow(11, "durable_mount", WARN, f"{path}: write/read OK; mount unknown (findmnt failed)")
    target, fstype, source = mount.get("TARGET", "?"), mount.get("FSTYPE", "?"), mount.get("SOURCE", "?")
    detail = f"{path} on {target} ({fstype} {source}): write/read OK"
    ephemeral_root = req.root_is_ephemeral if req.root_is_ephemeral is not None else fstype == "overlay"
    if req.expected_durable_mount is not None and target != req.expected_durable_mount.rstrip("/") and not (
            req.expected_durable_mount == "/" and target == "/"):
        return AuditRow(11, "durable_mount", FAIL, f"{detail}, but it resolves to {target}, "
                                                   f"not the expected {req.expected_durable_mount}")
    if target == "/" and ephemeral_root:
        return AuditRow(11, "durable_mount", FAIL, f"{detail}, but it resolves to the ephemeral root filesystem")
    if not write.get("removed"):
        return AuditRow(11, "durable_mount", WARN, f"{detail}; the probe file {write.get('path')} was not removed")
    if fstype.split(".")[0] in DELAYED_FSTYPES or fstype.startswith("fuse."):
        return AuditRow(11, "durable_mount", WARN, f"{detail}; {fstype}: writes may become visible late")
    return AuditRow(11, "durable_mount", PASS, detail)


def checkpoints_survive(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    if req.ckpt_tier_survives is None:
        return AuditRow(12, "checkpoints_survive", SKIPPED, "no profile tier mapping for the checkpoint mount")
    if req.ckpt_tier_survives:
        return AuditRow(12, "checkpoints_survive", PASS, "the checkpoint tier survives the down action")
    return AuditRow(12, "checkpoints_survive", WARN, "the down action wipes this tier: the local pull will be "
                                                     "the only copy")


# ---- rows 13-16 -----------------------------------------------------------------------------------

def gpu_health_row(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    report = gpu_health.health_from_facts(facts)
    if report.overall == gpu_health.NO_GPU:
        if req.gpus <= 0:
            return AuditRow(13, "gpu_health", PASS, "no GPU (CPU run)")
        return AuditRow(13, "gpu_health", SKIPPED, f"{report.summary()}: nothing to assess (see row 7)")
    return AuditRow(13, "gpu_health", report.overall, report.summary())


def _pids(text: str) -> set[int]:
    return {int(tok) for tok in re.findall(r"\d+", text)}


def vram_holders(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    """§5.1, report only: device holders nvidia-smi does not list, older than 2 min, not daemons or ours.
    Attributable only when nvidia-smi lists a pid at all (inside a PID namespace it usually lists none)."""
    if not facts.get("nvidia_smi"):
        return AuditRow(14, "vram_holders", SKIPPED, "no GPU")
    apps = _result(facts.get("compute_apps"))
    holders = facts.get("device_holders")
    if apps is None or apps[0] != 0 or not isinstance(holders, Mapping):
        return AuditRow(14, "vram_holders", SKIPPED, "compute apps or device holders not queried")
    if holders.get("tool") == "none":
        return AuditRow(14, "vram_holders", SKIPPED, "neither fuser nor lsof on the box")
    listed = _pids(apps[1])
    if not listed:
        return AuditRow(14, "vram_holders", SKIPPED, "nvidia-smi lists no compute pid in this namespace: "
                                                     "holders cannot be attributed")
    candidates = []
    for holder in holders.get("pids") or []:
        if not isinstance(holder, Mapping) or not isinstance(holder.get("pid"), int):
            continue
        pid, age, comm = holder["pid"], holder.get("age_s"), str(holder.get("comm", ""))
        if pid in listed or pid in req.own_pids or comm in req.known_daemons:
            continue
        if isinstance(age, int) and age > HOLDER_MIN_AGE_S:
            candidates.append(f"pid {pid} {comm or '?'} ({age // 60} min)")
    if candidates:
        return AuditRow(14, "vram_holders", WARN, "holding /dev/nvidia* but unknown to nvidia-smi (report only, "
                                                  "never killed): " + ", ".join(candidates))
    return AuditRow(14, "vram_holders", PASS, "none")


def unprobeable_clocks(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    if req.unprobeable_clocks is None:
        return AuditRow(15, "unprobeable_clocks", SKIPPED, "not asked: idle auto-stop, auto-shutdown")
    unknown = sorted(name for name, answer in req.unprobeable_clocks.items() if not answer)
    recorded = ", ".join(f"{k}: {v}" for k, v in sorted(req.unprobeable_clocks.items()) if v)
    if unknown:
        return AuditRow(15, "unprobeable_clocks", WARN, f"unknown: {', '.join(unknown)}"
                        + (f"; recorded {recorded}" if recorded else ""))
    return AuditRow(15, "unprobeable_clocks", PASS, f"recorded {recorded}" if recorded else "nothing to ask")


def clock_skew(facts: Mapping[str, Any]) -> float | None:
    """Seconds between the box's clock and the client's window around the call (0 inside the window;
    the box's `date +%s` truncates, hence one second of slack)."""
    now, sent, received = facts.get("now"), facts.get("client_sent_at"), facts.get("client_received_at")
    if not isinstance(now, int) or not isinstance(sent, int | float) or not isinstance(received, int | float):
        return None
    if now < sent - 1:
        return now - (sent - 1)
    if now > received:
        return now - received
    return 0.0


def baseline(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    boot_id = facts.get("boot_id")
    if not isinstance(boot_id, str) or not boot_id:
        return AuditRow(16, "baseline", WARN, "boot_id unreadable: reboots cannot be detected")
    skew = clock_skew(facts)
    detail = f"boot_id {boot_id}, " + ("clock skew not measured" if skew is None else f"clock skew {skew:+.0f} s")
    if skew is not None and abs(skew) > CLOCK_SKEW_S:
        return AuditRow(16, "baseline", WARN, detail + " (> 60 s: ages computed on the box will be off)")
    return AuditRow(16, "baseline", PASS, detail)


def _worst(statuses: Iterable[str]) -> str:
    return max(statuses, key=lambda s: _RANK[s], default=PASS)

