"""Tracker readers (audits/catalogue/readers): each format written as its library writes it into a cell folder
`runs/<run>/<cell>/`, loaded with `load(root)` like any project, and checked value by value; then a VERIFY
check run on what the reader produced, and malformed input that must be a problem, never an exception."""

from __future__ import annotations

import builtins
import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue import runner as catalogue
from remote_gpu_trainer.audits.catalogue.model import Capsule, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.readers import read_tracker_cell
from remote_gpu_trainer.audits.catalogue.readers.forensics import MISSING, config_diff, curve_peak
from support.capsules import load, write_capsule, write_json


def cell_dir(root: Path, run_id: str = "r", cell: str = "seed0") -> Path:
    folder = root / "runs" / run_id / cell
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def only(project: ProjectEvidence, key: str = "r/seed0") -> Capsule:
    capsule = project.capsule(key)
    assert capsule is not None, [c.key for c in project.capsules]
    return capsule


def check(project: ProjectEvidence, name: str) -> Any:
    spec = catalogue.by_name(name)
    assert spec is not None
    return catalogue.run_check(project, spec)


def column(capsule: Capsule, name: str) -> list[float]:
    assert capsule.train is not None
    return [float(v) for v in capsule.train[name].dropna()]


# -- writers, in each library's own shapes ---------------------------------------------------------------------
def trainer_state(steps: int = 4, *, accuracy: list[float] | None = None) -> dict[str, Any]:
    """As transformers' TrainerState.save_to_json writes it: training entries every logging step, an eval
    entry after each, and the closing summary entry."""
    accuracy = accuracy or [0.6, 0.7, 0.8, 0.85][:steps]
    history: list[dict[str, Any]] = []
    for i in range(steps):
        step = 50 * (i + 1)
        history.append({"epoch": 0.5 * (i + 1), "grad_norm": 2.0 - 0.25 * i, "learning_rate": 5e-05 * (1 - i / steps),
                        "loss": 0.9 - 0.2 * i, "step": step})
        history.append({"epoch": 0.5 * (i + 1), "eval_accuracy": accuracy[i], "eval_loss": 0.8 - 0.15 * i,
                        "eval_runtime": 1.25, "eval_samples_per_second": 800.0, "eval_steps_per_second": 100.0,
                        "step": step})
    history.append({"epoch": 0.5 * steps, "step": 50 * steps, "total_flos": 1.0e14, "train_loss": 0.61,
                    "train_runtime": 42.0, "train_samples_per_second": 95.2, "train_steps_per_second": 4.76})
    return {"best_global_step": 50 * steps, "best_metric": max(accuracy),
            "best_model_checkpoint": f"out/checkpoint-{50 * steps}", "epoch": 0.5 * steps, "eval_steps": 50,
            "global_step": 50 * steps, "is_hyper_param_search": False, "is_local_process_zero": True,
            "is_world_process_zero": True, "log_history": history, "logging_steps": 50, "max_steps": 50 * steps,
            "num_input_tokens_seen": 0, "num_train_epochs": 2, "save_steps": 50, "stateful_callbacks": {
                "TrainerControl": {"args": {"should_epoch_stop": False, "should_evaluate": False,
                                            "should_log": False, "should_save": True,
                                            "should_training_stop": True}, "attributes": {}}},
            "total_flos": 1.0e14, "train_batch_size": 16, "trial_name": None, "trial_params": None}


