"""Real table inputs for DELIVER's table tests (docs/deliver.md §4): source.csv bytes written by the one CSV
writer, and a project with capsules and a tables/<id>/table.json on disk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from remote_gpu_trainer.deliver.source_csv import source_csv
from remote_gpu_trainer.deliver.tables.render import SOURCE_COLUMNS
from support.capsules import write_json

# (method, metric, mean, std, n, seeds)
SourceRow = tuple[str, str, float, float | None, int, int]
SCHEMA = "remote-gpu-trainer/TABLE/v1"


def source_bytes(rows: Sequence[SourceRow]) -> bytes:
    """source.csv for these rows, sorted by (method, metric) as a build writes it."""
    return source_csv(SOURCE_COLUMNS, [
        {"method": m, "metric": k, "mean": mean, "std": std, "n": n, "seeds": seeds,
         "capsules": ";".join(f"{m}/seed{i}" for i in range(seeds)), "test_id": "set5"}
        for m, k, mean, std, n, seeds in rows], ("method", "metric"), "source.csv")


def write_table(root: Path, table_id: str, rows: Sequence[Mapping[str, Any]], *, test_id: str = "set5",
                layout: Mapping[str, Any] | None = None, **extra: Any) -> Path:
    """tables/<id>/table.json as a user writes it: rows, a test id and the layout (columns psnr by default)."""
    document: dict[str, Any] = {"schema": SCHEMA, "table_id": table_id, "test_id": test_id, "rows": list(rows),
                                "layout": dict(layout) if layout is not None else {"columns": ["psnr"]}}
    document.update(extra)
    return write_json(root / "tables" / table_id / "table.json", document)
