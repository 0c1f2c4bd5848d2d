"""Preempted runs (docs/remote-ops.md §10): shown as preempted, and relaunched on the same box only when the user
allowed it.

What decides "preempted" is audits/preemption.py; this module adds the provider's word (an instance status the
overview already fetched) and carries out `rgt run RUN --resume`: the same run id, the same command, on the box
that is still billing, so the job's own checkpoint loading restores progress. Three refusals, each one line:
the run is not preempted, `runs.<id>.auto_resume` is not true, or the box is not running (then only `rgt up`,
with its typed price approval, can rent another; this module never rents, stops or deletes anything).

The relaunch is an ordinary launch in the launch log, so the teardown gate treats it as any launch: a run
verified before the resume is not covered by that verification any more (docs/gate.md).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits import preemption
from remote_gpu_trainer.errors import RgtError, VerbFailed
from remote_gpu_trainer.providers.base import InstanceStatus

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState


def with_provider_word(state: RunState, status: InstanceStatus | None) -> RunState:
    """The run's state, its detail `preempted: ...` when the instance's API says preempted, interrupted or
    outbid (a state word or status message)."""
    if status is None:
        return state
    refined = preemption.refine(state.liveness, words=preemption.provider_words(status.detail))
    return state if refined == state.liveness else dataclasses.replace(state, liveness=refined)


async def watched_run_state(session: Session, run_id: str) -> RunState:
    """The run's state as `rgt watch` reports it: the probe's answer, and when that reads dead or unknown for a
    launched run, the provider's word too (a vast.ai box outbid, a spot VM interrupted), so a preempted run is
    called preempted by the one-run watch as by the dashboard and the patrol. The provider is asked only then:
    a running job costs no API call per pass. A provider that cannot be asked leaves the probe's answer."""
    from remote_gpu_trainer.services.watch.liveness import run_state

    state = await run_state(session, run_id)
    liveness = state.liveness
    if liveness.state not in ("dead", "unknown") or preemption.is_preempted(liveness) \
            or session.db.launch(run_id) is None:
        return state
    try:
        status = await session.instance_status(session.run_config(run_id).instance)
    except RgtError:
        return state
    return with_provider_word(state, status)


def unanswered(state: RunState) -> bool:
    """The box of a launched run could not be asked and no provider said why: nobody knows what it is doing."""
    liveness = state.liveness
    return liveness.state == "unknown" and liveness.detail != "not launched" and not preemption.is_preempted(liveness)


def ended_here(state: RunState) -> bool:
    """The job is over on this box: finished, dead, or preempted (which may read unknown when the provider took
    the box away): a watch that follows the run has nothing more to wait for."""
    return state.liveness.state in ("finished", "dead") or preemption.is_preempted(state.liveness)


async def resume_run(session: Session, run_id: str, actor: str = "user") -> dict[str, Any]:
    """Relaunch a preempted run on its still-billing box; refuses (VerbFailed) otherwise."""
    from remote_gpu_trainer.services.launch.launch import launch_run
    from remote_gpu_trainer.services.watch.liveness import run_state

    session.require_writable("resuming a run")
    run = session.run_config(run_id)
    if session.db.launch(run_id) is None:
        raise VerbFailed(f"run {run_id} was never launched: `rgt run {run_id}` launches it")
    status = await session.instance_status(run.instance)
    state = with_provider_word(await run_state(session, run_id), status)
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
