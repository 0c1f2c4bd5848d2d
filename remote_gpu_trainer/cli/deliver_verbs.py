"""`rgt build`, `rgt reconcile` and `rgt completeness`: DELIVER from the command line (docs/deliver.md).

`rgt build [WHAT] [ID] [PROJECT]` regenerates presentation from the pulled evidence: figures, tables,
EVIDENCE.json's generated fields and the LaTeX macros. Each builder lives in `deliver/`; the services gather
what they need from the project's state. A build that did not fully succeed exits 1; bad input exits 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.cli.parser import BUILD_TARGETS
from remote_gpu_trainer.errors import ConfigError

if TYPE_CHECKING:
    from remote_gpu_trainer.deliver.figures.build import FigureBuild
    from remote_gpu_trainer.deliver.tables.build import TableBuild
    from remote_gpu_trainer.services.session import Session


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
FIGURE_SCHEMA = "rgt-build-figure/v1"


def _build_figure(figure_id: str | None, project: str | None, fmt: str) -> int:
    """`rgt build figure ID`: exit 0 built and its pixel gate passed, 1 built but a check failed or two builds
    differed (the outputs are kept to look at) or its build.py failed, 2 bad input with nothing written
    (docs/deliver.md §3)."""
    return _build_output("figure", str(figure_id), project, fmt)


def _build_table(table_id: str | None, project: str | None, fmt: str) -> int:
    """`rgt build table ID`: exit 0 built and its parse gate passed, 1 built but a check failed (or two builds
    differed), 2 bad input with nothing written (docs/deliver.md §4)."""
    return _build_output("table", str(table_id), project, fmt)


def _build_output(kind: str, ident: str, project: str | None, fmt: str) -> int:
    """One figure or one table: the same session, exit codes and two faces (text, json) for both."""
    from remote_gpu_trainer.cli.printers import print_json
    from remote_gpu_trainer.cli.sessions import with_session
    from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK

    def action(session: Session) -> int:
        if kind == "figure":
            from remote_gpu_trainer.services.deliver.figures import build_figure

            figure = build_figure(session.project, ident, db=session.db)
            passed, show = figure.passed, lambda: _print_figure(figure)
            document = output_document(kind, ident, figure.folder, passed, figure.deterministic, figure.document)
        else:
            from remote_gpu_trainer.services.deliver.tables import build_table

            table = build_table(session.project, ident, db=session.db)
            passed, show = table.passed, lambda: _print_table(table)
            document = output_document(kind, ident, table.folder, passed, table.deterministic, table.document)
        if fmt == "json":
            print_json(document)
        else:
            show()
        return EXIT_OK if passed else EXIT_FAILED

    return with_session(project, action, writes=f"build {kind}")


def output_document(kind: str, ident: str, folder: Path, passed: bool, deterministic: bool,
                    document: Mapping[str, Any]) -> dict[str, Any]:
    """rgt-build-figure/v1 and rgt-build-table/v1 {schema, figure_id|table_id, folder, passed: bool,
    deterministic: bool, qa: object, source: object, outputs: [{path, sha256, px?}], disclosure: str|null}: the
    folder's generated keys (docs/formats.md)."""
    schema = FIGURE_SCHEMA if kind == "figure" else TABLE_SCHEMA
    return {"schema": schema, f"{kind}_id": ident, "folder": str(folder), "passed": passed,
            "deterministic": deterministic, "qa": document.get("qa"), "source": document.get("source"),
            "outputs": document.get("outputs"), "disclosure": document.get("disclosure")}


def _print_figure(built: FigureBuild) -> None:
    from remote_gpu_trainer.text import escape_control

    verdict = "passed" if built.passed else "FAILED"
    source = built.document.get("source") or {}
    print(f"figure {built.figure_id}: QA {verdict} → {escape_control(str(built.folder))}")
    print(f"  wrote source.csv ({source.get('rows')} rows), "
          + ", ".join(f"{o['path']}" + (f" ({o['px'][0]}×{o['px'][1]} px)" if "px" in o else "")
                      for o in built.document.get("outputs") or []))
    for check, result in built.checks.items():
        print(f"  {check:<12} {result.status:<10} {escape_control('; '.join(result.notes))}".rstrip())
    if not built.deterministic:
        print(f"  not deterministic: two builds from the same inputs gave different bytes "
              f"({', '.join(built.differing)})")
    disclosure = built.document.get("disclosure")
    if disclosure:
        print(f"  disclosure: {escape_control(str(disclosure))}")


