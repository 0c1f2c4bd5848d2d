"""The demo project (`rgt demo`, docs/architecture.md §4): a sim box, a real PyTorch run of three seeds that
writes its evidence through rgt_capsule, a dataset of generated files with its split manifest, and, with
`--flawed`, a second run with planted problems for the VERIFY checklist to find.

The dataset is small and synthetic (4 classes, 16 features): every item is one JSON file under `data/<split>/`,
listed with its sha256 in `splits/demo.json` (built by services/audit/splits.py, as `rgt splits build` would). The box
gets the same bytes as one pack (`demo_data.json`, pushed with the script), and the script checks each item
against the manifest before training. The flawed run's data (`data-flawed/`, `splits/demo-flawed.json`) is the
same except that one test item is a renamed copy of a training item; the flawed run has one seed and evaluates
its last checkpoint while recording the best one.

The demo delivers too (docs/deliver.md §9): it writes the user's half of DELIVER from assets/demo/deliver/ (a
loss-curve figure over the three seeds, a mean ± std table, the claims of EVIDENCE.json and a short paper
listed in `[deliver] docs`), so after verification `rgt build` and `rgt reconcile` (b and r on the Deliver panel)
work on it. The paper quotes one number typed by hand, a test accuracy of 0.9701, which no run of the demo can
produce: each seed's accuracy is k/128 (128 test items), so their mean is a multiple of 1/384, and 0.9701 is
0.0013 away from the nearest one, far outside what four decimals allow. Reconcile reports it with its line.
"""

from __future__ import annotations

import json
import random
import shlex
import sys
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.services.audit.splits import Source, SplitRequest, build_manifest
from remote_gpu_trainer.services.project_files import CONFIG_NAME, toml_string, write_new_file

DEMO_INSTANCE = "gpu-box"
DEMO_RUN = "demo"
DEMO_FLAWED_RUN = "demo-flawed"
SIZES = {"train": 384, "val": 64, "test": 128}
FEATURES = 16
CLASSES = 4
LEAKED = ("te0007", "tr0042")  # the flawed test item and the training item it copies
CAPSULE_FILES = ("run.json", "config.yaml", "train.csv", "best.pth", "test/main/metrics.json")


def create_demo(folder: Path, quick: bool = False, flawed: bool = False) -> Path:
    """Write the demo project into `folder` unless it already holds one; returns its rgt.toml."""
    target = folder / CONFIG_NAME
    if target.exists():
        load_project(target)
        return target
    if folder.exists() and any(folder.iterdir()):
        raise ConfigError(f"{folder} exists and is not empty: choose another folder for the demo")
    folder.mkdir(parents=True, exist_ok=True)
    assets = resources.files("remote_gpu_trainer")
    (folder / "train.py").write_bytes(assets.joinpath("assets/demo/train.py").read_bytes())
    (folder / "rgt_capsule.py").write_bytes(assets.joinpath("remote/rgt_capsule.py").read_bytes())
    items = demo_items()
    write_dataset(folder, "demo", "data", items)
    if flawed:
        write_dataset(folder, "demo-flawed", "data-flawed", leaked(items))
    write_deliverables(folder)
    write_new_file(target, demo_toml(sys.executable, quick, flawed))
    return target


def write_deliverables(folder: Path) -> None:
    """The user-written DELIVER files (assets/demo/deliver/, copied as they are): what to build and claim."""
    def copy(source: Traversable, target: Path) -> None:
        for entry in source.iterdir():
            if entry.is_dir():
                (target / entry.name).mkdir(exist_ok=True)
                copy(entry, target / entry.name)
            else:
                (target / entry.name).write_bytes(entry.read_bytes())

    copy(resources.files("remote_gpu_trainer").joinpath("assets/demo/deliver"), folder)


def demo_items(seed: int = 1234) -> dict[str, list[tuple[str, bytes]]]:
    """Every split's items as (id, file bytes): a fixed linear task, the same for every training seed."""
    rng = random.Random(seed)
    weights = [[rng.gauss(0, 1) for _ in range(CLASSES)] for _ in range(FEATURES)]
    prefix = {"train": "tr", "val": "va", "test": "te"}
    items: dict[str, list[tuple[str, bytes]]] = {}
    for split, count in SIZES.items():
        rows = []
        for index in range(count):
            x = [round(rng.gauss(0, 1), 6) for _ in range(FEATURES)]
            scores = [sum(x[f] * weights[f][c] for f in range(FEATURES)) + rng.gauss(0, 0.3) for c in range(CLASSES)]
            record = {"x": x, "y": max(range(CLASSES), key=scores.__getitem__)}
            rows.append((f"{prefix[split]}{index:04d}", json.dumps(record, sort_keys=True).encode()))
        items[split] = rows
    return items


