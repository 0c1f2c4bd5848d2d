"""`rgt accept`: independent acceptance of a pulled bundle on a second machine, and comparing two acceptances.

The bundle is what the local manifest lists in runs/RUN/ (docs/gate.md §2), plus the manifest itself. `--on
INSTANCE` pushes those files through that instance's transport into a scratch folder there (removed afterwards);
`--here` reads runs/RUN/ in place (this machine is the second one when the pull came from a box). Either way the
same program, remote/accept_bundle.py, runs on that machine with its own interpreter (sent on stdin, an emptied
environment, `timeout -k`): it re-hashes every file, load-checks every checkpoint with weights_only in a child
process with a timeout, and reads the metrics files back. Its answer is parsed strictly (audits/acceptance.py),
the scientific core derived from what that machine read, and the record written atomically with an ACCEPTANCE
event. The instance that produced the run is refused (an acceptance there proves nothing).

Where records live: `.rgt/acceptance/RUN/ACCEPTANCE-<machine>.json` (machine = the instance name, or `here`).
Not in runs/RUN/: verification and the teardown gate treat any file there that the manifest does not list as
an unexpected local file (docs/gate.md §5 step 2), so a record there would fail every later `rgt verify` and close
the gate. RECORDS_DIR is the one place to change once the local-root walk learns to skip ACCEPTANCE-*.json.
"""

from __future__ import annotations

import math
import os
import secrets
import shlex
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer import __version__
from remote_gpu_trainer.audits.acceptance import (
    RECORD_PREFIX,
    AcceptanceRecord,
    Answer,
    Verdict,
    answer_identity,
    compare_records,
    metrics_paths,
    parse_answer,
    parse_record,
    record_document,
)
from remote_gpu_trainer.audits.env_audit.interpreter import run_interpreter
from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    Manifest,
    Problem,
    canonical_json,
    is_checkpoint,
    parse_manifest,
    required_checkpoints,
    sha256_bytes,
)
from remote_gpu_trainer.clock import iso_offset
from remote_gpu_trainer.config.project import SAFE_NAME, ProjectConfig, RunConfig
from remote_gpu_trainer.errors import ConfigError, TransportError, VerbFailed
from remote_gpu_trainer.fsutil import atomic_write, read_regular
from remote_gpu_trainer.providers import table as provider_table
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.remote import program_stdin
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence.manifest import problems_line
from remote_gpu_trainer.state import events

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

PROGRAM = "accept_bundle.py"
HERE = "here"
RECORDS_DIR = "acceptance"  # under .rgt/ (module docstring says why not runs/RUN/)
SCRATCH = "/tmp/rgt-accept"  # on the far side; one fresh folder per acceptance, removed afterwards
CKPT_MIN_TIMEOUT_S = 120.0  # per checkpoint, as the local load check (docs/gate.md §5.1)
CKPT_S_PER_GIB = 30.0
HASH_BYTES_PER_S = 20 << 20  # a slow disk: bounds the re-hash part of the whole program's timeout
BASE_TIMEOUT_S = 120.0
KILL_GRACE_S = 5.0
TRANSPORT_SLACK_S = 30.0  # the far side's own `timeout` fires first; the transport's bound is the backstop
RECORD_MAX_BYTES = 256 << 20
TAIL_CHARS = 300


@dataclass(frozen=True)
class AcceptOutcome:
    """One written acceptance record: where it was written, its document, and the problems that make it not ok."""

    path: Path
    document: dict[str, Any]
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Comparison:
    """Two acceptance records of a run and the verdict of comparing them."""

    a: AcceptanceRecord
    b: AcceptanceRecord
    verdict: Verdict


def record_path(project: ProjectConfig, run_id: str, machine: str) -> Path:
    return project.state_dir / RECORDS_DIR / run_id / f"{RECORD_PREFIX}{machine}.json"


async def accept_run(session: Session, run_id: str, *, on: str | None, actor: str = "user") -> AcceptOutcome:
    """Accept runs/RUN/ on `on` (or here when None), write the record and its event; the record is written
    whatever the machine found (its problems are in it), but not when the machine gave no usable answer."""
    run = run_config(session, run_id)
    refuse_target(session.project, run, on)
    session.require_writable("rgt accept")
    root = session.project.run_dir(run.id)
    manifest = local_manifest(root, run)
    checkpoints = checkpoint_paths(run, manifest)
    timeouts = {path: checkpoint_timeout(manifest, path) for path in checkpoints}
    params: dict[str, Any] = {"files": [entry.path for entry in manifest.files] + [MANIFEST_NAME],
                              "checkpoints": timeouts, "metrics": metrics_paths(e.path for e in manifest.files)}
    timeout = program_timeout(manifest, timeouts)
    if on is None:
        answer = await run_program(LocalTransport(), sys.executable, {**params, "root": str(root)}, timeout, HERE)
        machine, provider = HERE, None
    else:
        answer = await accept_on(session, run, on, root, manifest, params, timeout)
        machine, provider = on, session.project.instances[on].provider
    document = record_document(
        run=run.id, machine=machine, identity=answer_identity(answer, on, provider),
        accepted_at=iso_offset(session.clock()), rgt_version=__version__,
        manifest=manifest, answer=answer, checkpoints=checkpoints)
    return write_record(session, run.id, machine, on, document, actor)


