"""The Slurm command layer: sbatch, squeue, sacct and scancel over any Transport (docs/providers.md §8).

On a cluster the job's state belongs to the scheduler, not to a process `rgt` can probe: a queued job has no
pid yet, and the scheduler may end a job for reasons no exit code tells (time limit, preemption, a failed
node). So the state is read from Slurm with fixed, machine-readable formats and mapped onto the liveness
words of docs/remote-ops.md §7. The job wrapper still writes its own `exit_code` (docs/remote-ops.md §6); this module
only answers what Slurm says.

Every call goes through `Transport.run` with a timeout, so it works the same on a login node over SSH and on
this machine. A connection that fails, times out or gets an answer in an unexpected shape raises
TransportError, which callers show as `unknown` and never as `dead`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from remote_gpu_trainer.errors import TransportError, VerbFailed
from remote_gpu_trainer.providers.base import CommandResult, Transport

COMMAND_TIMEOUT_S = 30.0

# squeue -O: one line per job, every field followed by "|"; Reason last because it is free-ish text.
SQUEUE_FIELDS = ("JobID", "State", "exit_code", "TimeUsed", "TimeLimit", "Reason")
SQUEUE_FORMAT = ",".join(f"{name}:|" for name in SQUEUE_FIELDS)
# sacct -P: "|" between fields, none after the last; -X keeps the allocation line and drops the steps.
SACCT_FIELDS = ("JobID", "State", "ExitCode", "Elapsed", "Timelimit", "Reason")
SACCT_FORMAT = ",".join(SACCT_FIELDS)

# Slurm's words for "the far side could not be asked", as opposed to "it answered".
_UNREACHABLE = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted",
    "connection refused",
    "problem talking to the database",
    "slurmdbd",
    "authentication error",
    "munge",
)
_INVALID_JOB = "invalid job id specified"
_JOB_ID = re.compile(r"^[0-9]+(?:[_+][0-9A-Za-z\[\]\-,%]+)?$")
_DURATION = re.compile(r"^(?:(?P<days>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)(?:\.\d+)?$")

_RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT"}
_DEAD_DETAILS = {
    "OUT_OF_MEMORY": "oom",
    "TIMEOUT": "time limit",
    "PREEMPTED": "preempted",
    "NODE_FAIL": "node failure",
    "BOOT_FAIL": "node boot failure",
    "DEADLINE": "deadline passed",
    "SPECIAL_EXIT": "special exit (held for requeue)",
}
_SIGNALS = {9: "SIGKILL", 15: "SIGTERM", 6: "SIGABRT", 11: "SIGSEGV", 2: "SIGINT", 1: "SIGHUP"}


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it. `state` is Slurm's own word ("" when neither squeue nor sacct knows the
    job); `exit_code`/`signal` are None when Slurm gave none; durations are seconds, None when unlimited or
    not set. `source` says which command answered, because squeue forgets a job minutes after it ends."""

    job_id: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    elapsed: int | None = None
    time_limit: int | None = None
    source: str = "squeue"  # squeue | sacct | none
    detail: str = ""

    @property
    def remaining(self) -> int | None:
        """Seconds of walltime left, for the meter; None without a limit."""
        if self.time_limit is None or self.elapsed is None:
            return None
        return max(0, self.time_limit - self.elapsed)

    def walltime(self) -> str:
        """`elapsed / limit` as Slurm writes durations, e.g. "0:12 / 1:00:00" or "3:04 / unlimited"."""
        used = format_duration(self.elapsed) if self.elapsed is not None else "?"
        limit = format_duration(self.time_limit) if self.time_limit is not None else "unlimited"
        return f"{used} / {limit}"


# ---- commands ------------------------------------------------------------------------------------------


