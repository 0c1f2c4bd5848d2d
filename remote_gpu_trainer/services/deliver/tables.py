"""Tables for every face (docs/deliver.md §4): `rgt build table ID`, `rgt build` for all and the Deliver screen
build through here, so each gets the project's declared metric directions (rgt.toml [metrics]) the same way.

The builder itself is deliver/tables/build.py; it reads only the project's files and writes only tables/<id>/.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.deliver.tables.build import TableBuild
from remote_gpu_trainer.deliver.tables.build import build_table as _build
from remote_gpu_trainer.services.deliver.sources import SourceJudge, amend_with

if TYPE_CHECKING:
    from datetime import datetime

    from remote_gpu_trainer.config.project import ProjectConfig
    from remote_gpu_trainer.state.db import StateDB


def build_table(project: ProjectConfig, table_id: str, *, code: Mapping[str, Any] | None = None,
                now: datetime | None = None, db: StateDB | None = None,
                amend: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> TableBuild:
    """Build tables/<table_id>/ of the project. `code` is the tree's git state and `now` the build's time when
    the caller builds several outputs at once (one `git status` and one timestamp for all); None computes
    them here. With the state database `db`, every input that is not verified evidence is disclosed in
    table.json (services/deliver/sources.py; `rgt build` hands its own `amend`, which counts them)."""
    if amend is None and db is not None:
        amend = amend_with(SourceJudge(project, db), [])
    return _build(project.root, table_id, declared=project.audit.metrics, code=code, now=now, amend=amend)
