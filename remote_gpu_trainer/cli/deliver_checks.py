"""`rgt reconcile` and `rgt completeness` (docs/deliver.md §6, §7): the two DELIVER verbs that judge rather
than build. Each calls its service, prints the answer (text for people, or the JSON document it wrote) and
returns its status: 0 nothing to report, 1 a drift or a hole (a status, never a block), 2 bad input.

Every string that came from a document, EVIDENCE.json or a box is escaped before it reaches the terminal.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from remote_gpu_trainer.cli.printers import print_json
from remote_gpu_trainer.text import escape_control, size

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.catalogue.reconcile.model import ReconcileReport
    from remote_gpu_trainer.deliver.completeness import CompletenessReport
    from remote_gpu_trainer.services.session import Session


def reconcile(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.config.project import load_project, resolve_project_file
    from remote_gpu_trainer.services.deliver.reconcile import reconcile_project

    project = load_project(resolve_project_file(args.project))
    outcome = reconcile_project(project, args.mode)
    if args.format == "json":
        print_json(outcome.report.to_dict())
    else:
        print_reconcile(outcome.report, outcome.written)
    return outcome.report.exit_code


def print_reconcile(report: ReconcileReport, written: str) -> None:
    """One line per drift (doc:line:col, what the document says, what EVIDENCE.json says, then the line
    itself), one per coarse quote (a number marked approximate that says less than the claim's precision: not
    a drift), then the warnings, the coverage and the infos in short."""
    print(f"reconcile: {len(report.documents)} document(s), {len(report.claims)} scalar claim(s), "
          f"mode {report.mode}")
    for drift in report.drifts:
        others = f" (also compared with {', '.join(drift.claim_ids[1:])})" if len(drift.claim_ids) > 1 else ""
        coarse = (f": coarser than the claim's precision ({drift.precision} decimal(s)); quote {drift.expected} "
                  "or mark it approximate (about, ~, ≈, roughly)"
                  if drift.reason == "coarser_than_precision" else "")
        print(escape_control(
            f"DRIFT {drift.doc}:{drift.line}:{drift.col}  {drift.claim_ids[0]} {drift.metric}: reads "
            f"{drift.reported_text} where EVIDENCE.json has {drift.expected} ({drift.authoritative!r}){others}"
            f"{coarse}"))
        print(f"      | {escape_control(drift.context)}")
    for quote in report.coarse_quotes:
        print(escape_control(
            f"COARSE {quote.doc}:{quote.line}:{quote.col}  {quote.claim_ids[0]} {quote.metric}: reads "
            f"{quote.marker} {quote.reported_text} where EVIDENCE.json has {quote.expected} at its precision "
            f"({quote.precision} decimal(s)): marked approximate, not a drift"))
        print(f"      | {escape_control(quote.context)}")
    for note in report.warnings:
        if note.kind != "ambiguous_anchor":
            print(escape_control(f"warning: {', '.join(note.claim_ids)}: {note.detail}"))
            continue
        print(escape_control(f"warning: anchor {note.anchor!r} is shared by {', '.join(note.claim_ids)} with "
                             "different values: give each claim its own alias"))
    for missing in report.missing_from_docs:
        where = f", paper anchor {missing.paper_anchor}" if missing.paper_anchor else ""
        print(escape_control(f"{missing.severity}: {missing.claim_id} ({missing.metric} = {missing.authoritative!r})"
                             f" appears in no document{where}"))
    for note in report.infos:
        print(escape_control(f"info: {note.doc}:{note.line}:{note.col} {note.kind} {', '.join(note.claim_ids)}"))
    covered = sum(1 for where in report.coverage.values() if where)
    print(f"coverage: {covered}/{len(report.claims)} scalar claim(s) quoted consistently")
    drifts, rough = len(report.drifts), len(report.coarse_quotes)
    coarse_words = f", {rough} coarse quote(s) marked approximate" if rough else ""
    print(f"wrote {written}: {drifts} drift(s){coarse_words}" if drifts else
          f"wrote {written}: no drift{coarse_words}")


def completeness(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.cli.sessions import with_session

    return with_session(args.project, lambda session: _completeness(session, args.format), writes="completeness")


def _completeness(session: Session, fmt: str) -> int:
    import asyncio

    from remote_gpu_trainer.services.deliver.completeness import COMPLETENESS_NAME, run_completeness

    async def assess() -> CompletenessReport:
        try:
            return await run_completeness(session)
        finally:
            await session.close_transports()

    report = asyncio.run(assess())
    if fmt == "json":
        print_json(report.to_dict())
    else:
        print_completeness(report, COMPLETENESS_NAME)
    return report.exit_code


def print_completeness(report: CompletenessReport, written: str) -> None:
    """One line per point (its state, then each check), the reasons under it, the pull list, the boxes that
    did not answer, and the counts."""
    from remote_gpu_trainer.deliver.completeness import CHECKS

    grid = report.grid
    print(escape_control(f"completeness: {len(report.points)} grid point(s) over "
                         f"{' × '.join(name for name, _ in grid.dims)}, claimed split {grid.split}"))
    for result in report.points:
        checks = " ".join(f"{check}={result.checks[check].state}" for check in CHECKS)
        print(escape_control(f"{result.state.upper():<10} {result.point.label} ({result.point.capsule}, test "
                             f"{result.point.test_id}): {checks}"))
        for check in CHECKS:
            if result.checks[check].detail:
                print(escape_control(f"           {check}: {result.checks[check].detail}"))
    if report.pull_list:
        print(f"pull list ({len(report.pull_list)} file(s) only on a box; pull them before any teardown):")
        for item in report.pull_list:
            known = f" ({size(item.bytes)})" if item.bytes is not None else ""
            print(escape_control(f"  {item.path} <- {item.remote}{known}"))
    for box in report.boxes:
        if not box.reachable and box.remote_root is not None:
            print(escape_control(f"box of run {box.run_id} did not answer: {box.detail}"))
    counts = report.counts()
    print(f"summary: {counts['complete']} complete, {counts['pull']} to pull, {counts['incomplete']} incomplete, "
          f"{counts['unknown']} unknown of {counts['points']}; wrote {written}")
