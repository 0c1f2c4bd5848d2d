"""The checkpoint-cadence row S94 (docs/log-signatures.md §2, docs/remote-ops.md §10): on a box that can be
preempted, the newest checkpoint older than twice the Young/Daly interval W means a preemption now would cost
more work than the cadence the run's own figures call for."""

from __future__ import annotations

from remote_gpu_trainer.audits.checkpoint_cadence import STALE_FACTOR
from remote_gpu_trainer.audits.log.samples import Hit
from remote_gpu_trainer.audits.rules.common import hit, is_alive
from remote_gpu_trainer.audits.rules.signals import RunSignals


def rule_s94(s: RunSignals) -> list[Hit]:
    """Alive, W known, and the newest checkpoint older than 2 × W."""
    if not is_alive(s) or s.ckpt_interval_s is None or s.newest_ckpt_mtime is None:
        return []
    age = s.now - s.newest_ckpt_mtime
    limit = STALE_FACTOR * s.ckpt_interval_s
    if age <= limit:
        return []
    return hit(s, "S94", f"newest checkpoint {age:.0f} s old, over 2 × W = {limit:.0f} s (Young/Daly W "
                         f"{s.ckpt_interval_s:.0f} s): a preemption now loses that much work")
