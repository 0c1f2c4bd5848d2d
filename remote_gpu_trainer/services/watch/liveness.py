"""Watch a launched run: one liveness look on the far side, classified by audits.liveness.

The look is a short bash script sent on stdin with its arguments quoted, answering KEY=VALUE lines.
It reads the recorded pid and its start time (guarding against pid reuse), never counts processes by
pattern (the look's own shell would match), and treats a zombie as ended: some containers' PID 1 never
reaps. Any transport failure becomes `unknown`, never `dead`.
"""

from __future__ import annotations

import asyncio
import json
import math
import shlex
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits import preemption
from remote_gpu_trainer.audits.checkpoint_cadence import write_time_from_file
from remote_gpu_trainer.audits.liveness import Liveness, LivenessLook, classify, sentinel_state
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import RgtError, TransportError
from remote_gpu_trainer.providers.base import BatchJobs, JobState, Transport
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.box_layout import ctl_dir, log_path

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

LOOK_TIMEOUT_S = 30.0

# The look forks as little as it can, since every refresh of every box runs it (issue 29 measured 17.6 ms for the
# first script, 8.1 ms for the second and 6.4 ms for this one, on a finished run): the time from bash's
# EPOCHREALTIME, small files read with the `read` builtin, one stat for every file whose time is asked and the
# newest checkpoint's birth, after one find for that checkpoint (awk picks it: a bash loop over 1,000 checkpoints
# took 20 ms).
# Times to the microsecond where the box's bash and stat can (GNU), whole seconds where they cannot (busybox):
# whole seconds on both sides of an age make it up to a second short, and a stall_after of 1 s would read as
# running for a second after the on-box sentinel (float times) said stalled.
# /proc/PID/stat is split after the last ") ", so a process name with spaces does not shift the fields.
_LOOK_SCRIPT = r"""set -u
CTL="$1"; LOG="$2"; ROOT="$3"
now=${EPOCHREALTIME-}; now=${now/,/.}
case "$now" in ''|*[!0-9.]*) now=$(date +%s.%N 2>/dev/null); case "$now" in ''|*[!0-9.]*) now=$(date +%s);; esac;; esac
echo "NOW=$now"
pid=
[ -r "$CTL/pid" ] && { read -r pid || :; } < "$CTL/pid"
state=gone
if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && { read -r stat || :; } < "/proc/$pid/stat" 2>/dev/null; then
  set -f; set -- ${stat##*) }; set +f
  st=${1-}; start=${20-}
  rec=
  [ -r "$CTL/pid_start" ] && { read -r rec || :; } < "$CTL/pid_start"
  if [ -n "$rec" ] && [ "$start" != "$rec" ]; then state=gone
  elif [ "$st" = "Z" ] || [ "$st" = "X" ]; then state=zombie
  else state=alive; fi
fi
echo "PID_STATE=$state"
code=
[ -f "$CTL/exit_code" ] && { { read -r code || :; } < "$CTL/exit_code"; echo "EXIT_CODE=$code"; }
[ -f "$CTL/DONE" ] && echo "DONE=1"
if [ -f "$CTL/sentinel.exited" ]; then
  why=; { read -r -N 64 why || :; } < "$CTL/sentinel.exited"; echo "SENTINEL_EXIT=${why//$'\n'/}"
fi
newest=
if [ -d "$ROOT" ]; then
  newest=$(find "$ROOT" -type f \( -name '*.pth' -o -name '*.pt' -o -name '*.ckpt' -o -name '*.safetensors' \) \
    -printf '%T@ %p\n' 2>/dev/null | awk 'NR == 1 || $1 > t { t = $1; newest = $0 } END { print newest }')
fi
# one stat for every file whose time is asked, the newest checkpoint's birth with them, a line each:
# SIZE MTIME BIRTH NAME (busybox: whole seconds, asked again)
names=()
for f in "$CTL/exit_code" "$LOG" "$CTL/launch.json" "$CTL/sentinel.heartbeat"; do [ -f "$f" ] && names+=("$f"); done
[ -n "$newest" ] && echo "CKPT=${newest%% *}" && names+=("${newest#* }")
if [ ${#names[@]} -gt 0 ]; then
  out=$(stat -c '%s %.9Y %W %n' -- "${names[@]}" 2>/dev/null)
  while read -r size mt birth name; do
    case "$mt" in ''|*[!0-9.]*) mt=$(stat -c '%Y' -- "$name" 2>/dev/null);; esac
    case "$name" in
      "$CTL/exit_code") echo "FINISHED=$mt";;
      "$LOG") echo "LOG=$size $mt";;
      "$CTL/launch.json") echo "STARTED=$mt";;
      "$CTL/sentinel.heartbeat") echo "SENTINEL=$mt";;
      "${newest#* }") echo "CKPT_BIRTH=$birth";;
    esac
  done <<< "$out"
fi
exit 0
"""


