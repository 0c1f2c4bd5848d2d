"""Shared fixtures for the evidence-chain tests: a real project, a simulated box, real tiny checkpoints.

The "box" is a folder reached through LocalTransport(root=...), exactly as the `sim` provider does;
checkpoints are real torch saves; the state database is real SQLite. Nothing of rgt is mocked.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from remote_gpu_trainer.config.project import InstanceConfig, ProjectConfig, RunConfig
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.state.db import StateDB

# Probe verdicts depend only on the bytes and the probe key (that is why rgt caches them by sha256), so
# verdicts that real probes produced in one test are handed to the next test's fresh database: identical
# checkpoints are then not load-verified again in every test, while new bytes always meet a real probe.
_PROBE_VERDICTS: dict[tuple[str, str], str] = {}

RUN_ID = "exp1"
REMOTE_ROOT = "/workspace/rgt/exp1"
INSTANCE_ID = "box-7f3a"


class Detonator:
    """Pickles as a call to os.system: loading it unsafely would create `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


@dataclass
class Env:
    project: ProjectConfig
    run: RunConfig
    db: StateDB
    transport: LocalTransport
    box: Path  # the result root as a folder on this machine

    @property
    def local(self) -> Path:
        return self.project.run_dir(self.run.id)

    def with_run(self, **changes: Any) -> Env:
        run = replace(self.run, **changes)
        project = replace(self.project, runs={run.id: run})
        return Env(project, run, self.db, self.transport, self.box)


def make_env(tmp: Path, roster: tuple[str, ...] = ("seed0", "seed1"), **run_changes: Any) -> Env:
    project_root = tmp / "project"
    project_root.mkdir(parents=True, exist_ok=True)
    run = RunConfig(
        id=RUN_ID, instance="box", workdir="/workspace/proj", command="python train.py", log="train.log",
        remote_root=REMOTE_ROOT, roster=roster, python=sys.executable,
    )
    run = replace(run, **run_changes)
    project = ProjectConfig(
        root=project_root, file=project_root / "rgt.toml", name="demo",
        instances={"box": InstanceConfig(name="box", provider="sim", id=INSTANCE_ID)}, runs={run.id: run},
    )
    disk = tmp / "disk"
    disk.mkdir(exist_ok=True)
    transport = LocalTransport(root=disk)
    box = Path(transport.resolve(REMOTE_ROOT))
    box.mkdir(parents=True, exist_ok=True)
    db = StateDB(project.state_db)
    for (sha256, key), result in _PROBE_VERDICTS.items():
        db.store_load_check(sha256, key, json.loads(result))
    return Env(project, run, db, transport, box)


def keep_probe_verdicts(env: Env) -> None:
    """Remember the verdicts real probes gave in this test (read from the SQLite file itself)."""
    with sqlite3.connect(env.project.state_db) as conn:
        for sha256, key, result in conn.execute("SELECT sha256, probe_key, result FROM checkpoint_probes"):
            _PROBE_VERDICTS[(sha256, key)] = result
    env.db.close()


def state_dict(seed: int, nan: bool = False) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(4, 3, generator=generator)
    if nan:
        weight[1, 2] = float("nan")
    return {"encoder.0.weight": weight, "encoder.0.bias": torch.zeros(4), "steps": torch.tensor([seed])}


def write_cell(box: Path, cell: str, seed: int = 0, *, nan: bool = False, detonator: Path | None = None,
               legacy: bool = False) -> None:
    """A finished cell: best.pth (a tiny real checkpoint), best_metrics.json and a log."""
    folder = box / cell
    folder.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {"model_state_dict": state_dict(seed, nan), "epoch": 3}
    if detonator is not None:
        payload["extra"] = Detonator(detonator)
    torch.save(payload, folder / "best.pth", _use_new_zipfile_serialization=not legacy)
    (folder / "best_metrics.json").write_text(json.dumps({"val_loss": 0.25 + seed / 100}), encoding="utf-8")
    (folder / f"{cell}.log").write_text(f"epoch 3 val_loss {0.25 + seed / 100}\n", encoding="utf-8")


def write_run(box: Path, roster: tuple[str, ...] = ("seed0", "seed1")) -> None:
    for seed, cell in enumerate(roster):
        write_cell(box, cell, seed)


def flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    index = len(data) // 2 if offset is None else offset
    data[index] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate(path: Path, keep: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])


def status_of(files: list[Any], path: str) -> str:
    matches = [item.status for item in files if item.path == path]
    assert len(matches) == 1, (path, files)
    return str(matches[0])