def leaked(items: dict[str, list[tuple[str, bytes]]]) -> dict[str, list[tuple[str, bytes]]]:
    """The flawed dataset: test item te0007 replaced by a renamed copy of training item tr0042's bytes."""
    test_id, train_id = LEAKED
    source = dict(items["train"])[train_id]
    return {**items, "test": [(i, source if i == test_id else data) for i, data in items["test"]]}


def write_dataset(folder: Path, split_set_id: str, data_dir: str, items: dict[str, list[tuple[str, bytes]]]) -> None:
    """The item files, their split manifest (services/audit/splits.py, from the folders) and the pack for the box."""
    for split, rows in items.items():
        (folder / data_dir / split).mkdir(parents=True, exist_ok=True)
        for item_id, data in rows:
            (folder / data_dir / split / f"{item_id}.json").write_bytes(data)
    sources = tuple(Source("folder", folder / data_dir / split, split) for split in items)
    build_manifest(folder, SplitRequest(split_set_id, sources, dataset="rgt-demo-synthetic", method="random",
                                        seed=1234))
    pack = {"members": {split: [[i, data.decode()] for i, data in rows] for split, rows in items.items()}}
    name = "demo_data.json" if split_set_id == "demo" else "demo_data_flawed.json"
    (folder / name).write_text(json.dumps(pack, sort_keys=True), encoding="utf-8")


def demo_toml(python: str, quick: bool, flawed: bool = False) -> str:
    extra = " --epochs 3 --steps-per-epoch 20 --step-delay 0.005" if quick else ""
    command = f"{shlex.quote(python)} train.py --cell {{cell}} --out {{out}}{extra}"
    required = ", ".join(f'"{name}"' for name in CAPSULE_FILES)
    text = f"""\
# The rgt demo: a real PyTorch run on a simulated rented box (provider "sim").
# The box bills a demo price; its disk is .rgt/sim/{DEMO_INSTANCE}/ and terminate deletes it.
# Each seed writes a capsule through rgt_capsule.py (run.json, config.yaml, train.csv, best.pth and
# test/main/metrics.json with per-item results); `rgt audit` checks them (VERIFY).

[project]
name = "rgt-demo"

[instances.{DEMO_INSTANCE}]
provider = "sim"

[runs.{DEMO_RUN}]
instance = "{DEMO_INSTANCE}"
workdir = "/workspace/demo"
command = {toml_string(command + " --run-id demo")}
log = "train.log"
remote_root = "/workspace/rgt/{DEMO_RUN}"
roster = ["seed0", "seed1", "seed2"]
required = [{required}]
metric = {{ name = "val_loss", direction = "min" }}
push = ["train.py", "rgt_capsule.py", "demo_data.json", "splits/demo.json"]
python = {toml_string(python)}

# DELIVER, once the run is pulled and verified: `rgt build` (b on the Deliver panel, 5) draws
# figures/loss-curve, the mean ± std table tables/tab-demo and the numbers of EVIDENCE.json with their LaTeX
# macros; `rgt reconcile` (r there) checks the numbers paper.md quotes against them.
[deliver]
docs = ["paper.md"]
"""
    if not flawed:
        return text
    flawed_command = (f"{command} --run-id {DEMO_FLAWED_RUN} --data demo_data_flawed.json --splits demo-flawed.json"
                      " --flaw last-checkpoint")
    return text + f"""
# The flawed twin (rgt demo --flawed): one seed, a test item that is a renamed copy of a training item, and an
# evaluation of the last checkpoint recorded as the best one. Open the checklist (4) to find them.
[runs.{DEMO_FLAWED_RUN}]
instance = "{DEMO_INSTANCE}"
workdir = "/workspace/demo-flawed"
command = {toml_string(flawed_command)}
log = "train.log"
remote_root = "/workspace/rgt/{DEMO_FLAWED_RUN}"
roster = ["seed0"]
required = [{required}]
metric = {{ name = "val_loss", direction = "min" }}
push = ["train.py", "rgt_capsule.py", "demo_data_flawed.json", "splits/demo-flawed.json"]
python = {toml_string(python)}
"""
