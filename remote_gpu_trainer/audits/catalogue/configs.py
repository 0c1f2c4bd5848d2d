"""Configs as VERIFY compares them (docs/verify.md §2, V01): one flattening, one equality, one glob match, for
the comparability checks, the smoke and integrity checks and the tracker forensics alike."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
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
    listed = patterns if isinstance(patterns, tuple) else tuple(patterns)
    try:
        lowered = _lowered(listed)
    except TypeError:  # an unhashable pattern (a list in rgt.toml): as text, like any other
        lowered = tuple(str(p).lower() for p in listed)
    return _matches(key, lowered)


@lru_cache(maxsize=256)
def _lowered(patterns: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(str(p).lower() for p in patterns)


@lru_cache(maxsize=1 << 14)
def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    """`matches`, remembered: V01 and V02 ask it of every config key of every capsule against the same
    patterns (50 capsules cost 50,000 fnmatch calls); the globs are one regex, as fnmatch translates them."""
    if not patterns:
        return False
    parts = key.lower().split(".")
    candidates = [".".join(parts[:i]) for i in range(1, len(parts) + 1)] + [parts[-1]]
    return any(_glob(patterns).match(c) is not None for c in candidates)


@lru_cache(maxsize=256)
def _glob(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))
