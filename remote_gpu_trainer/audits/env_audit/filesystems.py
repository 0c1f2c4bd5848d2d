"""Rows 9-12 of the environment audit (docs/remote-ops.md §4): hidden caches, staging and final directories on one
filesystem, the durable mount, and whether the checkpoint tier survives the down action."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.audits.env_audit.common import (
    CACHE_SHARE_OF_SCRATCH,
    DELAYED_FSTYPES,
    FAIL,
    PASS,
    SKIPPED,
    WARN,
    RunRequirements,
    worst_status,
)
from remote_gpu_trainer.audits.env_audit.facts import (
    args_block,
    df_of,
    disk_block,
    first_line,
    mount_of,
    parse_df,
    survey_result,
)
from remote_gpu_trainer.text import gib
from remote_gpu_trainer.views import AuditRow


def du_bytes(value: Any) -> tuple[int | None, bool]:
    """(bytes, complete): du's total even when it exited 1 on an unreadable subdirectory."""
    result = survey_result(value)
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
        size, complete = du_bytes(cache.get("du"))
        total += size or 0
        path = str(cache.get("path"))
        resolved = str(cache.get("resolved", path))
        where = path if resolved == path else f"{path} → {resolved}"
        parts.append(f"{where} {gib(size) if size is not None else '?'}")
        if not complete:
            partial.append(path)
        df = survey_result(cache.get("df"))
        fs = parse_df(df[1]) if df and df[0] == 0 else None
        if fs is not None and fs.total is not None and fs.total <= req.capped_tier_bytes:
            capped.append(f"{path} on {fs.target} ({gib(fs.total)} filesystem)")
    scratch, _ = df_of(facts, "scratch", "bytes")
    detail = f"{gib(total)} in caches: " + ", ".join(parts)
    if partial:
        detail += f" (du incomplete for {', '.join(partial)})"
    warnings = []
    if capped:
        warnings.append("on a capped tier: " + "; ".join(capped))
    if scratch is not None and scratch.total and total > CACHE_SHARE_OF_SCRATCH * scratch.total:
        warnings.append(f"over 30% of {scratch.target} ({gib(scratch.total)})")
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
        mount_s, mount_f = mount_of(pair.get("staging_mount")), mount_of(pair.get("final_mount"))
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
    return AuditRow(10, "same_filesystem", worst_status(statuses), "; ".join(parts))


def durable_mount(facts: Mapping[str, Any], req: RunRequirements) -> AuditRow:
    path = str(disk_block(facts, "durable").get("path", args_block(facts).get("durable", "?")))
    write = facts.get("durable_write")
    write = write if isinstance(write, Mapping) else {}
    mount = mount_of(disk_block(facts, "durable").get("mount"))
    if not (write.get("written") and write.get("read_back")):
        error = str(write.get("error") or "").strip() or "read back differs"
        return AuditRow(11, "durable_mount", FAIL, f"{path}: write/read test failed: {first_line(error)}")
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
