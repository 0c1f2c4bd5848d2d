"""A run's state as watching reports it (docs/remote-ops.md §10): the probe's answer with the provider's word.

The box's probe (services/watch/liveness.py) cannot see a preemption: an outbid vast.ai box or an interrupted
spot VM reads dead or unknown. The provider's instance status can, so the dashboard (services/overview.py),
the patrol and `rgt watch` refine the probe's answer with it, by one rule (audits/preemption.py), and a
preempted run is called preempted by every face. Relaunching it is the launch wing's (services/launch/resume.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits import preemption
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.providers.base import InstanceStatus
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.watch.liveness import RunState, run_state

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


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
    state = await run_state(session, run_id)
    liveness = state.liveness
    if liveness.state not in ("dead", "unknown") or preemption.is_preempted(liveness) \
            or session.db.launch(run_id) is None:
        return state
    try:
        status = await instance_status(session, run_config(session, run_id).instance)
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
