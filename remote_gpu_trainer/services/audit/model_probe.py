"""`rgt probe RUN CHECK`: run the model probe for a VERIFY probe check, store its answer, audit that check
(docs/verify.md §1).

The probe program (isolated/model_probe.py) imports the user's loader hook, `[verify.probe] hook` in rgt.toml,
so it is untrusted code: it runs in its own process, here (`--here`, on the pulled capsule runs/RUN/CELL/, with
this interpreter) or on the box (`--on INSTANCE`, pushed beside the run's workdir and run with the run's
python, on <remote_root>/<cell>), with a scrubbed environment and a timeout that kills its whole process group.
Its one JSON line is parsed strictly and its fields checked against what the check reads; only then is anything
stored (a probe record and a PROBE event per cell) and the check audited, so its finding shows at once. A probe
that fails stores nothing: the verb fails with one line naming the cell and what failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import inspect
import math
import os
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue import collapse, smoke
from remote_gpu_trainer.audits.catalogue.model import CheckResult
from remote_gpu_trainer.audits.catalogue.runner import CheckSpec, by_name
from remote_gpu_trainer.audits.env_audit.interpreter import run_interpreter
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import ConfigError, TransportError, VerbFailed
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.audit.audit import run_audit
from remote_gpu_trainer.services.evidence import store
from remote_gpu_trainer.services.evidence.load_checks import isolated_environment
from remote_gpu_trainer.state import events
from remote_gpu_trainer.strict_json import loads_strict

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.state.db import StateDB
    from remote_gpu_trainer.views import AuditFindingView

PROBE_CHECKS = ("V20", "V22", "V27", "V28")
PROGRAM = "model_probe.py"
STATS_MODULE = "rgt_probe_stats.py"
REMOTE_FOLDER = ".rgt/probe"  # under the run's workdir: beside the work, never inside remote_root
KILL_GRACE_S = 5.0
TRANSPORT_SLACK_S = 30.0  # the box's own `timeout` fires first; the transport's bound is the backstop
TAIL_CHARS = 300
# What each check reads from the answer (audits/catalogue/collapse.py and smoke.py docstrings), by kind.
FIELDS: dict[str, dict[str, str]] = {
    "V20": {"batch": "count", "mean_cosine": "number", "spread": "number"},
    "V22": {"batch": "count", "mean_cosine": "number", "spread_ratio": "number"},
    "V27": {"shape_equal": "bool", "allclose": "bool", "train_mean": "numbers", "train_std": "numbers",
            "eval_mean": "numbers", "eval_std": "numbers", "model_training_in_eval": "bool_or_null",
            "bn_untracked": "names"},
    "V28": {"trainable": "count", "covered": "count", "dead": "names", "not_in_optimizer": "names"},
}


@dataclass(frozen=True)
class CellAnswer:
    """One cell's probe answer: the subject the check reads it by, where the probe ran, and what it answered."""

    cell: str
    subject: str  # capsule:<run>/<cell>, the key the check reads the answer by
    where: str  # "here" or "on <instance>"
    answer: Mapping[str, Any]


@dataclass(frozen=True)
class ProbeOutcome:
    """What `rgt probe` did: the answers it stored, the check's result in the audit that followed, and that check's
    findings on the probed capsules."""

    check: str
    name: str
    run_id: str
    answers: tuple[CellAnswer, ...]
    result: CheckResult | None  # the check's result in the audit that followed
    findings: tuple[AuditFindingView, ...]  # the probed capsules' finding records of this check, any status


@dataclass(frozen=True)
class Target:
    """Where one cell's probe runs: the folder the hook is imported from and the capsule it is called with."""

    label: str  # <run>/<cell>
    where: str  # "here" or "on <instance>"
    root: str
    capsule: str


def probe_check(text: str) -> CheckSpec:
    """V20, V22, V27 or V28, by id or name; anything else is a usage error."""
    spec = by_name(text)
    if spec is None or spec.id not in PROBE_CHECKS:
        what = "not a VERIFY check" if spec is None else f"{spec.id} {spec.name} is not a probe check"
        raise ConfigError(f"rgt probe: {text!r} is {what}: probe checks are V20 output_cosine, V22 input_spread, "
                          "V27 train_eval_parity, V28 grad_coverage")
    return spec


async def probe_run(session: Session, run_id: str, check: str, *, cell: str | None = None, on: str | None = None,
                    actor: str = "user") -> ProbeOutcome:
    """Probe every cell of the run (or `cell`) here or on `on`, store the answers, audit the check."""
    spec = probe_check(check)
    project = session.project
    run = project.run(run_id)
    hook = project.audit.probe.hook
    if hook is None:
        raise ConfigError(f"{project.file}: rgt probe needs the loader hook: add [verify.probe] with "
                          'hook = "module:function" (see rgt help probe)')
    if on is not None and on not in project.instances:
        raise ConfigError(f"rgt probe --on: no instance {on!r} in {project.file} "
                          f"(instances: {', '.join(sorted(project.instances)) or 'none'})")
    session.require_writable("rgt probe")
    answers = []
    for name in cells_of(run, cell):
        target = local_target(session, run, name) if on is None else remote_target(run, name, on)
        document = await (run_here(spec.id, hook, target, project.audit.probe.timeout_s, db=session.db)
                          if on is None else
                          run_on(session, run, on, spec.id, hook, target, project.audit.probe.timeout_s))
        answers.append(CellAnswer(name, f"capsule:{target.label}", target.where, answer_of(spec.id, document, target)))
    return record(session, spec, run.id, answers, actor)


