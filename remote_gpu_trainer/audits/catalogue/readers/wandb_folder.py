"""A Weights & Biases local run folder (`wandb/run-<date>_<time>-<id>/files/`) as a capsule (docs/verify.md §5).

`files/config.yaml` holds `{key: {value: v}}` entries (older clients add `desc: null`) next to
`wandb_version` and the client's own `_wandb` block; `files/wandb-summary.json` the last logged value of
every key (`_step`, `_runtime`, `_timestamp` and `_wandb` are the client's); `files/wandb-metadata.json`
the program, args, git remote and commit, and GPU. The history itself is in the binary `run-<id>.wandb`
log: read with the wandb package's own protobuf schema (readers/wandb_history.py), it gives the curve, and in
offline mode, where wandb 0.31 writes no config.yaml and no summary, the config and the final numbers too.
A cell is one run: with several run folders the latest (by the date in its name) is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.model import Capsule
from remote_gpu_trainer.audits.catalogue.readers.common import WANDB_RUN, Curves, Reading, number, tracker_tests

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.catalogue.readers.wandb_history import History

SOURCE = "wandb"
MAX_LOG_BYTES = 512 << 20  # a run's binary log read whole; beyond this it is named, not read
CLIENT_KEYS = {"wandb_version", "_wandb"}


def read(root: Path, run_id: str, cell: str, paths: list[Path]) -> Capsule:
    reading = Reading(root, f"runs/{run_id}/{cell}")
    curves = Curves()
    if not paths:
        return reading.capsule(run_id, cell, SOURCE, curves, None)
    files = max(paths, key=lambda p: p.parent.name.removeprefix("offline-"))
    if len(paths) > 1:
        reading.problem(files.parent.parent, f"{len(paths)} W&B runs in one cell; read {files.parent.name} "
                                             "(the latest), keep one run per cell")
    config = _config(reading, files / "config.yaml")
    summary_path = files / "wandb-summary.json"
    step = _summary(reading, summary_path, curves)
    log = _log_path(files.parent)
    history = _history(reading, log, curves) if log is not None else None
    if history is not None and not summary_path.is_file():
        for key, value in history.summary.items():
            curves.add_point(key, None, value)
        steps = [s for s, _ in history.rows if s is not None]
        step = max(steps) if steps else step
    config = config or (dict(history.config) if history is not None and history.config else None)
    source_path = summary_path if summary_path.is_file() or log is None else log
    extra = {"step": step} if step is not None else {}
    tests = tracker_tests(curves, reading.rel(source_path), reading.sha(source_path), SOURCE, extra)
    metadata = _metadata(reading, files / "wandb-metadata.json")
    record = _record(files.parent.name, config or {}, metadata)
    train_source = log if history is not None and history.rows else None
    return reading.capsule(run_id, cell, SOURCE, curves, train_source, config=config, tests=tests,
                           run_record=record)


def _log_path(folder: Path) -> Path | None:
    """The run's binary log `run-<id>.wandb` (a regular file, never a symlink), or None."""
    logs = sorted(p for p in folder.glob("run-*.wandb") if not p.is_symlink() and p.is_file())
    return logs[-1] if logs else None


def _history(reading: Reading, path: Path, curves: Curves) -> History | None:
    """Fold the log's history rows into `curves`; None (with a problem naming why) when it cannot be read."""
    from remote_gpu_trainer.audits.catalogue.readers.wandb_history import WandbMissing, read_history

    if path.stat().st_size > MAX_LOG_BYTES:
        reading.problem(path, f"larger than {MAX_LOG_BYTES >> 20} MiB: its history is not read")
        return None
    data = reading.read_bytes(path)
    if data is None:
        return None
    try:
        history = read_history(data)
    except WandbMissing as exc:
        reading.problem(path, f"W&B history not read: {exc}")
        return None
    for message in history.problems:
        reading.problem(path, message)
    for step, values in history.rows:
        for key, value in values.items():
            curves.add_point(key, step, value)
    return history


def _config(reading: Reading, path: Path) -> dict[str, Any] | None:
    """config.yaml's values, unwrapped from `{value: v}`; the client's own keys left out."""
    if not path.is_file():
        return None
    data = reading.read_yaml(path)
    if data is None:
        return None
    if not isinstance(data, Mapping):
        reading.problem(path, "is not a mapping of keys to {value: ...} entries")
        return None
    config: dict[str, Any] = {}
    for key, entry in data.items():
        if str(key) in CLIENT_KEYS:
            continue
        config[str(key)] = entry["value"] if isinstance(entry, Mapping) and "value" in entry else entry
    return config or None


def _summary(reading: Reading, path: Path, curves: Curves) -> int | None:
    """Fold the summary's eval numbers into `curves` (no step: each is final); the run's last `_step`."""
    if not path.is_file():
        return None
    data = reading.read_json(path)
    if data is None:
        return None
    if not isinstance(data, Mapping):
        reading.problem(path, "is not a JSON object of key -> last value")
        return None
    for key, value in data.items():
        value_number = number(value)
        if isinstance(key, str) and not key.startswith("_") and value_number is not None:
            curves.add_point(key, None, value_number)
    step = number(data.get("_step"))
    return int(step) if step is not None and step.is_integer() else None


def _metadata(reading: Reading, path: Path) -> Mapping[str, Any]:
    if not path.is_file():
        return {}
    data = reading.read_json(path)
    if data is not None and not isinstance(data, Mapping):
        reading.problem(path, "is not a JSON object")
    return data if isinstance(data, Mapping) else {}


def _record(folder: str, config: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The run.json fields a W&B run holds: seed (a `seed` config key), code, command, GPU, identity."""
    match = WANDB_RUN.match(folder)
    provenance: dict[str, Any] = {"tracker": {"backend": "wandb", "run_id": match["id"] if match else None}}
    if "seed" in config:
        provenance["seed"] = config["seed"]
    git = metadata.get("git")
    if isinstance(git, Mapping) and isinstance(git.get("commit"), str):
        provenance["code"] = {"repo": git.get("remote"), "commit": git["commit"]}
    program, args = metadata.get("program"), metadata.get("args")
    if isinstance(program, str):
        listed = args if isinstance(args, list) else []
        provenance["command"] = {"argv": ["python", program, *(str(a) for a in listed if a is not None)]}
    if isinstance(metadata.get("gpu"), str):
        provenance["hardware"] = {"gpu": metadata["gpu"], "count": metadata.get("gpu_count"),
                                  "cuda": metadata.get("cuda") or metadata.get("cudaVersion")}
    return {"source": SOURCE, "provenance": provenance}
