"""The GPU rows of the environment audit (docs/remote-ops.md §4): 7 (GPUs present and suitable), 8 (torch sees
them), 13 (GPU health) and 14 (VRAM held by processes nvidia-smi does not list)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.audits import gpu_health
from remote_gpu_trainer.audits.env_audit.common import (
    FAIL,
    GPU_BUSY_RATIO,
    HOLDER_MIN_AGE_S,
    PASS,
    SKIPPED,
    WARN,
    RunRequirements,
)
from remote_gpu_trainer.audits.env_audit.facts import args_block, first_line, survey_result
from remote_gpu_trainer.text import size_iec
from remote_gpu_trainer.views import AuditRow


def gpu_inventory(facts: Mapping[str, Any]) -> tuple[list[gpu_health.GpuInfo] | None, str]:
    """(GPUs, "") or (None, why): None with a why that starts "no GPU" is the no-GPU state."""
    if not facts.get("nvidia_smi"):
        return None, "no GPU: nvidia-smi missing"
    result = survey_result(facts.get("gpus"))
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
    memory = ", ".join(sorted({size_iec((g.memory_total_mib or 0) * (1 << 20), 0, 'GiB') for g in found}))
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
    result = survey_result(facts.get("torch"))
    python = str(args_block(facts).get("python", "?"))
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
            except (ValueError, RecursionError):  # a survey answer nested 100,000 deep is no answer
                break
            if isinstance(parsed, dict):
                return parsed, ""
    return None, f"{python} exited {rc}: {first_line(out, 'no output')}"


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
    """`python3 (/usr/bin/python3.11, Python 3.11.2) [why]`: the word the survey ran, what it resolved to,
    and why that interpreter, since a torch version means nothing without whose it is."""
    ran = str(args_block(facts).get("python", "?"))
    parts = []
    executable, version = info.get("executable"), info.get("python")
    if isinstance(executable, str) and executable and executable != ran:
        parts.append(executable)
    if isinstance(version, str) and version:
        parts.append(f"Python {version}")
    label = f"{ran} ({', '.join(parts)})" if parts else ran
    return f"{label} [{req.interpreter_why}]" if req.interpreter_why else label


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
    apps = survey_result(facts.get("compute_apps"))
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
