"""Real framework projects for the whole arc (tests/e2e/test_frameworks.py, docs/frameworks.md).

Each case is a training script under tests/fixtures/frameworks/<name>/ written from the framework's own
quick-start defaults and run unchanged; only its rgt.toml is rgt's: the command line (where the framework takes
its output folder and seed from), the cells, the files that must exist, and the metric. `FRAMEWORKS` is the
table the tests and the docs' minimal rgt.toml follow.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from support.helpers import FIXTURES, run_rgt, toml_string

FRAMEWORK_FIXTURES = FIXTURES / "frameworks"


@dataclass(frozen=True)
class Framework:
    """One framework's project: its script folder, the cell command and what the report must show."""

    name: str
    folder: str
    command: str  # {py} is this interpreter; {cell}, {out}, {workdir} are rgt's placeholders
    required: tuple[str, ...]
    source: str  # the results row's format (deliver/results.py)
    push: tuple[str, ...] = ("train.py",)
    roster: tuple[str, ...] = ("1", "2")
    test_id: str = "val"
    metric: str = "loss"
    series: str = "val/loss"  # the figure's y, as the tracker names it
    extra: str = ""  # more rgt.toml lines for the run
    links: bool = False  # the framework leaves symlinks in the cell (W&B's latest-run, debug.log)
    checkpoints: tuple[str, ...] = field(default_factory=tuple)  # cell-relative files that must load-verify


HF_ARGS = ("--output_dir {out} --seed {cell} --num_train_epochs 2 --logging_steps 2 --eval_strategy epoch "
           "--save_strategy epoch --per_device_train_batch_size 8")

FRAMEWORKS = {
    "hf_trainer": Framework(
        "hf_trainer", "hf_trainer", "{py} train.py " + HF_ARGS + " --report_to none",
        ("model.safetensors", "trainer_state.json"), "trainer_state", series="eval_loss",
        checkpoints=("model.safetensors", "checkpoint-16/optimizer.pt", "checkpoint-16/scheduler.pt",
                     "checkpoint-16/rng_state.pth")),
    "hf_trainer_tensorboard": Framework(
        "hf_trainer_tensorboard", "hf_trainer", "{py} train.py " + HF_ARGS + " --report_to tensorboard",
        ("model.safetensors", "trainer_state.json"), "trainer_state", series="eval/loss",
        checkpoints=("model.safetensors", "checkpoint-8/optimizer.pt")),
    "lightning_csv": Framework(
        "lightning_csv", "lightning", "cd {out} && {py} {workdir}/train.py --logger csv --seed {cell}",
        ("logs/lightning_logs/version_0/metrics.csv",
         "logs/lightning_logs/version_0/checkpoints/epoch=2-step=24.ckpt"), "lightning", series="val_loss",
        checkpoints=("logs/lightning_logs/version_0/checkpoints/epoch=2-step=24.ckpt",)),
    "lightning_tensorboard": Framework(
        "lightning_tensorboard", "lightning", "cd {out} && {py} {workdir}/train.py --logger tensorboard --seed {cell}",
        ("tb_logs/regressor/version_0/hparams.yaml",
         "tb_logs/regressor/version_0/checkpoints/epoch=2-step=24.ckpt"), "tensorboard", series="val_loss",
        checkpoints=("tb_logs/regressor/version_0/checkpoints/epoch=2-step=24.ckpt",)),
    "mlflow": Framework(
        "mlflow", "mlflow_store",
        "cd {out} && MLFLOW_TRACKING_URI=file:./mlruns MLFLOW_ALLOW_FILE_STORE=true {py} {workdir}/train.py {cell}",
        ("mlruns/0/meta.yaml",), "mlflow", series="val_loss"),
    "wandb_offline": Framework(
        "wandb_offline", "wandb_offline", "cd {out} && WANDB_MODE=offline {py} {workdir}/train.py {cell}",
        ("model.pth",), "wandb", links=True, checkpoints=("model.pth",)),
    "hydra": Framework(
        "hydra", "hydra_app", "cd {out} && {py} {workdir}/train.py seed={cell}", ("model.pth",), "tensorboard",
        push=("train.py", "conf"), checkpoints=("model.pth",)),
    "torchrun": Framework(
        "torchrun", "torchrun_ddp",
        "{py} -m torch.distributed.run --standalone --nproc_per_node 2 train.py {out} {cell}", ("model.pth",),
        "tensorboard", checkpoints=("model.pth",)),
    "accelerate": Framework(
        "accelerate", "accelerate_state", "{py} train.py {out} {cell}", ("epoch_1/model.safetensors",),
        "tensorboard", series="val_loss",
        checkpoints=("epoch_1/model.safetensors", "epoch_1/optimizer.bin", "epoch_1/scheduler.bin",
                     "epoch_1/random_states_0.pkl")),
}


def framework_project(root: Path, framework: Framework, *, instance_body: str = 'provider = "sim"',
                      box: Path | None = None) -> Path:
    """The project folder: the framework's script files and an rgt.toml with one run `r1`."""
    root.mkdir(parents=True, exist_ok=True)
    source = FRAMEWORK_FIXTURES / framework.folder
    for item in framework.push:
        target = root / item
        if (source / item).is_dir():
            shutil.copytree(source / item, target)
        else:
            shutil.copy2(source / item, target)
    workdir = str(box / "job") if box else "/workspace/job"
    remote_root = str(box / "out") if box else "/workspace/out"
    cells = ", ".join(f'"{c}"' for c in framework.roster)
    command = framework.command.replace("{py}", sys.executable)
    (root / "rgt.toml").write_text(f"""\
[project]
name = "{framework.name.replace('_', '-')}"

[instances.box]
{instance_body}

[runs.r1]
instance = "box"
workdir = {toml_string(workdir)}
push = [{", ".join(toml_string(p) for p in framework.push)}]
command = {toml_string(command)}
log = "train.log"
remote_root = {toml_string(remote_root)}
roster = [{cells}]
required = [{", ".join(toml_string(r) for r in framework.required)}]
metric = {{ name = "loss", direction = "min" }}
{framework.extra}
""", encoding="utf-8")
    return root


def figure_spec(root: Path, framework: Framework) -> str:
    """A line figure over the run's cells, naming the series as the tracker does; returns its id."""
    folder = root / "figures" / "curve"
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "curve", "kind": "line",
            "title": f"{framework.name}: validation loss", "x": "step", "y": framework.series,
            "series": [{"label": framework.name, "capsules": [f"r1/{cell}" for cell in framework.roster]}]}
    (folder / "figure.json").write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return "curve"


def table_spec(root: Path, framework: Framework) -> str:
    """A table of the run's validation metric over its cells (one row, one column); returns its id."""
    folder = root / "tables" / "main"
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"schema": "remote-gpu-trainer/TABLE/v1", "table_id": "main", "test_id": framework.test_id,
            "rows": [{"method": framework.name, "capsules": [f"r1/{cell}" for cell in framework.roster]}],
            "layout": {"columns": [framework.metric], "precision": 4}}
    (folder / "table.json").write_text(json.dumps(spec, indent=2), encoding="utf-8")
    return "main"


def rgt_ok(*args: str, cwd: Path, timeout: float = 300) -> str:
    """`rgt ARGS` that must exit 0: its stdout; a failure shows both streams."""
    done = run_rgt(*args, cwd=cwd, timeout=timeout)
    assert done.returncode == 0, f"rgt {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout
