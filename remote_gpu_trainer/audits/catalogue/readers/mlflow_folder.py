"""An MLflow file store (`mlruns/`) as a capsule, read from the files, without mlflow (docs/verify.md §5).

Layout: `mlruns/<experiment_id>/<run_id>/meta.yaml` (run_id, run_name, status, start_time, end_time,
lifecycle_stage), `params/<key>` (the value as text), `metrics/<key>` (one line per logged point:
`<timestamp ms> <value> <step>`; very old stores omit the step), `tags/<key>`. A key with `/` is a nested
folder. A cell is one run: when the store holds several, the latest started active run is read and the
others are named in a problem. Params become the config (typed back from text), `mlflow.source.git.commit`
the code commit, and the run's identity `provenance.tracker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import Capsule
from remote_gpu_trainer.audits.catalogue.readers.common import Curves, Reading, number, tracker_tests, typed, walk_files

SOURCE = "mlflow"
STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
SKIP_FOLDERS = {".trash", "models", ".migrations"}


def read(root: Path, run_id: str, cell: str, paths: list[Path]) -> Capsule:
    reading = Reading(root, f"runs/{run_id}/{cell}")
    curves = Curves()
    runs = [run for mlruns in paths for run in _runs(reading, mlruns)]
    if not runs:
        if paths:
            reading.problem(paths[0], "no run folder with a meta.yaml")
        return reading.capsule(run_id, cell, SOURCE, curves, None)
    folder, meta = max(runs, key=lambda run: (number(run[1].get("start_time")) or 0.0, run[0].name))
    if len(runs) > 1:
        reading.problem(folder.parent.parent, f"{len(runs)} MLflow runs in one cell; read {folder.name} (the "
                                              "latest started), keep one run per cell")
    for key, path in walk_files(folder / "metrics"):
        _read_metric(reading, key, path, curves)
    config = {key: typed(text) for key, text in _texts(reading, folder / "params").items()}
    tags = _texts(reading, folder / "tags")
    meta_path = folder / "meta.yaml"
    tests = tracker_tests(curves, reading.rel(meta_path), reading.sha(meta_path), SOURCE)
    return reading.capsule(run_id, cell, SOURCE, curves, _train_source(folder), config=config or None,
                           tests=tests, run_record=_record(meta, config, tags))


def _runs(reading: Reading, mlruns: Path) -> list[tuple[Path, Mapping[str, Any]]]:
    """Every active run (folder, parsed meta.yaml) of every experiment in the store."""
    runs = []
    for experiment in sorted(p for p in mlruns.iterdir() if p.is_dir() and not p.is_symlink()):
        if experiment.name in SKIP_FOLDERS:
            continue
        for folder in sorted(p for p in experiment.iterdir() if p.is_dir() and not p.is_symlink()):
            meta_path = folder / "meta.yaml"
            if not meta_path.is_file():
                continue
            meta = reading.read_yaml(meta_path)
            if not isinstance(meta, Mapping):
                if meta is not None:
                    reading.problem(meta_path, "is not a mapping of keys to values")
                continue
            if meta.get("lifecycle_stage") != "deleted":
                runs.append((folder, meta))
    return runs


def _read_metric(reading: Reading, key: str, path: Path, curves: Curves) -> None:
    """One metric file's points; lines that are not `timestamp value [step]` are counted in one problem."""
    data = reading.read_bytes(path)
    if data is None:
        return
    bad = 0
    for line in data.decode("utf-8", errors="replace").splitlines():
        fields = line.split()
        if not fields:
            continue
        try:
            value = float(fields[1])
            step = int(fields[2]) if len(fields) > 2 else 0
        except (IndexError, ValueError):
            bad += 1
            continue
        curves.add_point(key, step, value)
    if bad:
        reading.problem(path, f"{bad} line{'s' if bad > 1 else ''} not `timestamp value step` (left out)")


def _texts(reading: Reading, folder: Path) -> dict[str, str]:
    """`<folder>/<key>` files as key → text (params, tags)."""
    texts = {}
    for key, path in walk_files(folder) if folder.is_dir() else ():
        data = reading.read_bytes(path)
        if data is not None:
            texts[key] = data.decode("utf-8", errors="replace")
    return texts


def _train_source(folder: Path) -> Path:
    """The file a curve finding cites: the loss metric when there is one, else the run's meta.yaml."""
    for name in ("loss", "train_loss", "train/loss"):
        if (folder / "metrics" / name).is_file():
            return folder / "metrics" / name
    return folder / "meta.yaml"


def _record(meta: Mapping[str, Any], config: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, Any]:
    """The run.json fields an MLflow run holds: seed (a `seed` param), code commit, and its identity."""
    status = meta.get("status")
    tracker = {"backend": "mlflow", "run_id": meta.get("run_id"), "experiment_id": meta.get("experiment_id"),
               "run_name": meta.get("run_name") or tags.get("mlflow.runName"),
               "status": STATUS.get(status, status) if isinstance(status, int) else status}
    provenance: dict[str, Any] = {"tracker": tracker}
    if "seed" in config:
        provenance["seed"] = config["seed"]
    commit = tags.get("mlflow.source.git.commit")
    if commit:
        provenance["code"] = {"commit": commit.strip()}
    return {"source": SOURCE, "provenance": provenance}
