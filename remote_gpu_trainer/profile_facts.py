"""The facts of a provider profile as typed values: what each action destroys, which storage survives and keeps
billing, what still bills after the meter stops, the provider's danger clocks, prices and API, each with the
month it was verified (docs/providers.md §11), and how old those facts are.

Code asks a profile these questions; it never branches on the provider's name for any of that. profiles.py
reads and checks the TOML files (assets/profiles/<id>.toml) into these values.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

UNSTAMPED = "unstamped"
MANUAL = "manual"  # an action's endpoint when the user performs it in the provider's console
STALE_HINT = "STALE, re-check the provider's pricing page"
HOURS_PER_MONTH = 730.0  # 8760 h / 12: how providers turn a per-month storage price into an hourly one
SIZE_UNITS = {"GB": 1_000_000_000, "GiB": 1 << 30}

# Exact lengths only: a countdown shown to the user needs a fixed duration, so calendar months/years are refused.
_DURATION = re.compile(r"^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")


# -- typed profile parts ----------------------------------------------------------------------------------


class _RowCompat:
    """Dict-style reads (`row.get("what")`, `row["path"]`) for callers written when rows were plain dicts."""

    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key, None)
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        if getattr(self, key, None) is None:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and getattr(self, key, None) is not None


@dataclass(frozen=True)
class Action:
    """One action a provider profile declares: what it stops and destroys, whether it can be undone, and when that
    was verified. The gate and the teardown modal read these facts, never the provider's name."""

    id: str
    label: str
    stops_compute: bool
    stops_storage_billing: bool | str  # True, False or "partial"
    destroys: tuple[str, ...]
    reversible: bool
    caveats: tuple[str, ...]
    verified: str
    endpoint: str | None = None  # None or "manual": a console step the user performs and attests
    full_meter_stop: bool = False
    requires: tuple[str, ...] = ()
    after: str | None = None
    source: str | None = None
    conflict: str | None = None

    @property
    def needs_gate(self) -> bool:
        """Irreversible, or destroys a storage tier: the full gate applies (docs/gate.md §7).

        Any destroyed tier counts as holding run data, because the profile cannot know where a job wrote.
        """
        return not self.reversible or bool(self.destroys)

    @property
    def manual(self) -> bool:
        """True when rgt cannot perform it: the user clicks it in the console, so the result is user-attested."""
        return self.endpoint is None or self.endpoint == MANUAL


@dataclass(frozen=True)
class StorageTier(_RowCompat):
    """One storage tier of a profile: where it is, whether it survives a stop or a destroy and bills while stopped,
    and when that was verified; what keeps billing after a teardown is read from these."""

    name: str
    path: str
    survives_stop: bool
    survives_destroy: bool
    billed_while_stopped: bool
    verified: str
    scope: str | None = None
    attach: str | None = None
    inode_cap: int | None = None
    grow_only: bool = False
    price_note: str | None = None
    source: str | None = None
    conflict: str | None = None


@dataclass(frozen=True)
class Residual(_RowCompat):
    """Something that still bills after the full meter stop, and what ends it."""

    what: str
    ended_by: str
    verified: str
    id: str | None = None
    action: str | None = None  # the profile action that ends it, when there is one
    price_note: str | None = None
    source: str | None = None
    conflict: str | None = None


@dataclass(frozen=True)
class DangerClock(_RowCompat):
    """A provider-side timer or trigger that stops, releases or deletes without asking."""

    id: str
    trigger: str
    effect: str
    verified: str
    after: str = ""  # ISO-8601 duration, "" when the trigger has no fixed delay
    source: str | None = None
    conflict: str | None = None

    @property
    def duration(self) -> timedelta | None:
        """The delay as a timedelta, for countdowns; None when the clock has no fixed length."""
        return parse_duration(self.after)


@dataclass(frozen=True)
class SurfaceItem(_RowCompat):
    """A sentence the profile wants the user shown, a danger or a convenience, with when it was verified."""

    kind: str  # "danger" or "convenience"
    text: str
    verified: str
    source: str | None = None
    conflict: str | None = None


@dataclass(frozen=True)
class StorageRate:
    """A storage price the meter can apply: `rate` per GB (or GiB) per month, while stopped or always."""

    tier: str  # a storage tier name or a residual id
    rate: float
    applies: str  # "stopped" or "always"
    verified: str
    unit: str = "GB"
    free_gb: float = 0.0
    note: str | None = None
    source: str | None = None
    conflict: str | None = None

    def per_hour(self, size_bytes: int, hours_per_month: float = HOURS_PER_MONTH) -> float:
        """Hourly cost of `size_bytes` on this tier, after the free allowance, over the provider's own month
        (`[pricing] hours_per_month`: vast.ai and Lambda use 720 h)."""
        billable = max(0.0, size_bytes / SIZE_UNITS[self.unit] - self.free_gb)
        return billable * self.rate / hours_per_month