async def look(run: RunConfig, transport: Transport, launch: dict[str, Any] | None) -> LivenessLook:
    """The job's control files, log and newest checkpoint. Asked also without a launch record here: a lost or
    replaced state database must not make a running job read as never launched (docs/gate.md §7.2); a box
    that cannot be asked about a run rgt never recorded stays `not launched`."""
    found = await _look(run, transport)
    if launch is None and found.error is not None:
        return LivenessLook(error=None, pid_state="unknown")
    return found


def launched_here(launch: dict[str, Any] | None, seen: LivenessLook) -> bool:
    """A launch rgt recorded, or one the box's control folder records (its launch.json): the box is the ledger."""
    return launch is not None or (seen.error is None and seen.started_at is not None)


async def _look(run: RunConfig, transport: Transport) -> LivenessLook:
    args = " ".join(shlex.quote(transport.resolve(p)) for p in (ctl_dir(run), log_path(run), run.remote_root))
    try:
        result = await transport.run(f"bash -s -- {args}", stdin=_LOOK_SCRIPT.encode(), timeout=LOOK_TIMEOUT_S)
    except (TransportError, OSError, TimeoutError) as exc:
        return LivenessLook(error=str(exc) or type(exc).__name__)
    if result.rc != 0:
        return LivenessLook(error=f"probe exited {result.rc}: {result.error_text.strip()[:200]}")
    return parse_look(result.text)


def parse_look(text: str) -> LivenessLook:
    """The look's KEY=value lines. A value that does not parse counts as absent, never as a crash: a file
    deleted between the look's test and its stat (a teardown under way) prints nothing, and a hostile box
    may print anything."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    now = _stamp(values.get("NOW"))
    if now is None:
        return LivenessLook(error="probe answered without a time")
    exit_code = values.get("EXIT_CODE")
    size, _, mtime = values.get("LOG", "").partition(" ")
    log_size, log_mtime = _number(size), _stamp(mtime)
    return LivenessLook(
        now=now,
        pid_state=values.get("PID_STATE", "unknown"),
        exit_code=int(exit_code) if exit_code and exit_code.lstrip("-").isdigit() else None,
        done=values.get("DONE") == "1",
        log_size=int(log_size) if log_size is not None and log_mtime is not None else 0,
        log_mtime=log_mtime if log_size is not None else None,
        newest_ckpt_mtime=_stamp(values.get("CKPT")),
        newest_ckpt_birth=_stamp(values.get("CKPT_BIRTH")),
        started_at=_stamp(values.get("STARTED")),
        finished_at=_stamp(values.get("FINISHED")),
        sentinel_beat=_stamp(values.get("SENTINEL")),
        sentinel_exit=values.get("SENTINEL_EXIT") or None,
    )


def _age(now: float, then: float | None) -> float | None:
    return max(0.0, now - then) if then is not None else None


def _number(text: str | None) -> float | None:
    """A finite number, or None for absent, empty or garbled text."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


MAX_STAMP = 253402300799.0  # 9999-12-31T23:59:59Z: the last second a datetime can hold


def _stamp(text: str | None) -> float | None:
    """Epoch seconds a datetime can hold (0 to MAX_STAMP), or None: a box that prints a time of 1e18 or -1e13
    must not make every later fromtimestamp() (finished_at, the sentinel's heartbeat) raise."""
    value = _number(text)
    return value if value is not None and 0.0 <= value <= MAX_STAMP else None


async def liveness(run: RunConfig, transport: Transport, launch: dict[str, Any] | None) -> Liveness:
    seen = await look(run, transport, launch)
    return classify(seen, launched=launched_here(launch, seen))


@dataclass(frozen=True)
class RunState:
    """The live facts about one run that the overview and `rgt watch` need."""

    liveness: Liveness
    finished_at: datetime | None
    walltime: str | None = None  # a batch job's `elapsed / limit`, for the meter
    exit_code: int | None = None
    started_at: float | None = None  # epoch seconds of the launch the look saw
    sentinel: str | None = None  # the on-box sentinel's liveness (audits/liveness.sentinel_state); None: not used
    newest_ckpt_age_s: float | None = None  # age of the newest checkpoint under remote_root, on the box's clock
    ckpt_write_s: float | None = None  # its creation-to-last-write gap: one checkpoint's write time (§10)


WAITING_RUN = RunState(Liveness("unknown", "waiting for the box's answer"), None)


async def run_state(session: Session, run_id: str) -> RunState:
    run = run_config(session, run_id)
    return await run_state_of(session, run, run.instance)


