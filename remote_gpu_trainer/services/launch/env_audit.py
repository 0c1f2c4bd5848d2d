"""Phase 0 of a launch: the environment survey of a box and its audit (docs/remote-ops.md §1, §4).

The survey (remote/env_survey.sh) is sent as a bash program on stdin with every argument shell-quoted, so
nothing from the run is spliced into a script body, and it is bounded by a deadline
(services/box_programs.py). Its answer is parsed strictly: a survey that prints anything but one JSON object
of the expected version is a bad answer, reported as a one-line TransportError (state unknown), never guessed
at. Judging the facts is audits/env_audit/'s job; this module fetches them, stores the rows and logs the event.
The live GPU samples a watcher takes are services/watch/gpu_samples.py.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import shlex
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.env_audit import (
    LOOPBACK,
    SURVEY_VERSION,
    RunRequirements,
    audit_environment,
    kept_checkpoints,
    run_interpreter,
    worst,
)
from remote_gpu_trainer.audits.manifest import is_checkpoint
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import TransportError, VerbFailed
from remote_gpu_trainer.networks import load_network
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.box_programs import run_box_program
from remote_gpu_trainer.services.evidence.manifest import local_manifest
from remote_gpu_trainer.state import events
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.views import AuditRow

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

SURVEY_TIMEOUT_S = 120.0


def survey_script() -> bytes:
    """The environment survey as shipped in the package (remote/env_survey.sh)."""
    return importlib.resources.files("remote_gpu_trainer.remote").joinpath("env_survey.sh").read_bytes()


def survey_command(transport: Transport, *, scratch: str, durable: str, python: str, workdir: str,
                  staging_pairs: Iterable[tuple[str, str]]) -> str:
    """`bash -s -- M D PY WORKDIR [STAGING FINAL]...`, every argument quoted; paths as the box sees them."""
    paths = [transport.resolve(scratch), transport.resolve(durable)]
    args = [*paths, python, transport.resolve(workdir)]
    for staging, final in staging_pairs:
        args += [transport.resolve(staging), transport.resolve(final)]
    return "bash -s -- " + " ".join(shlex.quote(a) for a in args)


async def run_env_survey(transport: Transport, *, scratch: str, durable: str, python: str, workdir: str,
                        staging_pairs: Iterable[tuple[str, str]] = (), timeout: float = SURVEY_TIMEOUT_S,
                        clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """The survey's facts, plus `client_sent_at`/`client_received_at` (local wall clock around the call)
    so the audit can measure clock skew without reading a clock itself."""
    command = survey_command(transport, scratch=scratch, durable=durable, python=python, workdir=workdir,
                            staging_pairs=staging_pairs)
    sent = clock()
    result = await run_box_program(transport, command, survey_script(), timeout, "environment probe")
    received = clock()
    facts = parse_survey_output(result.stdout)
    facts["client_sent_at"] = sent
    facts["client_received_at"] = received
    return facts


def parse_survey_output(stdout: bytes) -> dict[str, Any]:
    """Exactly one JSON object, first key "version" equal to SURVEY_VERSION, no duplicate keys, no NaN.

    Bytes are decoded with U+FFFD for invalid UTF-8: the survey passes command output through byte for byte,
    and a path or a log line on the box need not be UTF-8.
    """
    text = stdout.decode("utf-8", errors="replace").strip()
    try:
        facts = loads_strict(text)
    except ValueError as exc:
        raise TransportError(f"environment probe answered badly (not one JSON object: {exc}); "
                             f"output starts {text[:80]!r}") from None
    if not isinstance(facts, dict) or next(iter(facts), None) != "version":
        raise TransportError("environment probe answered badly: the first field is not the script version")
    if facts["version"] != SURVEY_VERSION:
        raise TransportError(f"environment probe answered with version {facts['version']!r}, "
                             f"expected {SURVEY_VERSION!r}")
    if "error" in facts:
        raise TransportError(f"environment probe refused its arguments: {facts['error']}")
    return facts


async def audit_run_environment(session: Session, run_id: str, actor: str = "user") -> list[AuditRow]:
    """Phase 0 on the run's instance: one environment survey, sixteen rows, stored and logged (docs/remote-ops.md §4).
    It checks the box for the next launch, so it reads rgt.toml as it is (not the last launch's bindings)."""
    run = session.project.run(run_id)
    transport = await instances.remote(session, run.instance)
    workdir, durable = transport.resolve(run.workdir), transport.resolve(run.remote_root)
    made = await transport.run(f"mkdir -p {shlex.quote(workdir)} {shlex.quote(durable)}", timeout=30)
    if made.rc != 0:
        raise VerbFailed(f"cannot create {run.workdir} or {run.remote_root} on {run.instance}: "
                         f"{made.error_text.strip()[:200]}")
    # Row 8 checks the interpreter the command runs, not a python3 that may lack the run's torch.
    python = run_interpreter(run.command, run.python, explicit=run.python_explicit, run_id=run_id)
    facts = await run_env_survey(transport, scratch=run.workdir, durable=run.remote_root, python=python.path,
                                workdir=run.workdir)
    # with a size, row 3 weighs best + the resume anchor against the durable disk
    budget, source = checkpoint_size(session, run)
    rows = audit_environment(facts, RunRequirements(gpus=run.gpus, interpreter_why=python.why,
                                                    ckpt_tier_survives=session.profile(run.instance).durable_survives(),
                                                    no_proxy_hosts=no_proxy_hosts(run), ckpt_bytes=budget,
                                                    ckpt_source=source,
                                                    kept=kept_checkpoints(1, 0) if budget is not None else None))
    session.db.add_audit(run_id, "env", [dataclasses.asdict(row) for row in rows])
    counts = {status: sum(1 for r in rows if r.status == status) for status in ("fail", "warn", "pass")}
    events.env_audited(session.db, run_id=run_id, instance=run.instance, worst=worst(rows), fails=counts["fail"],
                       warns=counts["warn"], rows=[dataclasses.asdict(r) for r in rows], actor=actor)
    return rows


def checkpoint_size(session: Session, run: RunConfig) -> tuple[int | None, str]:
    """One checkpoint's size for row 3 and where it came from: `runs.<id>.checkpoint_bytes` when set, else the
    largest checkpoint a pulled manifest of this run, or of a run with the same command, lists (the first
    checkpoints rgt has seen of this training); (None, "") when neither says."""
    if run.checkpoint_bytes is not None:
        return run.checkpoint_bytes, f"runs.{run.id}.checkpoint_bytes"
    same = [run] + [other for other in session.project.runs.values()
                    if other.id != run.id and other.command == run.command]
    for other in same:
        manifest = local_manifest(session.project.run_dir(other.id), other)
        sizes = [f.bytes for f in manifest.files if is_checkpoint(f.path, other.checkpoint_globs)] if manifest else []
        if sizes:
            return max(sizes), f"estimated: the largest checkpoint run {other.id} pulled"
    return None, ""


def no_proxy_hosts(run: RunConfig) -> tuple[str, ...]:
    """Row 17's hosts: loopback, plus the mirrors of the run's network profile (docs/remote-ops.md §12)."""
    return LOOPBACK + (load_network(run.network).mirror_hosts if run.network else ())


def acknowledge_failed_rows(session: Session, run_id: str, failed: list[AuditRow], note: str,
                            actor: str = "user") -> None:
    """Launching past failed phase-0 rows is the user's call, recorded with their reason before the launch."""
    if not note.strip():
        raise VerbFailed(f"run {run_id}: launching past a failed phase-0 row needs a reason (--ack \"why\")")
    events.env_acknowledged(session.db, run_id=run_id, instance=session.project.run(run_id).instance, note=note,
                            checks=[r.check for r in failed], actor=actor)
