"""Strict JSON for everything rgt reads from a box or an evidence store.

Python's json accepts NaN, Infinity and duplicate keys (the last one silently wins); a manifest, a metrics
file or a probe answer that relies on either is not evidence, so every reader goes through here.

A box can also send JSON nested deeper than Python's recursion limit (100,000 `[`): the decoder's
RecursionError is turned into the ValueError every caller already handles, so hostile nesting is a refusal
or a finding, never an internal error.
"""

from __future__ import annotations

import json
from typing import Any


def loads_strict(data: str | bytes) -> Any:
    """Parse JSON; raise ValueError on NaN/Infinity, duplicate keys, or bytes that are not UTF-8."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("nested too deeply to be read (more levels than Python's recursion limit)") from None


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON (not a finite number)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result
