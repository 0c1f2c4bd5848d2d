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
from remote_gpu_trainer.services.watch import recovery
from remote_gpu_trainer.services.watch.liveness import RunState, run_state
from remote_gpu_trainer.state.events import EventKind

PUT_DOWN_KINDS = (EventKind.ACTION, EventKind.TORN_DOWN, EventKind.STOPPED, EventKind.TEARDOWN_UNCONFIRMED)
TEARDOWN_ACTIONS = ("stop", "terminate")

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


def with_provider_word(session: Session, run_id: str, state: RunState, status: InstanceStatus | None) -> RunState:
    """The run's state, its detail `preempted: ...` when the instance's API says preempted, interrupted or outbid (a
    state word or status message), or says stopped or terminated of an interruptible box that `rgt down` did not put
    down since the run's launch (RunPod's interrupted spot pod is EXITED, with no word for why)."""
    if status is None:
        return state
    refined = preemption.refine(state.liveness, words=preemption.provider_words(status.detail),
                                exit_code=state.exit_code, taken=_taken(session, run_id, status))
    return state if refined == state.liveness else dataclasses.replace(state, liveness=refined)


def _taken(session: Session, run_id: str, status: InstanceStatus) -> str | None:
    """The provider's state for an interruptible box it stopped or took while rgt did not (None otherwise)."""
    if status.state not in preemption.TAKEN_STATES or _ended_before(session, run_id) or _stopped_by_owner(status):
        return None
    instance = run_config(session, run_id).instance
    interruptible = session.instance(instance).preemptible or preemption.interruptible_status(status.detail)
    return status.state if interruptible and not put_down_since_launch(session, run_id, instance) else None


def _stopped_by_owner(status: InstanceStatus) -> bool:
    """The provider says its owner asked for the stop (vast.ai's `intended_status` stopped: the console, the CLI or
    rgt); a preemption leaves the intent `running`."""
    api = status.detail.get("api")
    return isinstance(api, dict) and api.get("intended_status") == "stopped"


def _ended_before(session: Session, run_id: str) -> bool:
    """A watcher last saw the job ended on its own (finished, or dead but not preempted): a box stopped after that
    did not take the run from anyone."""
    seen = recovery.last_seen(session, run_id)
    return seen is not None and (seen.state == "finished"
                                 or (seen.state == "dead" and not seen.detail.startswith(preemption.PREEMPTED)))


def launch_seq(session: Session, run_id: str) -> int:
    """The event of the run's current launch (0: never launched): what is known of this launch is written after it."""
    found = session.db.events(run_id=run_id, kind=EventKind.LAUNCH, limit=1)
    return found[-1].seq if found else 0


def put_down_since_launch(session: Session, run_id: str, instance: str) -> str:
    """What `rgt down` wrote when it asked to stop or tear down the run's box after its current launch, or saw it
    done ("" if nothing): a box a person put down is neither preempted nor one recovery starts or replaces, even when
    the stop's confirmation never came (interrupted, timed out)."""
    after = launch_seq(session, run_id)
    found = [event for kind in PUT_DOWN_KINDS for event in session.db.events(kind=kind)
             if event.instance == instance and event.seq > after
             and (kind != EventKind.ACTION or event.detail.get("action") in TEARDOWN_ACTIONS)]
    return max(found, key=lambda event: event.seq).summary if found else ""


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
    return with_provider_word(session, run_id, state, status)


def unanswered(state: RunState) -> bool:
    """The box of a launched run could not be asked and no provider said why: nobody knows what it is doing."""
    liveness = state.liveness
    return liveness.state == "unknown" and liveness.detail != "not launched" and not preemption.is_preempted(liveness)


def ended_here(state: RunState) -> bool:
    """The job is over on this box: finished, dead, or preempted (which may read unknown when the provider took
    the box away): a watch that follows the run has nothing more to wait for."""
    return state.liveness.state in ("finished", "dead") or preemption.is_preempted(state.liveness)
