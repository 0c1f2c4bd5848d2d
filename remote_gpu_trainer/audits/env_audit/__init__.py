"""Phase-0 environment audit (docs/remote-ops.md §4): pure rows from the environment survey's facts and the run's needs.

The facts are the parsed JSON object that remote/env_survey.sh printed (raw command outputs); this package
parses them (facts.py) and applies the table's thresholds (common.py), one function per row: space.py (rows
1-4), limits.py (5-6), gpu.py (7-8, 13-14), filesystems.py (9-12), clocks.py (15-16); interpreter.py says
which python row 8 checks. It runs nothing and reads nothing, so every threshold can be tested at its
boundary with constructed facts. A `fail` row becomes a finding that must be acknowledged before `run`;
nothing here blocks anything (only teardown is gated).

Rows whose inputs are not in the facts or the requirements (3, 4, 12, 15 when the caller has no estimate)
come back `skipped` with what is missing, never silently absent: the table always has seventeen rows (row 17,
proxy.py: a proxy without no_proxy entries for loopback and the mirrors, docs/remote-ops.md §12).

This module assembles the table and re-exports the names callers use, so `audits.env_audit` stays the one
place to import the audit from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from remote_gpu_trainer.audits.env_audit.clocks import baseline, clock_skew, unprobeable_clocks
from remote_gpu_trainer.audits.env_audit.common import (
    FAIL,
    LOOPBACK,
    NO_LIMIT_BYTES,
    PASS,
    SCRATCH_RESERVE_BYTES,
    SKIPPED,
    SURVEY_VERSION,
    WARN,
    RunRequirements,
    worst_status,
)
from remote_gpu_trainer.audits.env_audit.facts import DfRow, parse_df, parse_findmnt
from remote_gpu_trainer.audits.env_audit.filesystems import (
    checkpoints_survive,
    du_bytes,
    durable_mount,
    hidden_caches,
    same_filesystem,
)
from remote_gpu_trainer.audits.env_audit.gpu import (
    gpu_health_row,
    gpu_inventory,
    gpus,
    torch_facts,
    torch_sees_gpus,
    vram_holders,
)
from remote_gpu_trainer.audits.env_audit.interpreter import Interpreter, command_program, is_python, run_interpreter
from remote_gpu_trainer.audits.env_audit.limits import cpu_limit, cpu_quota, memory_limit, memory_limit_bytes
from remote_gpu_trainer.audits.env_audit.proxy import proxy_row
from remote_gpu_trainer.audits.env_audit.space import (
    checkpoint_budget,
    disk_bytes,
    disk_inodes,
    export_file_count,
    export_inodes,
    kept_checkpoints,
    use_status,
)
from remote_gpu_trainer.views import AuditRow

# The old private spellings, still reached through this module by the tests of the table's boundaries.
_du_bytes = du_bytes
_use_status = use_status

__all__ = [
    "FAIL", "LOOPBACK", "NO_LIMIT_BYTES", "PASS", "SURVEY_VERSION", "SCRATCH_RESERVE_BYTES", "SKIPPED", "WARN",
    "AuditRow",
    "DfRow", "Interpreter", "RunRequirements", "audit_environment", "baseline", "checkpoint_budget",
    "checkpoints_survive", "clock_skew", "command_program", "cpu_limit", "cpu_quota", "disk_bytes", "disk_inodes",
    "du_bytes", "durable_mount", "export_file_count", "export_inodes", "gpu_health_row", "gpu_inventory", "gpus",
    "hidden_caches", "is_python", "kept_checkpoints", "memory_limit", "memory_limit_bytes", "parse_df",
    "parse_findmnt", "proxy_row", "run_interpreter", "same_filesystem", "torch_facts", "torch_sees_gpus",
    "unprobeable_clocks",
    "use_status", "vram_holders", "worst",
]


def audit_environment(facts: Mapping[str, Any], req: RunRequirements) -> list[AuditRow]:
    """All seventeen rows, in table order."""
    if facts.get("version") != SURVEY_VERSION:
        raise ValueError(f"environment facts have version {facts.get('version')!r}, expected {SURVEY_VERSION!r}")
    rows: list[Callable[[Mapping[str, Any], RunRequirements], AuditRow]] = [
        disk_bytes, disk_inodes, checkpoint_budget, export_inodes, memory_limit, cpu_limit, gpus, torch_sees_gpus,
        hidden_caches, same_filesystem, durable_mount, checkpoints_survive, gpu_health_row, vram_holders,
        unprobeable_clocks, baseline, proxy_row]
    return [row(facts, req) for row in rows]


def worst(rows: Iterable[AuditRow]) -> str:
    """The worst status of a table (pass when empty)."""
    return worst_status(r.status for r in rows)
