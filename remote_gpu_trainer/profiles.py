"""Provider profiles: billing and teardown semantics as data (assets/profiles/<id>.toml, providers.md §11).

Code asks a profile what an action destroys, what keeps billing, and how old those facts are; it never
branches on the provider's name for any of that. Loading is strict: a misspelt key in a profile would
silently drop a money or teardown fact, so unknown keys, missing required keys, bad enum values and bad
month stamps are one-line errors that name the file and the dotted key.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from remote_gpu_trainer.errors import ConfigError

SCHEMA = "remote-gpu-trainer/PROFILE/v1"
UNSTAMPED = "unstamped"
MANUAL = "manual"  # an action's endpoint when the user performs it in the provider's console
STALE_HINT = "STALE, re-check the provider's pricing page"
HOURS_PER_MONTH = 730.0  # 8760 h / 12: how providers turn a per-month storage price into an hourly one

KINDS = ("ssh-rental", "cloud-api", "slurm", "kubernetes", "notebook", "workstation", "ssh")
CONTROL_MODES = ("api", "cli", "console", "none")
AUTH_SCHEMES = ("bearer", "basic-user", "raw-header")
DETACH_PRIMITIVES = ("tmux", "setsid", "nohup", "onstart", "sbatch", "k8s-job")
FACT_SOURCES = ("upstream", "provider-docs", "provider-cli", "secondary", "field")
PRICE_SOURCES = ("api", "profile", "user", "none")  # [pricing] source: where the live hourly price comes from
ENDPOINT_NAMES = ("list", "get", "create", "stop", "start", "terminate", "offers", "logs")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
VERBS = ("up", "push", "run", "watch", "pull", "down")
VERB_GATES = ("full", "confirm", "none")
SURFACE_KINDS = ("danger", "convenience")
BILLING_UNITS = ("second", "minute", "hour")
RATE_APPLIES = ("stopped", "always")
SIZE_UNITS = {"GB": 1_000_000_000, "GiB": 1 << 30}

_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_PROFILE_ID = re.compile(r"^[a-z][a-z0-9-]*$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_PRICE_UNIT = re.compile(r"^[A-Z]{3}(-cents)?/h$")
_GONE_WHEN = re.compile(r"^(http:\d{3}|absent:list|status:[A-Za-z_-]+|null:[A-Za-z_.]+)$")
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
        """Irreversible, or destroys a storage tier: the full gate applies (gate-and-manifests.md §7).

        Any destroyed tier counts as holding run data, because the profile cannot know where a job wrote.
        """
        return not self.reversible or bool(self.destroys)

    @property
    def manual(self) -> bool:
        """True when rgt cannot perform it: the user clicks it in the console, so the result is user-attested."""
        return self.endpoint is None or self.endpoint == MANUAL


@dataclass(frozen=True)
class StorageTier(_RowCompat):
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

    def per_hour(self, size_bytes: int) -> float:
        """Hourly cost of `size_bytes` on this tier, after the free allowance."""
        billable = max(0.0, size_bytes / SIZE_UNITS[self.unit] - self.free_gb)
        return billable * self.rate / HOURS_PER_MONTH


@dataclass(frozen=True)
class Pricing:
    currency: str
    compute_per_hour: float | None
    storage_per_hour: float | None
    source: str  # where the live price comes from: api, profile, user or none (not a fact's provenance)
    verified: str = UNSTAMPED
    billed_per: str | None = None
    note: str | None = None
    conflict: str | None = None
    storage_per_gb_month: tuple[StorageRate, ...] = ()

    def storage_rate(self, tier: str) -> StorageRate | None:
        return next((r for r in self.storage_per_gb_month if r.tier == tier), None)


@dataclass(frozen=True)
class Endpoint:
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
        """Profile default < env var named in base_url_env < `api_base` on the instance (providers.md §0)."""
        from_env = environ.get(self.base_url_env, "").strip() if self.base_url_env else ""
        return (instance_api_base or from_env or self.base_url).rstrip("/")


@dataclass(frozen=True)
class Control:
    mode: str
    console_url: str | None = None
    api: ApiControl | None = None
    cli: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spot:
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


# -- loading ----------------------------------------------------------------------------------------------


def _profiles_dir() -> Any:
    return resources.files("remote_gpu_trainer").joinpath("assets/profiles")


def profile_ids() -> list[str]:
    """The ids of every shipped profile, sorted."""
    return sorted(entry.name[:-5] for entry in _profiles_dir().iterdir() if entry.name.endswith(".toml"))


def list_profiles() -> list[Profile]:
    """Every shipped profile, loaded strictly: one bad file fails loudly rather than hiding a provider."""
    return [load_profile(profile_id) for profile_id in profile_ids()]


def load_profile(profile: str | Path) -> Profile:
    """A shipped profile by id (`"runpod"`), or any profile file by Path; its `id` must match the file name."""
    if isinstance(profile, Path):
        where, stem = str(profile), profile.stem
        try:
            text = profile.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read profile: {exc.strerror or exc}") from None
    else:
        where, stem = f"assets/profiles/{profile}.toml", profile
        if not _PROFILE_ID.match(profile):
            raise ConfigError(f"no billing profile for provider {profile!r} (assets/profiles/)")
        try:
            text = _profiles_dir().joinpath(f"{profile}.toml").read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"no billing profile for provider {profile!r} (assets/profiles/)") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: malformed TOML: {exc}") from None
    loaded = parse_profile(data, where)
    if loaded.id != stem:
        raise ConfigError(f"{where}: id: {loaded.id!r} does not match the file name {stem!r}")
    return loaded


class _Table:
    """Typed reads from one TOML table; each read marks its key known, `done()` rejects the rest."""

    def __init__(self, where: str, path: str, data: Any) -> None:
        self.where, self.path = where, path
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: {path or 'top level'}: must be a table")
        self.data: dict[str, Any] = data
        self.known: set[str] = set()

    def fail(self, key: str, problem: str) -> ConfigError:
        dotted = f"{self.path}.{key}" if self.path else key
        return ConfigError(f"{self.where}: {dotted}: {problem}")

    def _value(self, key: str, required: bool) -> Any:
        self.known.add(key)
        if key not in self.data and required:
            raise self.fail(key, "missing required key")
        return self.data.get(key)

    def req_str(self, key: str, choices: tuple[str, ...] = ()) -> str:
        value = self.opt_str(key, choices, required=True)
        assert value is not None
        return value

    def opt_str(self, key: str, choices: tuple[str, ...] = (), required: bool = False) -> str | None:
        value = self._value(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, not {type(value).__name__}")
        if choices and value not in choices:
            raise self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def req_bool(self, key: str) -> bool:
        return bool(self.opt_bool(key, False, required=True))

    def opt_bool(self, key: str, default: bool, required: bool = False) -> bool:
        value = self._value(key, required)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def opt_num(self, key: str, required: bool = False) -> float | None:
        value = self._value(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise self.fail(key, "must be a non-negative number")
        return float(value)

    def opt_int(self, key: str) -> int | None:
        value = self._value(key, False)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise self.fail(key, "must be a non-negative integer")
        return value

    def str_list(self, key: str, required: bool = False, choices: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self._value(key, required)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.fail(key, "must be a list of strings")
        bad = [item for item in value if choices and item not in choices]
        if bad:
            raise self.fail(key, f"{bad[0]!r} is not one of {', '.join(choices)}")
        return tuple(value)

    def table(self, key: str, required: bool = False) -> _Table | None:
        value = self._value(key, required)
        return None if value is None else _Table(self.where, self._sub(key), value)

    def rows(self, key: str) -> list[_Table]:
        """An array of tables (`storage = [{...}]` or `[[storage]]`), each addressed as key[index]."""
        value = self._value(key, False)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(key, "must be an array of tables")
        return [_Table(self.where, f"{self._sub(key)}[{index}]", row) for index, row in enumerate(value)]

    def month(self, key: str = "verified") -> str:
        value = self.req_str(key)
        if value != UNSTAMPED and not _MONTH.match(value):
            raise self.fail(key, f"{value!r} must be \"YYYY-MM\" or \"unstamped\"")
        return value

    def provenance(self) -> tuple[str, str | None, str | None]:
        """The stamp every fact-bearing entry carries: verified month, source, conflict."""
        return self.month(), self.opt_str("source", FACT_SOURCES), self.opt_str("conflict")

    def rest_str(self) -> dict[str, str]:
        """All remaining keys as string templates (the free-form `[control.cli]` table)."""
        return {key: self.req_str(key) for key in list(self.data) if key not in self.known}

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.known)
        if unknown:
            raise self.fail(unknown[0], "unknown key")

    def _sub(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key


def parse_profile(data: dict[str, Any], where: str) -> Profile:
    """Build a Profile from parsed TOML, checking every table against §11; errors name `where` and the key."""
    top = _Table(where, "", data)
    schema = top.req_str("schema")
    if schema != SCHEMA:
        raise top.fail("schema", f"must be {SCHEMA!r}")
    profile_id = top.req_str("id")
    if not _PROFILE_ID.match(profile_id):
        raise top.fail("id", f"{profile_id!r} must be lower-case letters, digits and dashes")
    display_name, kind = top.req_str("display_name"), top.req_str("kind", KINDS)
    family = top.opt_str("family")
    stale_after = top.opt_int("stale_after_months")
    storage = tuple(_storage(row) for row in top.rows("storage"))
    actions = tuple(_action(row) for row in top.rows("actions"))
    residuals = tuple(_residual(row) for row in top.rows("residuals"))
    clocks = tuple(_clock(row) for row in top.rows("danger_clocks"))
    surface = tuple(_surface(row) for row in top.rows("surface_to_user"))
    control = _control(_must(top.table("control", required=True)))
    pricing_table = top.table("pricing")
    pricing = _pricing(pricing_table) if pricing_table else Pricing("USD", None, None, "none")
    spot_table = top.table("spot")
    spot = _spot(spot_table) if spot_table else None
    _other_tables(top)
    gpu_sampling = top.opt_bool("gpu_sampling", True)
    top.done()
    profile = Profile(
        id=profile_id, display_name=display_name, kind=kind,
        stale_after_months=6 if stale_after is None else stale_after, actions=actions, storage=storage,
        residuals=residuals, surface_to_user=surface, pricing=pricing, raw=data, gpu_sampling=gpu_sampling,
        family=family, control=control, danger_clocks=clocks, spot=spot, where=where,
    )
    _cross_check(profile, top)
    return profile


def _must(table: _Table | None) -> _Table:
    assert table is not None  # required=True already raised
    return table


def _storage(row: _Table) -> StorageTier:
    tier = StorageTier(
        name=row.req_str("name"), path=row.req_str("path"), survives_stop=row.req_bool("survives_stop"),
        survives_destroy=row.req_bool("survives_destroy"), billed_while_stopped=row.req_bool("billed_while_stopped"),
        verified=row.month(), scope=row.opt_str("scope"), attach=row.opt_str("attach"),
        inode_cap=row.opt_int("inode_cap"), grow_only=row.opt_bool("grow_only", False),
        price_note=row.opt_str("price_note"), source=row.opt_str("source", FACT_SOURCES),
        conflict=row.opt_str("conflict"),
    )
    row.done()
    return tier


def _action(row: _Table) -> Action:
    row.known.add("stops_storage_billing")
    billing = row.data.get("stops_storage_billing")
    if billing is None:
        raise row.fail("stops_storage_billing", "missing required key")
    if not isinstance(billing, bool) and billing != "partial":
        raise row.fail("stops_storage_billing", 'must be true, false or "partial"')
    verified, source, conflict = row.provenance()
    action = Action(
        id=row.req_str("id"), label=row.req_str("label"), stops_compute=row.req_bool("stops_compute"),
        stops_storage_billing=billing, destroys=row.str_list("destroys", required=True),
        reversible=row.req_bool("reversible"), caveats=row.str_list("caveats"), verified=verified,
        endpoint=row.opt_str("endpoint"), full_meter_stop=row.opt_bool("full_meter_stop", False),
        requires=row.str_list("requires"), after=row.opt_str("after"), source=source, conflict=conflict,
    )
    row.done()
    return action


def _residual(row: _Table) -> Residual:
    verified, source, conflict = row.provenance()
    residual = Residual(
        what=row.req_str("what"), ended_by=row.req_str("ended_by"), verified=verified, id=row.opt_str("id"),
        action=row.opt_str("action"), price_note=row.opt_str("price_note"), source=source, conflict=conflict,
    )
    row.done()
    return residual


def _clock(row: _Table) -> DangerClock:
    verified, source, conflict = row.provenance()
    after = row.opt_str("after") or ""
    if after and parse_duration(after) is None:
        raise row.fail("after", f"{after!r} is not an ISO-8601 duration in weeks/days/hours (e.g. P15D, PT30S)")
    clock = DangerClock(
        id=row.req_str("id"), trigger=row.req_str("trigger"), effect=row.req_str("effect"), verified=verified,
        after=after, source=source, conflict=conflict,
    )
    row.done()
    return clock


def _surface(row: _Table) -> SurfaceItem:
    verified, source, conflict = row.provenance()
    item = SurfaceItem(kind=row.req_str("kind", SURFACE_KINDS), text=row.req_str("text"), verified=verified,
                       source=source, conflict=conflict)
    row.done()
    return item


def _pricing(table: _Table) -> Pricing:
    currency = table.req_str("currency")
    if not _CURRENCY.match(currency):
        raise table.fail("currency", f"{currency!r} must be a three-letter code such as USD or CNY")
    rates = tuple(_rate(row) for row in table.rows("storage_per_gb_month"))
    pricing = Pricing(
        currency=currency, compute_per_hour=table.opt_num("compute_per_hour"),
        storage_per_hour=table.opt_num("storage_per_hour"), source=table.req_str("source", PRICE_SOURCES),
        verified=table.month(), billed_per=table.opt_str("billed_per", BILLING_UNITS), note=table.opt_str("note"),
        conflict=table.opt_str("conflict"), storage_per_gb_month=rates,
    )
    table.done()
    return pricing


def _rate(row: _Table) -> StorageRate:
    verified, source, conflict = row.provenance()
    rate = StorageRate(
        tier=row.req_str("tier"), rate=_must_num(row, "rate"), applies=row.req_str("applies", RATE_APPLIES),
        verified=verified, unit=row.opt_str("unit", tuple(SIZE_UNITS)) or "GB", free_gb=row.opt_num("free_gb") or 0.0,
        note=row.opt_str("note"), source=source, conflict=conflict,
    )
    row.done()
    return rate


def _must_num(table: _Table, key: str) -> float:
    value = table.opt_num(key, required=True)
    assert value is not None
    return value


def _control(table: _Table) -> Control:
    mode = table.req_str("mode", CONTROL_MODES)
    console_url = table.opt_str("console_url")
    api_table = table.table("api", required=mode == "api")
    api = _api(api_table) if api_table else None
    cli_table = table.table("cli")
    cli = cli_table.rest_str() if cli_table else {}
    table.done()
    return Control(mode=mode, console_url=console_url, api=api, cli=cli)


def _api(table: _Table) -> ApiControl:
    verified, source, conflict = table.provenance()
    price_unit = table.opt_str("price_unit")
    if price_unit is not None and not _PRICE_UNIT.match(price_unit):
        raise table.fail("price_unit", f"{price_unit!r} must look like USD/h or USD-cents/h")
    gone_when = table.str_list("gone_when")
    bad = [g for g in gone_when if not _GONE_WHEN.match(g)]
    if bad:
        raise table.fail("gone_when", f"{bad[0]!r} is not http:<code>, absent:list, status:<word> or null:<field>")
    endpoints_table = table.table("endpoints")
    api = ApiControl(
        base_url=_url(table, "base_url"), auth_scheme=table.req_str("auth_scheme", AUTH_SCHEMES),
        auth_env=table.str_list("auth_env", required=True), verified=verified,
        base_url_env=table.opt_str("base_url_env"),
        auth_files=tuple(_auth_file(text) for text in table.str_list("auth_files")),
        rate_limit_per_s=table.opt_num("rate_limit_per_s"), price_field=table.opt_str("price_field"),
        price_unit=price_unit, endpoints=_endpoints(endpoints_table) if endpoints_table else {},
        gone_when=gone_when, source=source, conflict=conflict,
    )
    table.done()
    return api


def _url(table: _Table, key: str) -> str:
    url = table.req_str(key)
    if not url.startswith("https://") or "?" in url:
        raise table.fail(key, f"{url!r} must be an https:// URL without a query string")
    return url.rstrip("/")


def _auth_file(text: str) -> AuthFile:
    path, _, key = text.partition("#")
    return AuthFile(path=path, key=key or None)


def _endpoints(table: _Table) -> dict[str, Endpoint]:
    endpoints = {}
    for name in list(table.data):
        if name not in ENDPOINT_NAMES:
            table.known.add(name)
            raise table.fail(name, f"unknown endpoint name (one of {', '.join(ENDPOINT_NAMES)})")
        entry = _must(table.table(name))
        path = entry.req_str("path")
        if not path.startswith("/"):
            raise entry.fail("path", f"{path!r} must start with /")
        endpoints[name] = Endpoint(method=entry.req_str("method", HTTP_METHODS), path=path, body=entry.opt_str("body"))
        entry.done()
    table.done()
    return endpoints


def _spot(table: _Table) -> Spot:
    verified, source, conflict = table.provenance()
    spot = Spot(
        available=table.req_bool("available"), verified=verified, create_flag=table.opt_str("create_flag"),
        grace_s=table.opt_num("grace_s"), signal=table.opt_str("signal"), detect=table.str_list("detect"),
        source=source, conflict=conflict,
    )
    table.done()
    return spot


# Tables kept only in `raw` (read there by the services): key -> (type, required, allowed values).
_KeySpec = dict[str, tuple[str, bool, tuple[str, ...]]]
_PLAIN_TABLES: dict[str, _KeySpec] = {
    "checkpoints": {"durable_tier": ("str", True, ()), "scratch_tier": ("str", False, ())},
    "detach": {"primitive": ("str", True, DETACH_PRIMITIVES), "install": ("str", False, ()),
               "fallback": ("str", False, DETACH_PRIMITIVES), "survives_restart": ("bool", False, ())},
    "network": {"proxy_hook": ("str", False, ()), "unset_proxy_after": ("bool", False, ()),
                "free_egress": ("bool", False, ())},
    "env": {"contract": ("str", False, ()), "interpreter": ("str", False, ()),
            "forbid_conda_create": ("bool", False, ()), "strip_framework_pins": ("bool", False, ())},
    "ssh": {"user": ("str", True, ()), "port_changes_on_restart": ("bool", False, ()),
            "host_key_changes_on_recreate": ("bool", False, ())},
}
_FLAVOR: _KeySpec = {"name": ("str", True, ()), "host_template": ("str", True, ()), "port_source": ("str", False, ()),
           "file_transfer": ("bool", False, ())}
_VERB: _KeySpec = {"via": ("str", True, ()), "action": ("str", True, ()), "gate": ("str", False, VERB_GATES)}


def _check_plain(table: _Table, spec: _KeySpec) -> None:
    for key, (kind, required, choices) in spec.items():
        if kind == "bool":
            table.opt_bool(key, False, required=required)
        else:
            table.opt_str(key, choices, required=required)


def _other_tables(top: _Table) -> None:
    """Check ssh, checkpoints, detach, network, env and verbs; the services read them through `raw`."""
    for name, spec in _PLAIN_TABLES.items():
        table = top.table(name)
        if table is None:
            continue
        _check_plain(table, spec)
        for flavor in table.rows("flavors") if name == "ssh" else []:
            _check_plain(flavor, _FLAVOR)
            flavor.done()
        table.done()
    verbs = top.table("verbs")
    if verbs:
        for verb in VERBS:
            entry = _must(verbs.table(verb, required=True))
            _check_plain(entry, _VERB)
            entry.done()
        verbs.done()


def _cross_check(profile: Profile, top: _Table) -> None:
    """References between tables resolve, ids are unique, and the down verb gates what needs the gate."""
    tiers = [tier.name for tier in profile.storage]
    action_ids = [action.id for action in profile.actions]
    residual_ids = [r.id for r in profile.residuals if r.id]
    for label, ids in (("storage", tiers), ("actions", action_ids), ("residuals", residual_ids),
                       ("danger_clocks", [c.id for c in profile.danger_clocks])):
        duplicate = next((i for i in ids if ids.count(i) > 1), None)
        if duplicate is not None:
            raise top.fail(label, f"duplicate id {duplicate!r}")
    api = profile.control.api
    for index, action in enumerate(profile.actions):
        where = f"actions[{index}]"
        for name in action.destroys:
            if name not in tiers and name not in residual_ids:
                raise top.fail(f"{where}.destroys", f"{name!r} names no storage tier or residual id")
        for name in action.requires:
            if name not in action_ids:
                raise top.fail(f"{where}.requires", f"{name!r} names no action")
        if profile.control.mode == "api" and api and not action.manual and action.endpoint not in api.endpoints:
            raise top.fail(f"{where}.endpoint", f"{action.endpoint!r} names no [control.api.endpoints] entry")
    for index, residual in enumerate(profile.residuals):
        if residual.action is not None and residual.action not in action_ids:
            raise top.fail(f"residuals[{index}].action", f"{residual.action!r} names no action")
    for index, rate in enumerate(profile.pricing.storage_per_gb_month):
        if rate.tier not in tiers and rate.tier not in residual_ids:
            raise top.fail(f"pricing.storage_per_gb_month[{index}].tier",
                           f"{rate.tier!r} names no storage tier or residual id")
    for key in ("durable_tier", "scratch_tier"):
        name = profile.raw.get("checkpoints", {}).get(key)
        if name is not None and name not in tiers:
            raise top.fail(f"checkpoints.{key}", f"{name!r} names no storage tier")
    _check_down_verb(profile, top)


def _check_down_verb(profile: Profile, top: _Table) -> None:
    down = profile.raw.get("verbs", {}).get("down")
    if down is None or down["action"] == "none":
        return
    action = profile.action(down["action"])
    if action is None:
        raise top.fail("verbs.down.action", f"{down['action']!r} names no action")
    if action.needs_gate and down.get("gate") != "full":
        raise top.fail("verbs.down.gate", f"action {action.id!r} needs the full gate: set gate = \"full\"")
