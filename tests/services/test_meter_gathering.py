"""The meter's gathering: what a provider reports an instance holds becomes `Held` inputs for audits/meter.py.

The billing arithmetic itself is tested in tests/audits/test_meter.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from remote_gpu_trainer.audits.meter import Held
from remote_gpu_trainer.profiles import load_profile
from remote_gpu_trainer.services.meter import held_storage

MONTH_H = 730.0


@dataclass
class Status:
    detail: dict[str, Any] = field(default_factory=dict)


def test_held_storage_prices_what_the_profile_knows_and_drops_the_rest() -> None:
    status = Status({"storage": [
        {"name": "network-volume", "size_gb": 10, "price_per_gb_month": 0.07},
        {"name": "volume", "size_gb": 20},  # no price: kept with an unknown hourly rate
        {"name": "mystery-disk", "size_gb": 5, "price_per_gb_month": 1.0},  # not in the profile
        "not a mapping",
    ]})
    held = held_storage(load_profile("runpod"), status)
    assert [h.name for h in held] == ["network-volume", "volume"]
    assert held[0].size_bytes == 10 * 10**9
    assert held[0].per_hour is not None and abs(held[0].per_hour - 10 * 0.07 / MONTH_H) < 1e-12
    assert held[1] == Held("volume", 20 * 10**9, None)


def test_held_storage_ignores_bad_numbers_and_missing_detail() -> None:
    status = Status({"storage": [{"name": "volume", "size_gb": -3, "price_per_gb_month": True}]})
    assert held_storage(load_profile("runpod"), status) == [Held("volume", None, None)]
    assert held_storage(load_profile("runpod"), None) == []
    assert held_storage(load_profile("runpod"), Status({"storage": "nope"})) == []
