"""Issue 26 item 13: a `line` figure over a train.csv of any length builds in bounded memory, and what it draws
stays faithful to the whole curve.

train.csv is read in chunks, hashed as it is parsed, and a curve longer than figures/reduce.py EXACT_ROWS is drawn
from the first, last, minimum and maximum point of each pixel column (M4); figure.json's provenance says so
with the curve's full row count. The 10,000,000-row build runs `rgt build figure` in its own process, under a
wrapper process whose only child it is, so the peak RSS measured is that build's alone.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from remote_gpu_trainer.deliver.figures.reduce import EXACT_ROWS, ColumnReducer
from support.helpers import run_rgt

PEAK_LIMIT_MB = 500
#: runs one command as its only child and prints the child's peak RSS in kB (Linux ru_maxrss) on stdout
WRAPPER = ("import resource, subprocess, sys\n"
           "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
           "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
           "sys.stderr.write(done.stderr)\n")


def _project(root: Path, capsules: dict[str, Any], y: str = "loss") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rgt.toml").write_text('[project]\nname = "long-curves"\n', encoding="utf-8")
    figure = {"schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "curve", "kind": "line", "x": "step", "y": y,
              "series": [{"label": "ours", "capsules": list(capsules)}]}
    (root / "figures/curve").mkdir(parents=True)
    (root / "figures/curve/figure.json").write_text(json.dumps(figure), encoding="utf-8")
    for key, write in capsules.items():
        (root / "runs" / key).mkdir(parents=True)
        write(root / "runs" / key / "train.csv")
    return root


def _write_curve(path: Path, rows: int, *, seed: int = 0, block: int = 1_000_000) -> None:
    """step 1..rows and a noisy decaying loss, written a million rows at a time (one string per block)."""
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as handle:
        handle.write("step,loss\n")
        for start in range(0, rows, block):
            steps = np.arange(start + 1, min(start + block, rows) + 1)
            loss = 1.0 / np.sqrt(steps) + 0.01 * rng.standard_normal(steps.size)
            handle.write("".join(f"{s},{v:.6f}\n" for s, v in zip(steps.tolist(), loss.tolist(), strict=True)))


def test_a_ten_million_row_train_csv_builds_its_figure_under_500_mb(tmp_path: Path) -> None:
    rows = 10_000_000
    root = _project(tmp_path / "p", {"r/s0": lambda path: _write_curve(path, rows)})
    command = [sys.executable, "-m", "remote_gpu_trainer", "build", "figure", "curve", str(root)]
    done = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    code, peak_kb = (int(word) for word in done.stdout.split())
    assert code == 0, done.stderr
    assert peak_kb / 1024 < PEAK_LIMIT_MB, f"peak RSS {peak_kb / 1024:.0f} MB"
    written = json.loads((root / "figures/curve/figure.json").read_text(encoding="utf-8"))
    [reduction] = written["provenance"]["reduction"]
    assert reduction["rows"] == rows and reduction["note"].startswith(f"reduced from {rows} rows to ")
    assert reduction["drawn"] == written["source"]["rows"] <= 4 * reduction["columns"]
    data = (root / "runs/r/s0/train.csv").read_bytes()
    assert written["inputs"][0]["sha256"] == hashlib.sha256(data).hexdigest()  # the whole file, as parsed
    assert written["qa"]["deterministic"] is True


def _columns(reduced_x: np.ndarray, x: np.ndarray, x0: float, bucket: float, factor: int) -> tuple[
        np.ndarray, np.ndarray]:
    return (np.floor((x - x0) / bucket).astype(np.int64) // factor,
            np.floor((reduced_x - x0) / bucket).astype(np.int64) // factor)


def test_the_reduction_keeps_every_pixel_columns_first_last_min_and_max() -> None:
    rng = np.random.default_rng(7)
    x = np.cumsum(rng.integers(1, 5, size=300_000)).astype(np.float64)  # uneven steps, strictly increasing
    y = np.cumsum(rng.standard_normal(x.size))
    y[rng.integers(0, x.size, size=40)] += rng.choice([-500.0, 500.0], size=40)  # one-row spikes
    reducer = ColumnReducer(640)
    for start in range(0, x.size, 7_777):  # chunks that do not line up with any column
        reducer.add(x[start:start + 7_777], y[start:start + 7_777], None)
    reduced = reducer.result()
    assert reduced.rows == x.size and 0 < reduced.columns <= 640 and reduced.err is None
    assert reduced.column_width == reduced.bucket_width * reduced.factor
    assert np.all(np.diff(reduced.x) > 0) and reduced.x.size <= 4 * reduced.columns
    column, kept_column = _columns(reduced.x, x, reduced.x0, reduced.bucket_width, reduced.factor)
    kept = dict(zip(reduced.x.tolist(), reduced.y.tolist(), strict=True))
    for c in np.unique(column):
        inside = column == c
        xs, ys = x[inside], y[inside]
        assert kept[float(xs[0])] == ys[0] and kept[float(xs[-1])] == ys[-1]
        assert kept[float(xs[np.argmin(ys)])] == ys.min() and kept[float(xs[np.argmax(ys)])] == ys.max()
        assert set(reduced.x[kept_column == c].tolist()) <= set(xs.tolist())  # nothing from elsewhere
    assert kept[float(x[np.argmax(y)])] == y.max() and kept[float(x[np.argmin(y)])] == y.min()


def test_a_curve_up_to_exact_rows_is_drawn_whole() -> None:
    x = np.arange(EXACT_ROWS, dtype=np.float64)
    reducer = ColumnReducer(100)
    reducer.add(x, np.sin(x), np.zeros(x.size))
    reduced = reducer.result()
    assert reduced.columns == 0 and reduced.x.tolist() == x.tolist() and reduced.err is not None


def test_three_long_seeds_are_averaged_then_reduced_and_the_provenance_says_from_how_many_rows(
        tmp_path: Path) -> None:
    rows = 60_000
    root = _project(tmp_path / "p", {f"r/s{k}": (lambda path, k=k: _write_curve(path, rows, seed=k, block=rows))
                                     for k in range(3)})
    done = run_rgt("build", "figure", "curve", str(root), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads((root / "figures/curve/figure.json").read_text(encoding="utf-8"))
    [reduction] = written["provenance"]["reduction"]
    assert reduction["rows"] == rows and f"reduced from {rows} rows to {reduction['drawn']}" in reduction["note"]
    assert written["qa"]["deterministic"] is True and written["qa"]["checks"]["G5_axis"] == "pass"
    frames = [np.loadtxt(root / f"runs/r/s{k}/train.csv", delimiter=",", skiprows=1) for k in range(3)]
    mean = np.vstack([f[:, 1] for f in frames]).mean(axis=0)
    steps = frames[0][:, 0]
    source = np.genfromtxt(root / "figures/curve/source.csv", delimiter=",", names=True, dtype=None,
                           encoding="utf-8")
    drawn = dict(zip(source["x"].tolist(), source["y"].tolist(), strict=True))
    assert len(drawn) == reduction["drawn"] and set(source["seeds"].tolist()) == {3}
    assert drawn[int(steps[np.argmin(mean)])] == mean.min() and drawn[int(steps[np.argmax(mean)])] == mean.max()
    assert drawn[1] == mean[0] and drawn[rows] == mean[-1]
    column = np.floor((steps - reduction["x0"]) / reduction["column_width"]).astype(np.int64)
    assert len(np.unique(column)) >= reduction["columns"] - 1


def test_seeds_that_log_different_steps_are_a_g5_problem_on_a_long_curve(tmp_path: Path) -> None:
    rows = 30_000

    def every_other(path: Path) -> None:
        steps = np.arange(2, 2 * rows + 1, 2)
        path.write_text("step,loss\n" + "".join(f"{s},{1 / s:.6f}\n" for s in steps.tolist()), encoding="utf-8")

    root = _project(tmp_path / "p", {"r/s0": lambda path: _write_curve(path, 2 * rows, block=2 * rows),
                                     "r/s1": every_other})
    done = run_rgt("build", "figure", "curve", str(root), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    written = json.loads((root / "figures/curve/figure.json").read_text(encoding="utf-8"))
    assert written["qa"]["checks"]["G5_axis"] == "fail"
    assert f"seeds do not share x values ({rows} row(s) at an x not every seed logged)" in written["qa"]["notes"]
