"""Random sequences of user actions on a real sim project, each followed by a real teardown attempt.

The actions are what a user (careless or not) does between a verification and `rgt down`: verify, pull,
launch the run again, edit rgt.toml (every evidence key, the location-only keys `workdir`, `log` and
`command`, harmless keys), damage and restore file bytes and mtimes, put an old marker back or hand-edit one,
add a second instance entry naming the same box, remove the run from rgt.toml, declare a second run on the box
that is never launched, lose the state database, replace the local root by a symlink to a copy of it, make the
box's ledger unreadable (garbage in the run's entry: the sim box's "cannot be asked") and readable again, and
tear down accepting the loss of exactly the runs at risk. The model below knows nothing of rgt's gate code: it
tracks what is true of the world (which bytes are where, which verification happened when, under which
configuration, what the launch bound, what rgt and the box remember) and says that the teardown may succeed
exactly when a fresh, bound verification covers every run on the box and nothing is unknown
(docs/gate.md §7, "Launch-time bindings"; §5 "Home is local"; the box's ledger).
After every step the real teardown (`teardown.execute` through a Session, with the typed instance id)
must agree; when it succeeds the box is gone and the example ends (the next one starts from a new copy).

CI runs 40 examples. For a long run set RGT_GATE_EXAMPLES (docs/gate.md §7):

    RGT_GATE_EXAMPLES=2000 .venv/bin/python -m pytest -q tests/services/test_gate_actions.py -p no:cacheprovider
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
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.errors import ConfigError, GateRefused, VerbFailed
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from support.gate_helpers import (
    box_root,
    keep_verdicts,
    launch_finished,
    local_root,
    pull_and_verify,
    relaunch_finished,
    run_table,
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
EXAMPLES = int(os.environ.get("RGT_GATE_EXAMPLES", "40"))  # CI: 40; a long run: RGT_GATE_EXAMPLES=2000
SECOND = "r2"  # a second run declared on the same box, never launched
LEDGER = Path("root") / ".rgt-ledger"  # in the sim box's disk: its login's home is /root
GARBAGE = b"{not json"

# Each evidence key's alternative value. remote_root and roster are also location keys: an edit after the launch
# applies to the next launch only (the launched run is pulled and verified where its launch put it).
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
# The location-only keys (docs/gate.md §7, "Launch-time bindings"): an edit is drift, shown, and changes
# neither what the evidence means nor where the launched run's files are.
LOCATIONS = {
    "workdir": ('workdir = "/workspace/job"', 'workdir = "/workspace/job-moved"'),
    "log": ('log = "train.log"', 'log = "train-2.log"'),
    "command": (f"command = {toml_string(small_command())}", f"command = {toml_string(small_command(' && true'))}"),
}
PROBE_CONFIGS = {  # state_keys and allowed_globals change the probe's verdict key: one of them at a time
    "orig": "",
    "keys": 'state_keys = ["model_state_dict", "weights"]',
    "globals": 'allowed_globals = ["collections.OrderedDict"]',
}
TWIN_IDS = (BOX_ID, BOX_ID.upper(), f" {BOX_ID.title()} ")  # one box however the id is written


@dataclass
class Config:
    alt: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(ALTERNATIVES, False))
    moved: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(LOCATIONS, False))
    probe: str = "orig"
    gpus: int = 0  # harmless
    run_present: bool = True
    twin: int | None = None  # a second entry naming the same box (TWIN_IDS[twin]): rgt.toml is refused
    second: bool = False  # SECOND declared on the same instance

    def evidence(self) -> tuple[object, ...]:
        return (tuple(sorted(self.alt.items())), self.probe)

    def text(self) -> str:
        lines = [ALTERNATIVES[key] if alt else ORIGINALS[key] for key, alt in self.alt.items()]
        lines += [LOCATIONS[key][moved] for key, moved in self.moved.items()]
        run = f"""
