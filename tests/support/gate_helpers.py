"""Helpers for the gate-binding, fault-injection and action-sequence tests: real sim projects driven through
the Session and the installed `rgt` console script, with real checkpoints and the real state database.

Probe verdicts depend only on the checkpoint bytes and the probe key (rgt caches them by sha256 in the state
database), so verdicts that real probes produced in one project are copied into the next project's fresh
database: identical checkpoints are then not load-verified again in every test, while new bytes and new
probe keys always meet a real probe.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.state.db import StateDB
from support.helpers import FIXTURES, INSTANCE, RUN, toml_string, wait_for_liveness

RGT = Path(sys.executable).parent / "rgt"  # the installed console script, as a user runs it
SIM_ID = "sim-box"
_VERDICTS: dict[tuple[str, str], str] = {}


def small_command(extra: str = "") -> str:
    """A job that writes one real checkpoint and its metrics per cell (two probes per verification)."""
    cells = shlex.quote(str(FIXTURES / "cells"))
    return (f"cp {cells}/{{cell}}/best.pth {cells}/{{cell}}/best_metrics.json {{out}}/ "
            f"&& echo 'epoch=1 step=10/10 loss=0.500000 lr=0.001'{extra}")


def project_text(*, command: str | None = None, run_extra: str = "", instance_extra: str = "",
                 second_run: bool = False, runs: bool = True, extra: str = "") -> str:
    """One sim instance `box` and run `r1` (and, with `second_run`, a run `r2` on the same box)."""
    text = f"""\
[project]
name = "gate-tests"

[instances.{INSTANCE}]
provider = "sim"
{instance_extra}
"""
    if runs:
        text += run_table(RUN, command or small_command(), run_extra)
    if second_run:
        text += run_table("r2", command or small_command(), "")
    return text + extra


def run_table(run_id: str, command: str, extra: str = "", instance: str = INSTANCE) -> str:
    return f"""
[runs.{run_id}]
instance = "{instance}"
workdir = "/workspace/job-{run_id}"
command = {toml_string(command)}
log = "train.log"
remote_root = "/workspace/rgt/{run_id}"
roster = ["seed0", "seed1"]
required = ["best.pth", "best_metrics.json"]
python = {toml_string(sys.executable)}
{extra}
"""


def write_text_project(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "rgt.toml"
    path.write_text(text, encoding="utf-8")
    return path


def seed_verdicts(root: Path) -> None:
    """Hand the verdicts real probes gave earlier to this project's state database."""
    db = StateDB(root / ".rgt" / "state.db")
    try:
        for (sha256, key), result in _VERDICTS.items():
            db.store_load_check(sha256, key, json.loads(result))
    finally:
        db.close()


def keep_verdicts(root: Path) -> None:
    path = root / ".rgt" / "state.db"
    if not path.exists():
        return
    with sqlite3.connect(path) as conn:
        for sha256, key, result in conn.execute("SELECT sha256, probe_key, result FROM checkpoint_probes"):
            _VERDICTS[(sha256, key)] = result
    conn.close()