def cells_of(run: RunConfig, cell: str | None) -> tuple[str, ...]:
    if cell is None:
        return run.roster
    if cell not in run.roster:
        raise ConfigError(f"rgt probe --cell: run {run.id} has no cell {cell!r} (cells: {', '.join(run.roster)})")
    return (cell,)


def record(session: Session, spec: CheckSpec, run_id: str, answers: Sequence[CellAnswer],
           actor: str) -> ProbeOutcome:
    """Every answer stored with its event, then the audit of this one check."""
    for answer in answers:
        session.db.add_probe_record(spec.id, answer.subject, answer.answer)
        events.probe_recorded(session.db, check=spec.id, subject=answer.subject, where=answer.where, actor=actor)
    audit = run_audit(session.project, session.db, only={spec.id}, actor=actor)
    subjects = {answer.subject for answer in answers}
    result = next((r for r in audit.results if r.check == spec.id), None)
    shown = tuple(f for f in audit.view.findings if f.check == spec.id and f.subject in subjects)
    return ProbeOutcome(spec.id, spec.name, run_id, tuple(answers), result, shown)


# -- here -----------------------------------------------------------------------------------------------------
def local_target(session: Session, run: RunConfig, cell: str) -> Target:
    folder = session.project.run_dir(run.id) / cell
    if not folder.is_dir():
        raise VerbFailed(f"probe {run.id}/{cell}: no pulled copy at runs/{run.id}/{cell}/: rgt pull {run.id} "
                         f"first, or probe on the box with --on {run.instance}")
    return Target(f"{run.id}/{cell}", "here", str(session.project.root), str(folder))


async def run_here(check: str, hook: str, target: Target, timeout: float, *,
                   db: StateDB | None = None) -> Mapping[str, Any]:
    """The probe as a child of rgt: this interpreter, -I, the scrubbed environment, its own process group
    (killed whole on timeout), cwd the project root (relative paths in the hook mean what training meant).

    The hook is untrusted code running beside the evidence: the whole store `runs/` is hashed before it runs
    and again after (services/evidence/store.py: content and mode, never size or mtime, which a writer can put
    back), and any change fails the probe naming it, with nothing stored."""
    command = [sys.executable, "-I", "-B", "-m", "remote_gpu_trainer.isolated.model_probe", check, "--hook", hook,
               "--root", target.root, "--capsule", target.capsule]
    before = await asyncio.to_thread(store.snapshot, Path(target.root), db)
    process = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=isolated_environment(), cwd=target.root, start_new_session=True)
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        await _kill_group(process)
        raise VerbFailed(f"{_failed(check, target)}: no answer within {timeout:g} s (timeout_s in "
                         "[verify.probe]); the probe was killed") from None
    except asyncio.CancelledError:  # rgt interrupted: the probe goes with it
        await _kill_group(process)
        raise
    changed = store.changes(before, await asyncio.to_thread(store.snapshot, Path(target.root), db))
    if changed:  # the pulled copy is evidence: a hook that writes there unverifies it, which must not go unsaid
        raise VerbFailed(f"{_failed(check, target)}: the hook changed the evidence store ({store.summary(changed)})"
                         f": the pulled copy is no longer the verified one; rgt verify {target.label.split('/')[0]} "
                         "says what changed, and a pull restores it. Nothing was stored")
    return parse(check, target, process.returncode or 0, out, err)


async def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the probe's whole process group (whatever the hook started goes too), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


# -- on the box -----------------------------------------------------------------------------------------------
def remote_target(run: RunConfig, cell: str, instance: str) -> Target:
    return Target(f"{run.id}/{cell}", f"on {instance}", run.workdir, f"{run.remote_root.rstrip('/')}/{cell}")