async def submit(transport: Transport, script_path: str, *, job_name: str, workdir: str, output: str,
                 time_limit: int | str | None = None, extra_args: Sequence[str] = (),
                 timeout: float = COMMAND_TIMEOUT_S) -> str:
    """`sbatch --parsable` the script; returns the job id. `time_limit` is minutes (int) or any Slurm time
    string. sbatch runs in `workdir`, so a relative script path is found there; every argument is quoted."""
    args = ["sbatch", "--parsable", f"--job-name={job_name}", f"--chdir={workdir}", f"--output={output}"]
    if time_limit is not None:
        args.append(f"--time={time_limit}")
    args += [*extra_args, script_path]
    result = await _run(transport, args, timeout=timeout, cwd=workdir, what="sbatch")
    if result.rc != 0:
        _raise_for(result, "sbatch", f"submitting {script_path}")
    try:
        return parse_sbatch(result.text)
    except ValueError as exc:
        raise TransportError(f"{exc}; the job may have been submitted: look for {job_name!r} in squeue") from None


async def job_state(transport: Transport, job_id: str, *, timeout: float = COMMAND_TIMEOUT_S) -> SlurmJob:
    """What Slurm says about the job now: squeue while the controller remembers it, then sacct.

    A job neither knows comes back with state "" (liveness unknown): a missing record is not a dead job.
    """
    job = await squeue_state(transport, job_id, timeout=timeout)
    if job is not None:
        return job
    return await sacct_state(transport, job_id, timeout=timeout)


async def squeue_state(transport: Transport, job_id: str, *,
                       timeout: float = COMMAND_TIMEOUT_S) -> SlurmJob | None:
    """The controller's view, or None when it no longer knows the job (purged after MinJobAge)."""
    _check_job_id(job_id)
    args = ["squeue", "--noheader", f"--jobs={job_id}", "--states=all", f"--Format={SQUEUE_FORMAT}"]
    result = await _run(transport, args, timeout=timeout, what="squeue")
    if result.rc != 0:
        if _INVALID_JOB in result.error_text.lower():
            return None
        _raise_for(result, "squeue", f"asking about job {job_id}")
    return _pick(_parsed(parse_squeue, result.text, "squeue"), job_id)


async def sacct_state(transport: Transport, job_id: str, *, timeout: float = COMMAND_TIMEOUT_S) -> SlurmJob:
    """The accounting database's view; state "" when it has no record of the job."""
    _check_job_id(job_id)
    args = ["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job_id}",
            f"--format={SACCT_FORMAT}"]
    result = await _run(transport, args, timeout=timeout, what="sacct")
    if result.rc != 0:
        if "accounting storage is disabled" in (result.error_text + result.text).lower():
            return SlurmJob(job_id, "", source="none",
                            detail="squeue no longer knows the job and this cluster keeps no accounting")
        _raise_for(result, "sacct", f"asking about job {job_id}")
    job = _pick(_parsed(parse_sacct, result.text, "sacct"), job_id)
    if job is None:
        return SlurmJob(job_id, "", source="none", detail="neither squeue nor sacct knows the job")
    return job


async def cancel(transport: Transport, job_id: str, *, timeout: float = COMMAND_TIMEOUT_S) -> None:
    """`scancel` the job. Cancelling a job that already ended is not an error (Slurm answers 0 too); the
    caller confirms the outcome with job_state, because a reply is never proof (docs/providers.md §0)."""
    _check_job_id(job_id)
    result = await _run(transport, ["scancel", job_id], timeout=timeout, what="scancel")
    if result.rc != 0:
        _raise_for(result, "scancel", f"cancelling job {job_id}")


# ---- liveness ------------------------------------------------------------------------------------------


def liveness_of(job: SlurmJob) -> tuple[str, str]:
    """Map Slurm's state onto running/finished/dead/stalled/unknown with a detail (docs/remote-ops.md §7).

    Only a state Slurm ended the job with can make it dead; a state this table does not know is unknown.
    """
    state = job.state
    if not state:
        return "unknown", job.detail or "no record of the job"
    if state == "PENDING":
        return "running", f"queued: {job.reason or 'None'}"
    if state in ("REQUEUED", "REQUEUE_FED"):
        return "running", f"requeued: {job.reason or 'None'}"
    if state in _RUNNING_STATES:
        return "running", f"{state.lower()}: {job.walltime()}"
    if state in ("SUSPENDED", "STOPPED", "REQUEUE_HOLD", "RESV_DEL_HOLD"):
        return "stalled", f"{state.lower().replace('_', ' ')}: {job.reason or 'None'}"
    if state == "COMPLETED":
        if job.exit_code == 0 and not job.signal:
            return "finished", "exit 0"
        if job.exit_code is None:
            return "unknown", "completed without an exit code"
        return "dead", _exit_detail(job)
    if state == "FAILED":
        return "dead", _exit_detail(job)
    if state == "CANCELLED":
        return "dead", f"cancelled {job.detail}".strip()
    if state in _DEAD_DETAILS:
        return "dead", _DEAD_DETAILS[state]
    return "unknown", f"unrecognised Slurm state {state!r}"


