"""Which parsed samples are stored: a dense series downsampled on the way in (docs/architecture.md §5).

A trainer that logs every step writes millions of samples; storing each one was the largest cost of
following a log (one SQLite row each) and the state database grew with the log. Nothing reads every stored
sample: the stateful rules read the monitor's in-memory windows, and what is stored serves a restarted rgt
(its first and newest windows, the loss chart). So per key (and per roster cell):

- the first `head` samples are stored as they came (the rules' first window, S72/S75/S81, and every sample
  of a short run);
- after them the samples fall into consecutive buckets of `bucket` samples, and a closed bucket stores only
  its minimum, its maximum, its first non-finite sample and its last sample (in arrival order, each once):
  a spike is some bucket's maximum, a plateau or a dip its minimum, a NaN/inf its first non-finite, and
  the series always ends on its true last point;
- after every `level` closed buckets the bucket size doubles, so a log ten times longer stores only a few
  thousand rows more per key (the count grows with the logarithm of the length, never with the length).

A bucket still open holds four samples of aggregates, never its samples: memory is constant per key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from remote_gpu_trainer.audits.log.samples import Sample

HEAD = 2000  # stored as they came: the monitor's SERIES_WINDOW, so a short run is stored exactly
BUCKET = 64  # samples per bucket once the head is full
LEVEL = 1000  # closed buckets before the bucket size doubles

Kept = tuple[int, Sample]  # (arrival index within the key, the sample)


@dataclass
class _Bucket:
    """The aggregates of one open bucket: the sample at each extreme, the first non-finite, the last."""

    size: int
    count: int = 0
    first_t: float = 0.0  # when its first sample was read
    low: Kept | None = None
    high: Kept | None = None
    bad: Kept | None = None
    last: Kept | None = None

    def take(self, part: Sequence[Sample], first_index: int) -> None:
        """Merge consecutive samples (arrival indexes from `first_index`) into the aggregates."""
        values = [s.value for s in part]
        if all(map(math.isfinite, values)):
            finite = values
        else:
            bad_at = next(i for i, v in enumerate(values) if not math.isfinite(v))
            if self.bad is None:
                self.bad = (first_index + bad_at, part[bad_at])
            finite = [v if math.isfinite(v) else math.nan for v in values]
        low_at = _index_of(finite, min)
        high_at = _index_of(finite, max)
        if low_at is not None and (self.low is None or part[low_at].value < self.low[1].value):
            self.low = (first_index + low_at, part[low_at])
        if high_at is not None and (self.high is None or part[high_at].value > self.high[1].value):
            self.high = (first_index + high_at, part[high_at])
        if not self.count:
            self.first_t = part[0].t
        self.last = (first_index + len(part) - 1, part[-1])
        self.count += len(part)

    def rows(self) -> list[Sample]:
        """The kept samples in arrival order, each once."""
        kept = dict(pick for pick in (self.low, self.high, self.bad, self.last) if pick is not None)
        return [kept[index] for index in sorted(kept)]


def _index_of(values: list[float], pick: Callable[[list[float]], float]) -> int | None:
    """Index of the smallest/largest finite value (NaN stands in for the non-finite ones); None if none."""
    clean = [v for v in values if v == v]
    return values.index(pick(clean)) if clean else None


def by_key(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    """Samples grouped per key, arrival order kept within each (one pass shared by the monitor's windows
    and the thinner)."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        group = groups.get(sample.key)
        if group is None:
            group = groups[sample.key] = []
        group.append(sample)
    return groups


@dataclass
class _KeyState:
    """What the thinner keeps per series key: how many samples it has seen, the buckets closed at the current size,
    and the bucket being filled."""

    seen: int = 0
    closed: int = 0  # buckets closed at the current size
    bucket: _Bucket = field(default_factory=lambda: _Bucket(BUCKET))


class SeriesThinner:
    """Per key: which of the samples fed so far go to storage (see the module docstring)."""

    def __init__(self, head: int = HEAD, bucket: int = BUCKET, level: int = LEVEL) -> None:
        self.head, self.bucket, self.level = head, bucket, level
        self._keys: dict[str, _KeyState] = {}

    def add(self, samples: Iterable[Sample] | Mapping[str, list[Sample]]) -> list[Sample]:
        """The samples to store now, in arrival order within each key (keys grouped, in first-seen order);
        `samples` may be grouped already (by_key)."""
        groups = samples if isinstance(samples, Mapping) else by_key(samples)
        rows: list[Sample] = []
        for key, group in groups.items():
            rows.extend(self._add_key(key, group))
        return rows

    def _add_key(self, key: str, samples: list[Sample]) -> list[Sample]:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _KeyState(bucket=_Bucket(self.bucket))
        rows: list[Sample] = []
        start = max(0, min(len(samples), self.head - state.seen))
        rows.extend(samples[:start])
        state.seen += start
        while start < len(samples):
            bucket = state.bucket
            end = min(len(samples), start + bucket.size - bucket.count)
            bucket.take(samples[start:end], state.seen)
            state.seen += end - start
            start = end
            if bucket.count == bucket.size:
                rows.extend(bucket.rows())
                state.closed += 1
                size = bucket.size
                if state.closed == self.level:
                    size, state.closed = size * 2, 0
                state.bucket = _Bucket(size)
        return rows

    def resume(self, stored: Mapping[str, int]) -> None:
        """After a restart: keys with `stored` rows already in this cell have used that much of their head
        (rows past the head are buckets' picks, so a full head stays full and is not stored again)."""
        for key, count in stored.items():
            self._keys[key] = _KeyState(seen=min(count, self.head), bucket=_Bucket(self.bucket))

    def flush(self, opened_before: float | None = None) -> list[Sample]:
        """Close the open buckets (all of them: the cell ended or rgt is closing; or those whose first sample
        was read before `opened_before`, so a slow log's samples reach storage soon): their rows."""
        rows: list[Sample] = []
        for state in self._keys.values():
            bucket = state.bucket
            if bucket.count and (opened_before is None or bucket.first_t < opened_before):
                rows.extend(state.bucket.rows())
                state.bucket = _Bucket(state.bucket.size)
        return rows

    def pending(self) -> int:
        """Samples fed but not yet represented in storage (in open buckets)."""
        return sum(state.bucket.count for state in self._keys.values())
