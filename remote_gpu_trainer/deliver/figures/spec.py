"""The user-authored part of `figures/<id>/figure.json`, read and checked once (docs/deliver.md §3).

A bad key is refused with one line naming the file and the key (`figures/f/figure.json: series[1].capsules:
...`), before anything is read from runs/ or written anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.toml_table import unknown_keys

FIGURE_SCHEMA = "remote-gpu-trainer/FIGURE/v1"
KINDS = ("line", "bar", "scatter", "custom")
CHECK_IDS = ("G1_blank", "G2_glyphs", "G3_clipped", "G4_overlap", "G5_axis", "G6_data")
#: the checks a user may disclose instead of fixing (a rendering bug is never disclosed away)
DISCLOSABLE = ("G5_axis", "G6_data")
DEFAULT_FIGSIZE = (6.4, 4.0)
DEFAULT_DPI = 150
#: the most pixels a figure may have: the gate holds the PNG as floats (~70 bytes a pixel at its peak, twice
#: rendered), so figsize 40×40 in at 600 dpi (576 MP) would take tens of GB, inside the TUI's process too
MAX_MEGAPIXELS = 40
EXPECT_KEYS = ("rows", "value_axis", "direction", "baseline", "scale", "inverted", "error_bars")


@dataclass(frozen=True)
class Series:
    """One series of figure.json: its label and the capsules it is drawn from."""

    label: str
    capsules: tuple[str, ...]


@dataclass(frozen=True)
class FigureSpec:
    """What the user asked for. `x`/`y` are train.csv columns for `line` and metric names for `scatter`;
    `metric` is the bar metric; `inputs` are the user's own inputs[] entries (the `custom` kind's)."""

    figure_id: str
    kind: str
    series: tuple[Series, ...] = ()
    x: str | None = None
    y: str | None = None
    test_id: str | None = None
    metric: str | None = None
    title: str | None = None
    xlabel: str | None = None
    ylabel: str | None = None
    figsize: tuple[float, float] = DEFAULT_FIGSIZE
    dpi: int = DEFAULT_DPI
    expect: Mapping[str, Any] = field(default_factory=dict)
    disclose: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple[Mapping[str, Any], ...] = ()


class _Reader:
    """Typed access to the document's keys, each refusal naming the file and the key."""

    def __init__(self, document: Mapping[str, Any], where: str) -> None:
        self.document = document
        self.where = where

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {key}: {message}")

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.document.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"{value!r} is not a non-empty string" if value is not None else "missing")
        return value

    def number(self, value: Any, key: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or not low <= value <= high:
            raise self.fail(key, f"{value!r} is not a number from {low:g} to {high:g}")
        return float(value)


def parse_spec(document: Mapping[str, Any], figure_id: str, where: str, *, has_builder: bool) -> FigureSpec:
    read = _Reader(document, where)
    kind = read.text("kind", required=True)
    if kind not in KINDS:
        raise read.fail("kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if has_builder != (kind == "custom"):
        raise read.fail("kind", f"{kind!r}, but the folder has a build.py: set kind to custom, or remove build.py"
                        if has_builder else "custom, but the folder has no build.py (build(inputs), render(df))")
    spec = FigureSpec(
        figure_id=figure_id, kind=kind, title=read.text("title"), xlabel=read.text("xlabel"),
        ylabel=read.text("ylabel"), figsize=_figsize(read), dpi=int(read.number(document.get("dpi", DEFAULT_DPI),
                                                                                "dpi", 50, 600)),
        expect=_expect(read), disclose=_disclose(read))
    _pixels(read, spec)
    if kind == "custom":
        return _replace(spec, inputs=_inputs(read))
    series = _series(read)
    if kind == "line":
        return _replace(spec, series=series, x=read.text("x") or "step", y=read.text("y", required=True))
    test_id = read.text("test_id", required=True)
    if kind == "bar":
        return _replace(spec, series=series, test_id=test_id, metric=read.text("metric", required=True))
    return _replace(spec, series=series, test_id=test_id, x=read.text("x", required=True),
                    y=read.text("y", required=True))


def _replace(spec: FigureSpec, **changes: Any) -> FigureSpec:
    return replace(spec, **changes)


def _figsize(read: _Reader) -> tuple[float, float]:
    value = read.document.get("figsize", list(DEFAULT_FIGSIZE))
    if not isinstance(value, list) or len(value) != 2:
        raise read.fail("figsize", f"{value!r} is not [width, height] in inches")
    return (read.number(value[0], "figsize[0]", 1, 40), read.number(value[1], "figsize[1]", 1, 40))


def _pixels(read: _Reader, spec: FigureSpec) -> None:
    width, height = round(spec.figsize[0] * spec.dpi), round(spec.figsize[1] * spec.dpi)
    if width * height > MAX_MEGAPIXELS * 1_000_000:
        raise read.fail("figsize", f"{spec.figsize[0]:g}×{spec.figsize[1]:g} in at {spec.dpi} dpi is {width}×{height}"
                        f" px, more than {MAX_MEGAPIXELS} megapixels: lower figsize or dpi")


def _expect(read: _Reader) -> dict[str, Any]:
    value = read.document.get("expect", {})
    if not isinstance(value, Mapping):
        raise read.fail("expect", "is not an object")
    unknown = sorted(unknown_keys(value, EXPECT_KEYS))
    if unknown:
        raise read.fail(f"expect.{unknown[0]}", f"unknown (one of {', '.join(EXPECT_KEYS)})")
    rows = value.get("rows")
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
        raise read.fail("expect.rows", f"{rows!r} is not a whole number ≥ 1")
    if value.get("scale", "linear") not in ("linear", "log"):
        raise read.fail("expect.scale", f"{value.get('scale')!r} is not linear or log")
    if not isinstance(value.get("inverted", False), bool):
        raise read.fail("expect.inverted", "is not true or false")
    if value.get("direction") not in (None, "higher_is_better", "lower_is_better"):
        raise read.fail("expect.direction", f"{value.get('direction')!r} is not higher_is_better or lower_is_better")
    baseline = value.get("baseline")
    if baseline is not None:
        read.number(baseline, "expect.baseline", -math.inf, math.inf)
    return dict(value)


def _disclose(read: _Reader) -> dict[str, str]:
    value = read.document.get("disclose", {})
    if not isinstance(value, Mapping):
        raise read.fail("disclose", f"is not an object of {' / '.join(DISCLOSABLE)} -> text")
    for key, text in value.items():
        if key not in DISCLOSABLE:
            raise read.fail(f"disclose.{key}", f"only {', '.join(DISCLOSABLE)} can be disclosed instead of fixed")
        if not isinstance(text, str) or not text.strip():
            raise read.fail(f"disclose.{key}", "is not a non-empty sentence")
    return dict(value)


def _series(read: _Reader) -> tuple[Series, ...]:
    value = read.document.get("series")
    if not isinstance(value, list) or not value:
        raise read.fail("series", "missing or empty: a list of {label, capsules: [\"<run>/<cell>\", ...]}")
    found: list[Series] = []
    for index, entry in enumerate(value):
        key = f"series[{index}]"
        if not isinstance(entry, Mapping):
            raise read.fail(key, "is not an object {label, capsules}")
        label, capsules = entry.get("label"), entry.get("capsules")
        if not isinstance(label, str) or not label.strip() or label.startswith("_"):
            raise read.fail(f"{key}.label", f"{label!r} is not a label (a non-empty string not starting with _)")
        if label in {s.label for s in found}:
            raise read.fail(f"{key}.label", f"{label!r} is used twice")
        if not isinstance(capsules, list) or not capsules or not all(isinstance(c, str) for c in capsules) \
                or len(set(capsules)) != len(capsules):
            raise read.fail(f"{key}.capsules", "is not a non-empty list of distinct \"<run>/<cell>\" strings")
        found.append(Series(label, tuple(capsules)))
    return tuple(found)


def _inputs(read: _Reader) -> tuple[Mapping[str, Any], ...]:
    value = read.document.get("inputs")
    if not isinstance(value, list) or not value or not all(isinstance(e, Mapping) for e in value):
        raise read.fail("inputs", "a custom figure lists its inputs: [{capsule, test_id, metric}, ...]")
    return tuple(value)


def label_direction(label: str | None) -> str | None:
    """Which way an axis label says is better: ↑ means higher, ↓ lower, None when it says neither."""
    if not label:
        return None
    up, down = "↑" in label, "↓" in label
    return "higher_is_better" if up and not down else "lower_is_better" if down and not up else None


def arrow(direction: str | None) -> str:
    return {"higher_is_better": " (↑ better)", "lower_is_better": " (↓ better)"}.get(direction or "", "")
