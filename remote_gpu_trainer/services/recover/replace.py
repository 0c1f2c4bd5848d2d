"""Renting a replacement box for a preempted run whose box the provider took (docs/remote-ops.md §10.1, "A
replacement box").

Called by services/recover/run.py under the run's lock, once audits/recover.py decided RENT within a standing
approval. In order, each step written to the event log before it is taken:
1. `quoted`: what an equivalent box costs now, judged by audits/recover.quote_refusals (at most
   max_price_per_hour, a GPU class allowed, an hour of it within what max_spend leaves). A quote refused rents nothing.
2. `renting`, then `rented` (with the box, its price and the approval): the box is created under the run's instance
   name, bills on the meter like any other, and shows in `rgt status`; recovery's spending is read from its meter.
3. `pushed`: each cell's checkpoint kept home (services/recover/checkpoint_home.py) written to the same path in the
   cell's result root on the new box, so the run's `{resume}` finds it there.
4. the relaunch, as on the preempted box (run.py's `launching` / `launched`).

What rents: a provider rgt creates boxes with directly (the sim, at its profile's price), and a cloud provider whose API
rgt rents through and quotes a price before creating (vast.ai, Lambda), for an instance with a `launch` constraint
(services/recover/rent_cloud.py: the new box stands in for the preempted one under the same instance name, and its
first host key is trusted under the person's approval). The run's `push` files go to the new box with the checkpoints.
At most one box is rented per launch of the run (audits/recover.decide). Nothing here stops, terminates or deletes
anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.recover import quote_refusals
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.providers.base import Creatable
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from remote_gpu_trainer.services.box_layout import cell_root
from remote_gpu_trainer.services.instances import create_instance, remote
from remote_gpu_trainer.services.launch.launch import push
from remote_gpu_trainer.services.recover.checkpoint_home import home_copies
from remote_gpu_trainer.services.recover.ledger import RENTED
from remote_gpu_trainer.services.recover.rent_cloud import cloud_quote, cloud_request, rent_cloud
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.recover import RecoveryFacts
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.providers.cloud.types import GpuRequest
    from remote_gpu_trainer.services.session import Session

ACTOR = "rgt:recover"


@dataclass(frozen=True)
class Quoted:
    """What an equivalent box costs now, as recovery asks it."""

    price_per_hour: float | None
    gpu: str
    text: str
    request: GpuRequest | None = None  # a cloud box: what is sent to the provider's create (None: a sim box)


async def quote_replacement(session: Session, run: RunConfig,
                            facts: RecoveryFacts) -> tuple[Quoted | None, list[str]]:
    """What an equivalent box costs now and every reason the limits refuse it (empty: it may be rented). The quote is
    written to the event log when it differs from the last one written (a patrol asks every few minutes)."""
    assert facts.limits is not None
    provider = session.provider(run.instance)
    if isinstance(provider, CloudProvider):
        request, cannot = cloud_request(session, run, facts, provider)
        if request is None:
            return None, cannot
        price, said = await cloud_quote(provider, request)
        quoted = Quoted(price, request.gpu_type, f"{request.gpu_count}x {request.gpu_type}: {said}", request)
        own = session.project.instances[run.instance].launch
        own_gpu = own.gpu if own is not None else None
    elif isinstance(provider, Creatable):
        quoted = _quote(session, run)
        own_gpu = quoted.gpu
    else:
        return None, [f"instances.{run.instance}: {provider.profile.display_name} boxes are not rented by rgt: "
                      "recovery can only resume there once the box is back"]
    refused = quote_refusals(facts.limits, price_per_hour=quoted.price_per_hour, gpu=quoted.gpu,
                             own_gpu=own_gpu if not facts.limits.gpus else None, spent=facts.spent,
                             run_id=run.id)
    if quoted.request is not None and quoted.price_per_hour is None:
        refused.append(quoted.text)  # why the provider gave no price: no offer under the ceiling now
    detail: dict[str, object] = {"price_per_hour": quoted.price_per_hour, "gpu": quoted.gpu, "refused": refused}
    last = next((e.detail for e in reversed(session.db.events(run_id=run.id, kind=EventKind.RECOVER))
                 if e.detail.get("step") == "quoted"), None)
    if last is None or {key: last.get(key) for key in detail} != detail:
        events.recover_step(session.db, run_id=run.id, instance=run.instance, step="quoted", actor=ACTOR,
                            summary=f"recovery of {run.id}: {quoted.text}" + (f": refused: {'; '.join(refused)}"
                                                                               if refused else ""), detail=detail)
    return quoted, refused


async def rent_quoted(session: Session, run: RunConfig, facts: RecoveryFacts, quoted: Quoted) -> list[str]:
    """Rent the quoted box under the run's instance name and push the run's `push` files and each cell's checkpoint
    kept home to it; the cells and paths of the checkpoints pushed."""
    mark = {"approval": facts.approval.seq, "price_per_hour": quoted.price_per_hour, "gpu": quoted.gpu}
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step="renting", actor=ACTOR,
                        summary=f"recovery of {run.id}: renting a replacement for {run.instance} ({quoted.text})",
                        detail=mark)
    if quoted.request is not None:
        assert quoted.price_per_hour is not None  # quote_refusals refuses an unknown price
        provider_id = (await rent_cloud(session, run, facts, quoted.request, quoted.price_per_hour)).provider_id
    else:
        status = await create_instance(session, run.instance, actor=ACTOR)
        if status.state != "running":  # nothing billing was made (a sim record that says running over a lost disk)
            raise RgtError(f"no replacement box: {run.instance} reads {status.state} after the create, not running")
        provider_id = status.provider_id
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step=RENTED, actor=ACTOR,
                        summary=f"recovery of {run.id}: rented {provider_id} for {run.instance}",
                        detail={**mark, "provider_id": provider_id})
    if run.push:
        await push(session.project, run, await remote(session, run.instance))
    return await push_checkpoints(session, run)


def _quote(session: Session, run: RunConfig) -> Quoted:
    """A box rgt creates itself bills its profile's compute price; its GPU class is the profile's word for it."""
    profile = session.profile(run.instance)
    price = profile.pricing.compute_per_hour
    gpu = str(profile.raw.get("recover", {}).get("gpu", f"{profile.id} box"))
    return Quoted(price_per_hour=price, gpu=gpu,
                  text=f"{gpu} at {price:.4f}/h ({profile.pricing.source})" if price is not None
                  else f"{gpu} at an unknown price")


async def push_checkpoints(session: Session, run: RunConfig) -> list[str]:
    """Each cell's checkpoint kept home, written to its path in the cell's result root on the run's box (read whole:
    one checkpoint in memory at a time). Written to the event log first, then pushed."""
    kept = home_copies(session, run.id)
    if not kept:
        return []
    listed = [f"{copy.cell}/{copy.path}" for copy in kept.values()]
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step="pushed", actor=ACTOR,
                        summary=f"recovery of {run.id}: pushing {', '.join(escape_control(x) for x in listed)}",
                        detail={"checkpoints": [{"cell": copy.cell, "path": copy.path, "sha256": copy.sha256}
                                                for copy in kept.values()]})
    transport = await remote(session, run.instance)
    for copy in kept.values():
        await transport.put_bytes(copy.local.read_bytes(), f"{cell_root(run, copy.cell)}/{copy.path}")
    return listed