def write_trainer_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_lightning(folder: Path, rows: list[dict[str, Any]], hparams: str | None = "lr: 0.001\nbatch_size: 32\n",
                    version: int = 0) -> Path:
    """As CSVLogger's ExperimentWriter writes: keys sorted, a row per log_metrics call, empty cells."""
    version_dir = folder / "lightning_logs" / f"version_{version}"
    version_dir.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for row in rows for k in row})
    with (version_dir / "metrics.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    if hparams is not None:
        (version_dir / "hparams.yaml").write_text(hparams, encoding="utf-8")
    return version_dir / "metrics.csv"


def lightning_rows(accs: list[float]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for epoch, acc in enumerate(accs):
        step = 10 * (epoch + 1) - 1
        rows.append({"epoch": epoch, "lr-AdamW": 0.001, "step": step, "train_loss_step": 1.0 / (epoch + 1)})
        rows.append({"epoch": epoch, "step": step, "val_acc": acc, "val_loss": 1.2 / (epoch + 1)})
        rows.append({"epoch": epoch, "step": step, "train_loss_epoch": 1.1 / (epoch + 1)})
    return rows


def write_events(folder: Path, accs: list[float], *, epochs: bool = True) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for i, acc in enumerate(accs):
        step = 100 * (i + 1)
        writer.add_scalar("train/loss", 2.0 / (i + 1), step)
        writer.add_scalar("train/learning_rate", 0.01, step)
        writer.add_scalar("eval/accuracy", acc, step)
        if epochs:
            writer.add_scalar("train/epoch", float(i + 1), step)
    writer.close()


def write_mlflow(folder: Path, monkeypatch: pytest.MonkeyPatch, params: dict[str, Any], losses: list[float],
                 accs: list[float]) -> str:
    """A real file store written by mlflow's own API."""
    import mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 refuses the file store without it
    mlflow.set_tracking_uri(f"file://{folder}/mlruns")
    try:
        with mlflow.start_run() as run:
            mlflow.log_params(params)
            mlflow.set_tag("mlflow.source.git.commit", "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071")
            for i, (loss, acc) in enumerate(zip(losses, accs, strict=True)):
                mlflow.log_metric("train_loss", loss, step=10 * i)
                mlflow.log_metric("val_accuracy", acc, step=10 * i)
                mlflow.log_metric("epoch", i, step=10 * i)
            mlflow.log_metric("test_accuracy", accs[-1] - 0.01, step=10 * (len(accs) - 1))
            return str(run.info.run_id)
    finally:
        mlflow.set_tracking_uri("")


WANDB_CONFIG = """wandb_version: 1

_wandb:
  desc: null
  value:
    cli_version: 0.16.6
    framework: torch
    is_jupyter_run: false
    python_version: 3.11.9
    start_time: 1718900000.0
    t:
      1: [1, 55]
      2: [1, 55]
lr:
  desc: null
  value: 0.001
model:
  desc: null
  value:
    width: 64
    depth: 4
seed:
  desc: null
  value: 3
output_dir:
  desc: null
  value: /tmp/out-7h3k9q2x
"""


def write_wandb(folder: Path, *, config: str = WANDB_CONFIG, summary: dict[str, Any] | None = None,
                run: str = "run-20260620_140311-7h3k9q2x") -> Path:
    files = folder / "wandb" / run / "files"
    files.mkdir(parents=True, exist_ok=True)
    (files / "config.yaml").write_text(config, encoding="utf-8")
    write_json(files / "wandb-summary.json", summary if summary is not None else {
        "train/loss": 0.31, "train/learning_rate": 1e-05, "train/global_step": 500, "eval/accuracy": 0.912,
        "eval/loss": 0.27, "eval/runtime": 3.4, "test_accuracy": 0.9, "_step": 500, "_runtime": 812.4,
        "_timestamp": 1718900812.1, "_wandb": {"runtime": 812}})
    write_json(files / "wandb-metadata.json", {
        "os": "Linux-6.5.0-x86_64-with-glibc2.35", "python": "3.11.9", "heartbeatAt": "2026-06-20T14:03:12.5",
        "startedAt": "2026-06-20T14:03:11.9", "docker": None, "cuda": None, "args": ["--lr", "0.001"],
        "state": "running", "program": "train.py", "codePathLocal": "train.py", "codePath": "train.py",
        "git": {"remote": "git@github.com:lab/ours.git", "commit": "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071"},
        "email": None, "root": "/workspace", "host": "box", "username": "u", "executable": "/usr/bin/python",
        "cpu_count": 8, "cpu_count_logical": 16, "gpu": "NVIDIA RTX 4090", "gpu_count": 1,
        "memory": {"total": 62.5}})
    (files / "output.log").write_text("epoch 1 done\n", encoding="utf-8")
    return files


# -- best_metrics.json (legacy cell) ---------------------------------------------------------------------------
def test_a_legacy_cell_reads_as_a_best_metrics_test_with_its_disclosure(tmp_path: Path) -> None:
    folder = cell_dir(tmp_path)
    (folder / "best.pth").write_bytes(b"\x80weights")
    write_json(folder / "best_metrics.json", {"psnr": 31.4238, "ssim": 0.8873, "epoch": 87, "step": 69600})
    capsule = only(load(tmp_path))
    assert capsule.source == "legacy"
    assert capsule.legacy_metrics == {"psnr": 31.4238, "ssim": 0.8873, "epoch": 87, "step": 69600}
    test = capsule.tests["best_metrics"]
    assert (test.split, test.n, test.metrics_path) == ("val", None, "runs/r/seed0/best_metrics.json")
    assert test.metric_value("psnr") == 31.4238 and test.metric_value("ssim") == 0.8873
    assert test.metric_value("epoch") is None
    assert test.metric_block("psnr")["direction"] == "higher_is_better"  # type: ignore[index]
    assert test.metrics is not None and test.metrics["epoch"] == 87 and test.metrics["step"] == 69600
    assert test.metrics["disclosure"] == "legacy cell: no run record or per-item results; not re-derivable"
    assert test.metrics_sha256 is not None and len(test.metrics_sha256) == 64


def test_the_seed_and_other_bookkeeping_beside_legacy_metrics_are_not_metrics(tmp_path: Path) -> None:
    """rgt's own demo wrote {val_loss, epoch, step, seed}: only val_loss is a number VERIFY judges."""
    folder = cell_dir(tmp_path)
    write_json(folder / "best_metrics.json", {"val_loss": 0.12, "epoch": 3, "step": 30, "seed": 1})
    blocks = only(load(tmp_path)).tests["best_metrics"].metrics["metrics"]  # type: ignore[index]
    assert sorted(blocks) == ["val_loss"]


def test_a_legacy_file_that_names_its_split_keeps_it_and_a_native_capsule_gets_no_legacy_test(tmp_path: Path) -> None:
    write_json(cell_dir(tmp_path) / "best_metrics.json", {"acc": 0.91, "split": "test"})
    native = write_capsule(tmp_path, "r", "seed1", metrics={"acc": 0.9})
    write_json(native / "best_metrics.json", {"acc": 0.95})
    project = load(tmp_path)
    assert only(project).tests["best_metrics"].split == "test"
    assert set(only(project, "r/seed1").tests) == {"main"}


def test_a_legacy_file_without_numbers_is_a_problem_naming_it(tmp_path: Path) -> None:
    write_json(cell_dir(tmp_path) / "best_metrics.json", {"note": "best so far"})
    project = load(tmp_path)
    assert only(project).tests == {}
    assert [(p.path, p.message.split(" (")[0]) for p in project.problems] == [
        ("runs/r/seed0/best_metrics.json", "no numeric metric")]


def test_metric_direction_runs_on_a_legacy_cell(tmp_path: Path) -> None:
    write_json(cell_dir(tmp_path) / "best_metrics.json", {"psnr": 31.2, "ssim": 0.88})
    write_json(cell_dir(tmp_path, cell="seed1") / "best_metrics.json", {"psnr": 31.0, "sharpness_score": 0.4})
    outcome = check(load(tmp_path), "metric_direction")
    assert outcome.status == "findings"
    assert {f.subject for f in outcome.findings} == {"capsule:r/seed1"}
    assert "sharpness_score" in outcome.findings[0].message
    assert "capsule:r/seed0" in outcome.passed_subjects


# -- Hugging Face trainer_state.json ---------------------------------------------------------------------------
def test_trainer_state_maps_log_history_onto_the_curve_and_the_last_eval_onto_val(tmp_path: Path) -> None:
    folder = cell_dir(tmp_path)
    write_trainer_state(folder / "out" / "checkpoint-100" / "trainer_state.json", trainer_state(2))
    write_trainer_state(folder / "out" / "checkpoint-200" / "trainer_state.json", trainer_state(4))
    capsule = only(load(tmp_path))
    assert capsule.source == "trainer_state"
    assert capsule.train_path == "runs/r/seed0/out/checkpoint-200/trainer_state.json"
    assert capsule.train is not None
    assert list(capsule.train.columns) == ["step", "epoch", "loss", "lr", "grad_norm", "val/accuracy", "val/loss"]
    assert list(capsule.train["step"]) == [50, 100, 150, 200]
    assert column(capsule, "loss") == pytest.approx([0.9, 0.7, 0.5, 0.3])  # not the summary's train_loss 0.61
    assert column(capsule, "lr")[0] == pytest.approx(5e-05)
    assert column(capsule, "epoch") == [0.5, 1.0, 1.5, 2.0]
    assert column(capsule, "val/accuracy") == [0.6, 0.7, 0.8, 0.85]
    val = capsule.tests["val"]
    assert set(capsule.tests) == {"val"} and val.split == "val"
    assert val.metric_value("accuracy") == 0.85 and val.metric_value("loss") == pytest.approx(0.35)
    assert val.metric_value("runtime") is None and val.metric_value("samples_per_second") is None
    assert val.metrics is not None and val.metrics["step"] == 200 and val.metrics["epoch"] == 2.0
    assert val.metrics["best_metric"] == 0.85 and val.metrics["best_model_checkpoint"] == "out/checkpoint-200"
    assert capsule.config == {"train_batch_size": 16, "num_train_epochs": 2, "max_steps": 200,
                              "logging_steps": 50, "eval_steps": 50, "save_steps": 50}
    assert capsule.run_record is None and capsule.problems == ()


def test_empty_or_zero_runs_on_a_trainer_state(tmp_path: Path) -> None:
    write_trainer_state(cell_dir(tmp_path) / "trainer_state.json", trainer_state(4))
    write_trainer_state(cell_dir(tmp_path, cell="seed1") / "trainer_state.json",
                        trainer_state(4, accuracy=[0.0, 0.0, 0.0, 0.0]))
    outcome = check(load(tmp_path), "empty_or_zero")
    assert outcome.status == "findings"
    assert [(f.subject, f.severity) for f in outcome.findings] == [("capsule:r/seed1", "error")]
    assert "no predictions emitted" in outcome.findings[0].message
    assert "capsule:r/seed0" in outcome.passed_subjects


# -- Lightning CSVLogger metrics.csv ---------------------------------------------------------------------------
def test_lightning_rows_merge_by_step_and_hparams_are_the_config(tmp_path: Path) -> None:
    folder = cell_dir(tmp_path)
    write_lightning(folder, lightning_rows([0.1]), version=0)  # an earlier attempt
    write_lightning(folder, lightning_rows([0.5, 0.7, 0.65]), version=1)
    capsule = only(load(tmp_path))
    assert capsule.source == "lightning"
    assert capsule.train_path == "runs/r/seed0/lightning_logs/version_1/metrics.csv"
    assert capsule.train is not None
    assert list(capsule.train.columns) == ["step", "epoch", "loss", "lr", "val/acc", "val/loss"]
    assert list(capsule.train["step"]) == [9, 19, 29]
    assert column(capsule, "epoch") == [0.0, 1.0, 2.0]
    assert column(capsule, "loss") == pytest.approx([1.0, 0.5, 1 / 3])  # train_loss_step; _epoch averages dropped
    assert column(capsule, "lr") == [0.001] * 3
    assert column(capsule, "val/acc") == [0.5, 0.7, 0.65]
    assert capsule.config == {"lr": 0.001, "batch_size": 32}
    val = capsule.tests["val"]
    assert val.metric_value("acc") == 0.65 and val.metric_value("loss") == pytest.approx(0.4)
    assert val.metrics is not None and val.metrics["epoch"] == 2.0
    assert val.metrics_path == "runs/r/seed0/lightning_logs/version_1/metrics.csv"


def test_a_nan_loss_in_a_lightning_csv_stays_nan_in_the_curve(tmp_path: Path) -> None:
    rows = lightning_rows([0.5, 0.6])
    rows[3]["train_loss_step"] = float("nan")
    write_lightning(cell_dir(tmp_path), rows)
    capsule = only(load(tmp_path))
    assert capsule.train is not None
    assert math.isnan(float(capsule.train["loss"].iloc[1]))


def test_metric_direction_runs_on_a_lightning_cell(tmp_path: Path) -> None:
    rows = lightning_rows([0.5, 0.6])
    rows[1]["val_wobble"] = 0.3
    write_lightning(cell_dir(tmp_path), rows)
    write_lightning(cell_dir(tmp_path, cell="seed1"), lightning_rows([0.5, 0.6]))
    outcome = check(load(tmp_path), "metric_direction")
    assert [f.subject for f in outcome.findings] == ["capsule:r/seed0"]
    assert "wobble" in outcome.findings[0].message and outcome.findings[0].severity == "error"
    assert "capsule:r/seed1" in outcome.passed_subjects


# -- TensorBoard event files -----------------------------------------------------------------------------------
def test_tensorboard_scalars_map_onto_the_curve(tmp_path: Path) -> None:
    write_events(cell_dir(tmp_path) / "runs" / "Jun20_14-03-11_box", [0.5, 0.75, 0.625])
    capsule = only(load(tmp_path))
    assert capsule.source == "tensorboard"
    assert capsule.train_path is not None and "events.out.tfevents." in capsule.train_path
    assert capsule.train is not None
    assert list(capsule.train.columns) == ["step", "epoch", "loss", "lr", "val/accuracy"]
    assert list(capsule.train["step"]) == [100, 200, 300]
    assert column(capsule, "loss") == pytest.approx([2.0, 1.0, 2 / 3])
    assert column(capsule, "lr") == pytest.approx([0.01] * 3)
    assert column(capsule, "epoch") == [1.0, 2.0, 3.0]
    assert column(capsule, "val/accuracy") == [0.5, 0.75, 0.625]  # exact in float32
    val = capsule.tests["val"]
    assert val.metric_value("accuracy") == 0.625 and val.metrics is not None and val.metrics["step"] == 300
    assert capsule.config is None and capsule.problems == ()


def test_a_tag_two_writer_folders_share_is_named_by_its_folder(tmp_path: Path) -> None:
    """One SummaryWriter per split, both logging `loss`: the folder keeps them apart (`train/loss`, `val/loss`)."""
    from torch.utils.tensorboard import SummaryWriter

    for name, values in (("train", [1.0, 0.5]), ("val", [1.25, 0.75])):
        writer = SummaryWriter(str(cell_dir(tmp_path) / "logs" / name))
        for epoch, value in enumerate(values):
            writer.add_scalar("loss", value, epoch)
        writer.close()
    capsule = only(load(tmp_path))
    assert capsule.train is not None
    assert column(capsule, "loss") == [1.0, 0.5]
    assert column(capsule, "val/loss") == [1.25, 0.75]


def test_trajectory_shape_flags_an_early_peak_read_from_tensorboard(tmp_path: Path) -> None:
    write_events(cell_dir(tmp_path), [0.5, 0.9, 0.8, 0.7, 0.65, 0.6, 0.6, 0.6, 0.6, 0.6])
    write_events(cell_dir(tmp_path, cell="seed1"), [0.5, 0.6, 0.7, 0.75, 0.8, 0.82, 0.84, 0.85, 0.86, 0.87])
    outcome = check(load(tmp_path), "trajectory_shape")
    assert outcome.status == "findings"
    assert [(f.subject, f.severity) for f in outcome.findings] == [("capsule:r/seed0", "warn")]
    assert "early peak then decline" in outcome.findings[0].message
    assert "capsule:r/seed1" in outcome.passed_subjects


def test_curve_peak_reads_best_and_last_by_direction(tmp_path: Path) -> None:
    write_events(cell_dir(tmp_path), [0.5, 0.875, 0.75, 0.625])
    capsule = only(load(tmp_path))
    peak = curve_peak(capsule.train, "val/accuracy")
    assert peak is not None
    assert (peak.direction, peak.best, peak.best_step, peak.best_epoch) == ("max", 0.875, 200, 2.0)
    assert (peak.last, peak.last_step, peak.last_epoch) == (0.625, 400, 4.0)
    assert peak.gap == 0.25 and peak.relative_gap == pytest.approx(0.25 / 0.375)
    loss = curve_peak(capsule.train, "loss")
    assert loss is not None and (loss.direction, loss.best_step, loss.gap) == ("min", 400, 0.0)
    assert curve_peak(capsule.train, "grad_norm") is None  # no such column
    assert curve_peak(capsule.train, "lr") is None  # no direction: lr is not an objective


# -- MLflow mlruns/ --------------------------------------------------------------------------------------------
def test_an_mlflow_store_maps_params_metrics_and_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = cell_dir(tmp_path)
    run_id = write_mlflow(folder, monkeypatch, {"lr": 0.001, "model.width": 64, "optimizer": "adam", "seed": 3,
                                                "amp": True},
                          [1.0, 0.5, 0.25], [0.6, 0.8, 0.9])
    capsule = only(load(tmp_path))
    assert capsule.source == "mlflow"
    assert capsule.config == {"lr": 0.001, "model.width": 64, "optimizer": "adam", "seed": 3, "amp": True}
    assert capsule.train is not None
    assert list(capsule.train.columns) == ["step", "epoch", "loss", "val/accuracy"]
    assert list(capsule.train["step"]) == [0, 10, 20]
    assert column(capsule, "loss") == [1.0, 0.5, 0.25] and column(capsule, "epoch") == [0.0, 1.0, 2.0]
    assert capsule.train_path is not None and capsule.train_path.endswith(f"{run_id}/metrics/train_loss")
    assert capsule.tests["val"].metric_value("accuracy") == 0.9
    assert capsule.tests["test"].split == "test" and capsule.tests["test"].metric_value("accuracy") == 0.89
    assert capsule.seed == 3 and capsule.prov("code", "commit") == "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071"
    assert capsule.prov("tracker", "run_id") == run_id and capsule.prov("tracker", "status") == "FINISHED"
    assert capsule.problems == ()


def test_seed_count_runs_on_mlflow_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(2):
        write_mlflow(cell_dir(tmp_path, cell=f"seed{seed}"), monkeypatch, {"lr": 0.001, "seed": seed},
                     [1.0, 0.5], [0.8, 0.9 - 0.01 * seed])
    project = load(tmp_path)
    outcome = check(project, "seed_count")
    assert outcome.status == "findings"
    assert any(f.subject == "number:r/val/accuracy" for f in outcome.findings), outcome.findings


def test_two_mlflow_runs_in_one_cell_read_the_latest_and_say_so(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    folder = cell_dir(tmp_path)
    write_mlflow(folder, monkeypatch, {"lr": 0.1}, [1.0], [0.1])
    write_mlflow(folder, monkeypatch, {"lr": 0.002}, [1.0], [0.7])
    project = load(tmp_path)
    assert only(project).config == {"lr": 0.002}
    assert [p.message.split(";")[0] for p in project.problems] == ["2 MLflow runs in one cell"]


# -- Weights & Biases run folder -------------------------------------------------------------------------------
def test_a_wandb_run_folder_maps_config_summary_and_metadata(tmp_path: Path) -> None:
    write_wandb(cell_dir(tmp_path))
    capsule = only(load(tmp_path))
    assert capsule.source == "wandb"
    assert capsule.config == {"lr": 0.001, "model": {"width": 64, "depth": 4}, "seed": 3,
                              "output_dir": "/tmp/out-7h3k9q2x"}
    assert capsule.train is None  # the history is in the binary .wandb log
    val = capsule.tests["val"]
    assert val.metric_value("accuracy") == 0.912 and val.metric_value("loss") == 0.27
    assert val.metric_value("runtime") is None
    assert val.metrics is not None and val.metrics["step"] == 500
    assert val.metrics_path == "runs/r/seed0/wandb/run-20260620_140311-7h3k9q2x/files/wandb-summary.json"
    assert capsule.tests["test"].metric_value("accuracy") == 0.9
    assert capsule.seed == 3 and capsule.prov("tracker") == {"backend": "wandb", "run_id": "7h3k9q2x"}
    assert capsule.prov("code") == {"repo": "git@github.com:lab/ours.git",
                                    "commit": "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071"}
    assert capsule.prov("command", "argv") == ["python", "train.py", "--lr", "0.001"]
    assert capsule.prov("hardware", "gpu") == "NVIDIA RTX 4090"
    assert capsule.problems == ()


def test_empty_or_zero_runs_on_wandb_summaries(tmp_path: Path) -> None:
    write_wandb(cell_dir(tmp_path))
    write_wandb(cell_dir(tmp_path, cell="seed1"), summary={"eval/accuracy": 0.912, "_step": 10})
    outcome = check(load(tmp_path), "empty_or_zero")
    assert outcome.status == "pass"
    assert set(outcome.subjects) == {"capsule:r/seed0", "capsule:r/seed1"}


def test_tensorboard_curves_take_the_config_of_the_wandb_run_beside_them(tmp_path: Path) -> None:
    folder = cell_dir(tmp_path)
    write_events(folder / "runs" / "Jun20", [0.5, 0.625])
    write_wandb(folder)
    capsule = only(load(tmp_path))
    assert capsule.source == "tensorboard"
    assert capsule.config is not None and capsule.config["lr"] == 0.001
    assert capsule.tests["val"].metric_value("accuracy") == 0.625  # the curve's own eval, not the summary's
    assert capsule.tests["test"].metric_value("accuracy") == 0.9  # only W&B has a test number
    assert capsule.seed == 3


# -- forensics: the config diff between two tracker runs -------------------------------------------------------
def test_config_diff_between_an_mlflow_and_a_wandb_run_names_the_one_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_mlflow(cell_dir(tmp_path, cell="a"), monkeypatch,
                 {"lr": 0.001, "model.width": 64.0, "model.depth": 4, "seed": 3, "output_dir": "/runs/a",
                  "run_name": "a"}, [1.0], [0.5])
    write_wandb(cell_dir(tmp_path, cell="b"), config=WANDB_CONFIG.replace("value: 0.001", "value: 0.0003"))
    project = load(tmp_path)
    a, b = only(project, "r/a"), only(project, "r/b")
    diff = config_diff(a.config, b.config)
    assert diff.keys == ("lr",) and diff.one_variable
    assert (diff.differences[0].a, diff.differences[0].b) == (0.001, 0.0003)
    wider = config_diff({"model": {"width": 64}, "data_path": "/x"}, {"model": {"width": 128, "depth": None}})
    assert [(d.key, d.a, d.b) for d in wider.differences] == [("model.depth", MISSING, None),
                                                              ("model.width", 64, 128)]
    assert not wider.one_variable
    assert config_diff({"wandb": {"project": "p"}, "tags": ["x"]}, {"wandb": {"project": "q"}}).keys == ()


# -- bad input: problems naming the file, never an exception ---------------------------------------------------
def test_a_malformed_trainer_state_is_a_problem(tmp_path: Path) -> None:
    path = cell_dir(tmp_path) / "trainer_state.json"
    path.write_text('{"log_history": [{"loss": 0.5, "step": ', encoding="utf-8")
    write_trainer_state(cell_dir(tmp_path, cell="seed1") / "trainer_state.json", {"global_step": 3})
    project = load(tmp_path)
    assert only(project).train is None and only(project).source == "trainer_state"
    messages = {p.path: p.message for p in project.problems}
    assert messages["runs/r/seed0/trainer_state.json"].startswith("malformed JSON")
    assert messages["runs/r/seed1/trainer_state.json"].startswith("no `log_history` list")


def test_a_metrics_csv_without_a_step_column_is_a_problem(tmp_path: Path) -> None:
    folder = cell_dir(tmp_path)
    (folder / "metrics.csv").write_text("epoch,train_loss\n0,0.5\n1,0.4\n", encoding="utf-8")
    project = load(tmp_path)
    assert only(project).train is None
    assert [(p.path, p.message) for p in project.problems] == [("runs/r/seed0/metrics.csv", "missing column: step")]


def test_a_truncated_event_file_is_a_problem_and_the_scalars_before_it_are_kept(tmp_path: Path) -> None:
    folder = cell_dir(tmp_path)
    write_events(folder, [0.5, 0.6, 0.7])
    events = next(folder.glob("events.out.tfevents.*"))
    events.write_bytes(events.read_bytes()[:-9])
    (cell_dir(tmp_path, cell="seed1") / "events.out.tfevents.1.box.1.0").write_bytes(b"\xff" * 64)
    project = load(tmp_path)
    capsule = only(project)
    assert capsule.train is not None and list(capsule.train["step"])[:2] == [100, 200]
    messages = {p.path: p.message for p in project.problems}
    assert messages[capsule.train_path or ""].startswith("truncated event file")
    assert messages["runs/r/seed1/events.out.tfevents.1.box.1.0"].startswith("not a TensorBoard event file")


def test_without_tensorboard_an_event_file_is_a_problem_not_a_crash(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    write_events(cell_dir(tmp_path), [0.5])
    real_import = builtins.__import__

    def no_tensorboard(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("tensorboard"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    project = load(tmp_path)
    assert only(project).train is None
    assert [p.message for p in project.problems] == ["install tensorboard to read event files"]


def test_a_wandb_config_that_is_not_yaml_is_a_problem(tmp_path: Path) -> None:
    write_wandb(cell_dir(tmp_path), config="lr: {value: [0.001\n  : : :\n\t- tab")
    project = load(tmp_path)
    capsule = only(project)
    assert capsule.config is None and capsule.tests["val"].metric_value("accuracy") == 0.912
    assert [(p.path.rsplit("/", 1)[-1], p.message.split(":")[0]) for p in project.problems] == [
        ("config.yaml", "malformed YAML")]


def test_symlinks_are_not_followed_out_of_the_project(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    write_trainer_state(outside / "trainer_state.json", trainer_state(2))
    folder = cell_dir(tmp_path / "project")
    (folder / "out").symlink_to(outside, target_is_directory=True)
    (folder / "trainer_state.json").symlink_to(outside / "trainer_state.json")
    assert read_tracker_cell(tmp_path / "project", "r", "seed0") is None
    assert load(tmp_path / "project").capsules == ()


def test_the_whole_catalogue_runs_on_every_reader_s_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No check may crash on a tracker cell: what a format lacks makes a check skip or judge less."""
    write_json(cell_dir(tmp_path, cell="legacy") / "best_metrics.json", {"psnr": 31.2})
    write_trainer_state(cell_dir(tmp_path, cell="hf") / "trainer_state.json", trainer_state(4))
    write_lightning(cell_dir(tmp_path, cell="pl"), lightning_rows([0.5, 0.6]))
    write_events(cell_dir(tmp_path, cell="tb"), [0.5, 0.6])
    write_mlflow(cell_dir(tmp_path, cell="ml"), monkeypatch, {"lr": 0.001, "seed": 1}, [1.0, 0.5], [0.6, 0.7])
    write_wandb(cell_dir(tmp_path, cell="wb"))
    project = load(tmp_path)
    assert sorted((c.cell, c.source) for c in project.capsules) == [
        ("hf", "trainer_state"), ("legacy", "legacy"), ("ml", "mlflow"), ("pl", "lightning"), ("tb", "tensorboard"),
        ("wb", "wandb")]
    outcomes = catalogue.run_all(project)
    assert len(outcomes) == len(catalogue.specs())
    assert {o.status for o in outcomes} <= {"pass", "findings", "skipped"}


def test_capsules_read_together_come_back_in_run_and_cell_order_each_with_its_own_problems(tmp_path: Path) -> None:
    """read_capsules reads cells on a few threads (audits/catalogue/load.py): the order and each cell's own
    problems are what reading them one by one gives."""
    for run_id in ("r2", "r0", "r1"):
        for seed in (3, 0, 2, 1):
            write_capsule(tmp_path, run_id, f"seed{seed}", seed=seed, metrics={"acc": 0.5})
    (tmp_path / "runs/r1/seed2/run.json").write_text("{not json", encoding="utf-8")
    project = load(tmp_path)
    assert [c.key for c in project.capsules] == [f"r{r}/seed{s}" for r in range(3) for s in range(4)]
    assert [p.path for c in project.capsules for p in c.problems] == ["runs/r1/seed2/run.json"]