[runs.{RUN}]
instance = "{INSTANCE}"
python = {toml_string(sys.executable)}
gpus = {self.gpus}
{PROBE_CONFIGS[self.probe]}
""" + "\n".join(line for line in lines if line) + "\n"
        twin = ("" if self.twin is None
                else f'\n[instances.twin]\nprovider = "sim"\nid = {toml_string(TWIN_IDS[self.twin])}\n')
        second = run_table(SECOND, small_command()) if self.second else ""
        return (f'[project]\nname = "gate-actions"\n\n[instances.{INSTANCE}]\nprovider = "sim"\nid = "{BOX_ID}"\n'
                + twin + (run if self.run_present else "") + second)


@dataclass
class Model:
    """The world as the test knows it, independently of rgt's gate."""

    config: Config = field(default_factory=Config)
    damaged: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(FILES, False))
    touched: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(FILES, False))  # mtime after the last verify
    markers: list[bytes] = field(default_factory=list)  # every marker a verification wrote, in order
    on_disk: int | str | None = None  # which marker is in the local root: an index, "forged", or none
    last_ok: bool | None = None  # the last verification's outcome (None: no record of one)
    last_marker: int | None = None  # the marker the last verification wrote (when it passed)
    verified_config: tuple[object, ...] | None = None
    launched_since: bool = False  # a launch after the last successful verification
    relaunched: bool = False  # a launch after the manifest was built: no verification of it can cover the box
    launch_known: bool = True  # the state database holds the run's launch record (its bindings)
    manifest_recorded: bool = True  # the state database holds the manifest's hash from when it was built
    symlinked: str | None = None  # "run": runs/<run> is a symlink to a copy; "runs": runs/ is one
    garbled: bytes | None = None  # the box's ledger entry is garbage; the bytes it held before
    log: list[str] = field(default_factory=list)

    def bound(self, key: str) -> bool:
        """Whether the run is looked for at the edited place of a location key (remote_root, roster): where its
        latest launch put it (every launch here was made under the originals), or, when no launch record is
        left, where rgt.toml says (a run rgt holds no launch of uses rgt.toml as it is)."""
        return self.config.alt[key] and not self.launch_known

    def adoptable(self) -> bool:
        """The box's manifest, where the run is looked for, is the local one and its tree is unchanged since."""
        return not self.bound("remote_root") and not self.bound("roster") and not self.relaunched

    def run_covered(self) -> bool:
        """A fresh, bound verification covers the run: the last one passed and wrote the marker that is
        here; nothing was launched since, and the manifest was built after the last launch, with its hash
        recorded; the bytes here are the verified ones, in a real local folder, and no file is newer than the
        verification; it was made under the configuration the run is judged by (rgt.toml's while the run is
        there, else the one it was verified under), and the box's manifest is where the run is looked for."""
        if self.symlinked or self.relaunched or not self.manifest_recorded:
            return False
        if not self.last_ok or self.on_disk != self.last_marker:
            return False
        if self.launched_since or any(self.damaged.values()) or any(self.touched.values()):
            return False
        judged = self.config.evidence() if self.config.run_present else self.verified_config
        if judged != self.verified_config:
            return False
        return not (self.config.run_present and self.bound("remote_root"))

    def at_risk_unknown(self) -> tuple[str, ...]:
        """Runs whose presence on the box is unknown: a declared run rgt never launched, while the box's
        ledger cannot be read (unknown is never empty)."""
        return (SECOND,) if self.config.second and self.garbled is not None else ()

    def teardown_allowed(self, accept_loss: tuple[str, ...] = ()) -> bool:
        """rgt.toml names the box once, and every run on it is covered or its loss accepted by name (a name
        that is not at risk is refused)."""
        if self.config.twin is not None:
            return False
        unknown = self.at_risk_unknown()
        if accept_loss:
            return set(accept_loss) <= set(unknown) and self.run_covered()
        return not unknown and self.run_covered()

    def verify_passes(self) -> bool:
        if self.symlinked:
            return False
        if not self.manifest_recorded and not self.bound("remote_root") and not self.adoptable():
            return False  # the box holds a manifest this project never recorded and cannot adopt
        return not self.bound("roster") and not any(self.damaged.values())


@dataclass
class World:
    root: Path

    def session(self) -> Session:
        return open_session(str(self.root))

    def write_config(self, config: Config) -> None:
        write_text_project(self.root, config.text())

    def local(self, path: str) -> Path:
        return local_root(self.root).joinpath(*path.split("/"))

    def ledger_entry(self) -> Path:
        project_id = (self.root / ".rgt" / "project-id").read_text().strip()
        return sim_disk(self.root) / LEDGER / project_id / f"{RUN}.json"


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
    path), which fills the hash cache before any action, and reads the box's ledger."""
    session = open_session(str(root))
    try:
        assert (await teardown.plan(session, INSTANCE)).gate_open
    finally:
        session.close()


# -- the actions -----------------------------------------------------------------------------------------

