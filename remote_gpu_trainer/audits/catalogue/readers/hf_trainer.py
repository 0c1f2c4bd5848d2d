"""Hugging Face Trainer `trainer_state.json` as a capsule (docs/verify.md §5).

`log_history` holds one dict per logging event: training entries (`loss`, `learning_rate`, `grad_norm`,
`epoch`, `step`), evaluation entries (`eval_<metric>`, `eval_runtime`, ..., `epoch`, `step`) and one closing
summary (`train_runtime`, `train_loss` averaged over the run, ...). Training and eval entries become the
curve; the summary is a run average, never a curve point. The last eval entry's numbers are the `val` test
(an `eval(metric_key_prefix="test")` call logs `test_<metric>`: the `test` test). The file's top level
gives a config of the Trainer's budget fields and the best checkpoint it kept.

Every checkpoint folder holds its own copy; the one with the highest `global_step` has the longest history.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import Capsule
from remote_gpu_trainer.audits.catalogue.readers.common import Curves, Reading, number, tracker_tests
from remote_gpu_trainer.audits.log.metrics import key_table

SOURCE = "trainer_state"
CONFIG_KEYS = ("train_batch_size", "num_train_epochs", "max_steps", "logging_steps", "eval_steps", "save_steps")


def read(root: Path, run_id: str, cell: str, paths: list[Path]) -> Capsule:
    reading = Reading(root, f"runs/{run_id}/{cell}")
    states = [(path, reading.read_json(path)) for path in paths]
    usable = [(path, state) for path, state in states if _history(reading, path, state) is not None]
    curves = Curves()
    if not usable:
        return reading.capsule(run_id, cell, SOURCE, curves, None)
    path, state = max(usable, key=lambda item: (_global_step(item[1]), -len(item[0].parts)))
    for entry in state["log_history"]:
        if isinstance(entry, Mapping) and not _is_summary(entry):
            curves.add_record(entry)
    tests = tracker_tests(curves, reading.rel(path), reading.sha(path), SOURCE, _best(state))
    return reading.capsule(run_id, cell, SOURCE, curves, path, config=_config(state), tests=tests)


def _history(reading: Reading, path: Path, state: Any) -> list[Any] | None:
    """The log_history list, or None (with a problem when the file parsed but is not a trainer state)."""
    history = state.get("log_history") if isinstance(state, Mapping) else None
    if state is not None and not isinstance(history, list):
        reading.problem(path, "no `log_history` list: not a Hugging Face trainer state")
        return None
    return history


def _global_step(state: Mapping[str, Any]) -> float:
    value = number(state.get("global_step"))
    return value if value is not None else -1.0


def _is_summary(entry: Mapping[str, Any]) -> bool:
    """The Trainer's closing entry (`train_runtime`, ...): averages over the run, not a logged point."""
    markers = key_table().summary_markers
    return any(isinstance(key, str) and key.lower() in markers for key in entry)


def _config(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Trainer's budget as trainer_state records it (training_args.bin is a pickle and is never read)."""
    config = {key: state[key] for key in CONFIG_KEYS if key in state and state[key] is not None}
    return config or None


def _best(state: Mapping[str, Any]) -> dict[str, Any]:
    """`best_metric` / `best_model_checkpoint` (set when the Trainer tracked a best model), for the tests."""
    best: dict[str, Any] = {}
    if number(state.get("best_metric")) is not None:
        best["best_metric"] = state["best_metric"]
    if isinstance(state.get("best_model_checkpoint"), str):
        best["best_model_checkpoint"] = state["best_model_checkpoint"]
    return best
