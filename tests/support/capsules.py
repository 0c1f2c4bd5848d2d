"""Write small real VERIFY inputs (capsules, split manifests, EVIDENCE.json) into a project folder, in the
formats of docs/verify.md §5, so audit tests run on files on disk exactly as a user's project holds them.

Every writer takes the project root and returns the path it wrote; the defaults make a clean capsule that
passes every check it feeds, so a test changes only the one thing it plants.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue.load import Declarations, load_project
from remote_gpu_trainer.audits.catalogue.model import ProjectEvidence


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(data), sort_keys=True), encoding="utf-8")
    return path


def run_record(run_id: str, cell: str, *, seed: int = 0, provenance_hash: str | None = None,
               selection_split: str = "val", epochs: int = 10, best_sha256: str = "ab" * 32,
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A complete run.json (docs/verify.md §5.1) whose fields can be overridden one by one with `extra`
    (a top-level key replaces that key; `provenance` keys are merged)."""
    record: dict[str, Any] = {
        "schema": "remote-gpu-trainer/RUN/v1", "run_id": run_id, "cell": cell, "exp_id": run_id,
        "task": "classification", "created_at": "2026-06-20T14:03:11Z", "closed_at": "2026-06-21T02:10:45Z",
        "rerun_of": None,
        "provenance": {
            "provenance_hash": provenance_hash or "sha256:" + hashlib.sha256(f"{run_id}/{cell}".encode()).hexdigest(),
            "config": {"path": "config.yaml", "sha256": "00" * 32},
            "code": {"repo": "local", "commit": "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071", "dirty": False,
                     "dirty_diff_sha256": None},
            "data": {"dataset": "synthetic", "split_manifest": "splits/main.json",
                     "split_manifest_sha256": "77" * 32, "data_sha256": "7c" * 32},
            "seed": seed,
            "determinism": {"declared": False, "flags": []},
            "env_lock": {"path": "requirements.lock", "sha256": "11" * 32},
            "hardware": {"gpu": "cpu", "count": 0, "driver": None, "cuda": None, "torch": "2.13.0+cpu"},
            "command": {"argv": ["python", "train.py"], "overrides": [], "env": {}},
        },
        "training": {"world_size": 1, "per_device_batch": 16, "grad_accum": 1, "effective_batch": 16,
                     "epochs": epochs, "steps": epochs * 100, "precision": "fp32"},
        "selection": {"criterion": "acc", "split": selection_split, "direction": "higher_is_better",
                      "epoch": epochs, "step": epochs * 100, "value": 0.9},
        "checkpoints": {"best": {"path": "best.pth", "sha256": best_sha256, "epoch": epochs}},
        "tests": [{"test_id": "main", "split": "test", "checkpoint": "best", "n": 0}],
    }
    for key, value in (extra or {}).items():
        if key == "provenance" and isinstance(value, Mapping):
            record["provenance"].update(value)
        else:
            record[key] = value
    return record


def _shipped_direction(metric: str) -> str:
    """The direction a careful evaluation script writes: the shipped registry's word (lpips is lower-is-better),
    higher-is-better for a metric the registry does not know."""
    short = metric_registry.direction(metric)
    return metric_registry.DIRECTION_WORDS.get(short or "", "higher_is_better")