def _exit_detail(job: SlurmJob) -> str:
    if job.signal:
        name = _SIGNALS.get(job.signal)
        return f"signal {job.signal} ({name})" if name else f"signal {job.signal}"
    if job.exit_code is None:
        return "no exit code"
    if job.exit_code == 137:
        return "exit 137 (SIGKILL: out of memory or killed)"
    if job.exit_code == 143:
        return "exit 143 (SIGTERM: stopped or preempted)"
    return f"exit {job.exit_code}"


# ---- parsers (pure) ------------------------------------------------------------------------------------


def parse_sbatch(text: str) -> str:
    """`sbatch --parsable` prints "id" or "id;cluster"; anything else is not a submission we can trust."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise ValueError(f"sbatch --parsable printed {len(lines)} lines, expected 1: {text.strip()[:200]!r}")
    job_id = lines[0].split(";", 1)[0]
    if not job_id.isdigit():
        raise ValueError(f"sbatch --parsable printed {lines[0][:200]!r}, not a job id")
    return job_id


def parse_squeue(text: str) -> list[SlurmJob]:
    """Lines of `squeue --noheader --Format=<SQUEUE_FORMAT>`: six fields each ending in "|".

    squeue's exit_code is the raw wait status (768 = exit 3; 9 = killed by signal 9).
    """
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if not line.endswith("|"):
            raise ValueError(f"squeue line {number} does not end with '|': {line[:200]!r}")
        fields = line[:-1].split("|", len(SQUEUE_FIELDS) - 1)
        if len(fields) != len(SQUEUE_FIELDS):
            raise ValueError(f"squeue line {number} has {len(fields)} fields, expected {len(SQUEUE_FIELDS)}")
        job_id, state, raw_status, used, limit, reason = (field.strip() for field in fields)
        _check_parsed_id(job_id, "squeue", number)
        exit_code, signal = _wait_status(raw_status, number)
        jobs.append(SlurmJob(
            job_id=job_id, state=_state_word(state), reason=_reason(reason), exit_code=exit_code, signal=signal,
            elapsed=parse_duration(used), time_limit=parse_duration(limit), source="squeue",
        ))
    return jobs


def parse_sacct(text: str) -> list[SlurmJob]:
    """Lines of `sacct --noheader --parsable2 --allocations --format=<SACCT_FORMAT>`: six "|"-separated
    fields; ExitCode is "code:signal"; State may carry a suffix ("CANCELLED by 0")."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", len(SACCT_FIELDS) - 1)
        if len(fields) != len(SACCT_FIELDS):
            raise ValueError(f"sacct line {number} has {len(fields)} fields, expected {len(SACCT_FIELDS)}")
        job_id, state, exit_field, elapsed, limit, reason = (field.strip() for field in fields)
        _check_parsed_id(job_id, "sacct", number)
        exit_code, signal = _exit_pair(exit_field, number)
        by = re.fullmatch(r"\S+ by (\d+)", state)
        jobs.append(SlurmJob(
            job_id=job_id, state=_state_word(state), reason=_reason(reason), exit_code=exit_code, signal=signal,
            elapsed=parse_duration(elapsed), time_limit=parse_duration(limit), source="sacct",
            detail=f"by uid {by[1]}" if by else "",
        ))
    return jobs


