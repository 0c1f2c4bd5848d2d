"""`rgt build table ID`: tables/<id>/table.json → source.csv, final.{md,tex,csv} and the parse gate
(docs/deliver.md §4).

The user writes which capsules make each row and which metrics make the columns; everything else is generated
from the capsules' `test/<test_id>/metrics.json` files, each read once through inputs.read_input (so the
sha256 recorded in `inputs` is of the bytes used). A row's cell is the mean and sample std over its capsules
(one per seed) of `metrics.<metric>.value`; `n` is metrics.json's `n`. The build renders twice into two temp
folders (the determinism check), gates the first copy (deliver/tables/gate.py) and only then moves the files in
and rewrites table.json's generated keys, keeping every key the user wrote.

Bad input (an unknown table, a malformed table.json, a capsule without the metric, a path out of the project)
raises ConfigError naming the file and key, before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue.model import MetricRule, sha256_hex
from remote_gpu_trainer.clock import iso_z, utc_now
from remote_gpu_trainer.deliver.document import load_document, merge_document
from remote_gpu_trainer.deliver.inputs import InputFile, TrackerInput, input_entry, resolve_test
from remote_gpu_trainer.deliver.outputs import output_folder, staging
from remote_gpu_trainer.deliver.provenance import environment, provenance
from remote_gpu_trainer.deliver.source_csv import mean_std, source_csv
from remote_gpu_trainer.deliver.tables.gate import GateResult, check_table
from remote_gpu_trainer.deliver.tables.render import SOURCE_COLUMNS, read_source, render
from remote_gpu_trainer.deliver.tables.spec import SCHEMA, TableRow, TableSpec, parse_spec
from remote_gpu_trainer.errors import ConfigError

SOURCE_KEY = ("method", "metric")
DIRECTION_WORDS = metric_registry.DIRECTION_WORDS


@dataclass(frozen=True)
class Reading:
    """One capsule's metrics.json for one row, as read (bytes and sha256) and parsed."""

    row: TableRow
    capsule: str
    found: InputFile
    body: Mapping[str, Any]
    where: str


@dataclass(frozen=True)
class TableBuild:
    """What a build wrote: the table.json document, the gate's answer and the determinism check."""

    table_id: str
    folder: Path
    document: Mapping[str, Any]
    gate: GateResult
    deterministic: bool

    @property
    def passed(self) -> bool:
        return self.gate.passed and self.deterministic


