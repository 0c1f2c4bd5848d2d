"""Provider profiles: billing and teardown semantics as data (assets/profiles/<id>.toml, docs/providers.md §11),
read and checked here into the typed facts of profile_facts.py (re-exported below, so callers import one module).

Code asks a profile what an action destroys, what keeps billing, and how old those facts are; it never
branches on the provider's name for any of that. Loading is strict: a misspelt key in a profile would
silently drop a money or teardown fact, so unknown keys, missing required keys, bad enum values and bad
month stamps are errors that name the file and the dotted key, read with the typed table reader
(toml_table.py) so every problem of a file is collected, each with its line (a row of an inline array,
`storage[0].name`, by the row's own line).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.profile_facts import (
    HOURS_PER_MONTH,
    MANUAL,
    SIZE_UNITS,
    STALE_HINT,
    UNSTAMPED,
    Action,
    ApiControl,
    AuthFile,
    Control,
    DangerClock,
    Endpoint,
    FactRef,
    Pricing,
    Profile,
    Residual,
    Spot,
    StaleFact,
    StorageRate,
    StorageTier,
    SurfaceItem,
    months_old,
    parse_duration,
    profile_age_text,
    stale_facts,
)
from remote_gpu_trainer.shipped_toml import ASSETS
from remote_gpu_trainer.toml_table import Field, Problems, SourceLines, Table, parse_toml, read_text

__all__ = [  # the facts are re-exported: callers import profiles, whichever half they need
    "HOURS_PER_MONTH", "MANUAL", "SIZE_UNITS", "STALE_HINT", "UNSTAMPED", "Action", "ApiControl", "AuthFile",
    "Control", "DangerClock", "Endpoint", "FactRef", "Pricing", "Profile", "Residual", "Spot", "StaleFact",
    "StorageRate", "StorageTier", "SurfaceItem", "list_profiles", "load_profile", "months_old", "parse_duration",
    "parse_profile", "profile_age_text", "profile_ids", "stale_facts",
]

SCHEMA = "remote-gpu-trainer/PROFILE/v1"
KINDS = ("ssh-rental", "cloud-api", "slurm", "kubernetes", "notebook", "workstation", "ssh")
CONTROL_MODES = ("api", "cli", "console", "none")
AUTH_SCHEMES = ("bearer", "basic-user", "raw-header")
DETACH_PRIMITIVES = ("tmux", "setsid", "nohup", "onstart", "sbatch", "k8s-job")
FACT_SOURCES = ("upstream", "provider-docs", "provider-cli", "secondary", "field")
PRICE_SOURCES = ("api", "profile", "user", "none")  # [pricing] source: where the live hourly price comes from
ENDPOINT_NAMES = ("list", "get", "create", "stop", "start", "terminate", "offers", "logs", "public_ips", "snapshots",
                  "ssh", "balance", "network_volume")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
VERBS = ("up", "push", "run", "watch", "pull", "down")
VERB_GATES = ("full", "confirm", "none")
SURFACE_KINDS = ("danger", "convenience")
BILLING_UNITS = ("second", "minute", "hour")
RATE_APPLIES = ("stopped", "always")

_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_PROFILE_ID = re.compile(r"^[a-z][a-z0-9-]*$")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_PRICE_UNIT = re.compile(r"^[A-Z]{3}(-cents)?/h$")
_GONE_WHEN = re.compile(r"^(http:\d{3}|absent:list|status:[A-Za-z_-]+|null:[A-Za-z_.]+)$")


# -- loading ----------------------------------------------------------------------------------------------


def _profiles_dir() -> Any:
    return ASSETS / "profiles"


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
        text = read_text(profile, "profile")
    else:
        where, stem = f"assets/profiles/{profile}.toml", profile
        if not _PROFILE_ID.match(profile):
            raise ConfigError(f"no billing profile for provider {profile!r} (assets/profiles/)")
        try:
            text = _profiles_dir().joinpath(f"{profile}.toml").read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"no billing profile for provider {profile!r} (assets/profiles/)") from None
    return parse_profile(parse_toml(where, text), where, expected_id=stem, lines=SourceLines(text))


def parse_profile(data: dict[str, Any], where: str, expected_id: str | None = None,
                  lines: SourceLines | None = None) -> Profile:
    """Build a Profile from parsed TOML, checking every table against §11; errors name `where` and the key.

    Every problem is collected; the references between tables are checked only when each table read cleanly
    (a reference to a row that failed to read would only add noise)."""
    problems = Problems()
    top = Table(problems, where, (), data, lines)
    profile = _profile(top, data)
    if expected_id is not None and profile.id and profile.id != expected_id:
        top.problem("id", f"{profile.id!r} does not match the file name {expected_id!r}")
    if not problems:
        _cross_check(profile, top)
    problems.raise_if_any()
    return profile


def _profile(top: Table, data: dict[str, Any]) -> Profile:
    if top.text("schema", required=True) not in (None, SCHEMA):
        top.problem("schema", f"must be {SCHEMA!r}")
    profile_id = top.req_text("id")
    if profile_id and not _PROFILE_ID.match(profile_id):
        top.problem("id", f"{profile_id!r} must be lower-case letters, digits and dashes")
    display_name, kind = top.req_text("display_name"), top.req_text("kind", KINDS)
    family = top.text("family")
    stale_after = top.whole("stale_after_months")
    storage = tuple(_storage(row) for row in top.rows("storage"))
    actions = tuple(_action(row) for row in top.rows("actions"))
    residuals = tuple(_residual(row) for row in top.rows("residuals"))
    clocks = tuple(_clock(row) for row in top.rows("danger_clocks"))
    surface = tuple(_surface(row) for row in top.rows("surface_to_user"))
    control = _control(_sub(top, "control", required=True))
    pricing_table = top.table("pricing")
    pricing = _pricing(pricing_table) if pricing_table else Pricing("USD", None, None, "none")
    spot_table = top.table("spot")
    spot = _spot(spot_table) if spot_table else None
    _other_tables(top)
    gpu_sampling = top.flag("gpu_sampling", True)
    top.done()
    return Profile(
        id=profile_id, display_name=display_name, kind=kind,
        stale_after_months=6 if stale_after is None else stale_after, actions=actions, storage=storage,
        residuals=residuals, surface_to_user=surface, pricing=pricing, raw=data, gpu_sampling=gpu_sampling,
        family=family, control=control, danger_clocks=clocks, spot=spot, where=top.where,
    )


def _sub(table: Table, key: str, required: bool = False) -> Table:
    """A sub-table, or an empty stand-in when it is missing or wrong (the problem is recorded)."""
    return table.table(key, required) or Table(table.problems, table.where, (*table.keys, key), {}, table.lines)


def _month(table: Table, key: str = "verified") -> str:
    value = table.req_text(key)
    if value and value != UNSTAMPED and not _MONTH.match(value):
        table.problem(key, f"{value!r} must be \"YYYY-MM\" or \"unstamped\"")
    return value


def _provenance(table: Table) -> tuple[str, str | None, str | None]:
    """The stamp every fact-bearing entry carries: verified month, source, conflict."""
    return _month(table), table.text("source", choices=FACT_SOURCES), table.text("conflict")


def _storage(row: Table) -> StorageTier:
    tier = StorageTier(
        name=row.req_text("name"), path=row.req_text("path"), survives_stop=row.flag("survives_stop", required=True),
        survives_destroy=row.flag("survives_destroy", required=True),
        billed_while_stopped=row.flag("billed_while_stopped", required=True),
        verified=_month(row), scope=row.text("scope"), attach=row.text("attach"),
        inode_cap=row.whole("inode_cap"), grow_only=row.flag("grow_only"),
        price_note=row.text("price_note"), source=row.text("source", choices=FACT_SOURCES),
        conflict=row.text("conflict"),
    )
    row.done()
    return tier


def _action(row: Table) -> Action:
    billing = row.value("stops_storage_billing", required=True)
    if billing is not None and not isinstance(billing, bool) and billing != "partial":
        row.problem("stops_storage_billing", 'must be true, false or "partial"')
    verified, source, conflict = _provenance(row)
    action = Action(
        id=row.req_text("id"), label=row.req_text("label"), stops_compute=row.flag("stops_compute", required=True),
        stops_storage_billing=billing if isinstance(billing, bool) or billing == "partial" else False,
        destroys=row.strings("destroys", required=True) or (),
        reversible=row.flag("reversible", required=True), caveats=row.strings("caveats") or (), verified=verified,
        endpoint=row.text("endpoint"), full_meter_stop=row.flag("full_meter_stop"),
        requires=row.strings("requires") or (), after=row.text("after"), source=source, conflict=conflict,
    )
    row.done()
    return action


def _residual(row: Table) -> Residual:
    verified, source, conflict = _provenance(row)
    residual = Residual(
        what=row.req_text("what"), ended_by=row.req_text("ended_by"), verified=verified, id=row.text("id"),
        action=row.text("action"), price_note=row.text("price_note"), source=source, conflict=conflict,
    )
    row.done()
    return residual


def _clock(row: Table) -> DangerClock:
    verified, source, conflict = _provenance(row)
    after = row.text("after") or ""
    if after and parse_duration(after) is None:
        row.problem("after", f"{after!r} is not an ISO-8601 duration in weeks/days/hours (e.g. P15D, PT30S)")
    clock = DangerClock(
        id=row.req_text("id"), trigger=row.req_text("trigger"), effect=row.req_text("effect"), verified=verified,
        after=after, source=source, conflict=conflict,
    )
    row.done()
    return clock


def _surface(row: Table) -> SurfaceItem:
    verified, source, conflict = _provenance(row)
    item = SurfaceItem(kind=row.req_text("kind", SURFACE_KINDS), text=row.req_text("text"), verified=verified,
                       source=source, conflict=conflict)
    row.done()
    return item


def _pricing(table: Table) -> Pricing:
    currency = table.req_text("currency")
    if currency and not _CURRENCY.match(currency):
        table.problem("currency", f"{currency!r} must be a three-letter code such as USD or CNY")
    rates = tuple(_rate(row) for row in table.rows("storage_per_gb_month"))
    pricing = Pricing(
        currency=currency, compute_per_hour=table.number("compute_per_hour"),
        storage_per_hour=table.number("storage_per_hour"), source=table.req_text("source", PRICE_SOURCES),
        verified=_month(table), billed_per=table.text("billed_per", choices=BILLING_UNITS), note=table.text("note"),
        conflict=table.text("conflict"), storage_per_gb_month=rates,
        hours_per_month=table.number("hours_per_month", HOURS_PER_MONTH, above=True) or HOURS_PER_MONTH,
    )
    table.done()
    return pricing


def _rate(row: Table) -> StorageRate:
    verified, source, conflict = _provenance(row)
    rate = StorageRate(
        tier=row.req_text("tier"), rate=row.number("rate", 0.0, required=True) or 0.0,
        applies=row.req_text("applies", RATE_APPLIES), verified=verified,
        unit=row.text("unit", choices=tuple(SIZE_UNITS)) or "GB", free_gb=row.number("free_gb") or 0.0,
        note=row.text("note"), source=source, conflict=conflict,
    )
    row.done()
    return rate


def _control(table: Table) -> Control:
    mode = table.req_text("mode", CONTROL_MODES)
    console_url = table.text("console_url")
    api_table = table.table("api", required=mode == "api")
    api = _api(api_table) if api_table else None
    cli_table = table.table("cli")
    cli = {key: cli_table.req_text(key) for key in list(cli_table.data)} if cli_table else {}  # free-form templates
    table.done()
    return Control(mode=mode, console_url=console_url, api=api, cli=cli)


def _api(table: Table) -> ApiControl:
    verified, source, conflict = _provenance(table)
    price_unit = table.text("price_unit")
    if price_unit is not None and not _PRICE_UNIT.match(price_unit):
        table.problem("price_unit", f"{price_unit!r} must look like USD/h or USD-cents/h")
    gone_when = table.strings("gone_when") or ()
    bad = [g for g in gone_when if not _GONE_WHEN.match(g)]
    if bad:
        table.problem("gone_when", f"{bad[0]!r} is not http:<code>, absent:list, status:<word> or null:<field>")
    endpoints_table = table.table("endpoints")
    api = ApiControl(
        base_url=_url(table, "base_url"), auth_scheme=table.req_text("auth_scheme", AUTH_SCHEMES),
        auth_env=table.strings("auth_env", required=True) or (), verified=verified,
        base_url_env=table.text("base_url_env"),
        auth_files=tuple(_auth_file(text) for text in table.strings("auth_files") or ()),
        rate_limit_per_s=table.number("rate_limit_per_s"), price_field=table.text("price_field"),
        price_unit=price_unit, endpoints=_endpoints(endpoints_table) if endpoints_table else {},
        gone_when=gone_when, source=source, conflict=conflict,
    )
    table.done()
    return api


def _url(table: Table, key: str) -> str:
    url = table.req_text(key)
    if url and (not url.startswith("https://") or "?" in url):
        table.problem(key, f"{url!r} must be an https:// URL without a query string")
    return url.rstrip("/")


def _auth_file(text: str) -> AuthFile:
    path, _, key = text.partition("#")
    return AuthFile(path=path, key=key or None)


def _endpoints(table: Table) -> dict[str, Endpoint]:
    endpoints = {}
    for name in list(table.data):
        if name not in ENDPOINT_NAMES:
            table.known.add(name)
            table.problem(name, f"unknown endpoint name (one of {', '.join(ENDPOINT_NAMES)})")
            continue
        entry = _sub(table, name)
        path = entry.req_text("path")
        if path and not path.startswith("/"):
            entry.problem("path", f"{path!r} must start with /")
        endpoints[name] = Endpoint(method=entry.req_text("method", HTTP_METHODS), path=path, body=entry.text("body"))
        entry.done()
    table.done()
    return endpoints


def _spot(table: Table) -> Spot:
    verified, source, conflict = _provenance(table)
    spot = Spot(
        available=table.flag("available", required=True), verified=verified, create_flag=table.text("create_flag"),
        grace_s=table.number("grace_s"), signal=table.text("signal"), detect=table.strings("detect") or (),
        source=source, conflict=conflict,
    )
    table.done()
    return spot


# Tables kept only in `raw` (read there by the services), declared field by field.
_PLAIN_TABLES: dict[str, dict[str, Field]] = {
    "checkpoints": {"durable_tier": Field("str", required=True), "scratch_tier": Field("str")},
    "detach": {"primitive": Field("str", required=True, choices=DETACH_PRIMITIVES), "install": Field("str"),
               "fallback": Field("str", choices=DETACH_PRIMITIVES), "survives_restart": Field("bool")},
    "network": {"proxy_hook": Field("str"), "unset_proxy_after": Field("bool"), "free_egress": Field("bool")},
    "env": {"contract": Field("str"), "interpreter": Field("str"), "forbid_conda_create": Field("bool"),
            "strip_framework_pins": Field("bool")},
    "ssh": {"user": Field("str", required=True), "port_changes_on_restart": Field("bool"),
            "host_key_changes_on_recreate": Field("bool")},
    # docs/remote-ops.md §10: μ for the Young/Daly interval on interruptible boxes (rgt.toml may override it)
    "preemption": {"mtbp_hours": Field("float", required=True), "note": Field("str"), "verified": Field("str"),
                   "source": Field("str")},
}
_FLAVOR = {"name": Field("str", required=True), "host_template": Field("str", required=True),
           "port_source": Field("str"), "file_transfer": Field("bool")}
_VERB = {"via": Field("str", required=True), "action": Field("str", required=True),
         "gate": Field("str", choices=VERB_GATES)}


def _other_tables(top: Table) -> None:
    """Check ssh, checkpoints, detach, network, env and verbs; the services read them through `raw`."""
    for name, spec in _PLAIN_TABLES.items():
        table = top.table(name)
        if table is None:
            continue
        table.fields(spec)
        for flavor in table.rows("flavors") if name == "ssh" else []:
            flavor.fields(_FLAVOR)
            flavor.done()
        table.done()
    verbs = top.table("verbs")
    if verbs:
        for verb in VERBS:
            entry = _sub(verbs, verb, required=True)
            entry.fields(_VERB)
            entry.done()
        verbs.done()


def _cross_check(profile: Profile, top: Table) -> None:
    """References between tables resolve, ids are unique, and the down verb gates what needs the gate."""
    tiers = [tier.name for tier in profile.storage]
    action_ids = [action.id for action in profile.actions]
    residual_ids = [r.id for r in profile.residuals if r.id]
    for label, ids in (("storage", tiers), ("actions", action_ids), ("residuals", residual_ids),
                       ("danger_clocks", [c.id for c in profile.danger_clocks])):
        duplicate = next((i for i in ids if ids.count(i) > 1), None)
        if duplicate is not None:
            top.problem(label, f"duplicate id {duplicate!r}")
    _check_actions(profile, top, tiers, residual_ids)
    for index, residual in enumerate(profile.residuals):
        if residual.action is not None and residual.action not in action_ids:
            top.problem(f"residuals[{index}].action", f"{residual.action!r} names no action")
    for index, rate in enumerate(profile.pricing.storage_per_gb_month):
        if rate.tier not in tiers and rate.tier not in residual_ids:
            top.problem(f"pricing.storage_per_gb_month[{index}].tier",
                        f"{rate.tier!r} names no storage tier or residual id")
    for key in ("durable_tier", "scratch_tier"):
        name = profile.raw.get("checkpoints", {}).get(key)
        if name is not None and name not in tiers:
            top.problem(f"checkpoints.{key}", f"{name!r} names no storage tier")
    _check_down_verb(profile, top)


def _check_actions(profile: Profile, top: Table, tiers: list[str], residual_ids: list[str]) -> None:
    """What each action destroys or requires exists, and an API action names a declared endpoint."""
    action_ids = [action.id for action in profile.actions]
    api = profile.control.api
    for index, action in enumerate(profile.actions):
        where = f"actions[{index}]"
        for name in action.destroys:
            if name not in tiers and name not in residual_ids:
                top.problem(f"{where}.destroys", f"{name!r} names no storage tier or residual id")
        for name in action.requires:
            if name not in action_ids:
                top.problem(f"{where}.requires", f"{name!r} names no action")
        if profile.control.mode == "api" and api and not action.manual and action.endpoint not in api.endpoints:
            top.problem(f"{where}.endpoint", f"{action.endpoint!r} names no [control.api.endpoints] entry")


def _check_down_verb(profile: Profile, top: Table) -> None:
    down = profile.raw.get("verbs", {}).get("down")
    if down is None or down["action"] == "none":
        return
    action = profile.action(down["action"])
    if action is None:
        top.problem("verbs.down.action", f"{down['action']!r} names no action")
    elif action.needs_gate and down.get("gate") != "full":
        top.problem("verbs.down.gate", f"action {action.id!r} needs the full gate: set gate = \"full\"")
