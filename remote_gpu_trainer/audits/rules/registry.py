"""Every watcher row by id, in row order, and `evaluate` to run all of them or a subset over one snapshot."""

from __future__ import annotations

from collections.abc import Callable, Collection

from remote_gpu_trainer.audits.log.samples import Hit
from remote_gpu_trainer.audits.rules import cadence, gpu, host, loss, metric, proc
from remote_gpu_trainer.audits.rules.signals import RunSignals

RULES: dict[str, Callable[[RunSignals], list[Hit]]] = {
    "S58": proc.rule_s58, "S59": proc.rule_s59, "S60": proc.rule_s60, "S61": proc.rule_s61, "S62": proc.rule_s62,
    "S63": proc.rule_s63, "S64": proc.rule_s64, "S65": proc.rule_s65,
    "S66": host.rule_s66, "S67": host.rule_s67, "S68": host.rule_s68, "S69": host.rule_s69,
    "S70": loss.rule_s70, "S71": loss.rule_s71, "S72": loss.rule_s72, "S73": loss.rule_s73, "S74": loss.rule_s74,
    "S75": metric.rule_s75, "S76": metric.rule_s76, "S77": metric.rule_s77, "S78": metric.rule_s78,
    "S79": metric.rule_s79, "S80": metric.rule_s80, "S81": metric.rule_s81, "S82": metric.rule_s82,
    "S83": metric.rule_s83, "S84": metric.rule_s84, "S85": metric.rule_s85,
    "S86": gpu.rule_s86, "S87": gpu.rule_s87, "S88": gpu.rule_s88, "S89": gpu.rule_s89, "S90": gpu.rule_s90,
    "S91": gpu.rule_s91, "S92": gpu.rule_s92, "S93": gpu.rule_s93,
    "S94": cadence.rule_s94,
}


def evaluate(signals: RunSignals, only: Collection[str] | None = None) -> list[Hit]:
    """Every row (or the named ones) over one snapshot, in row order. Unknown row ids are a caller bug."""
    if only is not None:
        unknown = sorted(set(only) - set(RULES))
        if unknown:
            raise ValueError(f"unknown rule id(s): {', '.join(unknown)}")
    hits: list[Hit] = []
    for row, rule in RULES.items():
        if only is None or row in only:
            hits += rule(signals)
    return hits
