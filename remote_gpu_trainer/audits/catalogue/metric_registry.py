"""Which way a metric is better and where its chance level lies (docs/verify.md §6).

The shipped rows are assets/catalogue.toml `[[metrics]]`; rgt.toml `[metrics]` declares the rest. A metric whose
direction is unknown is never guessed: V10 raises it until the user declares it once.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from functools import cache

from remote_gpu_trainer.audits.catalogue.model import MetricRule
from remote_gpu_trainer.audits.catalogue.runner import CATALOGUE_PATH
from remote_gpu_trainer.shipped_toml import read_asset

_PREFIXES = ("val/", "test/", "eval/", "eval_", "val_", "test_")
DIRECTION_WORDS = {"max": "higher_is_better", "min": "lower_is_better"}
# How V11 computes a chance floor (audits/catalogue/metric_sanity.py FLOORS has one function per kind).
CHANCE_KINDS = ("majority", "top_k", "prevalence", "f1_prevalence", "ln_classes", "target_variance", "vocab", "half",
                "zero", "one", "psnr_mean_image", "background")
WORD_DIRECTIONS = {word: short for short, word in DIRECTION_WORDS.items()}


@cache
def shipped() -> tuple[MetricRule, ...]:
    data = read_asset(CATALOGUE_PATH)
    return tuple(MetricRule(key.lower(), row["direction"], row.get("chance"), row.get("basis", "conv"))
                 for row in data.get("metrics", []) for key in row["keys"])


def normalise(name: str) -> str:
    """Lowercased, without one leading `val/`, `test/` or `eval_` (so `val/psnr` and `psnr` are one metric)."""
    lowered = name.strip().lower()
    for prefix in _PREFIXES:
        if lowered.startswith(prefix) and len(lowered) > len(prefix):
            return lowered[len(prefix):]
    return lowered


def resolve(name: str, declared: Mapping[str, MetricRule] | None = None) -> MetricRule | None:
    """The rule for a metric key: rgt.toml's declaration first, then the shipped table matched on the whole
    key, then on its first and last word (`psnr_y` is psnr, `top1_acc` is acc); None when unknown."""
    key = normalise(name)
    for table in (_declared(declared or {}), shipped()):
        rule = _match(key, table)
        if rule is not None:
            return rule
    return None


def direction(name: str, declared: Mapping[str, MetricRule] | None = None) -> str | None:
    """`max`, `min`, `monitor`, or None when unknown."""
    rule = resolve(name, declared)
    return rule.direction if rule is not None else None


def stated_or_registered(name: str, stated: Iterable[object],
                         declared: Mapping[str, MetricRule] | None = None) -> str | None:
    """A metric's direction (`max`, `min`, `monitor`, or None) as every face of rgt decides it
    (docs/verify.md §6): rgt.toml [metrics] first (the user's declaration), then the first direction a
    metrics.json states, then the shipped table (a match on the key's name, the weakest evidence). One rule, so a
    table's arrow, a figure's axis, the report, EVIDENCE.json and VERIFY never disagree; V10 flags a file that
    contradicts the registry."""
    declared_rule = _match(normalise(name), _declared(declared or {}))
    if declared_rule is not None:
        return declared_rule.direction
    for word in stated:
        short = to_short(word)
        if short is not None:
            return short
    return direction(name)


def to_short(word: object) -> str | None:
    """A direction as files spell it (`higher_is_better`, `max`, `lower_is_better`, `min`) in the short form."""
    if not isinstance(word, str):
        return None
    lowered = word.strip().lower()
    if lowered in DIRECTION_WORDS:
        return lowered
    return WORD_DIRECTIONS.get(lowered)


def _declared(declared: Mapping[str, MetricRule]) -> tuple[MetricRule, ...]:
    return tuple(MetricRule(normalise(k), r.direction, r.chance, "user") for k, r in declared.items())


def _match(key: str, table: tuple[MetricRule, ...]) -> MetricRule | None:
    words = [w for w in re.split(r"[^a-z0-9@/*]+", key) if w]
    candidates = [key] + ([words[0], words[-1]] if words else [])
    for candidate in candidates:  # an exact key on any word beats a glob (`top1_acc` is acc, not top-k)
        exact = next((rule for rule in table if rule.key == candidate), None)
        if exact is not None:
            return exact
    for candidate in candidates:
        globbed = next((rule for rule in table if "*" in rule.key and fnmatch.fnmatchcase(candidate, rule.key)),
                       None)
        if globbed is not None:
            return globbed
    return None
