"""Asking a provider about a box: its status (recorded for the meter), the row shown while it has not
answered, the transport an async verb reaches the box by, trusting its host key on first contact, and creating
a sim box.

A provider's failure reads as `unknown`, never as a state it did not report; every answer passes through
services/meter.py's record_snapshot, so the meter sees what the faces see.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.notice import rgt_command
from remote_gpu_trainer.errors import ConfigError, HostKeyNotTrusted, RgtError
from remote_gpu_trainer.providers.base import Creatable, InstanceStatus, Transport
from remote_gpu_trainer.services.meter import last_status, record_snapshot
from remote_gpu_trainer.state import events

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown
    from remote_gpu_trainer.services.session import Session


def host_key_prompts(session: Session) -> dict[str, HostKeyUnknown]:
    """Instance -> the unknown host key it presented at its last answer (first contact, not yet trusted), for
    the faces to offer to the user: a copy, since only instance_status and trust_host_key change them."""
    return dict(_prompts(session))


def _prompts(session: Session) -> dict[str, HostKeyUnknown]:
    return session.cache(__name__, dict)


async def remote(session: Session, name: str) -> Transport:
    """The transport for async work: a cloud box's SSH address comes from its provider, so the provider is
    asked once first when this process has not asked yet."""
    if last_status(session, name) is None and not session.has_transport(name):
        await session.asked(f"status:{name}", lambda: instance_status(session, name))
    return session.transport(name)


async def instance_status(session: Session, name: str) -> InstanceStatus:
    """Ask the provider, record a snapshot when something changed; failures read as `unknown`."""
    instance = session.instance(name)
    provider = session.provider(name)
    exists = True  # whether a box is there to bill: not when rgt.toml names none yet (a cloud box with no id)
    try:
        status = await asyncio.wait_for(provider.get(instance), session.provider_timeout_s)
    except (RgtError, OSError, TimeoutError) as exc:
        exists = not isinstance(exc, ConfigError)
        last = session.db.last_snapshot(name)
        status = InstanceStatus(
            name=name, provider=instance.provider, provider_id=last.provider_id or "" if last else "",
            state="unknown", gpu="?", price_per_hour=last.price_per_hour if last else None,
            price_source=last.price_source if last else "none",
            storage_per_hour=last.storage_per_hour if last else None,
            detail={"error": f"no answer within {session.provider_timeout_s:g} s" if isinstance(exc, TimeoutError)
                    and not str(exc) else str(exc)},
        )
    unknown_key = status.detail.get("host_key_unknown")  # set only by SSH-based providers
    if unknown_key is not None:
        _prompts(session)[name] = unknown_key
        status = dataclasses.replace(status, detail={**status.detail, "error": trust_refusal(session, name,
                                                                                            unknown_key)})
    else:
        _prompts(session).pop(name, None)
    if instance.price_per_hour is not None and status.price_source != "api" and exists:
        # the user's price fills in where the provider has none; an API price stays, and the user's
        # becomes the quote it is compared with (drift)
        status = InstanceStatus(**{**status.__dict__, "price_per_hour": instance.price_per_hour,
                                   "price_source": "user"})
    record_snapshot(session, status)  # and the meter keeps it as the box's last_status
    return status


def trust_refusal(session: Session, name: str, unknown: HostKeyNotTrusted) -> str:
    """The refusal of a first-contact host key, naming the exact command that trusts it for instance `name`."""
    command = rgt_command("trust", name, str(session.project.root), "--fingerprint", unknown.fingerprint_sha256)
    return unknown.said(f"run `{command}`")


def waiting_status(session: Session, name: str) -> InstanceStatus:
    """What a row shows while its box has not answered this refresh: the last known facts, marked."""
    last = last_status(session, name)
    note = "waiting for the provider's answer"
    if last is not None:  # the last answer stands, and so does what went wrong with it
        previous = last.detail.get("error")
        text = f"{previous} (asking again)" if previous else f"{note} (showing the last one)"
        return dataclasses.replace(last, detail={**last.detail, "error": text})
    instance = session.instance(name)
    snapshot = session.db.last_snapshot(name)
    return InstanceStatus(
        name=name, provider=instance.provider, provider_id=snapshot.provider_id or "" if snapshot else "",
        state="unknown", gpu="?", price_per_hour=snapshot.price_per_hour if snapshot else instance.price_per_hour,
        price_source=snapshot.price_source if snapshot else "none",
        storage_per_hour=snapshot.storage_per_hour if snapshot else None, detail={"error": note})


async def trust_host_key(session: Session, name: str, fingerprint: str, actor: str = "user") -> dict[str, Any]:
    """Trust on first use, once, by the user: the fingerprint they compared must be the one presented."""
    await instance_status(session, name)
    presented = _prompts(session).get(name)
    if presented is None:
        raise RgtError(f"instances.{name}: no unknown host key to trust (already trusted, or unreachable)")
    if fingerprint.strip() != presented.fingerprint_sha256:
        raise RgtError(f"instances.{name}: the host presents {presented.fingerprint_sha256}, not "
                       f"{fingerprint.strip()}: nothing was trusted")
    from remote_gpu_trainer.providers.box_identity import refuse_second_name
    from remote_gpu_trainer.providers.transports.ssh_hostkeys import (
        accept_host_key,  # asyncssh only when a host key is trusted
    )

    # a key another entry is trusted with is that entry's box: one gate per box (docs/gate.md §7 item 6)
    await refuse_second_name(session.project, name, presented.fingerprint_sha256)
    receipt = accept_host_key(presented.known_hosts_file, presented.host, presented.port, presented.key,
                              instance_id=session.provider(name).provider_id(session.instance(name)),
                              now=session.clock())
    events.host_key_trusted(session.db, instance=name, receipt=receipt, actor=actor)
    _prompts(session).pop(name, None)
    return receipt


async def create_instance(session: Session, name: str, actor: str = "user") -> InstanceStatus:
    """Start billing for a sim box (the embedded default's `up`); logged before it happens."""
    session.require_writable("creating an instance")
    provider = session.provider(name)
    if not isinstance(provider, Creatable):
        raise RgtError(f"instances.{name}: provider {provider.name!r} cannot create instances here")
    current = await instance_status(session, name)
    if current.state in ("running", "pending"):
        return current
    price = provider.profile.pricing.compute_per_hour
    events.create_approved(session.db, instance=name, price=price, actor=actor)
    await provider.create(session.instance(name))
    return await instance_status(session, name)
