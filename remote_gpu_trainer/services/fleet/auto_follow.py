"""Automatic, non-destructive follow-ups (docs/remote-ops.md §9.2): `runs.<id>.auto = ["pull", "verify"]` lets
a watcher (the TUI, `rgt watch RUN`, the patrol) bring a finished run's results home and verify them as soon as
it sees the run finished, so the teardown gate can be open by the time a person looks.

Finished means the wrapper wrote exit code 0 and DONE, which it writes only once the required files exist; the
pull then builds the manifest on the box and records its hash first (docs/gate.md §3-§4). Each launch of a run
is followed up once, whoever watches: the cross-process lock `.rgt/locks/auto/<run>.lock` (fsutil.run_lock)
makes racing watchers take turns, and the AUTO_FOLLOW event ("started", then how it ended) tells the later
ones it is taken. A watcher interrupted mid-way records "interrupted", and the next watcher tries again; one
killed outright leaves "started", and the user pulls by hand (`rgt pull`). Teardown is never a follow-up: this
module calls the pull and the verification and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote_gpu_trainer.errors import RgtError, VerbFailed
from remote_gpu_trainer.fsutil import run_lock
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

ACTOR = "auto"
LOCK_PREFIX = "auto"
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class FollowUp:
    """How one automatic follow-up ended: `outcome` "verified" (pulled, if asked, and verified), "pulled"
    (pull only), or "failed" (`summary` says which step and why)."""

    run_id: str
    launch_seq: int
    outcome: str
    summary: str

    @property
    def ok(self) -> bool:
        return self.outcome != "failed"


def latest_launch(session: Session, run_id: str) -> int | None:
    """The sequence number of the run's latest launch (what a follow-up or a notification is bound to)."""
    history = session.db.launch_history(run_id)
    return history[-1].seq if history else None


def status(session: Session, run_id: str) -> str:
    """The follow-up of the run's latest launch in one word: "off" (no `auto`), "waiting" (not taken yet),
    "started", or how it ended ("verified", "pulled", "failed")."""
    if not run_config(session, run_id).auto:
        return "off"
    ended = recorded(session, run_id)
    return "waiting" if ended is None or ended.outcome == INTERRUPTED else ended.outcome


def recorded(session: Session, run_id: str) -> FollowUp | None:
    """The latest recorded step of the follow-up of the run's latest launch; None when none was taken."""
    seq = latest_launch(session, run_id)
    found = [e for e in session.db.events(run_id=run_id, kind=EventKind.AUTO_FOLLOW)
             if seq is not None and e.detail.get("launch_seq") == seq]
    if not found:
        return None
    detail = found[-1].detail
    return FollowUp(run_id, int(seq or 0), str(detail.get("outcome")), str(detail.get("summary", "")))


async def follow_up(session: Session, run_id: str, liveness: str) -> FollowUp | None:
    """Pull and/or verify the run once its latest launch finished (`liveness` as the watcher just saw it),
    unless some watcher already took it; None when there was nothing to do now (not finished, no `auto`, taken,
    or another watcher or a person's pull or verify on it: the next look tries again)."""
    run = run_config(session, run_id)
    seq = latest_launch(session, run_id)
    if not run.auto or liveness != "finished" or seq is None or session.read_only:
        return None
    if _outcome(session, run_id, seq) not in (None, INTERRUPTED):
        return None
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(run_lock(session.project.state_dir, f"{LOCK_PREFIX}/{run_id}", "following up on"))
    except VerbFailed:
        return None  # another watcher holds it: its outcome will be on record
    with stack:
        if _outcome(session, run_id, seq) not in (None, INTERRUPTED) or _run_busy(session, run_id):
            return None  # taken while this watcher waited for its turn, or a pull or verify runs now
        events.auto_follow(session.db, run_id=run_id, instance=run.instance, launch_seq=seq, outcome="started",
                           steps=run.auto, summary=f"{' and '.join(run.auto)} started", actor=ACTOR)
        try:
            done = await _steps(session, run_id, run.auto, seq)
        except asyncio.CancelledError:
            events.auto_follow(session.db, run_id=run_id, instance=run.instance, launch_seq=seq,
                               outcome=INTERRUPTED, steps=run.auto, summary="interrupted", actor=ACTOR)
            raise
        events.auto_follow(session.db, run_id=run_id, instance=run.instance, launch_seq=seq, outcome=done.outcome,
                           steps=run.auto, summary=done.summary, actor=ACTOR)
    return done


async def _steps(session: Session, run_id: str, steps: tuple[str, ...], seq: int) -> FollowUp:
    """The pull, then the verification, each through the verb every face calls (its own lock and events)."""
    step = steps[0]
    try:
        if "pull" in steps:
            pulled = await pull_run(session, run_id, actor=ACTOR)
            if not pulled.ok:
                return FollowUp(run_id, seq, "failed", f"pull incomplete: {len(pulled.failed)} of "
                                f"{len(pulled.files)} file(s) not fetched; `rgt pull {run_id}` resumes it")
        if "verify" not in steps:
            return FollowUp(run_id, seq, "pulled", f"pulled {len(pulled.files)} file(s), each matching its "
                            "manifest hash")
        step = "verify"
        verified = await verify_run(session, run_id, actor=ACTOR)
    except (RgtError, OSError) as exc:
        return FollowUp(run_id, seq, "failed", f"{step} failed: {exc}")
    if not verified.ok:
        return FollowUp(run_id, seq, "failed", f"verification failed: {len(verified.errors)} problem(s); "
                        f"`rgt verify {run_id}` lists them")
    what = "pulled and verified" if "pull" in steps else "verified"
    return FollowUp(run_id, seq, "verified", f"{what}: PULL_VERIFIED.json written, the teardown gate may open")


def _run_busy(session: Session, run_id: str) -> bool:
    """Whether a pull, verification or teardown of the run holds its lock now (a person's, or another rgt's)."""
    try:
        with run_lock(session.project.state_dir, run_id, "checking"):
            return False
    except VerbFailed:
        return True


def _outcome(session: Session, run_id: str, seq: int) -> str | None:
    """The latest recorded outcome of this launch's follow-up; None when none was ever taken."""
    found = recorded(session, run_id)
    return found.outcome if found is not None and found.launch_seq == seq else None
