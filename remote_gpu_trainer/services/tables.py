"""Tables for every face (docs/deliver.md §4): `rgt build table ID`, `rgt build` for all and the Deliver screen
build through here, so each gets the project's declared metric directions (rgt.toml [metrics]) the same way.

The builder itself is deliver/tables.py; it reads only the project's files and writes only tables/<id>/.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.verify.load import SAFE_ID
from remote_gpu_trainer.deliver.tables import TableBuild
from remote_gpu_trainer.deliver.tables import build_table as _build

if TYPE_CHECKING:
    from pathlib import Path

    from remote_gpu_trainer.config import ProjectConfig


def build_table(project: ProjectConfig, table_id: str, *, code: Mapping[str, Any] | None = None) -> TableBuild:
    """Build tables/<table_id>/ of the project. `code` is the tree's git state when the caller builds several
    outputs at once (one `git status` for all); None computes it here."""
    return _build(project.root, table_id, declared=project.verify.metrics, code=code)


def table_ids(root: Path) -> list[str]:
    """The tables of a project: every plain folder under tables/ holding a table.json (tables/macros/, which
    holds generated LaTeX, has none), sorted."""
    top = root / "tables"
    if not _is_dir(top):
        return []
    return sorted(e.name for e in os.scandir(top) if SAFE_ID.match(e.name) and e.is_dir(follow_symlinks=False)
                  and (root / "tables" / e.name / "table.json").is_file())


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
