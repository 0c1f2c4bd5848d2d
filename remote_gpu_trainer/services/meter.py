"""The cost meter's gathering: what a provider says an instance holds, turned into the inputs of the billing
arithmetic in audits/meter.py (which holds the rules and is pure).

The session records instance snapshots and meter samples in the state database and asks audits/meter.py
for the figures; this module reads the provider's answer so the audit never sees a provider type.
"""

from __future__ import annotations

from remote_gpu_trainer.audits.meter import Held, valid_price
from remote_gpu_trainer.profiles import HOURS_PER_MONTH, Profile


def held_storage(profile: Profile, status: object | None) -> list[Held]:
    """What the provider says this instance holds (its `detail["storage"]`: name, size_gb,
    price_per_gb_month), as `Held` entries for the tiers and residuals the profile knows; others are
    left out rather than guessed at."""
    detail = getattr(status, "detail", None)
    items = detail.get("storage") if isinstance(detail, dict) else None
    known = {t.name for t in profile.storage} | {r.id for r in profile.residuals if r.id}
    held: list[Held] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or item.get("name") not in known:
            continue
        size_gb, price = valid_price(_float(item.get("size_gb"))), valid_price(_float(item.get("price_per_gb_month")))
        per_hour = size_gb * price / HOURS_PER_MONTH if size_gb is not None and price is not None else None
        held.append(Held(str(item["name"]), int(size_gb * 1e9) if size_gb is not None else None, per_hour))
    return held


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
