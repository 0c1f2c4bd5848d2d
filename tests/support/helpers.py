"""Test helpers: a controllable clock, project writers, and waiting for a real detached run to end."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state

FIXTURES = Path(__file__).parents[1] / "fixtures"
FIXED_NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
RUN = "r1"
INSTANCE = "box"
HUNG = "hung"  # an ssh instance whose server accepts TCP and never speaks (conftest.silent_server)


class FixedClock:
    """A clock the test moves by hand: meter totals and 'ago' labels become exact."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now = self.now + timedelta(**delta)


def copy_command() -> str:
    """A real job that writes the committed checkpoints into its cell folder and logs like a trainer."""
    cells = shlex.quote(str(FIXTURES / "cells"))
    return (f"cp -R {cells}/{{cell}}/. {{out}}/ && echo 'epoch=1 step=10/10 loss=0.500000 lr=0.001' "
            f"&& echo 'cell {{cell}} complete'")


def write_project(root: Path, command: str | None = None, roster: tuple[str, ...] = ("seed0", "seed1"),
                  extra_run: str = "", *, instance: str = INSTANCE, instance_body: str = 'provider = "sim"',
                  box: Path | None = None) -> Path:
    """One instance and run `r1`. `box` puts workdir and remote_root under a real folder (ssh, slurm, local
    boxes are this machine); without it they are the sim box's `/workspace/...` paths."""
    root.mkdir(parents=True, exist_ok=True)
    cells = ", ".join(f'"{c}"' for c in roster)
    workdir = str(box / "job") if box else "/workspace/job"
    remote_root = str(box / "rgt" / RUN) if box else f"/workspace/rgt/{RUN}"
    text = f"""\
[project]
name = "test-project"

[instances.{instance}]
{instance_body}

[runs.{RUN}]
instance = "{instance}"
workdir = {toml_string(workdir)}
command = {toml_string(command or copy_command())}
log = "train.log"
remote_root = {toml_string(remote_root)}
roster = [{cells}]
required = ["best.pth", "best_metrics.json"]
metric = {{ name = "val_loss", direction = "min" }}
python = {toml_string(sys.executable)}
{extra_run}
"""
    path = root / "rgt.toml"
    path.write_text(text, encoding="utf-8")
    return path


def toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def wait_for_liveness(session: Session, run_id: str = RUN, states: tuple[str, ...] = ("finished",),
                            timeout: float = 60.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = await run_state(session, run_id)
        if state.liveness.state in states:
            return state.liveness.state
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run_id} still {state.liveness} after {timeout}s")
        await asyncio.sleep(0.1)


async def launched_and_finished(session: Session) -> None:
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session)


def run_rgt(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`python -m remote_gpu_trainer ARGS` as a user runs it: its own process, exit code and output."""
    return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


def fill_disk(path: Path) -> int:
    """Write zeros to `path` until the filesystem refuses; returns the bytes that fit."""
    written = 0
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                written += handle.write(b"\0" * 4096) or 0
        except OSError:
            pass
    return written


def two_box_project(root: Path, port: int, home: Path) -> Path:
    hung = f'''
[instances.{HUNG}]
provider = "ssh"
host = "nobody@127.0.0.1:{port}"
price_per_hour = 1.25
'''
    write_project(root)
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(hung)
    home.mkdir(parents=True, exist_ok=True)
    return root


def wait_file(path: Path, timeout: float = 60.0) -> str:
    """The file's text once it exists (a marker another process writes), waiting up to `timeout`."""
    wait_exists(path, timeout)
    return path.read_text()


def wait_exists(path: Path, timeout: float = 60.0) -> None:
    """Until the file exists (another process writes it, or renames it into place whole), up to `timeout`."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def wait_gone(path: Path, timeout: float = 30.0) -> None:
    """Until the file is gone (another process deletes it), waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while path.exists():
        assert time.monotonic() < deadline, f"{path} is still there"
        time.sleep(0.05)


def kill_group(pgid_file: Path, sig: int, timeout: float = 30.0) -> None:
    """Send `sig` to the process group the job's `pgid` marker names; returns once no live (non-zombie) process of
    it is left, so a liveness look that follows sees the job gone."""
    group = int(wait_file(pgid_file).strip())
    os.killpg(group, sig)
    deadline = time.monotonic() + timeout
    while _group_members(group):
        assert time.monotonic() < deadline, f"process group {group} still alive after signal {sig}"
        time.sleep(0.05)


def _group_members(group: int) -> list[int]:
    """The live (not zombie) processes of a process group, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(stat.parent.name))
    return found
