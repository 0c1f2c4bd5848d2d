"""A run's recovery note as text (docs/remote-ops.md §9.4): pure, from the facts services/watch/recovery.py gathers.

Why a file at all: the laptop that launched a run may be closed, rgt may be gone, the user may come back
days later on another machine. The note says, without rgt running, where the job is (host, paths, pid or
Slurm job), how it was started, how to pick it up again and the first command to type. It holds nothing
secret: paths, ids and commands that are already in rgt.toml and the state database.

Everything that varies from one liveness look to the next (log ages, the clock) is left out, so the text changes only
when the run's state does, and the service can leave the file alone when nothing changed.

Every command meant to be pasted into a shell quotes its arguments (`shlex.quote`): a project folder or a path
with a space, a quote or a `;` in it still pastes as one argument, never as a second command.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remote_gpu_trainer.text import escape_control


@dataclass(frozen=True)
class RecoveryFacts:
    """What a note says about one run; every path is as on the box (rgt.toml's spelling)."""

    run_id: str
    project: str  # the project folder, for `cd` before the rgt commands
    instance: str
    host: str  # "ssh gpu1", "runpod pod-abc", "sim sim-box": how to reach the box
    workdir: str
    remote_root: str
    log: str
    ctl_dir: str
    command: str  # the run's command per cell, as rgt.toml gives it ({cell}, {out} filled in by the wrapper)
    handle: str | None = None  # "pid 4242" or "Slurm job 77"; None before the first launch
    launch_command: str | None = None  # how rgt started the wrapper on the box
    started_at: str | None = None
    state: str = "unknown"  # the last liveness rgt saw
    state_detail: str = ""
    state_since: str | None = None  # when rgt first saw that state
    evidence: tuple[str, ...] = ()  # the last pull and verification, one line each
    preempted: bool = False
    auto_resume: bool = False
    provider_id: str | None = None


MARKERS = ("pid", "pid_start", "exit_code", "DONE", "finished_at", "launch.json", "wrapper.sh")


def render(facts: RecoveryFacts) -> str:
    """The note in Markdown; the same facts always give the same bytes."""
    f = facts
    lines = [
        f"# Recovery note: run {f.run_id}",
        "",
        "Written by rgt on every change of this run's state; safe to read with rgt closed. Nothing here "
        "stops or deletes anything.",
        "",
        "## Where the job is",
        "",
        f"- instance: {f.instance} ({f.host})",
        f"- job: {f.handle or 'not launched yet'}" + (f", started {f.started_at}" if f.started_at else ""),
        f"- workdir: `{f.workdir}`",
        f"- results (remote_root): `{f.remote_root}`",
        f"- log: `{f.log}`",
        f"- control folder: `{f.ctl_dir}`",
        *[f"  - `{f.ctl_dir}/{name}`" for name in MARKERS],
        "",
        "## How it was started",
        "",
        f"- each cell runs: `{f.command}`",
        f"- rgt started the wrapper with: `{f.launch_command}`" if f.launch_command else "- not started yet",
        "",
        "## Last known state",
        "",
        f"- {f.state}" + (f" ({f.state_detail})" if f.state_detail else "")
        + (f", seen by rgt since {f.state_since}" if f.state_since else ""),
        *[f"- {line}" for line in f.evidence],
        "",
        "## After reconnecting",
        "",
        f"First: `cd {q(f.project)} && rgt watch {f.run_id} --once` (probes the box again), then:",
        "",
        *[f"- {step}" for step in next_steps(f)],
        "",
        "## Resume",
        "",
        *[f"- {step}" for step in resume_steps(f)],
        "",
        "## On the box, without rgt",
        "",
        f"- is the wrapper alive: `kill -0 $(cat {marker(f, 'pid')})`",
        f"- how it ended: `cat {marker(f, 'exit_code')} {marker(f, 'finished_at')}; ls {marker(f, 'DONE')}`",
        f"- the log: `tail -n 50 {q(f.log)}`",
    ]
    return escape_control("\n".join(lines), keep_newlines=True) + "\n"


def q(word: str) -> str:
    """One shell word, quoted only when it needs to be (plain paths stay readable)."""
    return shlex.quote(word)


def marker(f: RecoveryFacts, name: str) -> str:
    """A control file's path as one shell word."""
    return q(f"{f.ctl_dir}/{name}")


def next_steps(f: RecoveryFacts) -> list[str]:
    """What to do after the next look at the box, by the last known state and the evidence so far."""
    down = f"`rgt down {f.run_id} --confirm {q(f.provider_id)}`" if f.provider_id else f"`rgt down {f.run_id}`"
    if f.handle is None:
        return [f"`rgt run {f.run_id}` (the phase-0 audit, then the launch)"]
    if f.state in ("running", "stalled"):
        return [f"`rgt watch {f.run_id}` to follow it until it ends"]
    if f.preempted:
        return resume_steps(f)[:1]
    if f.state == "finished":
        if any(line.startswith("verified: passed") for line in f.evidence):
            return [f"{down} once you no longer need the box (the teardown gate decides)"]
        if any(line.startswith("pulled: every file") for line in f.evidence):
            return [f"`rgt verify {f.run_id}`"]
        return [f"`rgt pull {f.run_id}`, then `rgt verify {f.run_id}`"]
    if f.state == "dead":
        return [f"read the log's end (`rgt` shows it, or `tail -n 50 {q(f.log)}` on the box), then "
                f"`rgt pull {f.run_id}` for what was saved, or `rgt run {f.run_id} --rerun` for a fresh copy"]
    return [f"`rgt watch {f.run_id}` until the box answers"]


def resume_steps(f: RecoveryFacts) -> list[str]:
    """The resume path: follow a live job; relaunch a preempted one on the same box only with auto_resume."""
    steps = [f"a live job: `rgt watch {f.run_id}` (re-attaches to pid and log; nothing is restarted)"]
    if f.auto_resume:
        resume = (f"preempted: run `rgt run {f.run_id} --resume` to relaunch the same command on {f.instance} "
                  "while the box still bills (auto_resume = true permits it; rgt never relaunches by itself); the "
                  "job's own checkpoint loading restores progress")
    else:
        resume = (f"preempted: set `runs.{f.run_id}.auto_resume = true` in rgt.toml, then "
                  f"`rgt run {f.run_id} --resume` relaunches on {f.instance} while the box still bills")
    rent = f"box gone: `rgt up {f.run_id}` rents a new one, only with your typed price approval"
    return [resume, rent] if f.preempted else [*steps, resume, rent]
