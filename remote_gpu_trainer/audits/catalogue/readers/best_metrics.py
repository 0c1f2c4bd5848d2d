"""Upstream-style `best_metrics.json` (a legacy cell: `best.pth` + this file, docs/verify.md §5) as a test.

The file is a flat JSON object of metric → number, sometimes with the epoch or step the best checkpoint was
taken at and the split it was selected on. load.py reads it into `Capsule.legacy_metrics`; this turns it into
the metrics.json shape under test id `best_metrics`, so the checks that read tests see its numbers too, with
the disclosure the spec gives a legacy cell: its numbers cannot be re-derived.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import InputProblem, TestArtifacts
from remote_gpu_trainer.audits.catalogue.readers.common import metric_block, number

TEST_ID = "best_metrics"
LEGACY_DISCLOSURE = "legacy cell: no run record or per-item results; not re-derivable"
EPOCH_KEYS = ("epoch", "best_epoch")
STEP_KEYS = ("step", "best_step", "global_step", "iter", "iteration")
# Bookkeeping written beside the metrics, never a metric: the seed and the run's identity and timing.
BOOKKEEPING_KEYS = ("seed", "cell", "run", "run_id", "epochs", "steps", "time", "timestamp", "walltime", "elapsed")


def legacy_test(rel: str, data: Any, sha: str | None) -> tuple[TestArtifacts | None, list[InputProblem]]:
    """The test of a parsed best_metrics.json (`rel` project-relative), or None and why."""
    if not isinstance(data, Mapping):
        return None, [InputProblem(rel, "is not a JSON object of metric -> number")]
    epoch = _position(data, EPOCH_KEYS)
    step = _position(data, STEP_KEYS)
    split = data.get("split") if isinstance(data.get("split"), str) and data.get("split") else "val"
    skip = {*EPOCH_KEYS, *STEP_KEYS, *BOOKKEEPING_KEYS, "split"}
    blocks: dict[str, Any] = {}
    for name, value in data.items():
        value_number = number(value)
        if str(name) in skip or value_number is None:
            continue
        blocks[str(name)] = metric_block(str(name), value_number, int(step) if step is not None else None, epoch)
    if not blocks:
        return None, [InputProblem(rel, "no numeric metric (expected a flat object of metric -> number)")]
    body = {"source": "legacy", "split": split, "epoch": epoch, "step": int(step) if step is not None else None,
            "metrics": blocks, "metric_applicability": "applicable", "disclosure": LEGACY_DISCLOSURE}
    return TestArtifacts(test_id=TEST_ID, metrics_path=rel, metrics=body, metrics_sha256=sha), []


def _position(data: Mapping[str, Any], keys: tuple[str, ...]) -> float | None:
    """The first of `keys` that holds a number (an epoch or a step of the best checkpoint)."""
    for key in keys:
        value = number(data.get(key))
        if value is not None:
            return value
    return None
