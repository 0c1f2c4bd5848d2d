"""Watcher rules over a run's process, host, metric and GPU signals (docs/log-signatures.md §2 rows S58–S93, §3).

Why pure: the services gather facts every few seconds and hand them over in one `RunSignals` (signals.py);
each catalogue row is a small function of that snapshot, so a row can be tested with a hand-built scenario
and a caller can run any subset (registry.py). Nothing here does I/O or imports UI (docs/architecture.md §2).

One module per row family: proc.py (S58–S65, and §3.1 liveness refined), host.py (S66–S69), loss.py
(S70–S74 and the §3.2 spike math), metric.py (S75–S85), gpu.py (S86–S93); common.py and gpu_window.py
hold the tail scans and the §3.4 GPU windows they share. Samples are grouped by key once per `RunSignals`;
only the order *within* a key matters, so a caller may pass per-key windows concatenated (`samples`) or
the mapping itself (`series`).

Why rows may stay silent: a rule fires only on positive evidence. A missing input (None, an empty series)
means "unknown", never "bad"; the alert layer must not raise an alarm out of a gap in what was gathered.

This package re-exports the entry points so that callers import `remote_gpu_trainer.audits.rules`.
"""

from remote_gpu_trainer.audits.rules.loss import LossPoint, is_spike, replay_loss, robust_stats, spike_z
from remote_gpu_trainer.audits.rules.proc import effective_liveness
from remote_gpu_trainer.audits.rules.registry import RULES, evaluate
from remote_gpu_trainer.audits.rules.signals import (
    ClaimedSave,
    ComputeApp,
    ComputeSnapshot,
    DiskUsage,
    FinalMetric,
    GpuReading,
    MemorySample,
    RunSignals,
    WatchedFile,
    derive_t_log,
    signals_from_look,
)

__all__ = [
    "RULES", "ClaimedSave", "ComputeApp", "ComputeSnapshot", "DiskUsage", "FinalMetric", "GpuReading", "LossPoint",
    "MemorySample", "RunSignals", "WatchedFile", "derive_t_log", "effective_liveness", "evaluate", "is_spike",
    "replay_loss", "robust_stats", "signals_from_look", "spike_z",
]
