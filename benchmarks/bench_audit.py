"""VERIFY audit speed: rgt's whole audit of a project vs pandas reading the same files, in one process.

The project: `--capsules` capsules (default 50: ten runs of five seeds), each with `--rows` per-item results
(default 1,000, in results.parquet), a metrics.json, a run.json, a config.yaml and a train.csv, plus a split
manifest over real files. Two scenarios: the project as it is, and the same project with every run declared a
comparison against the first ([[verify.compare]]), which adds V07's paired per-item bootstrap (10,000 resamples
per comparison, as docs/verify.md §2 fixes it) and the other pair checks.
rgt: services/audit.run_audit (gather every file, run every check of the catalogue, apply the findings
lifecycle to a fresh state database, record the audit) after a warm-up round. Baseline, interleaved with it:
pandas.read_parquet of every results file and pandas.read_csv of every train.csv, plus json.loads of every
metrics.json and run.json, only reading what the audit reads. Budget (the VERIFY issue): within 3× the baseline.

    .venv/bin/python benchmarks/bench_audit.py [--capsules 50] [--rows 1000] [--rounds 9]
"""

from __future__ import annotations

import argparse
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

from remote_gpu_trainer.config.project import load_project  # noqa: E402
from remote_gpu_trainer.services.audit.audit import run_audit  # noqa: E402
from remote_gpu_trainer.state.db import StateDB  # noqa: E402
from support.capsules import classification_items, write_capsule, write_split  # noqa: E402

SEEDS = 5


def build(root: Path, capsules: int, rows: int, compare: bool) -> list[str]:
    runs = [f"m{index:02d}" for index in range(max(1, capsules // SEEDS))]
    compares = "".join(f'\n[[verify.compare]]\nrun = "{run}"\ncontrol = "{runs[0]}"\n' for run in runs[1:]
                       if compare)
    (root / "rgt.toml").write_text(f'[project]\nname = "bench"\n[metrics]\nacc = "max"\n{compares}',
                                   encoding="utf-8")
    for index, run in enumerate(runs):
        for seed in range(SEEDS):
            items = classification_items(rows, correct=int(rows * (0.6 + 0.02 * index)) - seed, offset=seed)
            acc = sum(item["acc"] for item in items) / rows
            write_capsule(root, run, f"seed{seed}", seed=seed, metrics={"acc": acc}, items=items,
                          results_format="parquet")
    write_split(root, "main", {split: [(f"{i}.bin", f"{split}-{i}".encode()) for i in range(200)]
                               for split in ("train", "val", "test")})
    return runs


def read_with_pandas(root: Path) -> float:
    import pandas as pd

    started = time.perf_counter()
    for path in sorted(root.glob("runs/*/*/test/*/results.parquet")):
        pd.read_parquet(path)
    for path in sorted(root.glob("runs/*/*/train.csv")):
        pd.read_csv(path)
    for path in sorted(root.glob("runs/*/*/**/*.json")):
        json.loads(path.read_bytes())
    return time.perf_counter() - started


def audit_once(root: Path, round_no: int) -> float:
    project = load_project(root / "rgt.toml")
    db = StateDB(root / ".rgt" / f"bench-{round_no}.db")
    started = time.perf_counter()
    run_audit(project, db)
    elapsed = time.perf_counter() - started
    db.close()
    return elapsed


BUDGET = 3.0  # the audit within 3x pandas reading the same files (issue 29)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capsules", type=int, default=50)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    ratios = [scenario(args.capsules, args.rows, args.rounds, compare) for compare in (False, True)]
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"budget {BUDGET:g} ×: {'met in both scenarios' if all(r <= BUDGET for r in ratios) else 'NOT met'}")
    return 0


def scenario(capsules: int, rows: int, rounds: int, compare: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="rgt-bench-audit-") as tmp:
        root = Path(tmp)
        runs = build(root, capsules, rows, compare)
        read_with_pandas(root)  # warm: imports and the page cache for both
        audit_once(root, -1)
        baseline, audited = [], []
        for n in range(rounds):  # interleaved, so a busy moment of the machine hits both
            baseline.append(read_with_pandas(root))
            audited.append(audit_once(root, n))
    base, ours = statistics.median(baseline), statistics.median(audited)
    pairs = len(runs) - 1 if compare else 0
    print(f"project: {len(runs) * SEEDS} capsules × {rows} per-item rows, {pairs} declared comparisons")
    print(f"  pandas reading the files:  {base:.3f} s (median of {rounds})")
    print(f"  rgt audit (every check):   {ours:.3f} s (median of {rounds})")
    ratio = ours / base
    print(f"  ratio: {ratio:.2f} × (budget {BUDGET:g} ×: {'met' if ratio <= BUDGET else 'NOT met'})")
    return ratio


if __name__ == "__main__":
    sys.exit(main())
