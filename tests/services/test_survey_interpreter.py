"""Phase 0's torch row checks the interpreter the run's command uses (issue 9, "What must hold" 4).

The session-level tests run the real environment survey (remote/env_survey.sh) through a real local box against real
interpreters: a fresh venv made in tmp (no torch in it) and this test's own interpreter (torch installed),
so a row that names the wrong interpreter also reports the wrong torch.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from remote_gpu_trainer.audits import env_audit as ea
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services.launch.env_audit import audit_run_environment
from remote_gpu_trainer.services.opening import open_session
from support.helpers import RUN, write_project

DEFAULT = "python3"


@pytest.mark.parametrize(("command", "program"), [
    ("python train.py --seed {cell} --out {out}", "python"),
    ("python3.11 -u train.py", "python3.11"),
    ("python3.13t train.py", "python3.13t"),
    ("/opt/conda/envs/x/bin/python train.py", "/opt/conda/envs/x/bin/python"),
    (".venv/bin/python3 -m trainer", ".venv/bin/python3"),
    ("CUDA_VISIBLE_DEVICES=0 python train.py", "python"),
    ("A=1 B='two words' python3 train.py", "python3"),
    ("env X=1 python train.py", "python"),
    ("env -i -u HOME --chdir /tmp X=1 /usr/bin/python3 t.py", "/usr/bin/python3"),
    ("/usr/bin/env python3 t.py", "python3"),
    ("'/opt/my envs/bin/python' t.py && echo done", "/opt/my envs/bin/python"),
    ("python train.py; echo done", "python"),
    ("cd {out} && python {workdir}/train.py", "python"),
    ("cd /w; cd out && WANDB_MODE=offline /opt/v/bin/python3 t.py", "/opt/v/bin/python3"),
])
def test_a_command_that_starts_with_a_python_is_checked_with_it(command: str, program: str) -> None:
    chosen = ea.run_interpreter(command, DEFAULT, explicit=False, run_id=RUN)
    assert chosen == ea.Interpreter(program, "the command's interpreter")


@pytest.mark.parametrize(("command", "named"), [
    ("torchrun --nproc_per_node 8 train.py", "starts with torchrun, not a python"),
    ("accelerate launch train.py", "starts with accelerate, not a python"),
    ("bash run.sh", "starts with bash, not a python"),
    ("CUDA_VISIBLE_DEVICES=0 /usr/local/bin/deepspeed train.py", "starts with /usr/local/bin/deepspeed"),
    ("python-config --prefix", "starts with python-config, not a python"),
    ("pythonista train.py", "starts with pythonista, not a python"),
    ("python 'unbalanced", "cannot be split into words"),
    ("X=1", "has no program word"),
    ("&& python train.py", "has no program word"),
    ("cd {out} && torchrun train.py", "starts with torchrun, not a python"),
    ("cd {out} || python train.py", "starts with cd, not a python"),
])
def test_a_launcher_keeps_the_default_and_says_why(command: str, named: str) -> None:
    chosen = ea.run_interpreter(command, DEFAULT, explicit=False, run_id=RUN)
    assert chosen.path == DEFAULT
    assert named in chosen.why and f"set runs.{RUN}.python to choose" in chosen.why


def test_python_set_in_rgt_toml_wins_over_the_command() -> None:
    chosen = ea.run_interpreter("/opt/venv/bin/python train.py", "/opt/other/bin/python3", explicit=True,
                                run_id=RUN)
    assert chosen == ea.Interpreter("/opt/other/bin/python3", f"runs.{RUN}.python in rgt.toml")


def test_rgt_toml_records_whether_python_was_set(tmp_path: Path) -> None:
    explicit = load_project(write_project(tmp_path / "set")).runs[RUN]
    assert explicit.python == sys.executable and explicit.python_explicit
    unset = load_project(without_python_line(write_project(tmp_path / "unset"))).runs[RUN]
    assert unset.python == DEFAULT and not unset.python_explicit


# ---- the real probe on a real box -----------------------------------------------------------------

def without_python_line(config: Path) -> Path:
    lines = config.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith("python = ")]
    assert len(kept) == len(lines) - 1
    config.write_text("".join(kept), encoding="utf-8")
    return config


def make_venv(path: Path) -> Path:
    """A real, torch-less interpreter at a path nothing else uses."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    python = path / "bin" / "python"
    assert python.is_file()
    return python


def torch_row(project: Path) -> ea.AuditRow:
    async def audit() -> list[ea.AuditRow]:
        session = open_session(str(project))
        try:
            return await audit_run_environment(session, RUN)
        finally:
            session.close()

    rows = {row.check: row for row in asyncio.run(audit())}
    return rows["torch"]


def local_project(root: Path, command: str, *, python_line: bool) -> Path:
    box = root / "box"
    box.mkdir(parents=True)
    config = write_project(root / "proj", command, instance_body='provider = "local"', box=box)
    if not python_line:
        without_python_line(config)
    return root / "proj"


def test_the_row_runs_the_commands_own_interpreter(tmp_path: Path) -> None:
    venv_python = make_venv(tmp_path / "env")
    command = f"CUDA_VISIBLE_DEVICES= {shlex.quote(str(venv_python))} train.py --out {{out}}"
    row = torch_row(local_project(tmp_path, command, python_line=False))
    assert row.detail.startswith(f"{venv_python} (Python {sys.version.split()[0]}) [the command's interpreter]: ")
    assert "torch not importable: ModuleNotFoundError" in row.detail and row.status == ea.FAIL


def test_a_relative_interpreter_is_found_in_the_workdir(tmp_path: Path) -> None:
    project = local_project(tmp_path, "env OMP_NUM_THREADS=1 .venv/bin/python train.py", python_line=False)
    make_venv(tmp_path / "box" / "job" / ".venv")  # workdir = box/job, where the command runs
    row = torch_row(project)
    assert row.detail.startswith(".venv/bin/python (")
    assert f"{tmp_path / 'box' / 'job' / '.venv' / 'bin' / 'python'}, Python " in row.detail
    assert "[the command's interpreter]" in row.detail and row.status == ea.FAIL


def test_python_in_rgt_toml_wins_over_the_commands_interpreter(tmp_path: Path) -> None:
    venv_python = make_venv(tmp_path / "env")
    row = torch_row(local_project(tmp_path, f"{venv_python} train.py", python_line=True))
    torch_version = importlib.metadata.version("torch")
    assert row.detail.startswith(f"{sys.executable} (Python {sys.version.split()[0]}) "
                                 f"[runs.{RUN}.python in rgt.toml]: torch {torch_version} ")
    assert row.status == ea.PASS and str(venv_python) not in row.detail


def test_a_launcher_command_checks_the_default_and_the_row_says_so(tmp_path: Path) -> None:
    row = torch_row(local_project(tmp_path, "torchrun --nproc_per_node 1 train.py", python_line=False))
    assert row.detail.startswith(f"{DEFAULT} (")
    assert (f"[the command starts with torchrun, not a python: checked the default; set runs.{RUN}.python "
            "to choose]") in row.detail
