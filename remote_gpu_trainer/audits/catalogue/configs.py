"""Configs as VERIFY compares them (docs/verify.md §2, V01): one flattening, one equality, one glob match, for
the comparability checks, the smoke and integrity checks and the tracker forensics alike."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from typing import Any


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys `a.b.c`, list items `a.0`; an empty mapping or list is a leaf, so it differs from missing."""
    if isinstance(node, Mapping) and node:
        items: Iterable[tuple[Any, Any]] = node.items()
    elif isinstance(node, list | tuple) and node:
        items = enumerate(node)
    else:
        return {prefix: node} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in items:
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same_value(a: Any, b: Any) -> bool:
    """Config equality: int 1 equals float 1.0, a bool is not a number, NaN equals NaN."""
    if is_number(a) and is_number(b):
        x, y = float(a), float(b)
        return x == y or (math.isnan(x) and math.isnan(y))
    return type(a) is type(b) and a == b


def matches(key: str, patterns: Iterable[str]) -> bool:
    """A glob matches the dotted key, one of its ancestors (`tags` covers `tags.0`) or its last segment,
    case-insensitively (trackers spell `Output_Dir` as users do)."""
    parts = key.lower().split(".")
    candidates = [".".join(parts[:i]) for i in range(1, len(parts) + 1)] + [parts[-1]]
    return any(fnmatch.fnmatchcase(c, str(p).lower()) for p in patterns for c in candidates)
