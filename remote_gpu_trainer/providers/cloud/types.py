"""Value types shared by the cloud API clients (docs/providers.md §3–§6).

Every client turns its provider's JSON into the same `CloudInstance`, so the meter, the dashboard and the
teardown service never branch on the provider's name. Provider state words are mapped through plain tables
kept at the top of each client module; a word no table knows becomes `unknown` (docs/architecture.md §6), with the raw
word kept beside it so the user sees what the provider actually said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remote_gpu_trainer.providers.base import INSTANCE_STATES, PRICE_SOURCES, InstanceStatus


def map_state(table: Mapping[str, str], raw: object) -> str:
    """The INSTANCE_STATES word for a provider word; `unknown` when the table has no entry.

    Matching ignores case and surrounding blanks because providers are not consistent about either
    (RunPod says RUNNING, Lambda says active). Unknown is deliberate: an unrecognised word must never read as
    `terminated`, which would tell the user the meter stopped when it may not have.
    """
    if not isinstance(raw, str):
        return "unknown"
    state = table.get(raw.strip().lower(), "unknown")
    return state if state in INSTANCE_STATES else "unknown"


def lower_keys(table: Mapping[str, str]) -> dict[str, str]:
    """A state table keyed by lower-case words, checked once at import so a typo in a table fails loudly."""
    bad = {word: state for word, state in table.items() if state not in INSTANCE_STATES}
    if bad:
        raise ValueError(f"state table maps onto unknown states: {bad}")
    return {word.strip().lower(): state for word, state in table.items()}


@dataclass(frozen=True)
class Money:
    """An amount in a currency; `per_hour` tells a rate from a balance (docs/providers.md §0)."""

    amount: float
    currency: str
    per_hour: bool = False


@dataclass(frozen=True)
class StorageBilling:
    """One storage item the API reports on an instance, and whether it keeps billing (facts from the spec)."""

    name: str
    size_gb: float | None = None
    bills_while_stopped: bool = True
    survives_terminate: bool = False
    price_per_gb_month: float | None = None
    ident: str | None = None
    price_per_hour: float | None = None  # the API's own hourly figure for this item (vast.ai storage_total_cost)


@dataclass(frozen=True)
class CloudInstance:
    """What one provider API says about one instance, normalised.

    `state` is always one of INSTANCE_STATES; `raw_state` is the provider's own word. `price_per_hour` is
    None when the API gives no price (Paperspace) and then `price_source` is `none`.
    """

    provider: str
    provider_id: str
    state: str
    raw_state: str
    name: str = ""
    gpu: str = ""
    gpu_count: int | None = None
    price_per_hour: float | None = None
    price_source: str = "none"
    currency: str = "USD"
    uptime_s: float | None = None
    created_at: str | None = None
    started_at: str | None = None
    public_ip: str | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    region: str | None = None
    storage: tuple[StorageBilling, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.state not in INSTANCE_STATES:
            raise ValueError(f"state {self.state!r} is not one of {INSTANCE_STATES}")
        if self.price_source not in PRICE_SOURCES:
            raise ValueError(f"price_source {self.price_source!r} is not one of {PRICE_SOURCES}")

    def to_status(self, name: str) -> InstanceStatus:
        """The Provider-protocol view (providers/base.py), for code that only knows InstanceStatus."""
        detail: dict[str, Any] = {"raw_state": self.raw_state, "currency": self.currency}
        for key in ("uptime_s", "created_at", "started_at", "public_ip", "ssh_host", "ssh_port", "region"):
            value = getattr(self, key)
            if value is not None:
                detail[key] = value
        return InstanceStatus(
            name=name, provider=self.provider, provider_id=self.provider_id, state=self.state, gpu=self.gpu,
            price_per_hour=self.price_per_hour, price_source=self.price_source, detail=detail,
        )


@dataclass(frozen=True)
class GpuRequest:
    """What `launch` asks for: a GPU type and count under a price ceiling (USD per hour for the instance)."""

    gpu_type: str
    image: str = ""
    gpu_count: int = 1
    max_price_per_hour: float | None = None
    disk_gb: int = 40
    name: str = "rgt"
    interruptible: bool = False
    region: str | None = None
    ssh_key_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.gpu_count < 1:
            raise ValueError("gpu_count must be at least 1")
        if self.max_price_per_hour is not None and self.max_price_per_hour <= 0:
            raise ValueError("max_price_per_hour must be positive")


@dataclass(frozen=True)
class Quote:
    """The price per hour an API will bill for a request, told before anything is created (None: it cannot
    tell), and where that figure comes from, as the approval screen says it."""

    price: float | None
    text: str
