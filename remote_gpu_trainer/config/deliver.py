"""rgt.toml's DELIVER tables (docs/formats.md, rgt.toml): `[deliver]` (the documents `rgt reconcile` and VERIFY's
V31 read) and `[grid]` (the expected experiment grid `rgt completeness` counts, docs/deliver.md §7).

```toml
[deliver]
docs = ["paper/*.tex", "README.md", "CITATION.cff"]   # project-relative paths or globs
mode = "rounding"                                     # or "exact"; optional

[grid]
dims = { dataset = ["set5", "set14"], method = ["baseline", "ours"], seed = [0, 1, 2] }
capsule = "{method}/seed{seed}"                       # <run-id>/<cell> of each point
test_id = "{dataset}"                                 # the test folder the point's number comes from
split = "test"                                        # the split every number claims (default "test")
```

`[deliver] docs` and `[verify.reconcile] docs` are one list: both are read, deduplicated in order ([deliver]
first), and the result is what `rgt reconcile` and V31 both read, so the verb and the audit never judge
different documents. A `mode` set in both places must agree.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID
from remote_gpu_trainer.audits.catalogue.reconcile.files import GLOB_CHARS, rgt_own_file
from remote_gpu_trainer.config.audit import AuditConfig
from remote_gpu_trainer.toml_table import Table

RECONCILE_MODES = ("rounding", "exact")
V31 = "V31"
MAX_GRID_POINTS = 100_000  # a grid is written by hand; more than this is a typo (a range pasted as a list)
_DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class DeliverConfig:
    """`[deliver]`: the documents reconcile reads (merged with `[verify.reconcile] docs`) and its mode
    (None: not set, the default `rounding` applies)."""

    docs: tuple[str, ...] = ()
    mode: str | None = None


@dataclass(frozen=True)
class GridPoint:
    """One point of the declared grid: its coordinates (dimension -> value as written, in `dims` order), the
    capsule `<run-id>/<cell>` and the test id its templates render to."""

    coords: tuple[tuple[str, str | int], ...]
    capsule: str
    test_id: str

    @property
    def run_id(self) -> str:
        return self.capsule.split("/", 1)[0]

    @property
    def cell(self) -> str:
        return self.capsule.split("/", 1)[1]

    @property
    def label(self) -> str:
        """`dataset=set5 method=ours seed=0`: how a person names the point."""
        return " ".join(f"{dim}={value}" for dim, value in self.coords)

    def as_dict(self) -> dict[str, str | int]:
        return dict(self.coords)


@dataclass(frozen=True)
class GridConfig:
    """`[grid]`: the dimensions, the two templates and the claimed split; `points` is the product rendered
    (checked at load: every point names a safe capsule and test id, no two points the same pair)."""

    dims: tuple[tuple[str, tuple[str | int, ...]], ...]
    capsule: str
    test_id: str
    split: str = "test"
    points: tuple[GridPoint, ...] = field(default=(), compare=False)


def read_deliver_config(top: Table, audit: AuditConfig) -> tuple[DeliverConfig, AuditConfig]:
    """`[deliver]`, and the audit config with V31's `docs` (and `mode`) made the same merged list."""
    body = top.table("deliver") if top.has("deliver") else None
    docs: tuple[str, ...] = ()
    mode: str | None = None
    if body is not None:
        body.expect({"docs", "mode"})
        body.done()
        docs = _doc_paths(body)
        mode = body.text("mode", choices=RECONCILE_MODES)
    v31 = dict(audit.overrides.get(V31, {}))
    audit_docs = v31.get("docs") or []
    merged = tuple(dict.fromkeys([*docs, *(audit_docs if isinstance(audit_docs, list) else [audit_docs])]))
    audit_mode = v31.get("mode")
    if mode is not None and audit_mode is not None and audit_mode != mode and body is not None:
        body.problem("mode", f"{mode!r} disagrees with [verify.reconcile] mode {audit_mode!r}: set it in one place")
    mode = mode if mode is not None else audit_mode if isinstance(audit_mode, str) else None
    if merged:
        v31["docs"] = list(merged)
    if mode is not None:
        v31["mode"] = mode
    if v31:
        audit = replace(audit, overrides={**audit.overrides, V31: v31})
    return DeliverConfig(docs=tuple(str(d) for d in merged), mode=mode), audit


def _doc_paths(body: Table) -> tuple[str, ...]:
    """Project-relative paths or globs: an absolute path or one climbing out with `..` names no document of
    the project, nor does a literal path naming one of rgt's own files (EVIDENCE.json, runs/…), so each is
    refused here with its line rather than at every reconcile."""
    docs = body.strings("docs", nonempty=True) or ()
    kept = []
    for entry in docs:
        if entry.startswith("/") or os.path.isabs(entry) or ".." in PurePosixPath(entry).parts:
            body.problem("docs", f"{entry!r} is outside the project: use a path or glob relative to the project root")
            continue
        if not any(char in entry for char in GLOB_CHARS) and rgt_own_file(os.path.normpath(entry)):
            body.problem("docs", f"{entry!r} is rgt's own file, never a document (docs/deliver.md §6): name the "
                                 "paper, README or model card that quotes the numbers")
            continue
        kept.append(entry)
    return tuple(kept)


