"""Random sequences of user actions on a real sim project, each followed by a real teardown attempt.

The actions are what a user (careless or not) does between a verification and `rgt down`: verify, launch
the run again, edit rgt.toml (every evidence key, and harmless keys), damage and restore file bytes and
mtimes, add a second instance entry naming the same box, remove the run from rgt.toml, put an old marker
back or hand-edit one, pull. The model below knows nothing of rgt's gate code: it tracks what is true of
the world (which bytes are where, which verification happened when, under which configuration) and says
that the teardown may succeed exactly when a fresh, bound verification covers every run on the box.
After every step the real teardown (`teardown.execute` through a Session, with the typed instance id)
must agree; when it succeeds the box is gone and the example ends (the next one starts from a new copy).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.errors import ConfigError, GateRefused, VerbFailed
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.session import Session
from support.gate_helpers import (
    box_root,
    keep_verdicts,
    launch_finished,
    local_root,
    pull_and_verify,
    relaunch_finished,
    seed_verdicts,
    sim_disk,
    small_command,
    toml_string,
    write_text_project,
)
from support.helpers import INSTANCE, RUN

BOX_ID = "sim-box"
FILES = ("seed0/best.pth", "seed0/best_metrics.json", "seed1/best.pth", "seed1/best_metrics.json")
OLD_NS = 1_577_836_800 * 1_000_000_000  # 2020-01-01: older than any verification

# Each evidence key's alternative value; every alternative but the roster's verifies fine.
ALTERNATIVES = {
    "remote_root": 'remote_root = "/workspace/rgt/elsewhere"',
    "roster": 'roster = ["seed0"]',
    "required": 'required = ["best.pth"]',
    "checkpoint_globs": 'checkpoint_globs = ["*.pth"]',
}
ORIGINALS = {
    "remote_root": f'remote_root = "/workspace/rgt/{RUN}"',
    "roster": 'roster = ["seed0", "seed1"]',
    "required": 'required = ["best.pth", "best_metrics.json"]',
    "checkpoint_globs": "",
}
PROBE_CONFIGS = {  # state_keys and allowed_globals change the probe's verdict key: one of them at a time
    "orig": "",
    "keys": 'state_keys = ["model_state_dict", "weights"]',
    "globals": 'allowed_globals = ["collections.OrderedDict"]',
}


@dataclass
class Config:
    alt: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(ALTERNATIVES, False))
    probe: str = "orig"
    gpus: int = 0  # harmless
    run_present: bool = True
    twin: bool = False  # a second entry with the same provider id: rgt.toml is refused

    def evidence(self) -> tuple[object, ...]:
        return (tuple(sorted(self.alt.items())), self.probe)

    def text(self) -> str:
        lines = [ALTERNATIVES[key] if alt else ORIGINALS[key] for key, alt in self.alt.items()]
        run = f"""
[runs.{RUN}]
instance = "{INSTANCE}"
workdir = "/workspace/job"
command = {toml_string(small_command())}
log = "train.log"
python = {toml_string(sys.executable)}
gpus = {self.gpus}
{PROBE_CONFIGS[self.probe]}
""" + "\n".join(line for line in lines if line) + "\n"
        twin = f'\n[instances.twin]\nprovider = "sim"\nid = "{BOX_ID}"\n' if self.twin else ""
        return (f'[project]\nname = "gate-actions"\n\n[instances.{INSTANCE}]\nprovider = "sim"\nid = "{BOX_ID}"\n'
                + twin + (run if self.run_present else ""))


@dataclass
class Model:
    """The world as the test knows it, independently of rgt's gate."""

    config: Config = field(default_factory=Config)
    damaged: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(FILES, False))
    touched: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(FILES, False))  # mtime after the last verify
    markers: list[bytes] = field(default_factory=list)  # every marker a verification wrote, in order
    on_disk: int | str | None = None  # which marker is in the local root: an index, "forged", or none
    last_ok: bool | None = None  # the last verification's outcome
    last_marker: int | None = None  # the marker the last verification wrote (when it passed)
    verified_config: tuple[object, ...] | None = None
    launched_since: bool = False  # a launch after the last successful verification
    relaunched: bool = False  # a launch after the manifest was built: no verification of it can cover the box
    log: list[str] = field(default_factory=list)

    def teardown_allowed(self) -> bool:
        """A fresh, bound verification covers the run: the last one passed and wrote the marker that is
        here; nothing was launched since, and the manifest was built after the last launch; the bytes here
        are the verified ones and no file is newer than it; it was made under the configuration the run is
        judged by (rgt.toml's while the run is there, else the one it was verified under), whose result
        root still holds the manifest on the box; and rgt.toml names the box once."""
        if self.config.twin or self.relaunched or not self.last_ok or self.on_disk != self.last_marker:
            return False
        if self.launched_since or any(self.damaged.values()) or any(self.touched.values()):
            return False
        judged = self.config.evidence() if self.config.run_present else self.verified_config
        if judged != self.verified_config:
            return False
        return not dict(judged[0])["remote_root"]  # type: ignore[index]

    def verify_passes(self) -> bool:
        return not self.config.alt["roster"] and not any(self.damaged.values())


