"""Gather the phase-0 environment facts and live GPU samples from a box (docs/remote-ops.md §1, §4, §5).

Both calls send a bash program on stdin with every argument shell-quoted, so nothing from the run is
spliced into a script body, and both are bounded by a deadline. The answers are parsed strictly: a
probe that prints anything but one JSON object of the expected version is a bad answer, reported as a
one-line TransportError (state unknown), never guessed at. Judging the facts is the audits' job
(audits/env_audit.py, audits/gpu_health.py); this module only fetches them.
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
from remote_gpu_trainer.audits.gpu_health import (
    SAMPLE_FIELDS,
    THROTTLE_FIELDS,
    GpuParseError,
    GpuSample,
    parse_gpu_samples,
)
from remote_gpu_trainer.audits.manifest import is_checkpoint
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import RgtError, TransportError, VerbFailed
from remote_gpu_trainer.networks import load_network
from remote_gpu_trainer.providers.base import CommandResult, InstanceStatus, Transport
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.evidence.manifest import local_manifest
from remote_gpu_trainer.services.watch import run_logs
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import describe_gpus
from remote_gpu_trainer.views import AuditRow

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

SURVEY_TIMEOUT_S = 120.0
SAMPLE_TIMEOUT_S = 15.0
SAMPLE_VERSION = "rgt-gpu-sample/1"
GPU_SAMPLE_S = 10.0  # the dashboard's GPU text is sampled at most this often per instance

# One query of the same fields as the survey's samples; KEY=VALUE lines, then nvidia-smi's CSV verbatim.
_SAMPLER = f"""set -u
main() {{
  echo "version={SAMPLE_VERSION}"
  if ! command -v nvidia-smi >/dev/null 2>&1; then echo "nvidia_smi=missing"; return 0; fi
  echo "nvidia_smi=present"
  local t="" out rc
  timeout -k 1 5 true >/dev/null 2>&1 && t="timeout -k 2 10"
  out=$($t nvidia-smi --query-gpu={','.join(SAMPLE_FIELDS)},{THROTTLE_FIELDS[0]} --format=csv,noheader,nounits 2>&1)
  rc=$?
  if [ "$rc" != 0 ]; then
    out=$($t nvidia-smi --query-gpu={','.join(SAMPLE_FIELDS)},{THROTTLE_FIELDS[1]} --format=csv,noheader,nounits 2>&1)
    rc=$?
  fi
  echo "rc=$rc"
  printf '%s\\n' "$out"
}}
main </dev/null; exit 0
"""


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
    result = await _run(transport, command, survey_script(), timeout, "environment probe")
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


async def sample_gpus(transport: Transport, timeout: float = SAMPLE_TIMEOUT_S) -> list[GpuSample] | None:
    """One sample per GPU for the live panel; None when the box has no GPU (no nvidia-smi, or no device)."""
    result = await _run(transport, "bash -s", _SAMPLER.encode(), timeout, "GPU sample")
    return parse_sample_output(result.stdout)


def parse_sample_output(stdout: bytes) -> list[GpuSample] | None:
    lines = stdout.decode("utf-8", errors="replace").splitlines()
    if not lines or lines[0] != f"version={SAMPLE_VERSION}":
        raise TransportError(f"GPU sampler answered badly: {lines[0][:80] if lines else 'nothing'!r}")
    if lines[1:2] == ["nvidia_smi=missing"]:
        return None
    if len(lines) < 3 or lines[1] != "nvidia_smi=present" or not lines[2].startswith("rc="):
        raise TransportError("GPU sampler answered badly: missing nvidia_smi/rc lines")
    rc_text = lines[2].removeprefix("rc=")
    csv = "\n".join(lines[3:])
    if rc_text != "0":
        if rc_text == "6" or "no devices were found" in csv.lower():
            return None
        first = next((line.strip() for line in lines[3:] if line.strip()), "no output")
        raise TransportError(f"nvidia-smi failed on the box (exit {rc_text}): {first[:200]}")
    try:
        samples = parse_gpu_samples(csv)
    except GpuParseError as exc:
        raise TransportError(f"GPU sampler answered badly: {exc}") from None
    return samples or None


async def _run(transport: Transport, command: str, script: bytes, timeout: float, what: str) -> CommandResult:
    try:
        result = await transport.run(command, stdin=script, timeout=timeout)
    except TimeoutError:
        raise TransportError(f"{what} got no answer within {timeout:g} s: state unknown, retry later") from None
    except TransportError as exc:
        if type(exc) is not TransportError:
            raise  # typed failures (host key, authentication) carry what the UI needs; never blur them
        raise TransportError(f"{what} could not reach the box: {_one_line(str(exc))}") from None
    except OSError as exc:
        raise TransportError(f"{what} could not run: {_one_line(str(exc)) or type(exc).__name__}") from None
    if result.rc != 0:
        detail = _one_line(result.error_text) or "no message"
        raise TransportError(f"{what} exited {result.rc}: {detail}")
    return result


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]




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


def last_audit(db: StateDB, run_id: str) -> tuple[AuditRow, ...]:
    """The run's last phase-0 audit as stored, for the dashboard and the report."""
    record = db.last_audit(run_id, "env")
    return tuple(AuditRow(**row) for row in record[1]) if record else ()


async def gpu_text(session: Session, name: str, status: InstanceStatus) -> str:
    """What the GPUs are doing, sampled at most every GPU_SAMPLE_S per instance; "no GPU" is a state."""
    if not session.profile(name).gpu_sampling or status.state != "running":
        return status.gpu
    texts = _gpu_texts(session)
    cached = texts.get(name)
    if cached is not None and time.monotonic() - cached[0] < GPU_SAMPLE_S:
        return cached[1]
    try:
        samples = await sample_gpus(session.transport(name))
    except RgtError:
        text = f"{cached[1]} (stale)" if cached else status.gpu or "?"  # the provider's word beats none
    else:
        text = describe_gpus(samples)
        run_logs.note_gpu_samples(session, name, samples or [])  # the GPU rules read them
    texts[name] = (time.monotonic(), text)
    return text


def _gpu_texts(session: Session) -> dict[str, tuple[float, str]]:
    """Instance -> (monotonic time, panel text) of its last GPU sample in this session."""
    return session.cache(__name__, dict)
