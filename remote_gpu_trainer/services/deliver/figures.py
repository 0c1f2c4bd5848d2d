"""Figures for every face (docs/deliver.md §3): `rgt build figure ID`, `rgt build` for all and the Deliver screen
build through here, so each gets the project's declared metric directions (rgt.toml [metrics]) the same way.

The builder itself is deliver/figures/build.py; it reads only the project's files and writes only figures/<id>/.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.deliver.outputs import output_ids

if TYPE_CHECKING:
    from pathlib import Path

    from remote_gpu_trainer.config.project import ProjectConfig
    from remote_gpu_trainer.deliver.figures.build import FigureBuild
    from remote_gpu_trainer.state.db import StateDB


def build_figure(project: ProjectConfig, figure_id: str, *, code: Mapping[str, Any] | None = None,
                 db: StateDB | None = None) -> FigureBuild:
    """Build figures/<figure_id>/ of the project. `code` is the tree's git state when the caller builds several
    outputs at once (one `git status` for all); None computes it here. matplotlib loads here, not at start-up.
    With the state database `db`, every input that is not verified evidence is disclosed in figure.json
    (services/deliver/sources.py; `rgt build` does it for all outputs itself)."""
    from remote_gpu_trainer.deliver.figures.build import build_figure as build
    from remote_gpu_trainer.services.deliver.sources import SourceJudge, amend_with

    amend = None if db is None else amend_with(SourceJudge(project, db), [])
    return build(project.root, figure_id, declared=project.audit.metrics, code=code, amend=amend)


def figure_ids(root: Path) -> list[str]:
    """The figures of a project: every plain folder under figures/ holding a figure.json, sorted."""
    return output_ids(root, "figure")
