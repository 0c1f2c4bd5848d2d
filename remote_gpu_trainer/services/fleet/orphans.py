"""Boxes a cloud account bills that no project knows (docs/remote-ops.md §9.3): the costliest box is the one
nobody remembers renting, and no project's dashboard would ever show it.

Each configured account (provider, API base URL, where its key comes from) is asked once, through its list
endpoint, within the per-box timeout. A listed instance whose provider id no known project names, in
rgt.toml (`id`) or in what `rgt up` recorded (the LAUNCHED events), is an orphan. An account that cannot be
listed is an error line, never an empty list. Nothing here stops, terminates or changes anything: the only
calls are the list endpoint's reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.meter import billing_model, first_rates
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.fleet_views import OrphanView
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.providers.base import InstanceStatus
from remote_gpu_trainer.services.meter import held_storage
from remote_gpu_trainer.state.billing import Snapshot
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import ProjectConfig
    from remote_gpu_trainer.profiles import Profile
    from remote_gpu_trainer.providers.cloud.provider import CloudProvider
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.state.db import StateDB

RENTED = (EventKind.LAUNCHED, EventKind.LAUNCH_OVER_BUDGET)  # `rgt up` wrote the provider id it rented
ANY_PROVIDER = "*"  # a rented id whose instance is no longer in rgt.toml: known on every provider


@dataclass(frozen=True)
class Account:
    """One cloud account: the same provider, API and key source are one account, however many projects."""

    provider: str
    api_base: str
    key_source: str

    @property
    def label(self) -> str:
        return f"{self.provider} account at {self.api_base} (key from {self.key_source})"


def known_ids(project: ProjectConfig, db: StateDB | None) -> set[tuple[str, str]]:
    """(provider, id) of every box the project names: rgt.toml `id`s and every box `rgt up` rented for it."""
    known = {(i.provider, i.id) for i in project.instances.values() if i.id}
    if db is not None:
        for kind in RENTED:
            for event in db.events(kind=kind):
                config = project.instances.get(event.instance or "")
                ident = event.detail.get("provider_id")
                provider = config.provider if config else ANY_PROVIDER  # the instance left rgt.toml since
                if ident:
                    known.add((provider, str(ident)))
    return known


def cloud_accounts(sessions: Sequence[Session]) -> tuple[dict[Account, CloudProvider], list[str]]:
    """The distinct accounts among the cloud instances of `sessions` (the first adapter seen speaks for
    each), and one line per instance whose account could not be told (no key, a bad API base)."""
    from remote_gpu_trainer.providers.cloud.provider import CloudProvider

    accounts: dict[Account, CloudProvider] = {}
    errors = []
    for session in sessions:
        for name in sorted(session.project.instances):
            if session.project.instances[name].provider not in table.of_kind("cloud"):
                continue
            try:
                provider = session.provider(name)
                found = provider.account() if isinstance(provider, CloudProvider) else None
            except RgtError as exc:
                errors.append(f"{session.project.name}/{name}: its cloud account could not be listed: {exc}")
                continue
            if found is not None and isinstance(provider, CloudProvider):
                accounts.setdefault(Account(provider.name, *found), provider)
    return accounts, errors


async def list_orphans(accounts: dict[Account, CloudProvider], known: set[tuple[str, str]],
                       timeout_s: float, at: datetime) -> tuple[list[OrphanView], list[str]]:
    """Every account asked at once, each within `timeout_s`: its orphans, and a line per account not listed."""
    answers = await asyncio.gather(*(_listed(provider, timeout_s) for provider in accounts.values()))
    orphans: list[OrphanView] = []
    errors = []
    for (account, provider), (listed, error) in zip(accounts.items(), answers, strict=True):
        if error is not None:
            errors.append(f"{account.label}: could not be listed: {error}")
            continue
        orphans += [orphan_view(account, status, provider.profile, at) for status in listed
                    if not {(account.provider, status.provider_id), (ANY_PROVIDER, status.provider_id)} & known]
    return orphans, errors


async def _listed(provider: CloudProvider, timeout_s: float) -> tuple[list[InstanceStatus], str | None]:
    try:
        return await asyncio.wait_for(provider.list_instances(strict=True), timeout_s), None
    except TimeoutError:
        return [], f"no answer within {timeout_s:g} s"
    except (RgtError, OSError) as exc:
        return [], provider.redact(str(exc)) or type(exc).__name__


def orphan_view(account: Account, status: InstanceStatus, profile: Profile, at: datetime) -> OrphanView:
    """One listed box no project names, billed by the rule the meter applies inside a project: a stopped box
    bills what its profile says a stopped box bills (not the compute price some APIs keep listing), and a
    state rgt does not map bills the listed price, marked as an estimate."""
    model = billing_model(profile, held_storage(profile, status))
    seen = Snapshot(at=at, instance=status.name, provider=status.provider, provider_id=status.provider_id,
                    state=status.state, price_per_hour=status.price_per_hour, price_source=status.price_source,
                    storage_per_hour=status.storage_per_hour)
    rates, estimate = first_rates(model, seen)
    items = sum(item.per_hour or 0.0 for item in model.items)  # a network volume bills whatever the pod does
    unknown = rates.unknown or any(item.per_hour is None for item in model.items)
    burn = rates.total + items
    return OrphanView(provider=account.provider, account=account.label, id=status.provider_id, name=status.name,
                      state=status.state, price_per_hour=status.price_per_hour, price_source=status.price_source,
                      currency=profile.pricing.currency, bills=burn > 0 or unknown, burn_per_hour=burn,
                      estimate=estimate, unknown_price=unknown)


def all_known_ids(pairs: Iterable[tuple[ProjectConfig, StateDB | None]]) -> set[tuple[str, str]]:
    known: set[tuple[str, str]] = set()
    for project, db in pairs:
        known |= known_ids(project, db)
    return known