async def do_verify(world: World, model: Model) -> None:
    if not model.config.run_present or model.config.twin is not None:
        return
    marker_before = read_or_none(local_root(world.root) / MARKER_NAME)
    session = world.session()
    try:
        result = await verify_run(session, RUN)
    finally:
        session.close()
    expected = model.verify_passes()
    assert result.ok == expected, (model.log, result.errors)
    if not model.manifest_recorded and model.adoptable():
        model.manifest_recorded = True  # adopted before verifying: the box's manifest is these very bytes
    model.last_ok = expected
    if expected:
        model.markers.append((local_root(world.root) / MARKER_NAME).read_bytes())
        model.on_disk = model.last_marker = len(model.markers) - 1
        model.verified_config = model.config.evidence()
        model.launched_since = False
        model.touched = dict.fromkeys(FILES, False)
        return
    model.last_marker = None
    if model.symlinked:  # refused before it touched anything: no marker is ever written (or removed) there
        assert read_or_none(local_root(world.root) / MARKER_NAME) == marker_before, model.log
        assert any(error.code == "not_home" for error in result.errors), (model.log, result.errors)
    else:
        model.on_disk = None
        assert not (local_root(world.root) / MARKER_NAME).exists()


async def do_pull(world: World, model: Model) -> None:
    if not model.config.run_present or model.config.twin is not None:
        return
    fails = (model.symlinked is not None or model.bound("roster")  # not a local copy; a manifest unfit
             or (not model.manifest_recorded and (model.bound("remote_root") or not model.adoptable())))
    session = world.session()
    try:
        result = await pull_run(session, RUN)
    except VerbFailed as exc:
        assert fails, (model.log, str(exc))
        return
    finally:
        session.close()
    assert not fails, model.log
    model.manifest_recorded = True  # adopted from the box when the database had lost it
    repairable = not model.bound("remote_root")  # elsewhere on the box, nothing is there to fetch
    assert result.ok == (repairable or not any(model.damaged.values())), (model.log, result.failed)
    if repairable:
        for path, damaged in model.damaged.items():
            if damaged:  # fetched again: the box's bytes, written now
                model.damaged[path] = False
                model.touched[path] = True


async def do_relaunch(world: World, model: Model) -> None:
    """The same bytes again, but a launch the verification predates. Not under an edited remote_root or
    roster: that launch would put its results elsewhere, which this model does not follow."""
    if not model.config.run_present or model.config.twin is not None or model.config.alt["remote_root"] \
            or model.config.alt["roster"]:
        return
    await relaunch_finished(world.root)
    model.launched_since = model.relaunched = model.launch_known = True
    model.garbled = None  # the launch wrote the run's ledger entry anew


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


def do_config(world: World, model: Model, key: str, index: int) -> None:
    config = model.config
    if key in config.alt:
        config.alt[key] = not config.alt[key]
    elif key in config.moved:
        config.moved[key] = not config.moved[key]
    elif key == "probe":
        config.probe = {"orig": "keys", "keys": "globals", "globals": "orig"}[config.probe]
    elif key == "gpus":
        config.gpus = 1 - config.gpus
    elif key == "run":
        config.run_present = not config.run_present
    elif key == "twin":
        config.twin = index % len(TWIN_IDS) if config.twin is None else None
    elif key == "second":
        config.second = not config.second
    world.write_config(config)


def do_lose_database(world: World, model: Model) -> None:
    """The state database deleted (with its WAL): launch log, manifest hashes, verification records gone. The
    probe verdicts real probes gave are handed to the fresh database only to save time (they are keyed on the
    checkpoint bytes); the box's ledger and rgt's last copy of it (.rgt/ledgers) stay."""
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (world.root / ".rgt" / name).unlink(missing_ok=True)
    seed_verdicts(world.root)
    model.launch_known = model.manifest_recorded = False
    model.last_ok = model.last_marker = model.verified_config = None


def do_symlink(world: World, model: Model, index: int) -> None:
    """runs/<run> (or runs/) replaced by a symlink to a copy of it, or put back as a real folder. Edits of the
    files meanwhile go through the link into the copy, and come back with it."""
    runs = world.root / "runs"
    if model.symlinked is None:
        model.symlinked = ("run", "runs")[index % 2]
        real = local_root(world.root) if model.symlinked == "run" else runs
        copy = world.root / f"{real.name}-copy"
        real.rename(copy)
        real.symlink_to(copy if model.symlinked == "run" else copy.name, target_is_directory=True)
    else:
        real = local_root(world.root) if model.symlinked == "run" else runs
        real.unlink()
        (world.root / f"{real.name}-copy").rename(real)
        model.symlinked = None


def do_garble_ledger(world: World, model: Model) -> None:
    """The box's ledger entry for the run made unreadable (the sim box's way of not answering), or its bytes
    put back (the box answers again)."""
    entry = world.ledger_entry()
    if model.garbled is None:
        model.garbled = entry.read_bytes()
        entry.write_bytes(GARBAGE)
    else:
        assert entry.read_bytes() == GARBAGE, model.log
        entry.write_bytes(model.garbled)
        model.garbled = None