@dataclass(frozen=True)
class Pricing:
    """A profile's prices: compute and storage per hour, the per-GB-month storage rates and how this provider turns
    them hourly, and where the live price comes from."""

    currency: str
    compute_per_hour: float | None
    storage_per_hour: float | None
    source: str  # where the live price comes from: api, profile, user or none (not a fact's provenance)
    verified: str = UNSTAMPED
    billed_per: str | None = None
    note: str | None = None
    conflict: str | None = None
    storage_per_gb_month: tuple[StorageRate, ...] = ()
    # How this provider turns a per-month storage price into an hourly one (vast.ai: 720 h, its own figures)
    hours_per_month: float = HOURS_PER_MONTH

    def storage_rate(self, tier: str) -> StorageRate | None:
        return next((r for r in self.storage_per_gb_month if r.tier == tier), None)


@dataclass(frozen=True)
class Endpoint:
    """One API call a profile declares (method, path under the base URL, optional body), so no client code holds a
    provider's URLs."""

    method: str
    path: str  # relative to the base URL, with {id}-style placeholders
    body: str | None = None


@dataclass(frozen=True)
class AuthFile:
    """A credential file; `key` names the entry inside it, None when the whole file is the key."""

    path: str
    key: str | None


@dataclass(frozen=True)
class ApiControl:
    """How rgt talks to a provider's API (`control.api`): base URL, auth, rate limit, where the price is, the
    endpoints, and the answers that mean an instance is gone."""

    base_url: str
    auth_scheme: str
    auth_env: tuple[str, ...]
    verified: str
    base_url_env: str | None = None
    auth_files: tuple[AuthFile, ...] = ()
    rate_limit_per_s: float | None = None
    price_field: str | None = None
    price_unit: str | None = None
    endpoints: Mapping[str, Endpoint] = field(default_factory=dict)
    gone_when: tuple[str, ...] = ()
    source: str | None = None
    conflict: str | None = None

    def endpoint(self, name: str) -> Endpoint | None:
        return self.endpoints.get(name)

    def resolved_base_url(self, instance_api_base: str | None, environ: Mapping[str, str]) -> str:
        """Profile default < env var named in base_url_env < `api_base` on the instance (docs/providers.md §0)."""
        from_env = environ.get(self.base_url_env, "").strip() if self.base_url_env else ""
        return (instance_api_base or from_env or self.base_url).rstrip("/")


@dataclass(frozen=True)
class Control:
    """How a provider is driven: by its API, a CLI, the console or not at all, with what the mode needs."""

    mode: str
    console_url: str | None = None
    api: ApiControl | None = None
    cli: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spot:
    """Whether a provider rents interruptible (spot) boxes, how one is asked for, and how a preemption shows: its
    grace, its signal, what to detect."""

    available: bool
    verified: str
    create_flag: str | None = None
    grace_s: float | None = None
    signal: str | None = None
    detect: tuple[str, ...] = ()
    source: str | None = None
    conflict: str | None = None


@dataclass(frozen=True)
class FactRef:
    """One stamped fact of a profile: where it sits (e.g. `actions[terminate]`) and its stamp."""

    where: str
    verified: str
    money: bool  # a money or teardown fact: these set the profile's headline stamp


@dataclass(frozen=True)
class StaleFact:
    """One profile fact older than the profile's `stale_after_months`, or never stamped, with its age, for the line
    that names it (stale facts are shown, never blocking)."""

    where: str
    verified: str
    months_old: int | None  # None when unstamped: its age is unknown

    @property
    def text(self) -> str:
        if self.months_old is None:
            return f"{self.where}: unstamped (never verified)"
        return f"{self.where}: verified {self.verified} ({_ago(self.months_old)})"


