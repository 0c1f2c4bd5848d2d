"""Starting again the box its provider stopped under a preempted run (docs/remote-ops.md §10.1, "The same box").

A RunPod spot pod that is interrupted goes EXITED: its job got SIGTERM (exit 143), its container disk is lost and its
volume disk, where the run's files and checkpoints are, stays. Starting that pod again (the profile's `start`
endpoint) brings the same box and its disk back, which is cheaper and surer than renting another one. It bills again
from then, so it is spending: called by services/recover/run.py under the run's lock once audits/recover.py decided
START_BOX within a standing approval, and judged like a quote (audits/recover.quote_refusals): the price the box
billed while it last ran (the provider states none for a stopped pod) at most max_price_per_hour, and an hour of it
within what max_spend leaves. Written to the event log before the call (`starting`), then `started` (whose meter counts
toward max_spend, services/recover/ledger.spent). The run is relaunched by a later look, once the box answers and
still holds the run (run.py's RESUME_HERE); a box that comes back with another host key is refused there by the
strict host-key check, as any box is.

A vast.ai box that was outbid is not started: its provider brings it back when the bid wins again (intended_status
stays `running`), and run.py reads it as `resuming`. A box that `rgt down` stopped is never started by recovery.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.recover import quote_refusals
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.recover.ledger import STARTED
from remote_gpu_trainer.state import events

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.recover import RecoveryFacts
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.services.session import Session

ACTOR = "rgt:recover"


def startable(session: Session, name: str) -> bool:
    """The box's provider can start a stopped box through its API: a cloud profile with a `start` endpoint and an
    API key rgt found (a box reached only over SSH cannot be started by rgt)."""
    provider = session.provider(name)
    return isinstance(provider, CloudProvider) and provider.can_start()


def running_price(session: Session, name: str, provider_id: str) -> float | None:
    """What the box billed per hour the last time it was seen running (a stopped pod's API price is 0.0)."""
    found = [snap for snap in session.db.snapshots(name)
             if snap.provider_id == provider_id and snap.state == "running" and snap.price_per_hour]
    return found[-1].price_per_hour if found else None


async def start_stopped(session: Session, run: RunConfig, facts: RecoveryFacts, provider_id: str) -> list[str]:
    """Start the run's stopped box within the limits; every reason the limits refuse it (empty: it was started)."""
    assert facts.limits is not None
    price = running_price(session, run.instance, provider_id)
    refused = quote_refusals(dataclasses.replace(facts.limits, gpus=()), price_per_hour=price, gpu="its own",
                             own_gpu="its own", spent=facts.spent, run_id=run.id)
    if refused:
        return [f"starting {provider_id} again: {reason}" for reason in refused]
    mark = {"approval": facts.approval.seq, "price_per_hour": price, "provider_id": provider_id}
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step="starting", actor=ACTOR,
                        summary=f"recovery of {run.id}: starting {provider_id} ({run.instance}) again at "
                                f"{price:.4f}/h", detail=mark)
    provider = session.provider(run.instance)
    assert isinstance(provider, CloudProvider)
    await provider.start(session.instance(run.instance))
    await session.forget_transport(run.instance)  # a started box may answer at another address
    status = await instance_status(session, run.instance)
    if status.state not in ("running", "pending"):
        raise RgtError(f"{provider_id} reads {status.state} after the start, not starting")
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step=STARTED, actor=ACTOR,
                        summary=f"recovery of {run.id}: {provider_id} ({run.instance}) started again: "
                                f"{status.state}", detail={**mark, "state": status.state})
    return []