async def run_state_of(session: Session, run: RunConfig, instance_name: str) -> RunState:
    """The job's state on the box `instance_name` names (also for a run no longer in rgt.toml)."""
    launch = session.db.launch(run.id)
    try:
        transport = await instances.remote(session, instance_name)
        provider = session.provider(instance_name)
        # Slurm first, then the files: the wrapper writes the exit code before the job ends, so a job Slurm
        # calls ended has its exit code file by the time the files are read (the other order races).
        job = await provider.job_state(transport, str(launch["slurm_job"])) if launch and \
            launch.get("slurm_job") and isinstance(provider, BatchJobs) else None
        seen = await look(run, transport, launch)
    except RgtError as exc:
        return RunState(Liveness("unknown", str(exc)), None)
    finished = datetime.fromtimestamp(seen.finished_at, UTC) if seen.finished_at else None
    judged = classify(seen, launched=launched_here(launch, seen), t_log=run.stall_after,
                      t_ckpt=2 * run.stall_after)
    if job is not None:
        judged = batch_liveness(job, judged)
    # on an interruptible box exit 143 is preemption (docs/remote-ops.md §10)
    judged = preemption.refine(judged, exit_code=seen.exit_code,
                               interruptible=session.instance(instance_name).preemptible)
    return RunState(judged, finished, job.walltime if job is not None and job.known else None,
                    exit_code=seen.exit_code, started_at=seen.started_at,
                    sentinel=_sentinel(seen, launch), newest_ckpt_age_s=_age(seen.now, seen.newest_ckpt_mtime),
                    ckpt_write_s=write_time_from_file(seen.newest_ckpt_birth, seen.newest_ckpt_mtime))


SETTLED = ("finished", "dead")  # a run in one of these changes only when it is launched again
SETTLED_LOOK_S = 10.0  # how long a watcher trusts a settled run's last look (docs/ux.md §4: probes every 10 s)


def settled_state(session: Session, run_id: str) -> RunState | None:
    """The run's last look, when it found the run ended less than SETTLED_LOOK_S ago under the launch it still
    has: a watcher that refreshes every 2 s need not fork a look on the box each time for a run that cannot move
    until it is launched again (issue 29: an idle dashboard's CPU). None: look now."""
    kept = _settled(session).get(run_id)
    if kept is None or time.monotonic() - kept[1] >= SETTLED_LOOK_S or kept[0] != _launch_key(session, run_id):
        return None
    return kept[2]


def remember_look(session: Session, run_id: str, state: RunState) -> None:
    """Keep a settled look for settled_state; forget the run's once it is anything else."""
    if state.liveness.state in SETTLED:
        _settled(session)[run_id] = (_launch_key(session, run_id), time.monotonic(), state)
    else:
        _settled(session).pop(run_id, None)


def _settled(session: Session) -> dict[str, tuple[str | None, float, RunState]]:
    return session.cache(__name__, dict)


def _launch_key(session: Session, run_id: str) -> str | None:
    """The run's latest launch record whole (its pid or job, its start, its log offset): a relaunch, here or by
    another rgt, changes it, even within the second its time is stored to."""
    launch = session.db.launch(run_id)
    return None if launch is None else json.dumps(launch, sort_keys=True, default=str)


async def bounded_run_state(session: Session, run_id: str) -> RunState:
    """The job's state within the provider timeout: a box that accepts connections and never speaks
    costs one timeout, then reads unknown."""
    try:
        return await asyncio.wait_for(run_state(session, run_id), session.provider_timeout_s)
    except TimeoutError:
        return RunState(Liveness("unknown", f"the box gave no answer within {session.provider_timeout_s:g} s"), None)


def _sentinel(seen: LivenessLook, launch: dict[str, Any] | None) -> str | None:
    """The sentinel's state when this launch started one (its record holds the poll interval)."""
    started = launch.get("sentinel") if launch else None
    if not isinstance(started, dict):
        return None
    if "error" in started:
        return "did not start"
    poll = started.get("poll_s")
    return sentinel_state(seen, float(poll) if isinstance(poll, int | float) else 30.0)


def batch_liveness(job: JobState, files: Liveness) -> Liveness:
    """A batch job: its scheduler says whether it is queued, running or ended; once ended, the wrapper's files
    (exit code and artifacts) decide finished versus incomplete, as for any detached job."""
    state, detail = job.liveness, job.detail
    if state == "finished":
        return files if files.state in ("finished", "dead") else Liveness("unknown", "ended; no exit code file")
    if state == "dead" and files.state == "dead" and files.detail.startswith("exit") and detail != "preempted":
        return files
    return Liveness(state, f"{job.scheduler} job {job.job_id}: {detail}")
