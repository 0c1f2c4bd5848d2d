"""Provider profiles: billing and teardown semantics as data (assets/profiles/<id>.toml, providers.md §11).

Code asks a profile what an action destroys, what keeps billing, and how old those facts are; it never
branches on the provider's name for any of that.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from .errors import ConfigError

SCHEMA = "remote-gpu-trainer/PROFILE/v1"
_TOP_KEYS = {
    "schema", "id", "display_name", "kind", "family", "stale_after_months", "control", "ssh", "storage",
    "checkpoints", "actions", "residuals", "danger_clocks", "spot", "detach", "network", "env", "verbs",
    "surface_to_user", "pricing", "gpu_sampling",
}
_REQUIRED = ("schema", "id", "display_name", "kind")
_ACTION_REQUIRED = ("id", "label", "stops_compute", "stops_storage_billing", "destroys", "reversible")


@dataclass(frozen=True)
class Action:
    id: str
    label: str
    stops_compute: bool
    stops_storage_billing: bool | str
    destroys: tuple[str, ...]
    reversible: bool
    caveats: tuple[str, ...]
    verified: str

    @property
    def needs_gate(self) -> bool:
        """Irreversible, or destroys a storage tier: the full gate applies (gate-and-manifests.md §7)."""
        return not self.reversible or bool(self.destroys)


@dataclass(frozen=True)
class Pricing:
    currency: str
    compute_per_hour: float | None
    storage_per_hour: float | None
    source: str


@dataclass(frozen=True)
class Profile:
    id: str
    display_name: str
    kind: str
    stale_after_months: int
    actions: tuple[Action, ...]
    storage: tuple[dict[str, Any], ...]
    residuals: tuple[dict[str, Any], ...]
    surface_to_user: tuple[dict[str, Any], ...]
    pricing: Pricing
    raw: dict[str, Any]
    gpu_sampling: bool = True  # false where there is no real GPU to ask (the simulated box)

    def action(self, action_id: str) -> Action | None:
        return next((a for a in self.actions if a.id == action_id), None)

    def oldest_verified(self) -> str:
        """The oldest stamp among money and teardown facts; 'unstamped' if any fact has none."""
        stamps = [a.verified for a in self.actions] + [str(s.get("verified", "unstamped")) for s in self.storage]
        if not stamps:
            return "unstamped"
        if "unstamped" in stamps:
            return "unstamped"
        return min(stamps)

    def is_stale(self, now: datetime) -> bool:
        """Facts older than `stale_after_months` (or unstamped) are shown with a stale badge, never blocking."""
        return months_old(self.oldest_verified(), now) > self.stale_after_months

    def durable_survives(self) -> bool | None:
        """Whether the checkpoint tier outlives the full teardown (None when the profile does not say)."""
        tier = self.raw.get("checkpoints", {}).get("durable_tier")
        entry = next((s for s in self.storage if s.get("name") == tier), None)
        return bool(entry["survives_destroy"]) if entry is not None and "survives_destroy" in entry else None

    def destroys_text(self, action: Action) -> list[str]:
        """Each destroyed tier with its path, so the modal names real places, not tier ids."""
        tiers = {str(s["name"]): s for s in self.storage}
        return [f"{name} ({tiers[name]['path']})" if name in tiers else name for name in action.destroys]


def months_old(stamp: str, now: datetime) -> int:
    if stamp == "unstamped":
        return 10_000
    year, month = (int(part) for part in stamp.split("-"))
    return (now.year - year) * 12 + (now.month - month)


def load_profile(profile_id: str) -> Profile:
    try:
        text = resources.files("remote_gpu_trainer").joinpath(f"assets/profiles/{profile_id}.toml").read_text(
            encoding="utf-8"
        )
    except FileNotFoundError:
        raise ConfigError(f"no billing profile for provider {profile_id!r} (assets/profiles/)") from None
    where = f"assets/profiles/{profile_id}.toml"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: malformed TOML: {exc}") from None
    return parse_profile(data, where)


def parse_profile(data: dict[str, Any], where: str) -> Profile:
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    for key in _REQUIRED:
        if key not in data:
            raise ConfigError(f"{where}: missing required key {key!r}")
    if data["schema"] != SCHEMA:
        raise ConfigError(f"{where}: schema must be {SCHEMA!r}")
    actions = []
    for index, raw in enumerate(data.get("actions", [])):
        missing = [key for key in _ACTION_REQUIRED if key not in raw]
        if missing:
            raise ConfigError(f"{where}: actions[{index}] lacks {', '.join(missing)}")
        actions.append(Action(
            id=raw["id"], label=raw["label"], stops_compute=bool(raw["stops_compute"]),
            stops_storage_billing=raw["stops_storage_billing"], destroys=tuple(raw["destroys"]),
            reversible=bool(raw["reversible"]), caveats=tuple(raw.get("caveats", [])),
            verified=str(raw.get("verified", "unstamped")),
        ))
    pricing_raw = data.get("pricing", {})
    pricing = Pricing(
        currency=str(pricing_raw.get("currency", "USD")),
        compute_per_hour=pricing_raw.get("compute_per_hour"),
        storage_per_hour=pricing_raw.get("storage_per_hour"),
        source=str(pricing_raw.get("source", "none")),
    )
    return Profile(
        id=data["id"], display_name=data["display_name"], kind=data["kind"],
        stale_after_months=int(data.get("stale_after_months", 6)), actions=tuple(actions),
        storage=tuple(data.get("storage", [])), residuals=tuple(data.get("residuals", [])),
        surface_to_user=tuple(data.get("surface_to_user", [])), pricing=pricing, raw=data,
        gpu_sampling=bool(data.get("gpu_sampling", True)),
    )
