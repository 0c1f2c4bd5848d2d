"""The stored series of a dense log (audits/log/thinning.py): what the rules and the loss chart need survives
(a spike, a NaN, the last point, every bucket's minimum) and the row count stays bounded, counted exactly."""

from __future__ import annotations

import math

from remote_gpu_trainer.audits.log.samples import Sample
from remote_gpu_trainer.audits.log.thinning import SeriesThinner, by_key


def loss(step: int, value: float, t: float = 0.0) -> Sample:
    return Sample(t, step, None, "loss", value, "kv")


def test_a_short_series_is_stored_exactly_as_it_came() -> None:
    thinner = SeriesThinner(head=10, bucket=4, level=2)
    samples = [loss(i, 1.0 / (i + 1)) for i in range(10)]
    assert thinner.add(samples) == samples
    assert thinner.flush() == [] and thinner.pending() == 0


def test_each_bucket_keeps_its_minimum_maximum_first_non_finite_and_last_in_arrival_order() -> None:
    thinner = SeriesThinner(head=2, bucket=5, level=100)
    values = [9.0, 8.0,  # the head
              3.0, 1.0, 50.0, 2.0, 2.5,  # bucket 1: a spike at step 4
              2.0, math.nan, 0.5, math.inf, 1.5,  # bucket 2: NaN first, inf later, minimum 0.5
              1.4, 1.3]  # still open
    rows = thinner.add([loss(i, v) for i, v in enumerate(values)])
    assert [(r.step, r.value) for r in rows if math.isfinite(r.value)] == [
        (0, 9.0), (1, 8.0), (3, 1.0), (4, 50.0), (6, 2.5), (7, 2.0), (9, 0.5), (11, 1.5)]
    assert [r.step for r in rows if math.isnan(r.value)] == [8]  # the first non-finite; inf at 10 is not first
    assert thinner.pending() == 2
    assert [(r.step, r.value) for r in thinner.flush()] == [(12, 1.4), (13, 1.3)]  # max; min and last: one row
    assert thinner.pending() == 0


def test_samples_fed_in_pieces_are_thinned_as_if_fed_at_once() -> None:
    values = [math.sin(i * 0.37) * (3.0 if i == 517 else 1.0) for i in range(2_000)]
    whole = SeriesThinner(head=100, bucket=16, level=10)
    pieces = SeriesThinner(head=100, bucket=16, level=10)
    expected = whole.add([loss(i, v) for i, v in enumerate(values)]) + whole.flush()
    got: list[Sample] = []
    for start in range(0, len(values), 37):
        got += pieces.add([loss(i, values[i]) for i in range(start, min(start + 37, len(values)))])
    assert got + pieces.flush() == expected
    assert max(expected, key=lambda s: s.value).step == 517  # the spike (3 × the sine's peak) survives


def test_keys_are_thinned_apart_and_grouping_keeps_arrival_order() -> None:
    mixed = [Sample(0.0, i, None, key, float(i), "kv") for i in range(6) for key in ("loss", "lr")]
    assert [s.step for s in by_key(mixed)["lr"]] == list(range(6))
    thinner = SeriesThinner(head=3, bucket=3, level=10)
    rows = thinner.add(mixed)
    assert [(s.key, s.step) for s in rows] == [("loss", 0), ("loss", 1), ("loss", 2), ("loss", 3), ("loss", 5),
                                               ("lr", 0), ("lr", 1), ("lr", 2), ("lr", 3), ("lr", 5)]


def test_a_million_sample_series_stores_14114_rows_and_holds_nothing_back() -> None:
    """Defaults: 2,000 as they came, then buckets of 64, 128, 256, 512 (1,000 each) and 1,024: three rows each."""
    thinner = SeriesThinner()
    stored = 0
    for start in range(0, 1_000_000, 10_000):
        stored += len(thinner.add([loss(i, float(i % 5)) for i in range(start, start + 10_000)]))
        assert thinner.pending() < 1024  # memory: an open bucket's aggregates, never its samples
    stored += len(thinner.flush())
    assert stored == 2_000 + 3 * (4 * 1_000 + 37) + 3 == 14_114  # 112 samples left in the last bucket
    assert thinner.pending() == 0


def test_a_restarted_thinner_does_not_store_a_full_head_again() -> None:
    thinner = SeriesThinner(head=4, bucket=2, level=10)
    thinner.resume({"loss": 9})  # 9 rows already stored in this cell: the head is used up
    assert [(s.step, s.value) for s in thinner.add([loss(10, 1.0), loss(11, 0.5)])] == [(10, 1.0), (11, 0.5)]
    thinner.resume({"loss": 1})
    assert len(thinner.add([loss(i, 1.0) for i in range(3)])) == 3  # three head places were left
