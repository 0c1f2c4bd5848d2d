"""Load-verification speed: rgt's real verifier vs one plain Python process that does the same work.

Two scenarios, each in a temporary sim project whose box is a local folder (as tests/support/evidence_helpers.py
builds it) and pulled once with the real `pull` (services/evidence/pull.py):
  - 200 small real torch checkpoints (one per cell, distinct bytes, plus each cell's metrics and log);
  - one large checkpoint (1 GiB by default; `--big-mib` makes it smaller on a slow machine, `--big-mib 0`
    leaves it out), one float32 tensor of random values.
rgt: `verify` (services/evidence/verify.py) itself, with a fresh state database every round so nothing is
cached (hashes and load-check verdicts are both computed again). The small scenario runs with the load-check pool
as shipped (one process per GiB to load, at most one per core) and forced to one process per core, to
show which pays off on this machine.
Baseline, run in the same process run: one `python` subprocess that imports torch, SHA-256s every file the
manifest lists (as verification must) and `torch.load(weights_only=True, mmap=True)`s every checkpoint,
checking every floating tensor is finite. Interpreter start and the torch import count for both.

    .venv/bin/python benchmarks/bench_verify.py [--rounds 3] [--small 200] [--big-mib 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from remote_gpu_trainer.services.evidence import load_checks  # noqa: E402
from remote_gpu_trainer.services.evidence.pull import pull  # noqa: E402
from remote_gpu_trainer.services.evidence.verify import verify  # noqa: E402
from remote_gpu_trainer.state.db import StateDB  # noqa: E402
from support.evidence_helpers import Env, make_env, write_cell  # noqa: E402

BASELINE = r"""
import hashlib, json, sys, torch
def finite(obj):
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if (item.is_floating_point() or item.is_complex()) and not bool(torch.isfinite(item).all()):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True
hashed, loaded = json.load(sys.stdin)
for path in hashed:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(4 << 20):
            digest.update(chunk)
for path in loaded:
    assert finite(torch.load(path, map_location="cpu", weights_only=True, mmap=True)), path
"""


def small_project(tmp: Path, count: int) -> Env:
    roster = tuple(f"cell{index:03d}" for index in range(count))
    env = make_env(tmp / "small", roster=roster)
    for index, cell in enumerate(roster):
        write_cell(env.box, cell, seed=index)
    return env


def big_project(tmp: Path, mib: int) -> Env:
    env = make_env(tmp / "big", roster=("seed0",))
    write_cell(env.box, "seed0", seed=0)
    elements = mib * (1 << 20) // 4
    torch.save({"model_state_dict": {"w": torch.randn(elements, generator=torch.Generator().manual_seed(1))}},
               env.box / "seed0" / "best.pth")
    return env


def pulled(env: Env) -> Env:
    result = asyncio.run(pull(env.project, env.run, env.transport, env.db))
    assert result.ok, result
    env.db.close()
    return env


def time_rgt(env: Env, processes: int | None = None) -> float:
    """verify as shipped, or with the pool forced to `processes` load-check processes."""
    saved = load_checks.POOL_MAX, load_checks.BYTES_PER_PROCESS
    if processes is not None:
        load_checks.POOL_MAX, load_checks.BYTES_PER_PROCESS = processes, 1
    state = env.project.state_db
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state}{suffix}").unlink(missing_ok=True)
    db = StateDB(state)  # fresh: no cached hash, no cached load-check verdict
    try:
        start = time.perf_counter()
        result = asyncio.run(verify(env.project, env.run, db))
        elapsed = time.perf_counter() - start
    finally:
        db.close()
        load_checks.POOL_MAX, load_checks.BYTES_PER_PROCESS = saved
    assert result.ok, result.errors[:3]
    return elapsed


def time_baseline(env: Env) -> float:
    files = sorted(str(path) for path in env.local.rglob("*") if path.is_file())
    checkpoints = [path for path in files if path.endswith(".pth")]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", BASELINE], check=True, input=json.dumps([files, checkpoints]).encode())
    return time.perf_counter() - start


def median(times: list[float]) -> float:
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--big-mib", type=int, default=1024)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="rgt-bench-verify-") as tmp:
        small = pulled(small_project(Path(tmp), args.small))
        base = [time_baseline(small) for _ in range(args.rounds)]
        shipped = [time_rgt(small) for _ in range(args.rounds)]
        rows.append((f"{args.small} small checkpoints: baseline (1 python, hash + torch.load mmap)",
                     median(base), median(base)))
        rows.append((f"{args.small} small checkpoints: rgt verify (pool as shipped: "
                     f"{load_checks.pool_size(args.small, 0)} process)", median(shipped), median(base)))
        if cores > 1:
            forced = [time_rgt(small, min(4, cores)) for _ in range(args.rounds)]
            rows.append((f"{args.small} small checkpoints: rgt verify, pool forced to {min(4, cores)} processes",
                         median(forced), median(base)))
        if args.big_mib > 0:
            big = pulled(big_project(Path(tmp), args.big_mib))
            big_base = [time_baseline(big) for _ in range(args.rounds)]
            big_rgt = [time_rgt(big) for _ in range(args.rounds)]
            rows.append((f"one {args.big_mib} MiB checkpoint: baseline", median(big_base), median(big_base)))
            rows.append((f"one {args.big_mib} MiB checkpoint: rgt verify", median(big_rgt), median(big_base)))
    print(f"\nload-verification, median of {args.rounds} rounds, {cores} cores, fresh state database per round"
          + ("" if args.big_mib >= 1024 else f"; large checkpoint reduced to {args.big_mib} MiB"))
    print(f"{'measurement':72} {'seconds':>8} {'x baseline':>11}")
    for name, seconds, baseline in rows:
        print(f"{name:72} {seconds:8.2f} {seconds / baseline:10.2f}x")
    print("aims (issue 10): at most 1.5x for the small checkpoints, 1.2x for the large one")


if __name__ == "__main__":
    main()
