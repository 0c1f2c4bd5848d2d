"""Renting a replacement cloud box for a preempted run (docs/remote-ops.md §10.1, "A replacement box"): what `rgt up`
would rent for the instance (its `launch` constraint), through the provider's API, within the recovery limits a
person approved.

Why these refusals: recovery spends only what it can price before it spends, so a provider whose create states no
price first (RunPod's REST create takes no ceiling) is not rented by recovery; and the new box is reached at the
address its API gives, so an instance whose rgt.toml names one box's address (`host`) is not either.

The new box's id is recorded as a LAUNCHED event that `replaces` the box it stands in for, so the session reads the
instance as the new box from then on (services/session.Session.instance) without rgt.toml being rewritten. Its first
host key is trusted under the person's approval, which said so when it was given (services/recover/approval.py's
prompt): recovery trusts only the key of the box it just created through the provider's authenticated API, at the
address that API gives, once, and writes which approval it did it under. Nothing here stops or deletes anything: a box
created above the quote is recorded, billed and said loudly, and left to `rgt down`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from remote_gpu_trainer import text
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.providers.cloud.client import LaunchOverBudget, Quotes
from remote_gpu_trainer.providers.cloud.provider import CloudProvider, stopped_storage_per_hour
from remote_gpu_trainer.providers.cloud.types import CloudInstance, GpuRequest
from remote_gpu_trainer.services.instances import host_key_prompts, instance_status, trust_host_key
from remote_gpu_trainer.services.launch.rent import config_line, gpu_request, has_launch_api
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.billing import Snapshot
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.recover import RecoveryFacts
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.services.session import Session

ACTOR = "rgt:recover"
READY_TIMEOUT_S = 600.0  # how long a rented box may take to answer running before recovery says it failed
READY_POLL_S = 2.0
PRICE_TOLERANCE = 1e-6  # a created box's price above the quote by more than rounding is over budget


def cloud_request(session: Session, run: RunConfig, facts: RecoveryFacts,
                  provider: CloudProvider) -> tuple[GpuRequest | None, list[str]]:
    """The request recovery would rent with (the instance's launch constraint, its ceiling lowered to the limit), or
    every reason it cannot rent this instance at all."""
    assert facts.limits is not None
    instance = session.project.instances[run.instance]
    name = f"instances.{run.instance}"
    reasons = []
    if not has_launch_api(provider.profile):
        reasons.append(f"{name}: {provider.profile.display_name} boxes are not rented through an API rgt can use")
    if instance.launch is None:
        reasons.append(f"{name}: no launch = {{ gpu = ..., max_price_per_hour = ... }}: recovery rents only what "
                       "`rgt up` would rent")
    if instance.host:
        reasons.append(f"{name}.host names one box's address: a replacement is reached where its API says; remove "
                       "host to let recovery rent one")
    if not isinstance(provider.client(), Quotes):
        reasons.append(f"{provider.profile.display_name} states no price before creating a box: recovery rents "
                       "nothing it cannot price first")
    if reasons or instance.launch is None:
        return None, reasons
    request = gpu_request(run.instance, instance.launch)
    ceiling = min(instance.launch.max_price_per_hour, facts.limits.max_price_per_hour)
    return dataclasses.replace(request, max_price_per_hour=ceiling), []


async def cloud_quote(provider: CloudProvider, request: GpuRequest) -> tuple[float | None, str]:
    """The API's price for the request now, and where it comes from (read-only calls)."""
    client = provider.client()
    assert isinstance(client, Quotes)
    try:
        quote = await client.quote(request)
    except (RgtError, OSError) as exc:  # nothing rentable under the ceiling now, or no answer: no price, no rent
        return None, provider.redact(str(exc))
    return quote.price, quote.text


async def rent_cloud(session: Session, run: RunConfig, facts: RecoveryFacts, request: GpuRequest,
                     price: float) -> CloudInstance:
    """Create the box at no more than the quoted price, record it as the instance's box in place of the preempted one,
    wait until it answers running, and trust its first host key under the approval."""
    provider = session.provider(run.instance)
    assert isinstance(provider, CloudProvider)
    replaced = session.instance(run.instance).id
    try:
        created = await provider.launch(dataclasses.replace(request, max_price_per_hour=price))
    except LaunchOverBudget as exc:
        _record(session, run, exc.instance, price, replaced, EventKind.LAUNCH_OVER_BUDGET)
        raise RgtError(f"OVER BUDGET: {provider.name} created {exc.instance.provider_id} above the quoted "
                       f"{text.price(price)}/h; it bills now and is left to `rgt down`") from exc
    if created.price_per_hour is not None and created.price_per_hour > price * (1 + PRICE_TOLERANCE):
        _record(session, run, created, price, replaced, EventKind.LAUNCH_OVER_BUDGET)
        raise RgtError(f"OVER BUDGET: {provider.name} created {created.provider_id} at "
                       f"{text.price(created.price_per_hour)}/h, above the quoted {text.price(price)}/h; it bills now "
                       "and is left to `rgt down`")
    _record(session, run, created, price, replaced, EventKind.LAUNCHED)
    await session.forget_transport(run.instance)  # the instance is the new box now: no connection to the old one
    await _wait_running(session, run.instance, created.provider_id)
    await _trust_first_key(session, run, facts)
    return created


def _record(session: Session, run: RunConfig, created: CloudInstance, price: float, replaced: str | None,
            kind: EventKind) -> None:
    """The new box in the event log (in place of `replaced`) and a snapshot, so the meter bills it from now."""
    known = created.price_per_hour is not None
    billed = created.price_per_hour if created.price_per_hour is not None else price
    currency = session.profile(run.instance).pricing.currency
    events.instance_rented(
        session.db, over_budget=kind is EventKind.LAUNCH_OVER_BUDGET, run_id=run.id, instance=run.instance,
        provider=created.provider, provider_id=created.provider_id, state=created.state, raw_state=created.raw_state,
        price_per_hour=billed, price_shown=text.price(billed, currency),
        price_source=created.price_source if known else "user", config_line=config_line(created.provider_id),
        replaces=replaced)
    session.db.add_snapshot(Snapshot(
        at=session.clock(), instance=run.instance, provider=created.provider, provider_id=created.provider_id,
        state=created.state, price_per_hour=billed, price_source=created.price_source if known else "user",
        storage_per_hour=stopped_storage_per_hour(session.profile(run.instance), created.storage)),
        detail={"source": kind, "run_id": run.id})


async def _wait_running(session: Session, name: str, provider_id: str) -> None:
    """Until the provider says the new box runs and SSH reaches it (or shows a host key to trust), bounded."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    while True:
        status = await instance_status(session, name)
        reached = status.detail.get("ssh_reachable") is True or name in host_key_prompts(session)
        if status.state == "running" and reached:
            return
        if status.state in ("terminated", "stopped") or loop.time() >= deadline:
            unreached = " but SSH does not answer" if status.state == "running" else ""
            raise RgtError(f"{provider_id} reads {status.state}{unreached} after the create: no relaunch there")
        await asyncio.sleep(READY_POLL_S)


async def _trust_first_key(session: Session, run: RunConfig, facts: RecoveryFacts) -> None:
    """The new box's first host key, trusted once under the approval (written as a `trusted` step first)."""
    presented = host_key_prompts(session).get(run.instance)
    if presented is None:
        return  # already trusted (the same address and key as a box trusted before)
    events.recover_step(session.db, run_id=run.id, instance=run.instance, step="trusted", actor=ACTOR,
                        summary=f"recovery of {run.id}: trusting the first host key of the box it rented, "
                                f"{presented.fingerprint_sha256}, under approval {facts.approval.seq}",
                        detail={"approval": facts.approval.seq, "fingerprint": presented.fingerprint_sha256})
    await trust_host_key(session, run.instance, presented.fingerprint_sha256, actor=ACTOR)
