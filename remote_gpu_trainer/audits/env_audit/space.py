"""Rows 1-4 of the environment audit (docs/remote-ops.md §4): disk bytes, inodes, the checkpoint budget and the
export's inodes, plus the counts rows 3 and 4 need from the caller."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from remote_gpu_trainer.audits.env_audit.common import (
    BUDGET_PASS_RATIO,
    EXPORT_PER_TEST_CAP,
    FAIL,
    PASS,
    SCRATCH_RESERVE_BYTES,
    SKIPPED,
    TOP_K_CAP,
    USE_FAIL_PCT,
    USE_WARN_PCT,
    WARN,
    RunRequirements,
    worst_status,
)
from remote_gpu_trainer.audits.env_audit.facts import df_of, disk_block
from remote_gpu_trainer.text import gib
from remote_gpu_trainer.views import AuditRow


def kept_checkpoints(concurrent_cells: int, top_k: int, *, pruning: bool = True, queued_cells: int = 0) -> int:
    """Checkpoints on disk at once: best + resume anchor + top-k (≤ 3) per running cell, or per queued
    cell when pruning is off (nothing is ever deleted, so every cell's set accumulates)."""
    per_cell = 2 + min(max(top_k, 0), TOP_K_CAP)
    cells = concurrent_cells if pruning else max(queued_cells, concurrent_cells)
    return per_cell * cells


def export_file_count(required_files: int, tests: Iterable[tuple[int, int, int]]) -> int:
    """Files an export writes: required files + Σ min(100, N_test) × conditions × roles (row 4)."""
    return required_files + sum(min(EXPORT_PER_TEST_CAP, n) * conditions * roles for n, conditions, roles in tests)


def use_status(pct: float) -> str:
    if pct >= USE_FAIL_PCT:
        return FAIL
    return WARN if pct >= USE_WARN_PCT else PASS


def _roles(facts: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(role, str(disk_block(facts, role).get("path", "?"))) for role in ("scratch", "durable")]


def disk_bytes(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    statuses, parts = [], []
    for role, path in _roles(facts):
        row, why = df_of(facts, role, "bytes")
        if row is None or row.used_pct() is None:
            statuses.append(FAIL)
            parts.append(f"{role} {path}: {why or 'size not reported'}")
            continue
        pct = row.used_pct()
        assert pct is not None
        free = row.avail or 0
        tiny = free < SCRATCH_RESERVE_BYTES  # a small disk nearly empty is still small: percent alone passed 0 B
        statuses.append(worst_status([use_status(pct), WARN if tiny else PASS]))  # row 3 fails what cannot fit
        parts.append(f"{role} {path} on {row.target}: {pct:.1f}% used, {gib(free)} free"
                     + (f" (under {gib(SCRATCH_RESERVE_BYTES)})" if tiny else ""))
    return AuditRow(1, "disk_bytes", worst_status(statuses), "; ".join(parts))


def disk_inodes(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    statuses, parts = [], []
    for role, path in _roles(facts):
        row, why = df_of(facts, role, "inodes")
        if row is None:
            statuses.append(FAIL)
            parts.append(f"{role} {path}: {why}")
            continue
        pct = row.used_pct()
        if pct is None:
            statuses.append(WARN)
            parts.append(f"{role} {path} on {row.target}: inodes not reported (-)")
            continue
        statuses.append(use_status(pct))
        parts.append(f"{role} {path} on {row.target}: {pct:.1f}% of inodes used, {row.avail:,} free")
    return AuditRow(2, "disk_inodes", worst_status(statuses), "; ".join(parts))


def checkpoint_budget(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    """B = ckpt_bytes × kept + data cache + logs + 2 GB against what the durable mount has free."""
    if req.ckpt_bytes is None or req.kept is None:
        return AuditRow(3, "checkpoint_budget", SKIPPED, "no checkpoint size estimate or kept count")
    row, why = df_of(facts, "durable", "bytes")
    if row is None or row.avail is None:
        return AuditRow(3, "checkpoint_budget", FAIL, f"durable free space unknown: {why or 'not reported'}")
    need = req.ckpt_bytes * req.kept + req.data_cache_bytes + req.log_bytes + SCRATCH_RESERVE_BYTES
    source = f" ({req.ckpt_source})" if req.ckpt_source else ""
    detail = (f"B = {gib(req.ckpt_bytes)}{source} × {req.kept} + scratch {gib(need - req.ckpt_bytes * req.kept)} "
              f"= {gib(need)} vs {gib(row.avail)} free on {row.target}")
    if need <= BUDGET_PASS_RATIO * row.avail:
        return AuditRow(3, "checkpoint_budget", PASS, detail)
    if need <= row.avail:
        return AuditRow(3, "checkpoint_budget", WARN, detail + " (over 80% of it)")
    return AuditRow(3, "checkpoint_budget", FAIL, detail + " (does not fit)")


def export_inodes(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    if req.export_files is None:
        return AuditRow(4, "export_inodes", SKIPPED, "no export file count (required files and tests unknown)")
    row, why = df_of(facts, "durable", "inodes")
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