def rgt(*args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """The console script in a real process; never inherits a terminal."""
    return subprocess.run([str(RGT), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env or dict(os.environ), stdin=subprocess.DEVNULL)


def sim_disk(root: Path, instance: str = INSTANCE) -> Path:
    return root / ".rgt" / "sim" / instance


def box_root(root: Path, run_id: str = RUN) -> Path:
    """The run's result root as a folder of the sim box."""
    return sim_disk(root) / "workspace" / "rgt" / run_id


def local_root(root: Path, run_id: str = RUN) -> Path:
    return root / "runs" / run_id


async def launch_finished(root: Path, run_id: str = RUN, *, create: bool = True) -> None:
    session = open_session(str(root))
    try:
        if create:
            await create_instance(session, run_config(session, run_id).instance)
        await launch_run(session, run_id)
        await wait_for_liveness(session, run_id)
    finally:
        await session.close_transports()
        session.close()


async def relaunch_finished(root: Path, run_id: str = RUN, states: tuple[str, ...] = ("finished",)
                            ) -> dict[str, object]:
    """Launch a run id again below the Session's append-only refusal (runner.launch, as an older rgt or
    any other path that reaches the box would): the gate itself must still notice the new launch."""
    from remote_gpu_trainer.services.gate import session_box_key
    from remote_gpu_trainer.services.launch import launch as runner

    session = open_session(str(root))
    try:
        run = session.project.run(run_id)  # a new launch binds rgt.toml as it is (docs/gate.md §7)
        detail = await runner.launch(session.project, run, await instances.remote(session, run.instance), session.db,
                                     session.clock, box=await session_box_key(session, run.instance))
        await wait_for_liveness(session, run_id, states=states)
        return detail
    finally:
        await session.close_transports()
        session.close()


async def pull_and_verify(root: Path, run_id: str = RUN) -> None:
    session = open_session(str(root))
    try:
        pulled = await pull_run(session, run_id)
        assert pulled.ok, pulled.failed
        verified = await verify_run(session, run_id)
        assert verified.ok, verified.errors
    finally:
        await session.close_transports()
        session.close()
    keep_verdicts(root)


async def verified_project(root: Path, text: str | None = None) -> Path:
    """A sim project whose run r1 was launched, finished, pulled and verified."""
    write_text_project(root, text or project_text())
    seed_verdicts(root)
    await launch_finished(root)
    await pull_and_verify(root)
    return root


def events(root: Path) -> list[tuple[str, str]]:
    """(kind, summary) of every event, read from the SQLite file itself."""
    with sqlite3.connect(root / ".rgt" / "state.db") as conn:
        rows = conn.execute("SELECT kind, summary FROM events ORDER BY seq").fetchall()
    conn.close()
    return [(str(kind), str(summary)) for kind, summary in rows]


def integrity(root: Path) -> str:
    with sqlite3.connect(root / ".rgt" / "state.db") as conn:
        value = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()
    return str(value)


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (old, text)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def flip_in_place(path: Path) -> None:
    """Change one byte in the middle without changing the size, then set atime and mtime back."""
    info = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(info.st_size // 2)
        byte = handle.read(1)
        handle.seek(info.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


# -- teardown as a user asks for it (the gate-binding and read-only-store tests) ----------------------------
def down(root: Path, run_id: str = RUN, confirm: str = SIM_ID) -> subprocess.CompletedProcess[str]:
    """`rgt down RUN PROJECT --confirm ID` as a user types it."""
    return rgt("down", run_id, str(root), "--confirm", confirm, cwd=root)


def approvals(root: Path) -> list[dict[str, object]]:
    """Every approval's payload, oldest first: what was typed, shown and given up before a provider call."""
    session = open_session(str(root))
    try:
        return [dict(event.detail) for event in session.db.events(kind="approval")]
    finally:
        session.close()


def refused_reasons(root: Path) -> list[str]:
    """The reasons of the latest refusal, as the event log holds them."""
    session = open_session(str(root))
    try:
        refusals = session.db.events(kind="refused")
        assert refusals, "no refusal recorded"
        return [str(reason) for reason in refusals[-1].detail["reasons"]]
    finally:
        session.close()


def assert_refused(root: Path, fragment: str, run_id: str = RUN) -> list[str]:
    marker_before = (local_root(root) / MARKER_NAME).read_bytes() if (local_root(root) / MARKER_NAME).exists() \
        else None
    result = down(root, run_id)
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert sim_disk(root).is_dir(), "a refused teardown destroyed the box"
    reasons = refused_reasons(root)
    assert any(fragment in reason for reason in reasons), reasons
    if marker_before is not None:  # the refusal is not because the marker went missing
        assert (local_root(root) / MARKER_NAME).read_bytes() == marker_before
    return reasons


def assert_torn_down(root: Path, run_id: str = RUN) -> None:
    result = down(root, run_id)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "terminated, confirmed by the provider" in result.stdout
    assert not sim_disk(root).exists()


def copy_project(template: Path, target: Path) -> Path:
    """A copy of a verified project: its sim box, state database and evidence (all paths are relative)."""
    shutil.copytree(template, target, symlinks=True)
    return target


# -- a job held mid-run (seed0 written, seed1 waiting for a file) -------------------------------------------
def held_command(release: Path) -> str:
    """The gate helpers' job, with seed1 held until `release` exists: seed0's results are written, seed1's not
    yet, so the run's results on the box are half-written for as long as the test wants, and at most 10 minutes:
    a test that fails before releasing it leaves no job spinning behind."""
    wait = f"[ ! -e {shlex.quote(str(release))} ] && [ $i -lt 12000 ]"
    hold = f"if [ {{cell}} = seed1 ]; then i=0; while {wait}; do sleep 0.05; i=$((i+1)); done; fi; "
    return hold + small_command()


async def launch_held(root: Path) -> None:
    """Launch r1 and return once seed0's results are on the box and seed1 is held (the job is running)."""
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        assert await wait_for_liveness(session, states=("running",)) == "running"
        while not (box_root(root) / "seed0" / "best_metrics.json").exists():
            await asyncio.sleep(0.05)
    finally:
        await session.close_transports()
        session.close()


async def release_and_finish(root: Path, release: Path) -> None:
    release.touch()
    session = open_session(str(root))
    try:
        assert await wait_for_liveness(session) == "finished"
    finally:
        await session.close_transports()
        session.close()