async def run_on(session: Session, run: RunConfig, instance: str, check: str, hook: str, target: Target,
                 timeout: float) -> Mapping[str, Any]:
    """Push the program (and the checks' helpers beside it), then run it with the run's python in the
    workdir, under `timeout -k` with an emptied environment: the box's keys and tokens stay out of it."""
    transport = await instances.remote(session, instance)
    folder = f"{run.workdir.rstrip('/')}/{REMOTE_FOLDER}"
    try:
        await transport.put_bytes(program_source(), f"{folder}/{PROGRAM}")
        await transport.put_bytes(stats_source().encode("utf-8"), f"{folder}/{STATS_MODULE}")
        python = run_interpreter(run.command, run.python, explicit=run.python_explicit, run_id=run.id).path
        command = remote_command(python, transport.resolve(f"{folder}/{PROGRAM}"), check, hook,
                                 transport.resolve(target.root), transport.resolve(target.capsule), timeout)
        done = await transport.run(command, timeout=timeout + KILL_GRACE_S + TRANSPORT_SLACK_S)
    except (TransportError, OSError) as exc:
        raise VerbFailed(f"{_failed(check, target)}: {exc}") from None
    except TimeoutError:
        raise VerbFailed(f"{_failed(check, target)}: no answer within {timeout:g} s") from None
    if done.rc in (124, 137):
        raise VerbFailed(f"{_failed(check, target)}: no answer within {timeout:g} s (timeout_s in "
                         "[verify.probe]); the probe was killed")
    if done.rc == 127 and not done.stdout.strip():
        raise VerbFailed(f"{_failed(check, target)}: {python} (or timeout) not found on {instance}: set python "
                         f"in [runs.{run.id}] ({_tail(done.stderr)})")
    return parse(check, target, done.rc, done.stdout, done.stderr)


def remote_command(python: str, program: str, check: str, hook: str, root: str, capsule: str,
                   timeout: float) -> str:
    q = shlex.quote
    keep = " ".join(f'{name}="${{{name}:-}}"' for name in ("PATH", "HOME", "LANG", "TMPDIR"))
    return (f"cd {q(root)} && exec env -i {keep} OMP_NUM_THREADS=1 "
            f"timeout -k {KILL_GRACE_S:g} {math.ceil(timeout)} {q(python)} -I -B {q(program)} {q(check)} "
            f"--hook {q(hook)} --root {q(root)} --capsule {q(capsule)} </dev/null")


def program_source() -> bytes:
    return importlib.resources.files("remote_gpu_trainer.isolated").joinpath(PROGRAM).read_bytes()


def stats_source() -> str:
    """The checks' numpy helpers as one module for the box, from their own source: the answer computed
    there means exactly what the check reads."""
    functions = (collapse.output_cosine_stats, collapse.input_spread_stats, smoke.parity_stats,
                 smoke._channel_stats, smoke.grad_coverage_stats)
    header = ('"""VERIFY\'s numpy helpers, copied from rgt\'s checks by `rgt probe --on`."""\n\n'
              "from __future__ import annotations\n\nfrom collections.abc import Mapping\nfrom typing import Any\n")
    return header + "".join(f"\n\n{inspect.getsource(function)}" for function in functions)


# -- the answer -----------------------------------------------------------------------------------------------
def parse(check: str, target: Target, rc: int, stdout: bytes, stderr: bytes) -> Mapping[str, Any]:
    """The probe's one JSON object, strictly; its failure in one line when it failed."""
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    if len(lines) != 1:
        raise VerbFailed(f"{_failed(check, target)}: exit {rc}, {len(lines)} lines on stdout instead of one "
                         f"JSON answer: {_tail(stderr)}")
    try:
        document = loads_strict(lines[0])
    except ValueError as exc:
        raise VerbFailed(f"{_failed(check, target)}: its answer is not JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("ok"), bool):
        raise VerbFailed(f"{_failed(check, target)}: its answer is not a probe result object")
    if not document["ok"]:
        raise VerbFailed(f"{_failed(check, target)}: {document.get('error')}: {document.get('detail')}")
    return document


def answer_of(check: str, document: Mapping[str, Any], target: Target) -> Mapping[str, Any]:
    """The answer, when it holds every field the check reads, of the kind it reads."""
    answer = document.get("answer")
    failed = _failed(check, target)
    if document.get("check") != check or not isinstance(answer, dict):
        raise VerbFailed(f"{failed}: the answer is not one for {check}")
    wrong = [key for key, kind in FIELDS[check].items() if key not in answer or not _is(kind, answer[key])]
    if wrong:
        raise VerbFailed(f"{failed}: the answer lacks or mistypes {', '.join(wrong)}")
    if check == "V28" and answer["covered"] > answer["trainable"]:
        raise VerbFailed(f"{failed}: covered {answer['covered']} > trainable {answer['trainable']}")
    return answer


def _is(kind: str, value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    checks = {
        "count": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "number": number,
        "bool": isinstance(value, bool),
        "bool_or_null": value is None or isinstance(value, bool),
        "numbers": isinstance(value, list) and all(_is("number", v) for v in value),
        "names": isinstance(value, list) and all(isinstance(v, str) for v in value),
    }
    return checks[kind]


def _failed(check: str, target: Target) -> str:
    return f"probe {check} of {target.label} ({target.where}) failed"


def _tail(stderr: bytes) -> str:
    text = " ".join(stderr.decode("utf-8", "replace").split())
    return text[-TAIL_CHARS:] or "nothing on stderr"
