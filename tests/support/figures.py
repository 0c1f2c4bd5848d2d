"""Real figure inputs for DELIVER's figure tests (docs/deliver.md §3): a project with capsules whose metrics and
curves are known, a figures/<id>/figure.json as a user writes it, and a hand-drawn figure gated exactly as a
build gates its own (rendered and saved under the same deterministic settings, warnings recorded)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.deliver.figures.build import deterministic_matplotlib, save_all
from remote_gpu_trainer.deliver.figures.kinds import SORT_KEY, SOURCE_COLUMNS
from remote_gpu_trainer.deliver.figures.pixel_gate import Check, GateInputs, run_gate
from remote_gpu_trainer.deliver.source_csv import source_csv
from support.capsules import write_capsule, write_json

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SCHEMA = "remote-gpu-trainer/FIGURE/v1"
#: (run, cell, acc, loss offset): two baseline seeds, three of ours
CELLS = (("base", "seed0", 0.80, 0.00), ("base", "seed1", 0.82, 0.02),
         ("ours", "seed0", 0.90, 0.01), ("ours", "seed1", 0.93, 0.03), ("ours", "seed2", 0.91, 0.02))
SERIES = [{"label": "baseline", "capsules": ["base/seed0", "base/seed1"]},
          {"label": "ours", "capsules": ["ours/seed0", "ours/seed1", "ours/seed2"]}]


def curve(offset: float, steps: int = 10) -> list[dict[str, Any]]:
    return [{"step": 100 * (k + 1), "epoch": k + 1, "loss": 1.0 / (k + 1) + offset, "lr": 0.001,
             "val/acc": 0.5 + 0.04 * k + offset} for k in range(steps)]


def write_cells(root: Path) -> None:
    """The five capsules of CELLS, each with test `main` (acc and loss metrics, n = 50) and a 10-step curve."""
    for run, cell, acc, offset in CELLS:
        write_capsule(root, run, cell, metrics={"acc": acc, "loss": 1.0 - acc}, n=50,
                      directions={"loss": "lower_is_better"}, train=curve(offset))


def write_figure(root: Path, figure_id: str, kind: str, **keys: Any) -> Path:
    """figures/<id>/figure.json as the user writes it (series SERIES unless given)."""
    document: dict[str, Any] = {"schema": SCHEMA, "figure_id": figure_id, "kind": kind}
    if kind != "custom":
        document["series"] = SERIES
    document.update(keys)
    return write_json(root / "figures" / figure_id / "figure.json", document)


def source_bytes(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """source.csv for rows given as partial dicts (missing columns empty), sorted as a build sorts them."""
    full = [{c: row.get(c) for c in SOURCE_COLUMNS} for row in rows]
    return source_csv(SOURCE_COLUMNS, full, SORT_KEY, "source.csv")


def gate(tmp_path: Path, draw: Callable[[Figure], None], rows: Sequence[Mapping[str, Any]], *, kind: str = "bar",
         expect: Mapping[str, Any] | None = None, disclose: Mapping[str, str] | None = None,
         problems: Mapping[str, Sequence[str]] | None = None, constrained: bool = True) -> dict[str, Check]:
    """Draw a figure with `draw`, save it as a build saves its own, and run the gate on what was written."""
    from matplotlib.figure import Figure

    source = source_bytes(rows)
    with deterministic_matplotlib("test"):
        figure = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained" if constrained else None)
        draw(figure)
        recorded = save_all(figure, tmp_path, 100, "{}")
        png = (tmp_path / "final.png").read_bytes()
        return run_gate(GateInputs(png, figure, recorded, source, kind, dict(expect or {}), dict(disclose or {}),
                                   dict(problems or {})))
