"""rgt.toml's VERIFY tables (docs/formats.md, rgt.toml): `[metrics]`, `[verify.<check>]`, `[[verify.compare]]`
and `[verify.probe]`.

```toml
[metrics]
my_score = "max"                        # or { direction = "max", chance = "majority" }

[verify.seed_count]                     # a check by name (or id, [verify.V04]): its params, key by key
min_seeds = 5

[[verify.compare]]                      # a method run against its control (V01, V06, V07)
run = "ours"
control = "baseline"
vary = ["model.aux_loss"]

[verify.probe]                          # `rgt probe RUN CHECK`: the user's loader hook (isolated/model_probe.py)
hook = "probe_hooks:build"              # module:function, imported from the project root (the workdir on the box)
timeout_s = 300                         # the probe program is killed after this long
```

A check or a param that does not exist is a config error with "did you mean", never a silently ignored line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remote_gpu_trainer.audits.catalogue.metric_registry import CHANCE_KINDS
from remote_gpu_trainer.audits.catalogue.model import Comparison, MetricRule
from remote_gpu_trainer.audits.catalogue.runner import by_name, specs
from remote_gpu_trainer.toml_table import Table, did_you_mean

DIRECTIONS = ("max", "min", "monitor")
_COMPARE_KEYS = {"run", "control", "vary", "test_id", "metric"}
_HOOK = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
DEFAULT_PROBE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ProbeSettings:
    """`[verify.probe]`: the `module:function` loader hook the model probes call, and their time limit."""

    hook: str | None = None
    timeout_s: float = DEFAULT_PROBE_TIMEOUT_S


@dataclass(frozen=True)
class AuditConfig:
    """The audit catalogue's declarations: `[metrics]` and `[verify.*]` (the rgt.toml key keeps the VERIFY phase's
    name: it is a contract)."""

    metrics: Mapping[str, MetricRule] = field(default_factory=dict)
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # check id -> params
    comparisons: tuple[Comparison, ...] = ()
    probe: ProbeSettings = field(default_factory=ProbeSettings)


def read_audit_config(top: Table) -> AuditConfig:
    """`[metrics]` and `[verify]` of the top-level table (absent: the catalogue's defaults)."""
    metrics = _metrics(top.table("metrics")) if top.has("metrics") else {}
    verify = top.table("verify") if top.has("verify") else None
    if verify is None:
        return AuditConfig(metrics=metrics)
    comparisons = tuple(c for c in (_comparison(row) for row in verify.rows("compare")) if c is not None)
    probe = _probe(verify.table("probe")) if verify.has("probe") else ProbeSettings()
    overrides: dict[str, dict[str, Any]] = {}
    names = sorted({s.name for s in specs().values()} | set(specs()))
    for key in list(verify.data):
        if key in ("compare", "probe"):
            continue
        spec = by_name(key)
        body = verify.table(key)
        if spec is None:
            verify.problem(key, f"no VERIFY check named {key!r}{did_you_mean(key, names)}")
            continue
        if body is not None:
            overrides[spec.id] = _params(body, spec.params)
    verify.done()
    return AuditConfig(metrics=metrics, overrides=overrides, comparisons=comparisons, probe=probe)


def _metrics(table: Table | None) -> dict[str, MetricRule]:
    rules: dict[str, MetricRule] = {}
    if table is None:
        return rules
    for key, raw in table.data.items():
        table.value(key)
        if isinstance(raw, str):
            raw = {"direction": raw}
        if not isinstance(raw, dict) or raw.get("direction") not in DIRECTIONS or set(raw) - {"direction", "chance"}:
            table.problem(key, 'must be "max", "min" or "monitor" (or { direction = "max", chance = "..." })')
            continue
        chance = raw.get("chance")
        if chance is not None and chance not in CHANCE_KINDS:
            table.problem(key, f"chance must name how the floor is computed: one of {', '.join(CHANCE_KINDS)}")
            continue
        rules[key] = MetricRule(key.lower(), raw["direction"], chance, "user")
    return rules


def _params(body: Table, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """A check's params from rgt.toml: only keys the check has, each of the default's type."""
    params: dict[str, Any] = {}
    for key, value in body.data.items():
        body.value(key)
        if key not in defaults:
            body.problem(key, f"not a param of this check{did_you_mean(key, list(defaults))}"
                         f" (its params: {', '.join(sorted(defaults)) or 'none'})")
            continue
        default = defaults[key]
        numeric = isinstance(default, int | float) and not isinstance(default, bool)
        if numeric and not _number_like(value, default):
            kind = "a whole number" if isinstance(default, int) else "a finite number"
            sign = " of 0 or more" if default >= 0 else ""
            body.problem(key, f"must be {kind}{sign}, like the default {default!r}")
            continue
        if not numeric and type(value) is not type(default):
            body.problem(key, f"must be of the same type as the default {default!r}")
            continue
        params[key] = value
    return params


def _number_like(value: Any, default: int | float) -> bool:
    """A param's number: finite, whole where the default is (a seed count), not negative where it is not."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if isinstance(default, int) and not isinstance(value, int):
        return False
    return not (default >= 0 > value)


def _probe(body: Table | None) -> ProbeSettings:
    """`[verify.probe]`: a hook spelt `module:function` (checked here, imported only by the probe program)."""
    if body is None:
        return ProbeSettings()
    body.expect({"hook", "timeout_s"})
    body.done()
    hook = body.text("hook", nonempty=True)
    if hook is not None and not _HOOK.fullmatch(hook):
        body.problem("hook", f"{hook!r} is not module:function (like probe_hooks:build)")
        hook = None
    timeout = body.number("timeout_s", DEFAULT_PROBE_TIMEOUT_S, above=True)
    return ProbeSettings(hook=hook, timeout_s=timeout if timeout is not None else DEFAULT_PROBE_TIMEOUT_S)


def _comparison(row: Table) -> Comparison | None:
    row.expect(_COMPARE_KEYS)
    row.done()
    run = row.text("run", required=True, nonempty=True)
    control = row.text("control", required=True, nonempty=True)
    vary = row.strings("vary") or ()
    test_id = row.text("test_id", nonempty=True)
    metric = row.text("metric", nonempty=True)
    if run is None or control is None:
        return None
    if run == control:
        row.problem("control", "must name another run than `run`")
        return None
    return Comparison(run=run, control=control, vary=vary, test_id=test_id, metric=metric)