def write_capsule(root: Path, run_id: str, cell: str, *, seed: int = 0,
                  config: Mapping[str, Any] | None = None,
                  metrics: Mapping[str, float] | None = None,
                  directions: Mapping[str, str] | None = None,
                  items: Sequence[Mapping[str, Any]] | None = None,
                  train: Sequence[Mapping[str, Any]] | None = None,
                  test_id: str = "main", split: str = "test",
                  n: int | None = None,
                  record: Mapping[str, Any] | None = None,
                  metrics_extra: Mapping[str, Any] | None = None,
                  results_format: str = "csv") -> Path:
    """A capsule `runs/<run>/<cell>/`: run.json, config.yaml, train.csv, test/<test>/metrics.json and per-item
    results. `metrics` maps metric -> value (aggregate `mean` of the column of the same name in `items`);
    `items` are per-item rows (item_id added when absent); `record` overrides run.json fields
    (see run_record); `metrics_extra` overrides metrics.json's top-level fields."""
    folder = root / "runs" / run_id / cell
    write_json(folder / "run.json", run_record(run_id, cell, seed=seed, extra=record))
    write_yaml(folder / "config.yaml", config if config is not None else {"model": {"width": 64}, "lr": 0.001,
                                                                         "seed": seed, "epochs": 10})
    write_csv(folder / "train.csv", train if train is not None else
              [{"step": 100 * (i + 1), "epoch": i + 1, "loss": 1.0 / (i + 1), "lr": 0.001, "grad_norm": 1.0,
                "val/acc": 0.5 + 0.04 * i} for i in range(10)])
    rows = [dict(row) for row in (items or [])]
    for index, row in enumerate(rows):
        row.setdefault("item_id", f"item{index:04d}")
        row.setdefault("split", split)
    blocks = {name: {"value": value, "direction": (directions or {}).get(name, _shipped_direction(name)),
                     "unit": None, "aggregate": "mean", "column": name}
              for name, value in (metrics or {}).items()}
    body: dict[str, Any] = {
        "schema": "remote-gpu-trainer/METRICS/v1", "run_id": run_id, "cell": cell, "test_id": test_id,
        "split": split, "n": n if n is not None else len(rows), "checkpoint_sha256": "ab" * 32,
        "protocol_id": "p1", "eval_command": {"argv": ["python", "eval.py"], "overrides": []},
        "metrics": blocks, "metric_applicability": "applicable", "created_at": "2026-06-21T01:58:02Z",
    }
    body.update(metrics_extra or {})
    test_dir = folder / "test" / test_id
    write_json(test_dir / "metrics.json", body)
    if rows:
        if results_format == "parquet":
            import pandas as pd

            pd.DataFrame(rows).to_parquet(test_dir / "results.parquet")
        else:
            write_csv(test_dir / "results.csv", rows)
    return folder


def write_split(root: Path, split_set_id: str, members: Mapping[str, Sequence[tuple[str, bytes]]], *,
                hash_unit: str = "file_bytes", method: str = "random",
                extra: Mapping[str, Any] | None = None, folder: str = "data") -> Path:
    """A split manifest over real files: `members[split]` lists (relative name, bytes); each file is written
    under `<folder>/<split>/` and listed with the sha256 of its bytes."""
    listed: dict[str, list[dict[str, Any]]] = {}
    for split, files in members.items():
        rows = []
        for name, data in files:
            path = root / folder / split / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            rows.append({"id": f"{split}-{name}", "path": path.relative_to(root).as_posix(),
                         "sha256": hashlib.sha256(data).hexdigest(), "group": None, "time": None})
        listed[split] = rows
    body: dict[str, Any] = {"schema": "remote-gpu-trainer/SPLITS/v1", "split_set_id": split_set_id,
                            "dataset": "synthetic", "method": method, "seed": 0, "hash_unit": hash_unit,
                            "created_at": "2026-06-01T10:00:00Z", "members": listed, "fit_records": []}
    body.update(extra or {})
    return write_json(root / "splits" / f"{split_set_id}.json", body)


def write_evidence(root: Path, claims: Sequence[Mapping[str, Any]]) -> Path:
    return write_json(root / "EVIDENCE.json", {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "t",
                                               "claims": list(claims)})


def classification_items(n: int, *, correct: int, classes: int = 10, offset: int = 0) -> list[dict[str, Any]]:
    """`n` per-item rows of a `classes`-way task with exactly `correct` right (column `acc` is 1 or 0)."""
    rows = []
    for i in range(n):
        target = (i + offset) % classes
        pred = target if i < correct else (target + 1) % classes
        rows.append({"item_id": f"item{i:04d}", "target": target, "pred": pred, "acc": float(pred == target)})
    return rows


def load(root: Path, declarations: Declarations | None = None) -> ProjectEvidence:
    """The project as the catalogue sees it."""
    return load_project(root, declarations)