@dataclass
class World:
    root: Path

    def session(self) -> Session:
        return Session.open(str(self.root))

    def write_config(self, config: Config) -> None:
        write_text_project(self.root, config.text())

    def local(self, path: str) -> Path:
        return local_root(self.root).joinpath(*path.split("/"))


def build_template(folder: Path) -> Path:
    """A project whose run was launched, pulled and verified, with the probe verdicts for every probe
    configuration of the model already real (verified once under each)."""
    root = folder / "template"
    world = World(root)
    world.write_config(Config())
    seed_verdicts(root)
    asyncio.run(launch_finished(root))
    for probe in ("keys", "globals", "orig"):
        world.write_config(Config(probe=probe))
        asyncio.run(pull_and_verify(root))
    keep_verdicts(root)
    return root


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield build_template(tmp_path_factory.mktemp("gate-actions"))


def fresh_world(template: Path) -> tuple[World, Model]:
    root = Path(tempfile.mkdtemp(prefix="example-", dir=template.parent)) / "proj"
    shutil.copytree(template, root, symlinks=True)
    asyncio.run(open_the_plan(root))
    model = Model()
    model.markers.append((local_root(root) / MARKER_NAME).read_bytes())
    model.on_disk = model.last_marker = 0
    model.last_ok = True
    model.verified_config = model.config.evidence()
    return World(root), model


async def open_the_plan(root: Path) -> None:
    """What a user opening the teardown dialog causes: the gate hashes the local copy (here: at its new
    path), which fills the hash cache before any action."""
    session = Session.open(str(root))
    try:
        assert (await teardown.plan(session, INSTANCE)).gate_open
    finally:
        session.close()


# -- the actions -----------------------------------------------------------------------------------------

async def do_verify(world: World, model: Model) -> None:
    if not model.config.run_present or model.config.twin:
        return
    session = world.session()
    try:
        result = await session.verify(RUN)
    finally:
        session.close()
    expected = model.verify_passes()
    assert result.ok == expected, (model.log, result.errors)
    model.last_ok = expected
    if expected:
        model.markers.append((local_root(world.root) / MARKER_NAME).read_bytes())
        model.on_disk = model.last_marker = len(model.markers) - 1
        model.verified_config = model.config.evidence()
        model.launched_since = False
        model.touched = dict.fromkeys(FILES, False)
    else:
        model.on_disk = model.last_marker = None
        assert not (local_root(world.root) / MARKER_NAME).exists()


async def do_pull(world: World, model: Model) -> None:
    if not model.config.run_present or model.config.twin:
        return
    session = world.session()
    try:
        result = await session.pull(RUN)
    except VerbFailed:
        assert model.config.alt["roster"], model.log  # the manifest does not fit the edited roster
        return
    finally:
        session.close()
    assert not model.config.alt["roster"], model.log
    repairable = not model.config.alt["remote_root"]  # elsewhere on the box, nothing is there to fetch
    assert result.ok == (repairable or not any(model.damaged.values())), (model.log, result.failed)
    if repairable:
        for path, damaged in model.damaged.items():
            if damaged:  # fetched again: the box's bytes, written now
                model.damaged[path] = False
                model.touched[path] = True


async def do_relaunch(world: World, model: Model) -> None:
    if not model.config.run_present or model.config.twin or model.config.alt["remote_root"] \
            or model.config.alt["roster"]:
        return
    await relaunch_finished(world.root)  # the same bytes again, but a launch the verification predates
    model.launched_since = model.relaunched = True


