"""Rows 15-16 of the environment audit (docs/remote-ops.md §4): the clocks no survey can see (asked of the user),
and the baseline a later check compares against (boot id, clock skew)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.audits.env_audit.common import CLOCK_SKEW_S, PASS, SKIPPED, WARN, RunRequirements
from remote_gpu_trainer.views import AuditRow


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
