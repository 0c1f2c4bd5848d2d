"""The percentile bootstrap every VERIFY check shares (V04, V07, V21), as docs/verify.md §2 fixes its stream.

Resample b of n items is row b of `default_rng(seed).integers(0, n, size=(resamples, n), dtype=int32)` (int64
past 2**31 items). The rows are drawn in blocks (`_block_rows`: 32 resamples of 1,000 items), an even number
of rows each: numpy's bounded int32 draws are then the same values as one draw of the whole matrix, so memory
stays bounded (a few MB) whatever n is, and the seed alone fixes every resample. The draw (half the CPU) runs one
chunk ahead on a helper thread (`_drawn_chunks`; numpy's fill releases the GIL) while the main thread counts
and multiplies: the same generator read in order, so the same rows; 10,000 resamples of 1,000 items for 9
comparisons take ~21 ms instead of ~34 ms wall when the second core is free (the same CPU).

A resampled mean is computed as c + counts @ (values − c) / n, where counts[b, i] is how often resample b drew
item i (counted with np.add.at over the block's indices) and c is the sample's first value: the same number as
values[index].mean() but for the rounding of the last bit (exact for whole-number values, and a constant sample
resamples to exactly itself), and one counts block serves every column at once. So V07 resamples all its
comparisons of one item count with one matrix (`resampled_means_many`): they share the seed, hence the rows,
exactly as if each had drawn its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

# One matrix product (resamples × items × columns) at most this big: OpenBLAS runs a product up to
# 4 × 65,536 multiply-adds on one thread (its GEMM_MULTITHREAD_THRESHOLD) and starts its thread pool above it,
# which cost 2-10x more CPU than it saved on a busy 2-core machine. A block of 32 resamples of 1,000 items, its
# columns 8 at a time, also keeps the block's counts in cache.
BLOCK_PRODUCT = 1 << 18
COLUMNS_PER_PRODUCT = 8
MAX_BLOCK_ROWS = 1024
# Indices drawn per call of the generator (2 MB of int32, 512 resamples of 1,000 items): big enough that a
# hand-over costs little, small enough that the first chunk (drawn before any counting) is a short wait.
DRAW_CHUNK = 1 << 19


def _block_rows(n: int) -> int:
    """Resamples per block: even (the int32 stream then matches one whole draw), at least 2."""
    return max(2, min(MAX_BLOCK_ROWS, BLOCK_PRODUCT // (max(n, 1) * COLUMNS_PER_PRODUCT)) & ~1)


def resampled_means_many(columns: Any, resamples: int, rng: Any) -> Any:
    """(resamples, k) means of the k columns of the (n, k) array `columns`, every column resampled with the
    same index rows drawn from `rng` (a numpy Generator)."""
    import numpy as np

    values = np.asarray(columns, dtype=float)
    n, k = values.shape
    if n == 0 or resamples <= 0:
        return np.full((max(resamples, 0), k), np.nan)
    centre = values[0]  # a value of the sample: a constant sample resamples to exactly itself, ties stay ties
    values = values - centre
    dtype = np.int32 if n < 2**31 else np.int64
    rows = _block_rows(n)
    width = max(1, BLOCK_PRODUCT // (rows * n))  # columns per product
    parts = [np.ascontiguousarray(values[:, first:first + width]) for first in range(0, k, width)]
    sums = [np.empty((resamples, part.shape[1])) for part in parts]
    for first, chunk in _drawn_chunks(rng, n, resamples, rows, dtype):
        for offset in range(0, len(chunk), rows):
            start, count = first + offset, min(rows, len(chunk) - offset)
            drawn = np.zeros(count * n)  # counts as floats, ready for the product; add.at beat bincount 7x here
            np.add.at(drawn, chunk[offset:offset + count].ravel(), 1.0)
            drawn = drawn.reshape(count, n)
            for part, out in zip(parts, sums, strict=True):
                np.matmul(drawn, part, out=out[start:start + count])
    return centre + np.concatenate(sums, axis=1) / n


def _drawn_chunks(rng: Any, n: int, resamples: int, rows: int, dtype: Any) -> Iterator[tuple[int, Any]]:
    """(first resample, positions) of the whole draw in order, in chunks of whole blocks drawn from `rng` one
    chunk ahead by one helper thread: numpy's bounded integer fill releases the GIL, so the next chunk is drawn
    on the other core while this one is counted (half the bootstrap's CPU, docs/verify.md §2). One generator,
    read in order by one thread: the rows are exactly those of one whole draw. A position is where an index
    falls in its block's counts, row by row (index + n × its row in the block), added on the helper too."""
    import numpy as np

    step = max(rows, DRAW_CHUNK // max(n, 1) // rows * rows)
    flat = dtype if rows * n < 2**31 else np.int64
    offsets = (np.arange(step, dtype=flat) % rows * n)[:, None]

    def draw(first: int) -> tuple[int, Any]:
        index = rng.integers(0, n, size=(min(step, resamples - first), n), dtype=dtype).astype(flat, copy=False)
        index += offsets[:len(index)]
        return first, index

    starts = range(0, resamples, step)
    if len(starts) < 2:  # one chunk: nothing to overlap with
        yield from (draw(first) for first in starts)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rgt-bootstrap") as pool:
        ahead = pool.submit(draw, starts[0])
        for first in starts[1:]:
            drawn = ahead.result()
            ahead = pool.submit(draw, first)
            yield drawn
        yield ahead.result()


def resampled_means(x: Any, resamples: int, rng: Any) -> Any:
    """`resamples` means of `x` resampled with replacement, drawn from `rng`."""
    import numpy as np

    return resampled_means_many(np.asarray(x, dtype=float).reshape(-1, 1), resamples, rng)[:, 0]


def mean_ci(x: Any, resamples: int, rng_seed: int) -> tuple[float, float]:
    """95 % percentile CI of mean(x)."""
    return mean_cis([x], resamples, rng_seed)[0]


def mean_cis(samples: Sequence[Any], resamples: int, rng_seed: int) -> list[tuple[float, float]]:
    """The 95 % percentile CI of the mean of each sample, each exactly as `mean_ci` computes it alone (its own
    generator from `rng_seed`): samples of one length share the generator's rows, so they are resampled
    together with one index matrix, drawn once per length."""
    import numpy as np

    arrays = [np.asarray(x, dtype=float).ravel() for x in samples]
    cis: list[tuple[float, float]] = [(float("nan"), float("nan"))] * len(arrays)
    by_length: dict[int, list[int]] = {}
    for position, array in enumerate(arrays):
        by_length.setdefault(array.size, []).append(position)
    for n, positions in by_length.items():
        columns = np.stack([arrays[p] for p in positions], axis=1) if n else np.empty((0, len(positions)))
        means = resampled_means_many(columns, resamples, np.random.default_rng(rng_seed))
        low, high = np.percentile(means, [2.5, 97.5], axis=0)
        for column, position in enumerate(positions):
            cis[position] = (float(low[column]), float(high[column]))
    return cis


def difference_ci(x: Any, y: Any, resamples: int, rng_seed: int) -> tuple[float, float]:
    """95 % percentile CI of mean(x) − mean(y) when x and y are resampled each on its own (unpaired)."""
    import numpy as np

    rng = np.random.default_rng(rng_seed)
    means = resampled_means(x, resamples, rng) - resampled_means(y, resamples, rng)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)
