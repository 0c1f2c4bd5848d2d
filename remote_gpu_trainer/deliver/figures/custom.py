"""A figure folder's own `build.py` (docs/deliver.md §3): the route for anything the built-in kinds do not draw.

`build.py` is the user's project code, like their training script, never a file from runs/: rgt runs it in its
own process (so the gate can read the live Figure it returns), from the bytes it hashed for the provenance, with
the same deterministic matplotlib settings as the built-in kinds. It must define

    def build(inputs) -> pandas.DataFrame   # one row per drawn mark, with exactly source.csv's columns
    def render(df, out_dir) -> matplotlib.figure.Figure

`inputs` are `BuildInput`s, one per figure.json `inputs[]` entry, each already read once and hashed; a build
reads its numbers from them, never from a path of its own. Whatever it raises fails the build (exit 1) with
nothing written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.model import plain, sha256_hex
from remote_gpu_trainer.deliver.inputs import InputFile, input_entry, resolve_input
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.fsutil import lstat_or_none, read_regular

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

BUILDER_NAME = "build.py"
#: cells of these columns that pandas holds as NaN mean "nothing" (no error bar, no test id), not a number
EMPTY_WHEN_NAN = ("err_lo", "err_hi", "capsules", "test_id", "metric")


@dataclass(frozen=True)
class BuildInput:
    """One input as build() sees it: what figure.json named, and the bytes rgt read and hashed."""

    capsule: str
    test_id: str | None
    metric: str | None
    split: str | None
    file: InputFile

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def sha256(self) -> str:
        return self.file.sha256

    @property
    def data(self) -> bytes:
        return self.file.data

    def json(self) -> Any:
        return self.file.json()

    def frame(self) -> pd.DataFrame:
        return self.file.frame()


@dataclass(frozen=True)
class Builder:
    """A loaded build.py: its project-relative path, the sha256 of the bytes that ran, and its two functions."""

    path: str
    sha256: str
    namespace: Mapping[str, Any]

    def build(self, inputs: Sequence[BuildInput]) -> Any:
        return self._call("build", inputs)

    def render(self, frame: pd.DataFrame, out_dir: Path) -> Figure:
        from matplotlib.figure import Figure

        figure = self._call("render", frame, out_dir)
        if not isinstance(figure, Figure):
            raise VerbFailed(f"{self.path}: render() returned {type(figure).__name__}, not a matplotlib Figure")
        return figure

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return self.namespace[name](*args)
        except (VerbFailed, ConfigError):
            raise
        except Exception as exc:  # the user's code: any failure of it fails this build, naming it
            raise VerbFailed(f"{self.path}: {name}() raised {type(exc).__name__}: {exc}") from exc


def load_builder(root: Path, folder: Path) -> Builder | None:
    """The folder's build.py, executed from the bytes read (a link is refused); None when there is none."""
    path = folder / BUILDER_NAME
    rel = path.relative_to(root).as_posix()
    if lstat_or_none(path) is None:
        return None
    data = read_regular(path)
    if data is None:
        raise ConfigError(f"{rel}: not a regular file (a link or a folder is refused)")
    namespace: dict[str, Any] = {"__name__": f"rgt_figure_{folder.name.replace('-', '_').replace('.', '_')}",
                                 "__file__": str(path)}
    try:
        exec(compile(data, str(path), "exec"), namespace)  # the user's own code, as documented above
    except Exception as exc:  # a syntax error or an import it lacks: the builder cannot run
        raise VerbFailed(f"{rel}: does not load ({type(exc).__name__}: {exc})") from exc
    missing = [name for name in ("build", "render") if not callable(namespace.get(name))]
    if missing:
        raise ConfigError(f"{rel}: defines no {' and no '.join(f'{m}()' for m in missing)} (build(inputs) -> "
                          "DataFrame, render(df, out_dir) -> Figure)")
    return Builder(rel, sha256_hex(data), namespace)


def read_inputs(root: Path, specs: Sequence[Mapping[str, Any]]) -> tuple[list[BuildInput], list[dict[str, Any]]]:
    """Each inputs[] entry read once; metrics.json's `split` is recorded, other files have none."""
    found, entries = [], []
    for index, spec in enumerate(specs):
        got = resolve_input(root, spec, f"inputs[{index}]")
        body = got.json() if got.path.endswith("/metrics.json") else None
        split = body.get("split") if isinstance(body, dict) and isinstance(body.get("split"), str) else None
        found.append(BuildInput(str(spec["capsule"]), _text(spec.get("test_id")), _text(spec.get("metric")), split,
                                got))
        entries.append(input_entry(spec, got, split))
    return found, entries


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def frame_rows(frame: Any, columns: Sequence[str], where: str) -> list[dict[str, Any]]:
    """build()'s DataFrame as source rows: exactly `columns`; NaN in the optional text/error columns is empty."""
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise VerbFailed(f"{where}: build() returned {type(frame).__name__}, not a pandas DataFrame")
    if sorted(map(str, frame.columns)) != sorted(columns) or len(frame.columns) != len(columns):
        raise ConfigError(f"{where}: build() returned columns {', '.join(map(str, frame.columns))}; source.csv's "
                          f"are {', '.join(columns)}")
    rows = []
    for record in frame.to_dict("records"):
        row = {str(k): plain(v) for k, v in record.items()}
        for column in EMPTY_WHEN_NAN:
            if isinstance(row[column], float) and math.isnan(row[column]):
                row[column] = None
        rows.append(row)
    return rows
