"""Preempted runs (docs/remote-ops.md §10): shown as preempted, and relaunched on the same box only when the user
allowed it.

What decides "preempted" is audits/preemption.py, with the provider's word (services/watch/watched_state.py);
this module carries out `rgt run RUN --resume`: the same run id, the same command, on the box
that is still billing, so the job's own checkpoint loading restores progress. Three refusals, each one line:
the run is not preempted, `runs.<id>.auto_resume` is not true, or the box is not running (then only `rgt up`,
with its typed price approval, can rent another; this module never rents, stops or deletes anything).

The relaunch is an ordinary launch in the launch log, so the teardown gate treats it as any launch: a run
verified before the resume is not covered by that verification any more (docs/gate.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits import preemption
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.watched_state import with_provider_word

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


async def resume_run(session: Session, run_id: str, actor: str = "user") -> dict[str, Any]:
    """Relaunch a preempted run on its still-billing box; refuses (VerbFailed) otherwise."""
    session.require_writable("resuming a run")
    run = run_config(session, run_id)
    if session.db.launch(run_id) is None:
        raise VerbFailed(f"run {run_id} was never launched: `rgt run {run_id}` launches it")
    status = await instance_status(session, run.instance)
    state = with_provider_word(session, run_id, await run_state(session, run_id), status)
    if not preemption.is_preempted(state.liveness):
        raise VerbFailed(f"run {run_id} is {state.liveness.state} ({state.liveness.detail}), not preempted: "
                         "--resume relaunches only a preempted run")
    if run.location_drift:  # a resumed job continues where its launch put it; rgt.toml's new places are a new run's
        moved = ", ".join(d.key for d in run.location_drift)
        raise VerbFailed(f"run {run_id}: rgt.toml changed {moved} since its launch; --resume continues the run "
                         f"where its launch put it: undo the edit, or `rgt run {run_id} --rerun` starts a new run")
    if not run.auto_resume:
        raise VerbFailed(f"run {run_id} was preempted, but runs.{run_id}.auto_resume is not true in "
                         f"{session.project.file}: set it to relaunch on {run.instance} while it still bills")
    if status.state != "running":
        raise VerbFailed(f"run {run_id} was preempted and {run.instance} is {status.state}: --resume never rents; "
                         f"`rgt up {run_id}` rents a new box with your typed price approval")
    return await launch_run(session, run_id, actor=actor, resume=True)
