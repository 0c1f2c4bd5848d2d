"""Readers for what training scripts already write, onto the capsule model the checks share (docs/verify.md §5).

A cell folder without the native capsule files may still hold a tracker's: a Hugging Face
`trainer_state.json`, a Lightning `metrics.csv`, TensorBoard event files, an MLflow `mlruns/` store or a W&B
run folder. Each format has its reader module; `read_tracker_cell` finds the files (depth-bounded, no
symlinks) and reads every format present. The first format in PREFERENCE with a curve is the capsule's
source; a config, run record or test it lacks is taken from the next format that has one (a W&B config
beside TensorBoard curves is one run seen twice). Every problem of every reader is kept.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from remote_gpu_trainer.audits.catalogue.model import Capsule
from remote_gpu_trainer.audits.catalogue.readers.common import Found, scan

PREFERENCE = ("trainer_state", "lightning", "mlflow", "tensorboard", "wandb")


def read_tracker_cell(root: Path, run_id: str, cell: str) -> Capsule | None:
    """The cell as its trackers recorded it, or None when it holds no tracker file either."""
    found = scan(root / "runs" / run_id / cell)
    capsules = [capsule for source in PREFERENCE if (capsule := _read(source, root, run_id, cell, found))]
    if not capsules:
        return None
    primary = next((c for c in capsules if c.train is not None), capsules[0])
    return _filled(primary, [c for c in capsules if c is not primary])


def _read(source: str, root: Path, run_id: str, cell: str, found: Found) -> Capsule | None:
    """One format's capsule, None when the cell has none of its files."""
    from remote_gpu_trainer.audits.catalogue.readers import (
        hf_trainer,
        lightning,
        mlflow_folder,
        tensorboard,
        wandb_folder,
    )

    readers = {"trainer_state": (hf_trainer.read, found.trainer_state),
               "lightning": (lightning.read, found.metrics_csv),
               "mlflow": (mlflow_folder.read, found.mlruns),
               "tensorboard": (tensorboard.read, found.events),
               "wandb": (wandb_folder.read, found.wandb_files)}
    read, paths = readers[source]
    return read(root, run_id, cell, paths) if paths else None


def _filled(primary: Capsule, others: list[Capsule]) -> Capsule:
    """`primary` with what it lacks taken from the other formats in the cell, and all their problems."""
    config = primary.config or next((c.config for c in others if c.config), None)
    record = primary.run_record or next((c.run_record for c in others if c.run_record), None)
    tests = dict(primary.tests)
    files = dict(primary.files)
    problems = list(primary.problems)
    for other in others:
        for test_id, test in other.tests.items():
            tests.setdefault(test_id, test)
        files.update({k: v for k, v in other.files.items() if k not in files})
        problems += other.problems
    return replace(primary, config=config, run_record=record, tests=tests, files=files, problems=tuple(problems))