def read_or_none(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


CONFIG_KEYS = (*ALTERNATIVES, *LOCATIONS, "probe", "gpus", "run", "twin", "second")
ACTIONS = ("verify", "verify", "pull", "relaunch", "flip", "touch", "age", "copy_marker", "edit_marker", "unmark",
           "config", "config", "lose_database", "symlink", "garble_ledger", "accept_loss")


async def apply(world: World, model: Model, action: str, index: int) -> tuple[str, ...]:
    """Do the action; the names the following teardown accepts the loss of (only after `accept_loss`: the
    runs the model holds at risk, or, when none is, the second run, which must then be refused)."""
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
        do_config(world, model, CONFIG_KEYS[index % len(CONFIG_KEYS)], index // len(CONFIG_KEYS))
    elif action == "lose_database":
        do_lose_database(world, model)
    elif action == "symlink":
        do_symlink(world, model, index)
    elif action == "garble_ledger":
        do_garble_ledger(world, model)
    elif action == "accept_loss":
        return model.at_risk_unknown() or (SECOND,)
    return ()


async def try_teardown(world: World, accept_loss: tuple[str, ...] = ()) -> bool:
    """The real teardown with the typed id: True when the box was terminated, False when refused."""
    try:
        session = world.session()
    except ConfigError as exc:  # the only way rgt.toml is refused here: one box under two names
        assert "names the same box as instances." in str(exc), str(exc)
        return False
    try:
        plan = await teardown.plan(session, INSTANCE, accept_loss=accept_loss)
        outcome = await teardown.execute(session, INSTANCE, BOX_ID, plan.lines, accept_loss=accept_loss)
    except GateRefused:
        return False
    finally:
        await session.close_transports()
        session.close()
    assert outcome.confirmed and outcome.final_state == "terminated"
    return True


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# Every new kind of action reaches a teardown in CI whatever is generated: each of these ends torn down or
# refused at the step the comment names (`unmark` first keeps the gate closed while the scene is set).
@example(steps=[("config", 0), ("verify", 0)])  # remote_root edited: verify verifies the launched files; down
@example(steps=[("config", 1), ("pull", 0), ("verify", 0)])  # the roster, likewise
@example(steps=[("unmark", 0), ("config", 4), ("config", 5), ("config", 6), ("copy_marker", 0)])  # drift: down
@example(steps=[("unmark", 0), ("config", 4), ("relaunch", 0), ("copy_marker", 0), ("pull", 0), ("verify", 0)])
@example(steps=[("lose_database", 0), ("config", 0), ("verify", 0), ("config", 0), ("verify", 0)])  # down at 5
@example(steps=[("lose_database", 0), ("relaunch", 0), ("pull", 0), ("verify", 0)])  # never
@example(steps=[("symlink", 0), ("flip", 0), ("verify", 0), ("symlink", 0), ("flip", 0), ("verify", 0)])  # at 6
@example(steps=[("symlink", 1), ("pull", 0), ("symlink", 1)])  # down when runs/ is real again
@example(steps=[("unmark", 0), ("config", 11), ("garble_ledger", 0), ("copy_marker", 0), ("accept_loss", 0)])
@example(steps=[("unmark", 0), ("garble_ledger", 0), ("config", 11), ("copy_marker", 0), ("garble_ledger", 0)])
@example(steps=[("unmark", 0), ("config", 11), ("garble_ledger", 0), ("flip", 0), ("copy_marker", 0),
                ("accept_loss", 0), ("flip", 0), ("accept_loss", 0)])  # waiving r2 never waives r1: down at 8
@example(steps=[("unmark", 0), ("config", 10), ("copy_marker", 0), ("config", 10)])  # the twin gone: down
@example(steps=[("unmark", 0), ("config", 22), ("copy_marker", 0), ("config", 22)])  # "SIM-BOX", then gone
@example(steps=[("unmark", 0), ("config", 34), ("copy_marker", 0), ("config", 0)])  # " Sim-Box ": never
@given(steps=st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 255)), min_size=1, max_size=10))
def test_teardown_succeeds_only_under_a_fresh_bound_verification(template: Path, steps: list[tuple[str, int]]
                                                                 ) -> None:
    world, model = fresh_world(template)
    try:
        for action, index in steps:
            model.log.append(f"{action}:{index}")
            accept_loss = asyncio.run(apply(world, model, action, index))
            expected = model.teardown_allowed(accept_loss)
            done = asyncio.run(try_teardown(world, accept_loss))
            assert done == expected, (model.log, model)
            assert sim_disk(world.root).is_dir() != done
            if done:
                assert not box_root(world.root).exists()
                break  # the box is gone: the next example starts from a fresh copy of the verified project
        for action in sorted({step.split(":")[0] for step in model.log}) if done else ["(refused at every step)"]:
            event(f"torn down after a step {action}" if done else action)
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
