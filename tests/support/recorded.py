"""The providers' own response bodies recorded under tests/fixtures/providers (its README names each source).

The fakes serve these bodies and the contract tests replay them, so what a client is tested against is what the
provider publishes, not what this project imagined. `recorded` hands out a fresh copy each time: a fake may
change the state of the pod it serves without touching the next test's body.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "providers"


@cache
def _load(provider: str, name: str) -> Any:
    return json.loads((FIXTURES / provider / f"{name}.json").read_text(encoding="utf-8"))


def recorded(provider: str, name: str) -> Any:
    """The body of tests/fixtures/providers/<provider>/<name>.json, a fresh copy."""
    return copy.deepcopy(_load(provider, name))


def names(provider: str, prefix: str = "") -> list[str]:
    """Every recorded body of `provider` whose name starts with `prefix`, sorted."""
    return sorted(p.stem for p in (FIXTURES / provider).glob(f"{prefix}*.json"))
