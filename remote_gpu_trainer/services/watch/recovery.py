"""Recovery notes (docs/remote-ops.md §9.4): `.rgt/recovery/<run-id>.md`, regenerated whenever rgt sees the run
change (a launch, a new liveness state in observe() or `rgt watch`, a pull, a verification).

Gathers the facts (rgt.toml, the launch record, the event log, the last state seen) and hands them to the pure
renderer (recovery_note.py). The file is written atomically and only when its text changed, so a watcher probing
every minute leaves it alone while nothing happens. It lives under `.rgt/`, never in `runs/<run-id>/`, which holds
only the pulled evidence the manifest describes.

The last state seen is kept beside the note (`<run-id>.state.json`: state, detail, since) because a pull or a
verification does not look at the box, yet its note must still say what the run was last seen doing.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.fsutil import atomic_write, read_regular
from remote_gpu_trainer.providers.transports.detach import detached_command
from remote_gpu_trainer.recovery_note import RecoveryFacts, render
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.box_layout import LAUNCH_LOG, ctl_dir, log_path, wrapper_path
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.liveness import Liveness
    from remote_gpu_trainer.services.session import Session

# Details that change on every liveness look (log and checkpoint ages) are not kept: the note would be rewritten
# each time.
_STABLE_DETAIL = ("finished", "dead", "unknown")


@dataclass(frozen=True)
class SeenState:
    """The last liveness state rgt saw for a run, its detail and since when, kept beside the note so a pull or a
    verification, which do not look at the box, can still say it."""

    state: str
    detail: str
    since: str


def note_path(project: ProjectConfig, run_id: str) -> Path:
    return project.state_dir / "recovery" / f"{run_id}.md"


def refresh(session: Session, run_id: str, liveness: Liveness | None = None) -> Path | None:
    """Rewrite the run's note if its text changed; `liveness` is what a liveness look just saw (None: keep the last
    state seen). Nothing is written in a read-only folder, for a run never launched or no longer in rgt.toml."""
    run = run_config(session, run_id) if run_id in session.project.runs else None  # where its launch put it
    if session.folder_read_only or run is None or session.db.launch(run_id) is None:
        return None
    path = note_path(session.project, run_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.is_symlink():  # .rgt/recovery/ pointing elsewhere: rgt writes nothing outside .rgt/
            return None
        data = render(gather(session, run, _remember(session, run_id, liveness))).encode()
        if read_regular(path) != data:
            atomic_write(path, data)
    except OSError:  # a full or read-only disk: the note waits for the next change; watching goes on
        return None
    return path


def _remember(session: Session, run_id: str, liveness: Liveness | None) -> SeenState | None:
    """The last state seen, updated when `liveness` differs from it (state and, where stable, detail)."""
    path = session.project.state_dir / "recovery" / f"{run_id}.state.json"
    old = _read_seen(path)
    if liveness is None:
        return old
    detail = liveness.detail if liveness.state in _STABLE_DETAIL else ""
    if old is not None and (old.state, old.detail) == (liveness.state, detail):
        return old
    seen = SeenState(liveness.state, detail, iso_z(session.clock()))
    atomic_write(path, (json.dumps(seen.__dict__, sort_keys=True) + "\n").encode())
    return seen


def last_seen(session: Session, run_id: str) -> SeenState | None:
    """The last liveness state a watcher saw for the run (None: none recorded, or the file is damaged)."""
    return _read_seen(session.project.state_dir / "recovery" / f"{run_id}.state.json")


def _read_seen(path: Path) -> SeenState | None:
    data = read_regular(path)
    try:
        raw = json.loads(data) if data else None
        return SeenState(str(raw["state"]), str(raw["detail"]), str(raw["since"])) if raw else None
    except (ValueError, KeyError, TypeError):
        return None  # a damaged file is rewritten at the next state seen


def gather(session: Session, run: RunConfig, seen: SeenState | None) -> RecoveryFacts:
    """The note's facts for `run` from rgt.toml, the launch record and the event log."""
    instance = session.instance(run.instance)
    provider = session.provider(run.instance)
    provider_id = instance.id or session.db.launched_provider_id(run.instance) or provider.provider_id(instance)
    host = f"{instance.provider} {instance.host}" if instance.host else f"{instance.provider} {provider_id}"
    launch = session.db.launch(run.id)
    state = seen.state if seen else ("unknown" if launch else "not launched")
    return RecoveryFacts(
        run_id=run.id, project=str(session.project.root), instance=run.instance, host=host,
        workdir=run.workdir, remote_root=run.remote_root, log=log_path(run), ctl_dir=ctl_dir(run),
        command=run.command, handle=_handle(launch), launch_command=_launch_command(session, run, launch),
        started_at=str(launch.get("started_at")) if launch else None, state=state,
        state_detail=seen.detail if seen else "", state_since=seen.since if seen else None,
        evidence=evidence_lines(session, run.id), preempted=bool(seen and seen.detail.startswith("preempted")),
        auto_resume=run.auto_resume, provider_id=provider_id,
    )


def _handle(launch: dict[str, Any] | None) -> str | None:
    if launch is None:
        return None
    return f"Slurm job {launch['slurm_job']}" if launch.get("slurm_job") else f"pid {launch.get('pid')}"


def _launch_command(session: Session, run: RunConfig, launch: dict[str, Any] | None) -> str | None:
    """The command rgt ran on the box to start the wrapper, in the box's own paths."""
    if launch is None:
        return None
    try:
        transport = session.transport(run.instance)
    except RgtError:  # a cloud box with no SSH address yet: the note says what it can, never fails observe()
        return None
    wrapper = transport.resolve(wrapper_path(run))
    if launch.get("method") == "sbatch":
        chdir = shlex.quote(f"--chdir={transport.resolve(run.workdir)}")
        return f"sbatch --parsable --job-name=rgt-{run.id} {chdir} {shlex.quote(wrapper)}"
    return detached_command(transport, ["bash", wrapper], ctl_dir(run), LAUNCH_LOG)


def evidence_lines(session: Session, run_id: str) -> tuple[str, ...]:
    """The last pull's and the last verification's outcome, from the event log."""
    lines = []
    for kinds, word in (((EventKind.PULL, EventKind.PULL_INCOMPLETE, EventKind.PULL_FAILED), "pulled"),
                        ((EventKind.VERIFY,), "verified")):
        found = [e for kind in kinds for e in session.db.events(run_id=run_id, kind=kind, limit=2)
                 if not (e.kind == EventKind.PULL and not e.detail)]  # a pull's start has no payload
        last = max(found, key=lambda e: e.seq, default=None)
        if last is None:
            continue
        if word == "pulled":
            outcome = ("every file, each matching its manifest hash" if last.kind == EventKind.PULL
                       else "incomplete" if last.kind == EventKind.PULL_INCOMPLETE else "failed")
        else:
            outcome = "passed" if last.detail.get("ok") else "failed"
        lines.append(f"{word}: {outcome} at {iso_z(last.at)}")
    return tuple(lines)