def build_table(root: Path, table_id: str, *, declared: Mapping[str, MetricRule] | None = None,
                code: Mapping[str, Any] | None = None, now: datetime | None = None,
                amend: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> TableBuild:
    """Build one table (see the module docstring). `declared` are rgt.toml's metric directions; `code` the
    git state of the tree (provenance.code_state, computed once per `rgt build`); `amend` a last change to
    table.json before it is written, once (services/deliver/sources.py: the unverified inputs disclosed)."""
    folder = output_folder(root, "table", table_id)
    where = f"tables/{table_id}/table.json"
    user = load_document(folder / "table.json", SCHEMA, "table_id", table_id)
    spec = parse_spec(user, root, where)
    readings = read_rows(root, spec, where)
    directions = table_directions(spec.layout.columns, readings, declared or {})
    names = ["source.csv"] + [f"final.{fmt}" for fmt in spec.layout.formats]
    moment = now or utc_now()
    with staging(folder) as stage:
        for target in (stage.first, stage.second):  # two builds from the same bytes: the determinism check
            for name, data in produce(spec, readings, directions).items():
                (target / name).write_bytes(data)
        differing = stage.differing(names)
        source = (stage.first / "source.csv").read_bytes()
        gate = check_table(source, {n: (stage.first / n).read_bytes() for n in names[1:]}, spec.layout, directions)
        prov = provenance(root, [r.capsule for r in readings], command=f"rgt build table {table_id}",
                          builder=None, env=environment(("pandas",)), code=code, now=moment)
        generated = {
            "inputs": _inputs(readings),
            "source": {"path": "source.csv", "sha256": sha256_hex(source), "rows": source.count(b"\n") - 1,
                       "columns": list(SOURCE_COLUMNS), "key": list(SOURCE_KEY),
                       "directions": {m: DIRECTION_WORDS.get(d or "") for m, d in directions.items()}},
            "provenance": prov, "outputs": stage.outputs(names[1:]),
            "qa": _qa(gate, differing, moment),
            "disclosure": disclosure(spec, readings, gate, prov),
        }
        document = merge_document(user, generated)
        if amend is not None:
            document = amend(document)
        stage.install(names, "table.json", document)
    return TableBuild(table_id, folder, document, gate, not differing)


def _qa(gate: GateResult, differing: Sequence[str], moment: datetime) -> dict[str, Any]:
    notes = list(gate.notes)
    if differing:
        notes.append(f"not deterministic: two builds from the same inputs gave different {', '.join(differing)}")
    return {"passed": gate.passed, "checked_at": iso_z(moment), "deterministic": not differing,
            "checks": dict(gate.checks), "notes": "; ".join(notes)}


def _inputs(readings: Sequence[Reading]) -> list[dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for r in readings:
        split = r.body.get("split") if isinstance(r.body.get("split"), str) else None
        entries.setdefault(r.found.path, input_entry({"capsule": r.capsule, "test_id": r.row.test_id}, r.found,
                                                     split))
    return list(entries.values())


# -- reading the capsules -------------------------------------------------------------------------------------
def read_rows(root: Path, spec: TableSpec, where: str) -> list[Reading]:
    """Every row's metrics.json files, each checked for the table's metrics and a whole `n`."""
    readings = []
    for index, row in enumerate(spec.rows):
        for position, capsule in enumerate(row.capsules):
            at = f"{where}: rows[{index}].capsules[{position}]"
            found = resolve_test(root, {"capsule": capsule, "test_id": row.test_id}, at)
            body = found.json()
            if not isinstance(body, dict):
                raise ConfigError(f"{found.path}: is not a JSON object (read for {at})")
            for metric in spec.layout.columns:
                if _value(body, metric) is None:
                    raise ConfigError(f"{found.path}: no finite metrics.{metric}.value (row {row.method!r} "
                                      f"needs {metric}; {at})")
            if _whole(body.get("n")) is None and not (isinstance(found, TrackerInput) and body.get("n") is None):
                raise ConfigError(f"{found.path}: n is missing or not a whole number ≥ 0 ({at})")
            readings.append(Reading(row, capsule, found, body, at))
        _same_n(row, [r for r in readings if r.row is row])
    return readings


def _same_n(row: TableRow, readings: Sequence[Reading]) -> None:
    counts = {r.found.path: r.body.get("n") for r in readings}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{path} n={n}" for path, n in counts.items())
        raise ConfigError(f"row {row.method!r}: its capsules were tested on different n ({listed}); a cell "
                          "averages seeds of one test set")


def _value(body: Mapping[str, Any], metric: str) -> float | None:
    blocks = body.get("metrics")
    block = blocks.get(metric) if isinstance(blocks, Mapping) else None
    value = block.get("value") if isinstance(block, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def table_directions(metrics: Sequence[str], readings: Sequence[Reading],
                     declared: Mapping[str, MetricRule]) -> dict[str, str | None]:
    """`max`/`min` per metric, or None, by the one rule of metric_registry.stated_or_registered (the metrics.json
    files' word, else rgt.toml [metrics], else the shipped table); `monitor` has no better side."""
    found: dict[str, str | None] = {}
    for metric in metrics:
        short = metric_registry.stated_or_registered(
            metric, (_block(r.body, metric).get("direction") for r in readings), declared)
        found[metric] = short if short in DIRECTION_WORDS else None
    return found


def _block(body: Mapping[str, Any], metric: str) -> Mapping[str, Any]:
    blocks = body.get("metrics")
    block = blocks.get(metric) if isinstance(blocks, Mapping) else None
    return block if isinstance(block, Mapping) else {}


# -- source rows and outputs ----------------------------------------------------------------------------------
def source_rows(spec: TableSpec, readings: Sequence[Reading]) -> list[dict[str, Any]]:
    """One row per (method, metric): mean and sample std over the row's capsules at full precision."""
    rows = []
    for row in spec.rows:
        mine = [r for r in readings if r.row is row]
        for metric in spec.layout.columns:
            values = [v for r in mine if (v := _value(r.body, metric)) is not None]
            centre, spread = mean_std(values)
            rows.append({"method": row.method, "metric": metric, "mean": centre, "std": spread,
                         "n": mine[0].body.get("n"), "seeds": len(values), "capsules": ";".join(row.capsules),
                         "test_id": row.test_id})
    return rows


def produce(spec: TableSpec, readings: Sequence[Reading], directions: Mapping[str, str | None]) -> dict[str, bytes]:
    """source.csv and every final.* from the readings: a pure function of their bytes, run twice per build."""
    source = source_csv(SOURCE_COLUMNS, source_rows(spec, readings), SOURCE_KEY, "source.csv")
    return {"source.csv": source, **render(read_source(source), spec.layout, directions)}


def disclosure(spec: TableSpec, readings: Sequence[Reading], gate: GateResult,
               prov: Mapping[str, Any]) -> str | None:
    """What a reader of the table must be told (docs/deliver.md §4): single-seed rows, numbers that are not
    from the test split, the gate's disclosed notes, a dirty tree. None when nothing."""
    parts = []
    for row in spec.rows:
        mine = [r for r in readings if r.row is row]
        if len(mine) == 1:
            parts.append(f"{row.method} is single-seed (no ± shown, never bold).")
        splits = sorted({str(r.body.get("split")) for r in mine} - {"test"})
        if splits:
            parts.append(f"{row.method}: {'/'.join(splits)}-split numbers, not test.")
    parts += [note.split(": ", 1)[1] + "." for note in gate.notes
              if gate.checks.get(note.split(": ", 1)[0]) == "disclosed"]
    if prov.get("git_dirty"):
        parts.append("Built from uncommitted code.")
    return " ".join(dict.fromkeys(parts)) or None
