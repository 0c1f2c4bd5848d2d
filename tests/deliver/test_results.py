"""Results first (docs/deliver.md §8), the pure part: capsules written to disk by tests/support/capsules.py, read
back by deliver/results.py with the json and csv modules, aggregated exactly as VERIFY aggregates a number; and
the meter's window arithmetic that costs a run (audits/meter.cost_between, shared_pieces).

The numbers are chosen to be exact in binary (0.5, 0.75, 1.0 have mean 0.75 and sample std 0.25), so every
assertion is an equality, never an approximation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remote_gpu_trainer.audits.catalogue.model import MetricRule
from remote_gpu_trainer.audits.meter import BillingModel, Interval, accrue, cost_between, shared_pieces
from remote_gpu_trainer.deliver.results import capsule_window, read_cells, result_rows, tracker_urls
from remote_gpu_trainer.views import ResultRowView
from support.capsules import write_capsule, write_csv, write_json
from support.results import three_seeds


def rows_of(root: Path, declared: dict[str, MetricRule] | None = None) -> dict[str, tuple[ResultRowView, ...]]:
    return result_rows(read_cells(root), declared)


def test_three_seeds_give_exact_mean_std_n_direction_best_and_last(tmp_path: Path) -> None:
    three_seeds(tmp_path)
    acc, err = rows_of(tmp_path)["r1"]
    assert acc == ResultRowView(
        test_id="main", split="test", metric="acc", direction="higher_is_better", unit=None, mean=0.75, std=0.25,
        seeds=3, n=4, cells=("r1/seed0", "r1/seed1", "r1/seed2"), curve="val/acc", best=0.75, last=0.625, note="",
        sources=tuple(f"runs/r1/seed{i}/test/main/metrics.json" for i in range(3)), source="capsule")
    assert acc.arrow == "↑"
    # err: 0.5, 0.25, 0.0 (↓); no val/err column, so best and last are the loss curve's (lowest is best)
    assert (err.metric, err.direction, err.arrow, err.mean, err.std) == ("err", "lower_is_better", "↓", 0.25, 0.25)
    assert (err.curve, err.best, err.last) == ("loss", 1.0, 1.5)  # mean of lows 0.5, 1.0, 1.5; of lasts .75, 1.5, 2.25


def test_one_seed_has_no_std_and_a_metric_nobody_knows_has_no_direction_and_no_best(tmp_path: Path) -> None:
    write_capsule(tmp_path, "solo", "seed0", metrics={"zorp": 3.5}, directions={"zorp": "whatever"}, n=7,
                  train=[{"step": 1, "loss": 2.0, "val/zorp": 1.0}, {"step": 2, "loss": 1.0, "val/zorp": 2.0}])
    (row,) = rows_of(tmp_path)["solo"]
    assert (row.mean, row.std, row.seeds, row.n) == (3.5, None, 1, 7)
    assert (row.direction, row.arrow, row.curve, row.best, row.last) == (None, "?", "val/zorp", None, 2.0)
    declared = {"zorp": MetricRule("zorp", "min")}  # rgt.toml [metrics] says which way is better
    (known,) = rows_of(tmp_path, declared)["solo"]
    assert (known.direction, known.best, known.last) == ("lower_is_better", 1.0, 2.0)


def test_a_run_folder_without_metrics_gives_no_rows_and_a_nan_value_is_not_a_seed(tmp_path: Path) -> None:
    write_capsule(tmp_path, "empty", "seed0")  # run.json, config, train.csv: no test metrics
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.5})
    write_capsule(tmp_path, "r", "seed1", metrics={"acc": 0.5})
    metrics = tmp_path / "runs" / "r" / "seed1" / "test" / "main" / "metrics.json"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace('"value": 0.5', '"value": "n/a"'),
                       encoding="utf-8")
    rows = rows_of(tmp_path)
    assert "empty" not in rows
    (row,) = rows["r"]
    assert (row.seeds, row.cells, row.std) == (1, ("r/seed0",), None)


def test_cells_that_disagree_on_n_or_split_say_so(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.5}, n=4)
    write_capsule(tmp_path, "r", "seed1", metrics={"acc": 1.0}, n=5, split="val")
    (row,) = rows_of(tmp_path)["r"]
    assert (row.split, row.n, row.mean) == (None, None, 0.75)
    assert row.note == "the cells name different splits: test, val; n differs across the cells: 4, 5"


def test_a_legacy_cell_reports_its_best_metrics_with_the_legacy_disclosure(tmp_path: Path) -> None:
    for seed, loss in enumerate((0.25, 0.5)):
        write_json(tmp_path / "runs" / "old" / f"seed{seed}" / "best_metrics.json", {"epoch": 3, "val_loss": loss})
    (row,) = rows_of(tmp_path)["old"]
    assert (row.test_id, row.split, row.metric, row.direction, row.mean, row.seeds) == (
        "best_metrics", "val", "val_loss", "lower_is_better", 0.375, 2)
    assert row.note == "legacy cell: no run record or per-item results; not re-derivable"


def test_curves_read_loss_and_val_columns_only_and_skip_blank_nan_and_text(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.5})
    write_csv(tmp_path / "runs" / "r" / "seed0" / "train.csv", [
        {"step": 1, "loss": "", "val/acc": "0.25", "train/acc": "9"},
        {"step": 2, "loss": "nan", "val/acc": "inf", "train/acc": "9"},
        {"step": 3, "loss": "0.5", "val/acc": "oops", "train/acc": "9"},
        {"step": 4, "loss": "0.75", "val/acc": "", "train/acc": "9"}])
    (cell,) = read_cells(tmp_path)
    assert set(cell.curves) == {"loss", "val/acc"}
    assert (cell.curves["loss"].last, cell.curves["loss"].low, cell.curves["loss"].high) == (0.75, 0.5, 0.75)
    assert (cell.curves["val/acc"].last, cell.curves["val/acc"].high) == (0.25, 0.25)


def test_links_and_malformed_files_are_never_followed_or_fatal(tmp_path: Path) -> None:
    three_seeds(tmp_path)
    outside = tmp_path / "elsewhere"
    write_capsule(outside, "x", "seed0", metrics={"acc": 0.0})
    os.symlink(outside / "runs" / "x", tmp_path / "runs" / "linked")  # a run folder that is a link
    os.symlink(outside / "runs" / "x" / "seed0", tmp_path / "runs" / "r1" / "seed9")  # a cell that is a link
    (tmp_path / "runs" / "r1" / "seed2" / "run.json").write_text("{not json", encoding="utf-8")
    cells = read_cells(tmp_path)
    assert [c.capsule.key for c in cells] == ["r1/seed0", "r1/seed1", "r1/seed2"]
    assert cells[2].problems[0].startswith("runs/r1/seed2/run.json: malformed JSON")
    assert rows_of(tmp_path)["r1"][0].mean == 0.75  # its metrics.json still counts


def test_the_capsules_window_spans_first_created_to_last_closed_and_needs_every_stamp(tmp_path: Path) -> None:
    three_seeds(tmp_path)
    start, end = capsule_window(read_cells(tmp_path)) or (None, None)
    assert (start, end) == (datetime(2026, 6, 20, 10, tzinfo=UTC), datetime(2026, 6, 22, 12, 30, tzinfo=UTC))
    write_capsule(tmp_path, "r1", "seed3", record={"closed_at": None})  # a cell not closed yet
    assert capsule_window(read_cells(tmp_path)) is None


def test_tracker_links_are_http_only_once_each_in_cell_order(tmp_path: Path) -> None:
    urls = ("https://wandb.ai/lab/p/runs/b", "javascript:alert(1)", "https://wandb.ai/lab/p/runs/b",
            "http://mlflow.local/#/runs/a")
    for seed, url in enumerate(urls):
        write_capsule(tmp_path, "r", f"seed{seed}", metrics={"acc": 0.5},
                      record={"provenance": {"tracker": {"backend": "wandb", "url": url}}})
    assert tracker_urls(read_cells(tmp_path)) == ("https://wandb.ai/lab/p/runs/b", "http://mlflow.local/#/runs/a")


# -- the meter over a window ---------------------------------------------------------------------------------
T0 = datetime(2026, 11, 1, 8, tzinfo=UTC)


@dataclass(frozen=True)
class Seen:
    """A snapshot as audits/meter reads one (the Observed protocol)."""

    at: datetime
    state: str
    price_per_hour: float | None
    price_source: str = "user"
    storage_per_hour: float | None = None


def hours(h: float) -> datetime:
    return T0 + timedelta(hours=h)


SNAPSHOTS = [Seen(hours(0), "running", 2.0), Seen(hours(4), "stopped", 2.0, storage_per_hour=0.5),
             Seen(hours(6), "running", 3.0)]


def test_cost_between_clips_the_meter_to_a_window_and_adds_up_to_accrue() -> None:
    model = BillingModel()
    assert cost_between(SNAPSHOTS, hours(1), hours(3), model=model).total == 4.0
    assert cost_between(SNAPSHOTS, hours(3), hours(7), model=model).total == 2.0 + 1.0 + 3.0  # run, stop, run
    whole = accrue(SNAPSHOTS, hours(8), model=model).total
    assert whole == cost_between(SNAPSHOTS, hours(0), hours(8), model=model).total == 8.0 + 1.0 + 6.0
    # a snapshot after the window never reaches back into it
    assert cost_between([*SNAPSHOTS, Seen(hours(7), "running", 100.0)], hours(0), hours(5), model=model).total == 8.5


def test_cost_between_flags_an_unknown_state_and_a_gap_as_estimates() -> None:
    unknown = [Seen(hours(0), "running", 2.0), Seen(hours(1), "unknown", None), Seen(hours(2), "running", 2.0)]
    assert cost_between(unknown, hours(0), hours(1)).estimate is False
    billed = cost_between(unknown, hours(0), hours(3))
    assert (billed.total, billed.estimate) == (6.0, True)  # the unknown hour at the last known rate
    gap = cost_between(SNAPSHOTS, hours(3), hours(5), gaps=[Interval(hours(3.5), hours(4.5))])
    assert gap.estimate is True and gap.total == 0.5 * 2.0 + 1.0 * 2.0 + 0.5 * 0.5  # the gap at the higher rate


def test_shared_pieces_split_overlapping_windows_among_the_runs_covering_them() -> None:
    pieces = shared_pieces({"r1": Interval(hours(0), hours(2)), "r2": Interval(hours(1), hours(3)),
                            "r3": Interval(hours(5), hours(6))})
    assert [((p.start - T0) / timedelta(hours=1), (p.end - T0) / timedelta(hours=1), runs)
            for p, runs in pieces] == [(0, 1, ("r1",)), (1, 2, ("r1", "r2")), (2, 3, ("r2",)), (5, 6, ("r3",))]
