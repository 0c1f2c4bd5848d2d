"""A reported number's per-seed values and the aggregates every check and the report agree on
(docs/verify.md §2, section B)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from remote_gpu_trainer.audits.catalogue.model import Capsule, EvidenceRef, Number, ProjectEvidence, TestArtifacts


@dataclass(frozen=True)
class SeedValue:
    """One seed's value of a reported number with the capsule and test it came from, so a check can cite the metrics
    file (`ref`)."""

    capsule: Capsule
    test: TestArtifacts
    value: float

    @property
    def ref(self) -> EvidenceRef:
        return EvidenceRef(self.test.metrics_path, self.test.metrics_sha256)


def seed_values(project: ProjectEvidence, number: Number) -> list[SeedValue]:
    """The finite values of `number.metric` in each of its cells' `test/<test_id>/metrics.json`, in cell order;
    a cell without the file or the value contributes nothing (a check counting seeds sees it missing), and
    neither does a cell the box recorded as failed or never started (`Capsule.outcome`)."""
    found: list[SeedValue] = []
    for key in number.cells:
        capsule = project.capsule(key)
        if capsule is not None and capsule.outcome is not None:
            continue
        test = capsule.tests.get(number.test_id) if capsule is not None else None
        value = test.metric_value(number.metric) if test is not None else None
        if capsule is not None and test is not None and value is not None and math.isfinite(value):
            found.append(SeedValue(capsule, test, value))
    return found


def mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def sample_std(values: list[float]) -> float | None:
    """Sample standard deviation (ddof = 1); None for fewer than two values."""
    return statistics.stdev(values) if len(values) >= 2 else None


def iqm(values: list[float]) -> float:
    """Interquartile mean: scipy's trim_mean with 25 % cut from each end (IQM([1, 2, 3, 4, 100]) = 3.0)."""
    from scipy.stats import trim_mean

    return float(trim_mean(values, 0.25))


def aggregate(number: Number, values: list[float]) -> float | None:
    """The number as its EVIDENCE row aggregates it: mean over seeds (default), IQM, or the single value."""
    if not values:
        return None
    if number.aggregate == "iqm_over_seeds":
        return iqm(values)
    if number.aggregate == "single":
        return values[0]
    return mean(values)


def left_out(project: ProjectEvidence, number: Number) -> list[str]:
    """`<run>/<cell> <outcome>` for each of the number's cells left out because it failed or never started."""
    capsules = [project.capsule(key) for key in number.cells]
    return [f"{c.key} {c.outcome}" for c in capsules if c is not None and c.outcome is not None]