def refuse_target(project: ProjectConfig, run: RunConfig, on: str | None) -> None:
    """Only a second machine can accept: an unknown instance, the run's own box, or `--here` for a run that
    ran on this machine (provider local) is refused before anything moves."""
    if on is None:
        if provider_table.kind_of(project.instances[run.instance].provider) == "local":
            raise ConfigError(f"rgt accept --here: run {run.id} ran on this machine (instance {run.instance}, "
                              "provider local): an acceptance here proves nothing; use --on another instance")
        return
    if on not in project.instances:
        raise ConfigError(f"rgt accept --on: no instance {on!r} in {project.file} "
                          f"(instances: {', '.join(sorted(project.instances)) or 'none'})")
    if on == run.instance:
        raise ConfigError(f"rgt accept --on {on}: {on} is the instance run {run.id} ran on; an acceptance "
                          "there proves nothing: use --on another instance, or --here")
    if on == HERE:
        raise ConfigError(f"rgt accept --on {on}: the name {HERE!r} is --here's record; rename the instance")


def local_manifest(root: Path, run: RunConfig) -> Manifest:
    """The local manifest, held to every rule of docs/gate.md §2 (it defines the bundle)."""
    data = read_regular(root / MANIFEST_NAME)
    if data is None:
        raise VerbFailed(f"{root / MANIFEST_NAME}: no pulled manifest (a regular file): rgt pull {run.id} first")
    manifest, problems = parse_manifest(data, roster=run.roster, run_id=run.id)
    if manifest is None or problems:
        raise VerbFailed(f"{root / MANIFEST_NAME}: manifest refused: {problems_line(problems)}")
    return manifest


def checkpoint_paths(run: RunConfig, manifest: Manifest) -> list[str]:
    """The files load-checked there: every required checkpoint and every file matching checkpoint_globs."""
    listed = {entry.path for entry in manifest.files}
    wanted = set(required_checkpoints(manifest.finished(run.roster), run.required, run.checkpoint_globs)) & listed
    wanted |= {path for path in listed if is_checkpoint(path, run.checkpoint_globs)}
    return sorted(wanted)


def checkpoint_timeout(manifest: Manifest, path: str) -> float:
    return max(CKPT_MIN_TIMEOUT_S, CKPT_S_PER_GIB * manifest.by_path()[path].bytes / (1 << 30))


def program_timeout(manifest: Manifest, checkpoints: dict[str, float]) -> float:
    """The bound of the whole program: every checkpoint's timeout, the re-hash of every byte, and a base."""
    return BASE_TIMEOUT_S + sum(checkpoints.values()) + manifest.total_bytes / HASH_BYTES_PER_S


# -- running the program ------------------------------------------------------------------------------------------
async def accept_on(session: Session, run: RunConfig, on: str, root: Path, manifest: Manifest,
                    params: dict[str, Any], timeout: float) -> Answer:
    """Push the bundle into a fresh scratch folder on `on`, run the program there with the run's python, and
    remove the folder again (also when the program failed)."""
    transport = await instances.remote(session, on)
    scratch = f"{SCRATCH}/{run.id}-{secrets.token_hex(6)}"
    python = run_interpreter(run.command, run.python, explicit=run.python_explicit, run_id=run.id).path
    try:
        try:
            for path in params["files"]:
                await transport.put_bytes(bundle_file(root, path), f"{scratch}/{path}")
        except (TransportError, OSError) as exc:
            raise VerbFailed(f"accept of {run.id} on {on}: pushing the bundle failed: {exc}") from None
        return await run_program(transport, python, {**params, "root": transport.resolve(scratch)}, timeout, on)
    finally:
        await remove_scratch(transport, scratch)


def bundle_file(root: Path, path: str) -> bytes:
    """A listed file's bytes, read only inside runs/RUN/ and never through a link (each folder on the way and
    the file itself are lstat-ed); the manifest's paths are already safe names (docs/gate.md §2)."""
    parts = path.split("/")
    for depth in range(1, len(parts)):
        info = os.lstat(root.joinpath(*parts[:depth]))
        if not stat.S_ISDIR(info.st_mode):  # a symlink is not S_ISDIR under lstat
            raise VerbFailed(f"runs/{root.name}/{'/'.join(parts[:depth])}: not a folder (a symlink?): refused; "
                             f"rgt verify {root.name} says more")
    data = read_regular(root.joinpath(*parts))
    if data is None:
        raise VerbFailed(f"runs/{root.name}/{path}: not a regular file here (missing or a symlink): "
                         f"rgt pull {root.name} and rgt verify {root.name} first")
    return data


