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
    from remote_gpu_trainer.services.audit.audit import AuditOutcome
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import AuditFindingView, CheckView

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
    from remote_gpu_trainer.audits.catalogue.runner import by_name
    from remote_gpu_trainer.services.audit.audit import for_run, run_audit

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
    view = for_run(outcome.view, run) if run is not None else outcome.view
    ran = {r.check for r in outcome.results}
    answers = [c for c in view.checks if c.id in ran]
    shown = [f for f in view.sorted_findings() if f.status != "fixed" and f.subject != "project"]
    if fmt == "json":
        print_json(audit_document(outcome, run, answers, shown))
    else:
        _print_audit(outcome, answers, shown)
    open_warn = [f for f in shown if f.status == "open" and f.severity in WARN_OR_ABOVE]
    return EXIT_FAILED if strict and open_warn else EXIT_OK


def audit_document(outcome: AuditOutcome, run: str | None, checks: list[CheckView],
                   shown: list[AuditFindingView]) -> dict[str, Any]:
    """The `rgt-audit/v1` document: each check's answer for the project or, with RUN, for that run
    (services/audit.for_run), and the findings listed."""
    from remote_gpu_trainer.report import audit_dict, finding_dict

    document = audit_dict(outcome.view)
    raised = {record.id for record in outcome.raised}
    return {"schema": AUDIT_SCHEMA, "run": run, "audited_at": document["audited_at"],
            "checks": [{"id": c.id, "name": c.name, "kind": c.kind, "status": c.status, "note": c.note,
                        "findings": c.findings} for c in checks],
            "raised": sorted(raised), "findings": [finding_dict(f) for f in shown]}


def _print_audit(outcome: AuditOutcome, checks: list[CheckView], shown: list[AuditFindingView]) -> None:
    raised = {record.id for record in outcome.raised}
    for check in checks:
        count = f" ({check.findings})" if check.findings else ""
        print(f"{GLYPHS.get(check.status, '?')} {check.id} {check.name:<24} {check.status:<8}{count} "
              f"{escape_control(check.note)}")
    if shown:
        print()
    for f in shown:
        new = " NEW" if f.id in raised else ""
        print(f"{f.id} {f.severity:<8} {f.status:<12} [{f.check}] {escape_control(f.subject)}: "
              f"{escape_control(f.message)}{new}")
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "findings", "skipped", "not_run")}
    more = " `rgt finding ID` shows one." if shown else ""
    waiting = f", {counts['not_run']} not run yet" if counts["not_run"] else ""
    print(f"\n{counts['pass']} pass, {counts['findings']} with findings, {counts['skipped']} skipped{waiting}; "
          f"{len(raised)} raised, {len(outcome.fixed)} fixed.{more}")


def _finding(session: Session, args: argparse.Namespace) -> int:
    from remote_gpu_trainer.report import finding_dict
    from remote_gpu_trainer.services.audit import findings
    from remote_gpu_trainer.services.audit.audit import finding_detail, finding_view

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
