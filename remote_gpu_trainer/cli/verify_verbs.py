"""`rgt audit` and `rgt finding`: VERIFY from the command line (docs/verify.md §2–§3).

`rgt audit [RUN] [PROJECT]` runs the catalogue over the project (findings are disclosed, never a failure:
exit 0, or 1 with --strict while a finding at warn or above is open); `rgt finding ID` shows one record and
moves it (--ack, --waive, --fixed, --reopen) through the service, which writes the event.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.cli.printers import print_json
from remote_gpu_trainer.cli.sessions import with_session
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.verify.model import CheckResult, Finding
    from remote_gpu_trainer.services.audit import AuditOutcome
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import VerifyFindingView

AUDIT_SCHEMA = "rgt-audit/v1"
GLYPHS = {"pass": "✓", "findings": "!", "skipped": "-", "not_run": " "}
WARN_OR_ABOVE = ("warn", "error", "critical")


def audit(args: argparse.Namespace) -> int:
    run, project = _run_and_project(args.run, args.project)
    return with_session(project, lambda s: _audit(s, run, args.check, args.format, args.strict), writes="audit")


def finding(args: argparse.Namespace) -> int:
    if args.status is None and (args.note or args.disclosure or args.scope != "subject"):
        raise ConfigError("rgt finding: --note, --disclosure and --scope go with a move: add --ack, --waive, "
                          "--fixed or --reopen")
    if args.status != "acknowledged" and (args.disclosure or args.scope != "subject"):
        raise ConfigError("rgt finding: --disclosure and --scope go with --ack (a waiver, a fix or a reopening "
                          "discloses nothing)")
    moving = "finding" if args.status is not None else None
    return with_session(args.project, lambda s: _finding(s, args), writes=moving)


def _run_and_project(run: str | None, project: str | None) -> tuple[str | None, str | None]:
    """`rgt audit PROJECT` works too: a lone argument that is a folder or a file is the project."""
    if run is not None and project is None and (Path(run).is_dir() or Path(run).suffix == ".toml"):
        return None, run
    return run, project


def _audit(session: Session, run: str | None, checks: list[str] | None, fmt: str, strict: bool) -> int:
    from remote_gpu_trainer.audits.verify.catalogue import by_name
    from remote_gpu_trainer.services.audit import run_audit

    if run is not None:
        session.project.run(run)
    only = None
    if checks:
        specs = [by_name(name) for name in checks]
        unknown = [name for name, spec in zip(checks, specs, strict=True) if spec is None]
        if unknown:
            raise ConfigError(f"rgt audit --check: no VERIFY check {unknown[0]!r} (V01...V33, or a name like "
                              "seed_count)")
        only = {spec.id for spec in specs if spec is not None}
    outcome = run_audit(session.project, session.db, only=only, actor="user")
    shown = _shown(outcome, run)
    if fmt == "json":
        print_json(audit_document(outcome, run, shown))
    else:
        _print_audit(outcome, shown, run)
    open_warn = [f for f in shown if f.status == "open" and f.severity in WARN_OR_ABOVE]
    return EXIT_FAILED if strict and open_warn else EXIT_OK


def _shown(outcome: AuditOutcome, run: str | None) -> list[VerifyFindingView]:
    from remote_gpu_trainer.services.audit import touches_run

    listed = [f for f in outcome.view.sorted_findings() if f.status != "fixed" and f.subject != "project"]
    return [f for f in listed if run is None or touches_run(f.subject, run)]


def audit_document(outcome: AuditOutcome, run: str | None, shown: list[VerifyFindingView]) -> dict[str, Any]:
    from remote_gpu_trainer.report import finding_dict, verify_dict

    document = verify_dict(outcome.view)
    raised = {record.id for record in outcome.raised}
    return {"schema": AUDIT_SCHEMA, "run": run, "audited_at": document["audited_at"],
            "checks": [{"id": r.check, "name": r.name, "kind": r.kind, "status": _scoped_status(r, run),
                        "note": r.note, "findings": len(_scoped(r, run))} for r in outcome.results],
            "raised": sorted(raised), "findings": [finding_dict(f) for f in shown]}


def _scoped(result: CheckResult, run: str | None) -> list[Finding]:
    """A check's findings about `run` (all of them for the whole project)."""
    from remote_gpu_trainer.services.audit import touches_run

    return [f for f in result.findings if run is None or touches_run(f.subject, run)]


def _scoped_status(result: CheckResult, run: str | None) -> str:
    """`findings` only when some are about `run`: another run's leak is not this run's answer."""
    if result.status == "findings" and not _scoped(result, run):
        return "pass"
    return result.status


def _print_audit(outcome: AuditOutcome, shown: list[VerifyFindingView], run: str | None) -> None:
    raised = {record.id for record in outcome.raised}
    for result in outcome.results:
        found, status = _scoped(result, run), _scoped_status(result, run)
        count = f" ({len(found)})" if found else ""
        print(f"{GLYPHS.get(status, '?')} {result.check} {result.name:<24} {status:<8}{count} "
              f"{escape_control(result.note)}")
    if shown:
        print()
    for f in shown:
        new = " NEW" if f.id in raised else ""
        print(f"{f.id} {f.severity:<8} {f.status:<12} [{f.check}] {escape_control(f.subject)}: "
              f"{escape_control(f.message)}{new}")
    counts = {s: sum(1 for r in outcome.results if _scoped_status(r, run) == s) for s in ("pass", "findings",
                                                                                          "skipped")}
    more = " `rgt finding ID` shows one." if shown else ""
    print(f"\n{counts['pass']} pass, {counts['findings']} with findings, {counts['skipped']} skipped; "
          f"{len(raised)} raised, {len(outcome.fixed)} fixed.{more}")


def _finding(session: Session, args: argparse.Namespace) -> int:
    from remote_gpu_trainer.report import finding_dict
    from remote_gpu_trainer.services import findings
    from remote_gpu_trainer.services.audit import finding_detail, finding_view

    if args.status is not None:
        findings.set_status(session.db, args.id, args.status, note=args.note, disclosure=args.disclosure,
                            scope=args.scope)
    record = session.db.finding_record(args.id)
    if record is None:
        raise ConfigError(f"no VERIFY finding {args.id} (rgt audit lists them)")
    view = finding_view(record)
    if args.format == "json":
        print_json(finding_dict(view))
    else:
        print(escape_control(finding_detail(view), keep_newlines=True))
    return EXIT_OK
