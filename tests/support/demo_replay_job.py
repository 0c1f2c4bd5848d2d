"""The demo's job in replay (support/demo_replay.py): write one cell's committed training outputs and print
its log, as the demo's train.py did when those bytes were made. Standard library only; it accepts and ignores
train.py's other options, so the demo's own command line runs it unchanged."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--from", dest="source", required=True, help="tests/fixtures/demo_replay")
    parser.add_argument("--cell", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--run-id", default="demo")
    args, _ = parser.parse_known_args()
    source = Path(args.source) / args.run_id
    for line in (source / f"{args.cell}.log").read_text(encoding="utf-8").splitlines():
        print(line, flush=True)
    # fresh modification times, as files written now have (copy2 would keep the checkout's)
    shutil.copytree(source / args.cell, args.out, dirs_exist_ok=True, copy_function=shutil.copyfile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
