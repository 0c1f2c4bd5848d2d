"""Liveness from facts, not from memory (docs/remote-ops.md §7): a pure classification over one liveness look (one
short script run on the box, services/watch/liveness.py).

First match wins: unknown (the look failed) → finished (exit 0 and DONE) → dead (no live process and not
finished) → stalled (alive, log and checkpoints silent too long) → running. A log line never decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.text import span

T_LOG_S = 15 * 60
DISK_GATE_EXIT = 75  # the job wrapper's own status when its disk-budget gate refuses a cell (docs/remote-ops.md §11)
T_CKPT_S = 30 * 60


@dataclass(frozen=True)
class LivenessLook:
    """What one liveness look saw on the far side; `error` set means the look itself failed."""

    now: float = 0.0
    pid_state: str = "unknown"  # alive | zombie | gone | unknown
    exit_code: int | None = None
    done: bool = False
    log_size: int = 0
    log_mtime: float | None = None
    newest_ckpt_mtime: float | None = None
    newest_ckpt_birth: float | None = None  # its creation time where the file system keeps one (stat %W; 0: none)
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    sentinel_beat: float | None = None  # mtime of the sentinel's heartbeat (docs/remote-ops.md §9.1)
    sentinel_exit: str | None = None  # the event after which the sentinel exited


@dataclass(frozen=True)
class Liveness:
    """A run's state as classified from one liveness look (running, finished, dead, stalled or unknown), with the
    fact that decided it."""

    state: str  # running | finished | dead | stalled | unknown
    detail: str


def classify(look: LivenessLook, launched: bool, t_log: float = T_LOG_S, t_ckpt: float = T_CKPT_S) -> Liveness:
    if not launched:
        return Liveness("unknown", "not launched")
    if look.error is not None:
        return Liveness("unknown", f"unreachable: {look.error}")
    if look.exit_code is not None:
        if look.exit_code == 0 and look.done:
            return Liveness("finished", "exit 0, artifacts present")
        if look.exit_code == 0:
            return Liveness("dead", "incomplete: exit 0 but required artifacts missing")
        return Liveness("dead", _exit_detail(look.exit_code))
    if look.pid_state in ("gone", "zombie"):
        return Liveness("dead", "no exit code: the job was killed or the box rebooted")
    if look.pid_state != "alive":
        return Liveness("unknown", "process state not readable")
    log_age = look.now - look.log_mtime if look.log_mtime is not None else None
    ckpt_age = look.now - look.newest_ckpt_mtime if look.newest_ckpt_mtime is not None else None
    log_silent = log_age is None or log_age > t_log
    ckpt_stale = ckpt_age is None or ckpt_age > t_ckpt
    started_long_ago = look.started_at is None or look.now - look.started_at > t_log
    if log_silent and ckpt_stale and started_long_ago:
        return Liveness("stalled", f"log silent {span(log_age)}, newest checkpoint {span(ckpt_age)}")
    if log_silent:
        return Liveness("running", "quiet: log silent but checkpoints fresh")
    return Liveness("running", f"log updated {span(log_age)} ago")


def _exit_detail(code: int) -> str:
    if code == 137:
        return "exit 137 (SIGKILL: out of memory or killed)"
    if code == 143:
        return "exit 143 (SIGTERM: stopped or preempted)"
    if code == DISK_GATE_EXIT:
        return f"exit {code} (disk budget: the next cell was not started, too little free space on the result root)"
    return f"exit {code}"




SENTINEL_GRACE_S = 5.0  # beyond three polls: a slow disk or a busy box delays a heartbeat, not a dead sentinel
_EVENT_WORD = re.compile(r"^[a-z_]{1,32}$")


def sentinel_state(look: LivenessLook, poll_s: float) -> str:
    """The on-box sentinel's own liveness, in words: `alive` while its heartbeat is fresher than three polls,
    `exited after finished` once it ended on an event, `silent since T` otherwise (nobody will be notified),
    `unknown` when the look failed. The exit word is text from the box: anything but a plain word is ignored."""
    if look.error is not None:
        return "unknown"
    if look.sentinel_exit is not None and _EVENT_WORD.match(look.sentinel_exit):
        return f"exited after {look.sentinel_exit}"
    if look.sentinel_beat is None:
        return "not started"
    if look.now - look.sentinel_beat <= 3 * poll_s + SENTINEL_GRACE_S:
        return "alive"
    return f"silent since {iso_z(datetime.fromtimestamp(look.sentinel_beat, UTC))}"