@dataclass(frozen=True)
class Profile:
    """A provider profile (assets/profiles/<id>.toml) as typed facts: actions, storage tiers, residuals, prices,
    control and spot terms. Code asks it what a verb destroys or what keeps billing instead of branching on the
    provider's name."""

    id: str
    display_name: str
    kind: str
    stale_after_months: int
    actions: tuple[Action, ...]
    storage: tuple[StorageTier, ...]
    residuals: tuple[Residual, ...]
    surface_to_user: tuple[SurfaceItem, ...]
    pricing: Pricing
    raw: dict[str, Any]
    gpu_sampling: bool = True  # false where there is no real GPU to ask (the simulated box)
    family: str | None = None
    control: Control = field(default_factory=lambda: Control("none"))
    danger_clocks: tuple[DangerClock, ...] = ()
    spot: Spot | None = None
    where: str = ""

    def action(self, action_id: str) -> Action | None:
        return next((a for a in self.actions if a.id == action_id), None)

    def tier(self, name: str) -> StorageTier | None:
        return next((s for s in self.storage if s.name == name), None)

    def teardown_action(self) -> Action | None:
        """The action behind the `down` verb (usually `terminate`), None where there is nothing to end."""
        down = self.raw.get("verbs", {}).get("down", {})
        return self.action(str(down.get("action", "terminate")))

    def facts(self) -> Iterator[FactRef]:
        """Every stamped fact, money and teardown facts flagged, so staleness is judged over all of them."""
        for tier in self.storage:
            yield FactRef(f"storage[{tier.name}]", tier.verified, True)
        for action in self.actions:
            yield FactRef(f"actions[{action.id}]", action.verified, True)
        for residual in self.residuals:
            yield FactRef(f"residuals[{residual.id or residual.what}]", residual.verified, True)
        for clock in self.danger_clocks:
            yield FactRef(f"danger_clocks[{clock.id}]", clock.verified, True)
        yield FactRef("pricing", self.pricing.verified, True)
        for rate in self.pricing.storage_per_gb_month:
            yield FactRef(f"pricing.storage_per_gb_month[{rate.tier}]", rate.verified, True)
        for index, item in enumerate(self.surface_to_user):
            yield FactRef(f"surface_to_user[{index}]", item.verified, item.kind == "danger")
        if self.control.api is not None:
            yield FactRef("control.api", self.control.api.verified, False)
        if self.spot is not None:
            yield FactRef("spot", self.spot.verified, False)

    def oldest_verified(self) -> str:
        """The oldest stamp among money and teardown facts; 'unstamped' if any of them has none."""
        stamps = [f.verified for f in self.facts() if f.money]
        if not stamps or UNSTAMPED in stamps:
            return UNSTAMPED
        return min(stamps)

    def is_stale(self, now: date) -> bool:
        """Facts older than `stale_after_months` (or unstamped) are shown with a stale badge, never blocking."""
        return months_old(self.oldest_verified(), now) > self.stale_after_months

    def durable_survives(self) -> bool | None:
        """Whether the checkpoint tier outlives the full teardown (None when the profile does not say)."""
        tier = self.tier(str(self.raw.get("checkpoints", {}).get("durable_tier", "")))
        return tier.survives_destroy if tier is not None else None

    def keeps_billing_text(self, action: Action) -> list[str]:
        """What still bills after `action`: surviving storage that bills while stopped, then the residuals.
        A stop keeps every tier it does not destroy (RunPod's volume, vast.ai's disk); a destroy keeps
        only what survives destroy (network volumes) and the residuals the profile lists."""
        destroyed = set(action.destroys)
        kept: list[str] = []
        for tier in self.storage:
            survives = tier.survives_destroy if action.full_meter_stop or not action.reversible else tier.survives_stop
            if tier.name not in destroyed and survives and tier.billed_while_stopped:
                note = f" ({tier.price_note})" if tier.price_note else ""
                kept.append(f"{tier.name} at {tier.path}{note}")
        if action.full_meter_stop or not action.reversible:
            kept.extend(f"{r.what} (ends with: {r.ended_by})" for r in self.residuals)
        return kept

    def destroys_text(self, action: Action) -> list[str]:
        """Each destroyed tier with its path, so the modal names real places, not tier ids."""
        paths = {tier.name: tier.path for tier in self.storage}
        whats = {r.id: r.what for r in self.residuals if r.id}
        return [f"{name} ({paths[name]})" if name in paths else whats.get(name, name) for name in action.destroys]


# -- age and staleness ------------------------------------------------------------------------------------


def months_old(stamp: str, now: date) -> int:
    """Whole calendar months between a "YYYY-MM" stamp and `now`; unstamped counts as ancient."""
    if stamp == UNSTAMPED:
        return 10_000
    year, month = (int(part) for part in stamp.split("-"))
    return (now.year - year) * 12 + (now.month - month)


def stale_facts(profile: Profile, today: date) -> list[StaleFact]:
    """Every fact older than the profile's `stale_after_months`, and every unstamped one (age unknown)."""
    stale = []
    for fact in profile.facts():
        if fact.verified == UNSTAMPED:
            stale.append(StaleFact(fact.where, fact.verified, None))
        elif (age := months_old(fact.verified, today)) > profile.stale_after_months:
            stale.append(StaleFact(fact.where, fact.verified, age))
    return stale


def profile_age_text(profile: Profile, today: date) -> str:
    """The stamp line beside money facts in the UI and report: oldest month, its age, unstamped count, badge."""
    stamps = [f.verified for f in profile.facts() if f.money]
    dated = sorted(s for s in stamps if s != UNSTAMPED)
    unstamped = len(stamps) - len(dated)
    if dated:
        text = f"verified {dated[0]} ({_ago(months_old(dated[0], today))})"
        if unstamped:
            text += f", {unstamped} fact{'s' if unstamped > 1 else ''} unstamped"
    else:
        text = "unstamped (never verified)"
    return f"{text} — {STALE_HINT}" if profile.is_stale(today) else text


def _ago(months: int) -> str:
    if months < 0:
        return "dated after today"
    if months == 0:
        return "this month"
    return f"{months} month{'s' if months > 1 else ''} ago"


def parse_duration(text: str) -> timedelta | None:
    """ISO-8601 duration with weeks, days, hours, minutes, seconds; "" means no fixed delay."""
    match = _DURATION.match(text) if text not in ("", "P", "PT") and not text.endswith("T") else None
    if match is None:
        return None
    weeks, days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