TABLE_SCHEMA = "rgt-build-table/v1"


def _print_table(built: TableBuild) -> None:
    from remote_gpu_trainer.text import escape_control

    verdict = "passed" if built.passed else "FAILED"
    print(f"table {built.table_id}: QA {verdict} → {escape_control(str(built.folder))}")
    for check, status in built.gate.checks.items():
        print(f"  {check:<24} {status}")
    if not built.deterministic:
        print("  not deterministic: two builds from the same inputs gave different bytes")
    for note in built.gate.notes:
        print(f"  - {escape_control(note)}")
    disclosure = built.document.get("disclosure")
    if disclosure:
        print(f"  disclosure: {escape_control(str(disclosure))}")


def _build_evidence(project: str | None, fmt: str) -> int:
    """EVIDENCE.json's generated fields from the capsules (docs/deliver.md §2)."""
    return _claims(project, fmt, with_macros=False)


def _build_macros(project: str | None, fmt: str) -> int:
    """tables/macros/final.tex, after EVIDENCE.json is regenerated from the same rows (docs/deliver.md §5)."""
    return _claims(project, fmt, with_macros=True)


def _claims(project: str | None, fmt: str, *, with_macros: bool) -> int:
    from remote_gpu_trainer.cli.claims_output import print_outcome
    from remote_gpu_trainer.cli.sessions import with_session
    from remote_gpu_trainer.clock import report_now
    from remote_gpu_trainer.services.deliver.claims import build_evidence

    def action(session: Session) -> int:
        outcome = build_evidence(session.project, session.db, report_now(), with_macros=with_macros, reaudit=True)
        print_outcome(outcome, session.project.root, fmt)
        return 0

    return with_session(project, action, writes="build macros" if with_macros else "build evidence")


BUILD_SCHEMA = "rgt-build/v1"


def _build_all(project: str | None, fmt: str) -> int:
    """`rgt build`: every figure, every table, then EVIDENCE.json and the macros (services/deliver/build.py), one line
    per item with its QA as it finishes. Exit 0 all built and passed; 1 an item failed its QA or its builder
    failed; 2 an item was refused as bad input (the others are still built) or there is nothing to build."""
    from remote_gpu_trainer.cli.sessions import with_session

    return with_session(project, lambda session: _all(session, fmt), writes="build")


def _all(session: Session, fmt: str) -> int:
    """rgt-build/v1 {schema, exit_code, summary, steps: [{kind, id, status, detail}]}, status one of passed,
    qa_failed, failed, bad_input, skipped, in build order."""
    import dataclasses

    from remote_gpu_trainer.cli.printers import print_json
    from remote_gpu_trainer.clock import report_now
    from remote_gpu_trainer.services.deliver.build import build_all
    from remote_gpu_trainer.text import escape_control
    from remote_gpu_trainer.views import BuildStep

    def progress(step: BuildStep | str) -> None:
        if fmt == "text" and isinstance(step, BuildStep):
            print(escape_control(step.line), flush=True)

    outcome = build_all(session.project, session.db, report_now(), progress=progress)
    if fmt == "json":
        print_json({"schema": BUILD_SCHEMA, "exit_code": outcome.exit_code, "summary": outcome.summary,
                    "steps": [dataclasses.asdict(step) for step in outcome.steps]})
    else:
        print(outcome.summary)
    return outcome.exit_code


def reconcile(args: argparse.Namespace) -> int:
    """`rgt reconcile` (docs/deliver.md §6): cli/deliver_checks.py prints what services/deliver/reconcile.py found."""
    from remote_gpu_trainer.cli import deliver_checks

    return deliver_checks.reconcile(args)


def completeness(args: argparse.Namespace) -> int:
    """`rgt completeness` (docs/deliver.md §7): cli/deliver_checks.py prints what
    services/deliver/completeness.py found."""
    from remote_gpu_trainer.cli import deliver_checks

    return deliver_checks.completeness(args)