async def remove_scratch(transport: Transport, scratch: str) -> None:
    try:
        await transport.run(f"rm -rf -- {shlex.quote(transport.resolve(scratch))}", timeout=60)
    except (TransportError, OSError, TimeoutError):
        pass  # a leftover scratch copy on the box holds nothing secret the box did not already have


def program_command(python: str, timeout: float) -> str:
    """The program on stdin, run under `timeout -k` with an emptied environment: no keys or tokens reach it."""
    keep = " ".join(f'{name}="${{{name}:-}}"' for name in ("PATH", "HOME", "LANG", "TMPDIR"))
    return (f"exec env -i {keep} OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES= "
            f"timeout -k {KILL_GRACE_S:g} {math.ceil(timeout)} {shlex.quote(python)} -I -")


async def run_program(transport: Transport, python: str, params: dict[str, Any], timeout: float,
                      machine: str) -> Answer:
    """The program's answer, or VerbFailed in one line naming the machine and what failed."""
    failed = f"acceptance on {machine} failed"
    try:
        done = await transport.run(program_command(python, timeout), stdin=program_stdin(PROGRAM, params),
                                   timeout=timeout + KILL_GRACE_S + TRANSPORT_SLACK_S)
    except (TransportError, OSError) as exc:
        raise VerbFailed(f"{failed}: {exc}") from None
    except TimeoutError:
        raise VerbFailed(f"{failed}: no answer within {timeout:.0f} s") from None
    if done.rc in (124, 137):
        raise VerbFailed(f"{failed}: no answer within {timeout:.0f} s; the program was killed")
    if done.rc == 127 and not done.stdout.strip():
        raise VerbFailed(f"{failed}: {python} (or timeout) not found there ({_tail(done.stderr)})")
    answer, why = parse_answer(done.stdout)
    if answer is None:
        raise VerbFailed(f"{failed}: exit {done.rc}, {why} ({_tail(done.stderr)})")
    return answer


def _tail(stderr: bytes) -> str:
    return " ".join(stderr.decode("utf-8", "replace").split())[-TAIL_CHARS:] or "nothing on stderr"


def write_record(session: Session, run_id: str, machine: str, instance: str | None, document: dict[str, Any],
                 actor: str) -> AcceptOutcome:
    """The record, atomically, then its event."""
    path = record_path(session.project, run_id, machine)
    data = canonical_json(document)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)
    problems = tuple(Problem(p["code"], p["path"], p["detail"]) for p in document["problems"])
    events.acceptance_recorded(session.db, run_id=run_id, machine=machine, instance=instance, ok=not problems,
                               problems=len(problems), record=str(path.relative_to(session.project.root)),
                               record_sha256=sha256_bytes(data), actor=actor)
    return AcceptOutcome(path, document, problems)


# -- comparing ----------------------------------------------------------------------------------------------------
def resolve_record(project: ProjectConfig | None, run_id: str | None, name: str) -> Path:
    """A record's path: `name` itself when it is a file, else the record of machine `name` for the run."""
    given = Path(name)
    if given.is_file() or "/" in name or name.endswith(".json"):
        return given
    if project is None or run_id is None:
        raise ConfigError(f"rgt accept --compare: {name!r} is not a file; name a RUN (and the project) to "
                          "compare machines' records by name")
    if not SAFE_NAME.match(name):
        raise ConfigError(f"rgt accept --compare: {name!r} is neither a file nor a machine name")
    project.run(run_id)
    return record_path(project, run_id, name)


def load_record(path: Path) -> AcceptanceRecord:
    """A record read back strictly; anything unreadable or malformed is a one-line usage error (exit 2)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise ConfigError(f"{path}: no acceptance record here ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > RECORD_MAX_BYTES:
        raise ConfigError(f"{path}: not an acceptance record (not a regular file of sane size)")
    data = read_regular(path) or b""
    record, problems = parse_record(data, str(path))
    if record is None:
        raise ConfigError(f"{path}: not an acceptance record: {'; '.join(problems[:3])}")
    return record


def compare_paths(a: Path, b: Path) -> Comparison:
    first, second = load_record(a), load_record(b)
    return Comparison(first, second, compare_records(first, second))


def compare_names(project: ProjectConfig | None, run_id: str | None, names: Sequence[str]) -> Comparison:
    """`rgt accept --compare A B`: each a path or a machine name resolved for the run."""
    a, b = (resolve_record(project, run_id, name) for name in names)
    return compare_paths(a, b)
