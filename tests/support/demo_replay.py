"""The demo with its training replayed from committed bytes (tests/fixtures/make_demo_replay.py says why).

`replay_demo(folder)` turns a project written by `create_demo` into one whose runs, launched on the sim box as
usual, write tests/fixtures/demo_replay/'s files instead of training: each run's command runs
demo_replay_job.py in place of train.py (the rest of the command line is the demo's own), and the split
manifests are the ones the replayed runs trained on. Only the job is replaced; rgt's part is the real one.
"""

from __future__ import annotations

import asyncio
import hashlib
import shlex
from importlib import resources
from pathlib import Path

from remote_gpu_trainer.services.demo_project import DEMO_INSTANCE, create_demo
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from support.helpers import FIXED_NOW, FixedClock, wait_for_liveness

REPLAY_DIR = Path(__file__).parents[1] / "fixtures" / "demo_replay"
JOB = Path(__file__).with_name("demo_replay_job.py")
SPLIT_MANIFESTS = ("demo.json", "demo-flawed.json")
DATA_PACKS = ("demo_data.json", "demo_data_flawed.json")


def source_digests(folder: Path) -> dict[str, str]:
    """The sha256 of what made the replayed bytes: the training script, the capsule writer and the data packs
    of a demo project written in `folder` with --flawed."""
    package = resources.files("remote_gpu_trainer")
    blobs = {"train.py": package.joinpath("assets/demo/train.py").read_bytes(),
             "rgt_capsule.py": package.joinpath("remote/rgt_capsule.py").read_bytes()}
    blobs.update({name: (folder / name).read_bytes() for name in DATA_PACKS})
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(blobs.items())}


def replay_demo(folder: Path) -> None:
    """Point the demo project in `folder` at the committed training outputs."""
    toml = folder / "rgt.toml"
    text = toml.read_text(encoding="utf-8")
    job = f"{shlex.quote(str(JOB))} --from {shlex.quote(str(REPLAY_DIR))}"
    assert text.count(" train.py --cell ") >= 1, "the demo's command line changed: update support/demo_replay.py"
    toml.write_text(text.replace(" train.py --cell ", f" {job} --cell "), encoding="utf-8")
    for name in SPLIT_MANIFESTS:
        if (folder / "splits" / name).exists():
            (folder / "splits" / name).write_bytes((REPLAY_DIR / name).read_bytes())


def run_demo(config: Path, *, pull: bool | tuple[str, ...] = False) -> Session:
    """Launch every run of the demo project at `config` on its sim box, on the fixed clock, as `rgt demo` does
    but without its phase-0 audit, wait for each to end and, with `pull` (True: every run, or the runs named),
    pull and verify it (so audit it). Returns the closed session (its project names the runs)."""
    session = open_session(str(config), clock=FixedClock(FIXED_NOW))

    async def prepare() -> None:
        await create_instance(session, DEMO_INSTANCE)
        for run in sorted(session.project.runs):
            await launch_run(session, run)
        for run in sorted(session.project.runs):
            await wait_for_liveness(session, run, timeout=300)
            if pull is True or (isinstance(pull, tuple) and run in pull):
                await pull_run(session, run)
                assert (await verify_run(session, run)).ok

    try:
        asyncio.run(prepare())
    finally:
        session.close()
    return session


def replayed_demo(folder: Path, *, flawed: bool, pull: bool | tuple[str, ...] = True) -> Path:
    """`rgt demo [--flawed]` in `folder` with its runs replayed (run_demo). Returns the project folder."""
    config = create_demo(folder, quick=True, flawed=flawed)
    replay_demo(folder)
    run_demo(config, pull=pull)
    return folder
