"""DELIVER build speed: `rgt build` of 20 figures and 10 tables vs a plain matplotlib/pandas script, in one process.

The project: `--capsules` capsules (default 50: ten runs of five seeds, written by tests/support/capsules.py),
each with a train.csv of `--steps` logged steps (default 200) and a metrics.json with acc and nll. Twenty figures
(per run: a `line` figure of the training loss, mean over the five seeds with a ±std band, and a `bar` figure of
the test accuracy of that run against the first, mean ± std over seeds) and ten tables (per run: that run and
the first, acc and nll as mean ± std with n).
rgt: `rgt build PROJECT` through `remote_gpu_trainer.cli.main` (every figure, every table; no EVIDENCE.json, so
evidence and macros are skipped): inputs read once and hashed, source.csv, two renders per figure for the
determinism check (the second from the rows up: source.csv, SVG and PDF, and the PNG's pixels drawn but not
encoded; docs/deliver.md §3), the pixel gate G1–G6 on the first, the table parse gate, provenance,
figure.json/table.json.
Baseline, interleaved with it: a plain script reading the same train.csv and metrics.json files with pandas,
drawing the same figures (same size, dpi, band and error bars) once and saving the same PNG, SVG and PDF, and
writing each table as Markdown, LaTeX and CSV with f-strings. What rgt adds is the second render, the gate and
the hashing; the ratio says what that costs. The budget (issue 29) is a wall-clock ratio of at most 2×; the
ratio of this process's CPU time is printed beside it, as it moves less when other processes load the machine.

    .venv/bin/python benchmarks/bench_build.py [--capsules 50] [--steps 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from remote_gpu_trainer.cli import main as rgt_main  # noqa: E402
from support.capsules import classification_items, write_capsule, write_json  # noqa: E402

SEEDS = 5
FIGSIZE = (6.4, 4.0)
DPI = 150
BUDGET = 2.0  # rgt build / plain script, wall clock (issue 29)


def build_project(root: Path, capsules: int, steps: int) -> list[str]:
    """Ten runs of five seeds (by default), twenty figure folders and ten table folders, users' halves only."""
    runs = [f"m{index:02d}" for index in range(max(2, capsules // SEEDS))]
    (root / "rgt.toml").write_text('[project]\nname = "bench-build"\n[metrics]\nacc = "max"\nnll = "min"\n',
                                   encoding="utf-8")
    for index, run in enumerate(runs):
        for seed in range(SEEDS):
            correct = 60 + 2 * index - seed
            items = classification_items(100, correct=correct, offset=seed)
            for item in items:
                item["nll"] = 0.2 if item["acc"] else 1.5
            train = [{"step": 10 * (i + 1), "epoch": 1 + i // 50, "loss": 2.0 / (1 + 0.05 * i) + 0.01 * seed,
                      "lr": 0.001} for i in range(steps)]
            write_capsule(root, run, f"seed{seed}", seed=seed, train=train, items=items,
                          metrics={"acc": correct / 100, "nll": sum(i["nll"] for i in items) / 100},
                          directions={"nll": "lower_is_better"})
    for run in runs:
        cells = [f"{run}/seed{seed}" for seed in range(SEEDS)]
        first = [f"{runs[0]}/seed{seed}" for seed in range(SEEDS)]
        write_json(root / "figures" / f"loss-{run}" / "figure.json", {
            "schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": f"loss-{run}", "kind": "line",
            "series": [{"label": run, "capsules": cells}], "x": "step", "y": "loss", "ylabel": "loss (↓ better)"})
        write_json(root / "figures" / f"acc-{run}" / "figure.json", {
            "schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": f"acc-{run}", "kind": "bar",
            "series": [{"label": runs[0], "capsules": first}, {"label": run if run != runs[0] else f"{run} again",
                                                                  "capsules": cells}],
            "test_id": "main", "metric": "acc", "ylabel": "accuracy (↑ better)"})
        write_json(root / "tables" / f"tab-{run}" / "table.json", {
            "schema": "remote-gpu-trainer/TABLE/v1", "table_id": f"tab-{run}", "test_id": "main",
            "rows": [{"method": runs[0], "capsules": [runs[0]]}] +
                    ([{"method": run, "capsules": [run]}] if run != runs[0] else []),
            "layout": {"columns": ["acc", "nll"], "precision": {"acc": 3, "nll": 3}}})
    return runs


def rgt_build(root: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one `rgt build` of everything."""
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = rgt_main(["build", str(root)])
    elapsed = time.perf_counter() - started, time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"rgt build exited {code}:\n{out.getvalue()}")
    return elapsed


def plain_script(root: Path, runs: list[str], out: Path) -> tuple[float, float]:
    """The same figures and tables as a user's own script would make them: read, aggregate, draw once, save."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd
    from matplotlib.figure import Figure

    started, cpu = time.perf_counter(), time.process_time()

    def metrics(run: str) -> pd.DataFrame:
        rows = []
        for seed in range(SEEDS):
            body = json.loads((root / "runs" / run / f"seed{seed}" / "test" / "main" / "metrics.json").read_bytes())
            rows.append({name: block["value"] for name, block in body["metrics"].items()} | {"n": body["n"]})
        return pd.DataFrame(rows)

    for run in runs:
        curves = pd.concat([pd.read_csv(root / "runs" / run / f"seed{seed}" / "train.csv")[["step", "loss"]]
                            for seed in range(SEEDS)])
        band = curves.groupby("step")["loss"].agg(["mean", "std"]).reset_index()
        figure = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
        axes = figure.add_subplot()
        axes.plot(band["step"], band["mean"], label=run)
        axes.fill_between(band["step"], band["mean"] - band["std"], band["mean"] + band["std"], alpha=0.25)
        axes.set_xlabel("step")
        axes.set_ylabel("loss (↓ better)")
        axes.legend()
        save(figure, out / f"loss-{run}")
        pair = [metrics(runs[0]), metrics(run)]
        figure = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
        axes = figure.add_subplot()
        axes.bar([0, 1], [m["acc"].mean() for m in pair], yerr=[m["acc"].std() for m in pair], capsize=4)
        axes.set_xticks([0, 1], [runs[0], run])
        axes.set_ylabel("accuracy (↑ better)")
        save(figure, out / f"acc-{run}")
        write_table(out / f"tab-{run}", [(runs[0], pair[0]), (run, pair[1])])
    return time.perf_counter() - started, time.process_time() - cpu


def save(figure: object, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in ("png", "svg", "pdf"):
        figure.savefig(folder / f"final.{suffix}", dpi=DPI)  # type: ignore[attr-defined]


def write_table(folder: Path, rows: list[tuple[str, object]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    md = ["| method | n | acc ↑ | nll ↓ |", "| --- | ---: | ---: | ---: |"]
    tex = ["\\begin{tabular}{lrrr}", "method & n & acc $\\uparrow$ & nll $\\downarrow$ \\\\"]
    csv = ["method,metric,mean,std,n"]
    for method, frame in rows:
        acc, nll, n = frame["acc"], frame["nll"], int(frame["n"].iloc[0])  # type: ignore[index]
        md.append(f"| {method} | {n} | {acc.mean():.3f} ± {acc.std():.3f} | {nll.mean():.3f} ± {nll.std():.3f} |")
        tex.append(f"{method} & {n} & {acc.mean():.3f} $\\pm$ {acc.std():.3f} & {nll.mean():.3f} $\\pm$ "
                   f"{nll.std():.3f} \\\\")
        csv += [f"{method},acc,{acc.mean()!r},{acc.std()!r},{n}", f"{method},nll,{nll.mean()!r},{nll.std()!r},{n}"]
    tex.append("\\end{tabular}")
    for name, lines in (("final.md", md), ("final.tex", tex), ("final.csv", csv)):
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capsules", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200, help="logged steps per train.csv")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rgt-bench-build-") as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        runs = build_project(root, args.capsules, args.steps)
        plain_script(root, runs, Path(tmp) / "warm")  # warm: imports, font cache, page cache for both
        rgt_build(root)
        baseline, built = [], []
        for n in range(args.rounds):  # interleaved, so a busy moment of the machine hits both
            baseline.append(plain_script(root, runs, Path(tmp) / f"plain-{n}"))
            built.append(rgt_build(root))
    base, ours = (statistics.median(t[0] for t in baseline), statistics.median(t[0] for t in built))
    base_cpu, ours_cpu = (statistics.median(t[1] for t in baseline), statistics.median(t[1] for t in built))
    ratio = ours / base
    print(f"project: {len(runs) * SEEDS} capsules ({len(runs)} runs × {SEEDS} seeds, {args.steps} logged steps "
          f"each), {2 * len(runs)} figures, {len(runs)} tables; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"  plain matplotlib + pandas script:  {base:.2f} s wall, {base_cpu:.2f} s CPU (median of {args.rounds})")
    print(f"  rgt build (all):                   {ours:.2f} s wall, {ours_cpu:.2f} s CPU (median of {args.rounds})")
    print(f"  ratio: {ratio:.2f} × wall (budget ≤ {BUDGET:g} ×: {'met' if ratio <= BUDGET else 'NOT met'}), "
          f"{ours_cpu / base_cpu:.2f} × CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
