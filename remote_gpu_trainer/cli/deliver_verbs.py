"""`rgt build`, `rgt reconcile` and `rgt completeness`: DELIVER from the command line (docs/deliver.md).

`rgt build [WHAT] [ID] [PROJECT]` regenerates presentation from the pulled evidence: figures, tables,
EVIDENCE.json's generated fields and the LaTeX macros. Each builder lives in `deliver/`; the services gather
what they need from the project's state. A build that did not fully succeed exits 1; bad input exits 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from remote_gpu_trainer.cli.parser import BUILD_TARGETS
from remote_gpu_trainer.errors import ConfigError


def build(args: argparse.Namespace) -> int:
    what, ident, project = _build_target(args.what, args.id, args.project)
    if what == "figure":
        return _build_figure(ident, project, args.format)
    if what == "table":
        return _build_table(ident, project, args.format)
    if what == "evidence":
        return _build_evidence(project, args.format)
    if what == "macros":
        return _build_macros(project, args.format)
    return _build_all(project, args.format)


def _build_target(what: str, ident: str | None, project: str | None) -> tuple[str, str | None, str | None]:
    """`rgt build PROJECT` and `rgt build evidence PROJECT` work too: only figure and table take an ID."""
    if what not in BUILD_TARGETS:
        if ident is None and (Path(what).is_dir() or Path(what).suffix == ".toml"):
            return "all", None, what
        raise ConfigError(f"rgt build: unknown target {what!r}: one of {', '.join(BUILD_TARGETS)}")
    if what in ("figure", "table"):
        if ident is None:
            raise ConfigError(f"rgt build {what}: name the {what} (its folder under {what}s/), or run `rgt build` "
                              "for everything")
        return what, ident, project
    if ident is not None and project is not None:
        raise ConfigError(f"rgt build {what}: takes no ID (only figure and table do)")
    return what, None, ident if ident is not None else project


# -- one function per target: each is filled by the builder it names -----------------------------------------
def _build_figure(figure_id: str | None, project: str | None, fmt: str) -> int:
    raise ConfigError("rgt build figure: not built yet")


def _build_table(table_id: str | None, project: str | None, fmt: str) -> int:
    raise ConfigError("rgt build table: not built yet")


def _build_evidence(project: str | None, fmt: str) -> int:
    raise ConfigError("rgt build evidence: not built yet")


def _build_macros(project: str | None, fmt: str) -> int:
    raise ConfigError("rgt build macros: not built yet")


def _build_all(project: str | None, fmt: str) -> int:
    raise ConfigError("rgt build: not built yet")


def reconcile(args: argparse.Namespace) -> int:
    """`rgt reconcile` (docs/deliver.md §6): cli/deliver_checks.py prints what services/reconcile.py found."""
    from remote_gpu_trainer.cli import deliver_checks

    return deliver_checks.reconcile(args)


def completeness(args: argparse.Namespace) -> int:
    raise ConfigError("rgt completeness: not built yet")