def do_flip(world: World, model: Model, path: str) -> None:
    """Bytes changed in place, mtime set back: flipping twice restores the bytes."""
    target = world.local(path)
    info = os.stat(target)
    with open(target, "r+b") as handle:
        handle.seek(info.st_size // 2)
        byte = handle.read(1)[0]
        handle.seek(info.st_size // 2)
        handle.write(bytes([byte ^ 0x5A]))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    model.damaged[path] = not model.damaged[path]


def do_touch(world: World, model: Model, path: str) -> None:
    now = time.time_ns()
    os.utime(world.local(path), ns=(now, now))
    model.touched[path] = True


def do_age(world: World, model: Model, path: str) -> None:
    os.utime(world.local(path), ns=(OLD_NS, OLD_NS))
    model.touched[path] = False


def do_copy_marker(world: World, model: Model, index: int) -> None:
    """Put back a marker some verification wrote (an old one, or the last one)."""
    which = index % len(model.markers)
    (local_root(world.root) / MARKER_NAME).write_bytes(model.markers[which])
    model.on_disk = which


def do_edit_marker(world: World, model: Model) -> None:
    """A hand-edited marker: the last one with one more space in it (same meaning, other bytes)."""
    data = model.markers[-1].replace(b'"files"', b'"files" ', 1)
    (local_root(world.root) / MARKER_NAME).write_bytes(data)
    model.on_disk = "forged"


def do_unmark(world: World, model: Model) -> None:
    (local_root(world.root) / MARKER_NAME).unlink(missing_ok=True)
    model.on_disk = None


def do_config(world: World, model: Model, key: str) -> None:
    config = model.config
    if key in config.alt:
        config.alt[key] = not config.alt[key]
    elif key == "probe":
        config.probe = {"orig": "keys", "keys": "globals", "globals": "orig"}[config.probe]
    elif key == "gpus":
        config.gpus = 1 - config.gpus
    elif key == "run":
        config.run_present = not config.run_present
    elif key == "twin":
        config.twin = not config.twin
    world.write_config(config)


CONFIG_KEYS = (*ALTERNATIVES, "probe", "gpus", "run", "twin")
ACTIONS = ("verify", "verify", "pull", "relaunch", "flip", "touch", "age", "copy_marker", "edit_marker", "unmark",
           "config", "config")


async def apply(world: World, model: Model, action: str, index: int) -> None:
    path = FILES[index % len(FILES)]
    if action == "verify":
        await do_verify(world, model)
    elif action == "pull":
        await do_pull(world, model)
    elif action == "relaunch":
        await do_relaunch(world, model)
    elif action == "flip":
        do_flip(world, model, path)
    elif action == "touch":
        do_touch(world, model, path)
    elif action == "age":
        do_age(world, model, path)
    elif action == "copy_marker":
        do_copy_marker(world, model, index)
    elif action == "edit_marker":
        do_edit_marker(world, model)
    elif action == "unmark":
        do_unmark(world, model)
    elif action == "config":
        do_config(world, model, CONFIG_KEYS[index % len(CONFIG_KEYS)])


async def try_teardown(world: World) -> bool:
    """The real teardown with the typed id: True when the box was terminated, False when refused."""
    try:
        session = world.session()
    except ConfigError:
        return False
    try:
        plan = await teardown.plan(session, INSTANCE)
        outcome = await teardown.execute(session, INSTANCE, BOX_ID, plan.lines)
    except GateRefused:
        return False
    finally:
        await session.close_transports()
        session.close()
    assert outcome.confirmed and outcome.final_state == "terminated"
    return True


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 255)), min_size=1, max_size=10))
def test_teardown_succeeds_only_under_a_fresh_bound_verification(template: Path, steps: list[tuple[str, int]]
                                                                 ) -> None:
    world, model = fresh_world(template)
    try:
        for action, index in steps:
            model.log.append(f"{action}:{index}")
            asyncio.run(apply(world, model, action, index))
            expected = model.teardown_allowed()
            done = asyncio.run(try_teardown(world))
            assert done == expected, (model.log, model)
            assert sim_disk(world.root).is_dir() != done
            if done:
                assert not box_root(world.root).exists()
                break  # the box is gone: the next example starts from a fresh copy of the verified project
    finally:
        shutil.rmtree(world.root.parent, ignore_errors=True)


def test_the_untouched_copy_tears_down(template: Path) -> None:
    """The starting point of every example is a verified project whose teardown succeeds."""
    world, model = fresh_world(template)
    try:
        assert model.teardown_allowed()
        assert asyncio.run(try_teardown(world))
    finally:
        shutil.rmtree(world.root.parent, ignore_errors=True)
