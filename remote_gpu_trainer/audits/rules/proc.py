"""The process rows S58–S65 (docs/log-signatures.md §2) and §3.1 liveness refined by step and GPU progress.

A row reads the liveness look's verdict, exit status and log tail from `RunSignals` and fires only on positive
evidence of how the process died, stalled or lost its state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import islice

from remote_gpu_trainer.audits.liveness import Liveness
from remote_gpu_trainer.audits.log.samples import Hit, Sample
from remote_gpu_trainer.audits.rules.common import (
    REGRESSION_TAIL,
    STEP_SCAN,
    age_of,
    fmt_dur,
    hit,
    newest_first,
    step_frozen_for,
    step_state,
    tail_of,
)
from remote_gpu_trainer.audits.rules.gpu_window import IDLE_UTIL, util_median
from remote_gpu_trainer.audits.rules.signals import ClaimedSave, RunSignals
from remote_gpu_trainer.text import strip_ansi

MTIME_SLACK_S = 1.0  # file mtimes and process start times come from clocks of different resolution

# S58 takes the severity of the row its exit status maps to
MAPPED_ROWS = {"S04": ("critical", "kernel OOM killer"), "S22": ("error", "native crash"),
               "S47": ("critical", "external stop: preemption, instance stop or scheduler limit")}

_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
# S55, the completion marker: input to `dead/incomplete` (§3.1), never proof of success on its own
_COMPLETION = re.compile(r"Training (?:completed|finished)|\bFINISHED\b|QUEUE DONE|"
                         r".Trainer\.fit. stopped: .max_(?:epochs|steps)=\d+. reached|Early stopping|"
                         r"Signaling Trainer to stop")
_WRAPPER_LINE = "== rgt:"  # the job wrapper's own markers follow the trainer's last line


# ---- §3.1 liveness, refined ------------------------------------------------------------------------

def effective_liveness(s: RunSignals) -> Liveness | None:
    """`classify` with what §3.1 adds and a liveness look cannot see: a step advance or a busy GPU is progress.

    classify() judges `stalled` from log and checkpoint mtimes only; the spec also requires no step advance
    for > T_log and a GPU util median < 5 %. Unknown GPU data keeps classify's word (CPU runs can stall too).
    """
    live = s.liveness
    if live is None or live.state != "stalled":
        return live
    frozen = step_frozen_for(s)
    if frozen is not None and frozen <= s.t_log:
        return Liveness("running", f"quiet: log silent but the step advanced {fmt_dur(frozen)} ago")
    util = util_median(s)
    if util is not None and util >= IDLE_UTIL:
        return Liveness("running", f"quiet: log silent but GPU util median {util:.0f}%")
    return live


def _progress_age(s: RunSignals) -> float | None:
    """Seconds since the last progress: a new log line or a step advance, whichever is newer."""
    ages = [a for a in (age_of(s, s.last_log_line_t), step_frozen_for(s)) if a is not None]
    return min(ages) if ages else None


def _exit_file_present(s: RunSignals) -> bool:
    return s.exit_code_file_present if s.exit_code_file_present is not None else s.exit_code is not None


def _last_trainer_line(lines: Sequence[str]) -> str:
    """The last non-blank line the trainer wrote (bars redraw with \\r; the wrapper's markers come after)."""
    for raw in reversed(lines):
        line = strip_ansi(raw).split("\r")[-1].strip()
        if line and not line.startswith(_WRAPPER_LINE):
            return line
    return ""


# ---- rows: proc ------------------------------------------------------------------------------------

def rule_s58(s: RunSignals) -> list[Hit]:
    """Killed by a signal: the exit status names the row (137 → S04, 139 → S22, 143 → S47)."""
    code = s.exit_code
    if code in (137, -9):
        tail = list(s.log_tail)[-200:]
        if any(_TRACEBACK.search(strip_ansi(line)) for line in tail):
            return []  # the traceback names a better row
        row, why = "S04", f"exit {code} (SIGKILL) with no Traceback in the last {len(tail)} log lines"
    elif code in (139, -11):
        row, why = "S22", f"exit {code} (SIGSEGV)"
    elif code in (143, -15) and not s.signal_sent_by_app:
        row, why = "S47", f"exit {code} (SIGTERM) that rgt did not send"
    else:
        return []
    severity, cause = MAPPED_ROWS[row]
    return hit(s, "S58", f"{why}: {row}, {cause}", severity, detail=row)


def _death_cause(s: RunSignals) -> str:
    if s.boot_id_changed:
        return "reboot (boot_id changed)"
    if s.oom_kill_delta:
        return f"oom (oom_kill rose by {s.oom_kill_delta})"
    full = [d.mount for d in s.disks if d.bytes_used_pct is not None and d.bytes_used_pct >= 99]
    if full:
        return f"disk full on {', '.join(full)}: the wrapper could not write its exit code there"
    return "killed (no reboot or OOM kill recorded)"


def rule_s59(s: RunSignals) -> list[Hit]:
    """Dead without an exit-code file: the wrapper itself was killed, so the cause is read around it. A job that
    died with a traceback (on a full disk the wrapper cannot record the exit code the traceback ended with) is
    not a crash without one: the traceback's own signature names the cause."""
    if s.liveness is None or s.liveness.state != "dead" or _exit_file_present(s):
        return []
    if any(_TRACEBACK.search(strip_ansi(line)) for line in list(s.log_tail)[-200:]):
        return []
    cause = _death_cause(s)
    log_age = age_of(s, s.last_log_line_t)
    last = f" (last log line {fmt_dur(log_age)} ago)" if log_age is not None else ""
    return hit(s, "S59", f"the job is gone{last} and its wrapper wrote no exit code; cause: {cause}",
               detail=cause.split(" ")[0])


def rule_s60(s: RunSignals) -> list[Hit]:
    """Finished in words (exit 0 or a completion last line) but the required artifacts are missing."""
    live = s.liveness
    if live is None or live.state != "dead":
        return []
    missing = s.artifacts_present is False or (s.artifacts_present is None and live.detail.startswith("incomplete"))
    last = _last_trainer_line(s.log_tail)
    says_done = s.exit_code == 0 or bool(_COMPLETION.search(last))
    if not (missing and says_done):
        return []
    claim = "exit 0" if s.exit_code == 0 else f"last line {last[:80]!r}"
    names = f" ({', '.join(s.missing_artifacts[:5])})" if s.missing_artifacts else ""
    return hit(s, "S60", f"{claim} but required artifacts are missing{names}: incomplete", detail="incomplete")


def rule_s61(s: RunSignals) -> list[Hit]:
    """Stalled (§3.1): alive, no progress for > T_log, stale checkpoint, idle GPU; critical at 3 × T_log."""
    live = effective_liveness(s)
    if live is None or live.state != "stalled":
        return []
    quiet = _progress_age(s)
    parts = [f"alive but no progress for {fmt_dur(quiet)} (T_log {fmt_dur(s.t_log)})" if quiet is not None
             else f"alive but silent ({live.detail})"]
    state = step_state(s)
    if state is not None:
        parts.append(f"step frozen at {state.step}")
    ckpt = age_of(s, s.newest_ckpt_mtime)
    parts.append(f"newest checkpoint {fmt_dur(ckpt)} old" if ckpt is not None else "no checkpoint yet")
    util = util_median(s)
    if util is not None:
        parts.append(f"GPU util median {util:.0f}%")
    severity = "critical" if quiet is not None and quiet >= 3 * s.t_log else "warn"
    return hit(s, "S61", ", ".join(parts), severity)


def rule_s62(s: RunSignals) -> list[Hit]:
    """Running but quiet: no log line for > T_log while checkpoints or the step counter move (buffered stdout)."""
    live = effective_liveness(s)
    if live is None or live.state != "running":
        return []
    log_age = age_of(s, s.last_log_line_t)
    quiet = log_age > s.t_log if log_age is not None else live.detail.startswith("quiet")
    if not quiet:
        return []
    ckpt = age_of(s, s.newest_ckpt_mtime)
    frozen = step_frozen_for(s)
    moving = []
    if ckpt is not None and ckpt <= s.t_ckpt:
        moving.append(f"newest checkpoint {fmt_dur(ckpt)} old")
    if frozen is not None and frozen <= s.t_log:
        moving.append(f"step advanced {fmt_dur(frozen)} ago")
    if not moving and live is s.liveness and ckpt is None and live.detail.startswith("quiet"):
        moving.append("checkpoints fresh (probe)")  # classify saw fresh checkpoints the caller did not pass
    if not moving:
        return []
    silent = f"no log line for {fmt_dur(log_age)}" if log_age is not None else "log silent"
    return hit(s, "S62", f"{silent} (T_log {fmt_dur(s.t_log)}) while {' and '.join(moving)}", detail="quiet")


def rule_s63(s: RunSignals) -> list[Hit]:
    """A file the live process reads was modified after it started (bash re-reads scripts by offset)."""
    edited = [f for f in s.watched_files if f.mtime > f.process_start + MTIME_SLACK_S]
    if not edited:
        return []
    text = "; ".join(f"{f.path} modified {fmt_dur(f.mtime - f.process_start)} after its process started"
                     for f in edited[:3])
    more = f" (+{len(edited) - 3} more)" if len(edited) > 3 else ""
    return hit(s, "S63", text + more)


def _save_problem(c: ClaimedSave) -> str | None:
    if c.exists is False:
        return "absent"
    if c.size == 0:
        return "size 0"
    if c.size is not None and c.source_size is not None and c.size != c.source_size:
        return f"size {c.size} ≠ source {c.source_size}"
    if c.load_ok is False:
        return "fails a safe load"
    return None


def rule_s64(s: RunSignals) -> list[Hit]:
    """A path a log line claimed was saved or copied does not hold what was claimed."""
    bad = [(c, p) for c in s.claimed_saves if (p := _save_problem(c)) is not None]
    if not bad:
        return []
    text = "; ".join(f"{c.path} ({c.claim} claim): {p}" for c, p in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return hit(s, "S64", f"{len(bad)} claimed save(s) fail the check: {text}{more}")


def _first_step_after(s: RunSignals, at: float | None) -> Sample | None:
    """The earliest stepped sample at or after `at` (every key), or the series' first when `at` is None."""
    best: Sample | None = None
    for key in s.keys():
        candidate: Sample | None = None
        if at is None:
            candidate = next((x for x in islice(s.of(key), STEP_SCAN) if x.step is not None), None)
        else:
            for x in newest_first(s.of(key)):
                if x.t < at:
                    break
                if x.step is not None:
                    candidate = x
        if candidate is not None and (best is None or candidate.t < best.t):
            best = candidate
    return best


def _step_drop(s: RunSignals) -> tuple[str, int, Sample] | None:
    """Within one key's recent samples, a step below the highest seen before it (a second run appended)."""
    for key in sorted(s.keys()):
        top: int | None = None
        for x in tail_of(s.of(key), REGRESSION_TAIL, finite=False):
            if x.step is None or x.approx_step:
                continue
            if top is not None and x.step < top:
                return key, top, x
            top = x.step if top is None else max(top, x.step)
    return None


def rule_s65(s: RunSignals) -> list[Hit]:
    """The step counter went backwards: after a relaunch (resume ignored) or inside one log (two runs)."""
    if s.relaunch_step_before is not None:
        first = _first_step_after(s, s.relaunch_at)
        if first is not None and first.step is not None and first.step < s.relaunch_step_before:
            return hit(s, "S65", f"first step after the relaunch is {first.step}, below step "
                                 f"{s.relaunch_step_before} reached before it: saved state not restored")
    drop = _step_drop(s)
    if drop is None:
        return []
    key, top, x = drop
    return hit(s, "S65", f"step of {key!r} fell from {top} to {x.step}: a second run appended to this log?")
