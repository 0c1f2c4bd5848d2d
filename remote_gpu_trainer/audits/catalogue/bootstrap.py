"""The percentile bootstrap every VERIFY check shares (V04, V07, V21): resamples drawn in chunks of index rows
with numpy's default_rng(seed), so memory stays bounded at CHUNK × n and no Python loop runs per resample."""

from __future__ import annotations

from typing import Any

CHUNK = 2000  # resamples drawn at a time


def resampled_means(x: Any, resamples: int, rng: Any) -> Any:
    """`resamples` means of `x` resampled with replacement, drawn from `rng` (a numpy Generator). Indices are
    int32 when they fit: drawing them is most of the cost, and int32 halves it."""
    import numpy as np

    values = np.asarray(x, dtype=float)
    dtype = np.int32 if values.size < 2**31 else np.int64
    means = []
    for start in range(0, resamples, CHUNK):
        index = rng.integers(0, values.size, size=(min(CHUNK, resamples - start), values.size), dtype=dtype)
        means.append(values[index].mean(axis=1))
    return np.concatenate(means) if means else np.empty(0)


def mean_ci(x: Any, resamples: int, rng_seed: int) -> tuple[float, float]:
    """95 % percentile CI of mean(x)."""
    import numpy as np

    low, high = np.percentile(resampled_means(x, resamples, np.random.default_rng(rng_seed)), [2.5, 97.5])
    return float(low), float(high)


def difference_ci(x: Any, y: Any, resamples: int, rng_seed: int) -> tuple[float, float]:
    """95 % percentile CI of mean(x) − mean(y) when x and y are resampled each on its own (unpaired)."""
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    means = resampled_means(x, resamples, rng) - resampled_means(y, resamples, rng)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)