def parse_duration(text: str) -> int | None:
    """Slurm durations ("M:SS", "H:MM:SS", "D-HH:MM:SS") in seconds; None for UNLIMITED, NOT_SET, blank and
    the other words Slurm prints where no number applies."""
    text = text.strip()
    match = _DURATION.match(text)
    if match is None:
        if text.upper() in ("", "UNLIMITED", "INFINITE", "NOT_SET", "N/A", "PARTITION_LIMIT", "INVALID"):
            return None
        raise ValueError(f"not a Slurm duration: {text[:50]!r}")
    days = int(match["days"] or 0)
    hours = int(match["h"] or 0)
    return ((days * 24 + hours) * 60 + int(match["m"])) * 60 + int(match["s"])


def format_duration(seconds: int) -> str:
    """Seconds the way Slurm prints them, so the meter reads like squeue."""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _state_word(text: str) -> str:
    word = text.split()[0] if text.split() else ""
    if word and not re.fullmatch(r"[A-Z_]+", word):
        raise ValueError(f"not a Slurm state: {text[:50]!r}")
    return word


def _reason(text: str) -> str:
    return "" if text in ("None", "(null)") else text


def _wait_status(text: str, number: int) -> tuple[int | None, int | None]:
    if text in ("", "N/A"):
        return None, None
    if not text.isdigit():
        raise ValueError(f"squeue line {number}: exit_code {text[:50]!r} is not a wait status")
    status = int(text)
    signal = status & 0x7F
    return (status >> 8) & 0xFF, signal or None


def _exit_pair(text: str, number: int) -> tuple[int | None, int | None]:
    if text == "":
        return None, None
    code, sep, signal = text.partition(":")
    if not sep or not code.isdigit() or not signal.isdigit():
        raise ValueError(f"sacct line {number}: ExitCode {text[:50]!r} is not code:signal")
    return int(code), int(signal) or None


def _check_parsed_id(job_id: str, command: str, number: int) -> None:
    if not _JOB_ID.match(job_id):
        raise ValueError(f"{command} line {number}: {job_id[:50]!r} is not a job id")


# ---- plumbing ------------------------------------------------------------------------------------------


def _check_job_id(job_id: str) -> None:
    """Refuse anything but a plain numeric id before it reaches a command line."""
    if not job_id.isdigit():
        raise ValueError(f"{job_id!r} is not a Slurm job id")


def _pick(jobs: list[SlurmJob], job_id: str) -> SlurmJob | None:
    exact = [job for job in jobs if job.job_id == job_id]
    if exact:
        return exact[0]
    return jobs[0] if jobs else None


def _parsed(parser: Callable[[str], list[SlurmJob]], text: str, command: str) -> list[SlurmJob]:
    """An answer we cannot read tells us nothing about the job: unknown, not dead."""
    try:
        return parser(text)
    except ValueError as exc:
        raise TransportError(f"{command} answered in an unexpected format: {exc}") from None


async def _run(transport: Transport, args: Sequence[str], *, timeout: float, what: str,
               cwd: str | None = None) -> CommandResult:
    command = " ".join(shlex.quote(arg) for arg in args)
    try:
        return await transport.run(command, cwd=cwd, timeout=timeout)
    except TransportError:
        raise
    except TimeoutError:
        raise TransportError(f"{what} did not answer within {timeout:g}s") from None
    except OSError as exc:
        raise TransportError(f"{what} could not be run: {exc}") from None


def _first_line(result: CommandResult) -> str:
    for line in (result.error_text + "\n" + result.text).splitlines():
        if line.strip():
            return line.strip()[:300]
    return f"exit status {result.rc}"


def _raise_for(result: CommandResult, command: str, doing: str) -> NoReturn:
    """Unreachable controller or database → TransportError (unknown); a refusal → VerbFailed."""
    message = _first_line(result)
    lowered = (result.error_text + result.text).lower()
    if result.rc == 127 or "command not found" in lowered:
        raise TransportError(f"{command} is not installed or not on PATH there ({doing}): {message}")
    if any(marker in lowered for marker in _UNREACHABLE):
        raise TransportError(f"{command} could not reach Slurm ({doing}): {message}")
    raise VerbFailed(f"{command} failed {doing}: {message}")