def read_grid_config(top: Table) -> GridConfig | None:
    """`[grid]`, or None when rgt.toml declares none; every problem names its key and line."""
    body = top.table("grid") if top.has("grid") else None
    if body is None:
        return None
    body.expect({"dims", "capsule", "test_id", "split"})
    body.done()
    dims = _dims(body)
    capsule = body.text("capsule", required=True, nonempty=True)
    test_id = body.text("test_id", required=True, nonempty=True)
    split = body.text("split", nonempty=True, default="test") or "test"
    if not SAFE_ID.match(split):
        body.problem("split", f"{split!r} is not a split name (letters, digits, '.', '_', '-')")
    names = [name for name, _ in dims]
    ok = dims and capsule is not None and test_id is not None
    ok = _placeholders(body, "capsule", capsule, names) and ok
    ok = _placeholders(body, "test_id", test_id, names) and ok
    if not ok or capsule is None or test_id is None:
        return None
    points = _points(body, dims, capsule, test_id)
    return GridConfig(dims=dims, capsule=capsule, test_id=test_id, split=split, points=points)


def _dims(body: Table) -> tuple[tuple[str, tuple[str | int, ...]], ...]:
    raw = body.value("dims", required=True)
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        body.problem("dims", 'must be a table of dimension = [values], e.g. { method = ["ours"], seed = [0, 1] }')
        return ()
    dims: list[tuple[str, tuple[str | int, ...]]] = []
    for name, values in raw.items():
        key = f"dims.{name}"
        if not _DIM_NAME.match(name):
            body.problem(key, "a dimension name uses letters, digits and '_' (it is written {name} in the templates)")
        elif not isinstance(values, list) or not values or not all(_coordinate(v) for v in values):
            body.problem(key, "must be a non-empty list of strings or whole numbers")
        elif len({str(v) for v in values}) != len(values):
            body.problem(key, "lists a value twice")
        else:
            dims.append((name, tuple(values)))
    size = 1
    for _, values in dims:
        size *= len(values)
    if size > MAX_GRID_POINTS:
        body.problem("dims", f"spans {size} points, more than {MAX_GRID_POINTS}: list only the grid you ran")
        return ()
    return tuple(dims) if len(dims) == len(raw) else ()


def _coordinate(value: Any) -> bool:
    return (isinstance(value, str) and bool(value.strip())) or (isinstance(value, int) and not isinstance(value, bool))


def _placeholders(body: Table, key: str, template: str | None, names: list[str]) -> bool:
    """Every `{name}` names a dimension, and no stray brace is left once they are taken out."""
    if template is None:
        return False
    unknown = [name for name in _PLACEHOLDER.findall(template) if name not in names]
    if unknown:
        body.problem(key, f"{{{unknown[0]}}} is not a dimension of [grid] dims (dims: {', '.join(names) or 'none'})")
        return False
    if "{" in _PLACEHOLDER.sub("", template) or "}" in _PLACEHOLDER.sub("", template):
        body.problem(key, f"{template!r} has an unmatched brace: write each dimension as {{name}}")
        return False
    return True


def render(template: str, coords: Mapping[str, str | int]) -> str:
    """The template with each `{dimension}` replaced by the point's value."""
    return _PLACEHOLDER.sub(lambda match: str(coords[match.group(1)]), template)


def _points(body: Table, dims: tuple[tuple[str, tuple[str | int, ...]], ...], capsule: str,
            test_id: str) -> tuple[GridPoint, ...]:
    """The product of the dimensions, each rendered; the first bad point of each kind is a problem."""
    names = [name for name, _ in dims]
    points: list[GridPoint] = []
    seen: dict[tuple[str, str], GridPoint] = {}
    for values in itertools.product(*(vals for _, vals in dims)):
        coords = tuple(zip(names, values, strict=True))
        point = GridPoint(coords, render(capsule, dict(coords)), render(test_id, dict(coords)))
        parts = point.capsule.split("/")
        if len(parts) != 2 or not all(SAFE_ID.match(part) for part in parts):
            body.problem("capsule", f"renders {point.capsule!r} for {point.label}: it must be <run-id>/<cell>, two "
                         "safe names")
            return ()
        if not SAFE_ID.match(point.test_id):
            body.problem("test_id", f"renders {point.test_id!r} for {point.label}: not a safe test id")
            return ()
        twin = seen.setdefault((point.capsule, point.test_id), point)
        if twin is not point:
            body.problem("dims", f"{twin.label} and {point.label} both map to capsule {point.capsule} test "
                         f"{point.test_id}: use every dimension in capsule or test_id")
            return ()
        points.append(point)
    return tuple(points)
