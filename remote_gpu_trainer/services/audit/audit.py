"""VERIFY as a service (docs/verify.md §2–§3): gather the project's evidence, run the catalogue, apply the findings
lifecycle, record the audit, and build the view every face shows.

The audit runs after every verification, on `rgt audit`, and in the dashboard whenever an input it reads changed
(`inputs_fingerprint`: the sizes and times of every file under runs/ and splits/, EVIDENCE.json, rgt.toml and the
model probe answers). It never blocks anything: its findings are disclosed, the only gate stays teardown.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.catalogue import attribution
from remote_gpu_trainer.audits.catalogue import runner as catalogue
from remote_gpu_trainer.audits.catalogue.load import Declarations, load_project
from remote_gpu_trainer.audits.catalogue.model import CHECK_STATUSES, CheckResult, ProjectEvidence
from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.services.audit import findings
from remote_gpu_trainer.services.bindings import bound_run_config
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.audit import FindingRecord
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import span
from remote_gpu_trainer.views import AuditFindingView, AuditView, CheckView, FindingView

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import ProjectConfig

INPUT_TOPS = ("runs", "splits")
INPUT_FILES = ("EVIDENCE.json", "rgt.toml")
LOG_SUFFIXES = (".log", ".txt")
MAX_LOG_BYTES = 16 << 20
SKIPPED_DIRS = {".rgt", ".git", ".venv", "__pycache__"}


@dataclass(frozen=True)
class AuditOutcome:
    """What one audit did: every check's result, the finding records it raised and fixed, and the view built after
    it."""

    results: tuple[CheckResult, ...]
    raised: tuple[FindingRecord, ...]
    fixed: tuple[FindingRecord, ...]
    view: AuditView


def gather(project: ProjectConfig, db: StateDB) -> ProjectEvidence:
    """The evidence the catalogue reads: the files (audits/catalogue/load.py), rgt.toml's declarations, the stored
    probe answers and the logs pulled with each run (what V32 checks "saved" lines against)."""
    declarations = Declarations(metrics=project.audit.metrics, comparisons=project.audit.comparisons,
                                rosters={run_id: bound_run_config(project, db, run_id).roster  # as launched
                                         for run_id in project.runs})
    evidence = load_project(project.root, declarations)
    logs = {run_dir.name: tuple(_log_lines(run_dir)) for run_dir in _run_dirs(project.root)}
    return replace(evidence, probes=db.probe_records(), log_lines={k: v for k, v in logs.items() if v},
                   case_insensitive_fs=_case_insensitive(project.root))


def run_audit(project: ProjectConfig, db: StateDB, *, only: set[str] | None = None,
              actor: str = "rgt") -> AuditOutcome:
    """Run the catalogue (all checks, or `only` these ids) and apply the lifecycle; one event says how it went."""
    fingerprint = inputs_fingerprint(project.root, db)
    evidence = gather(project, db)
    results = tuple(catalogue.run_all(evidence, project.audit.overrides, only))
    outcome = findings.apply_results(db, results, actor=actor)
    ctx = attribution.context(evidence)
    answers = {r.check: answer_row(r, ctx) for r in results}
    previous = db.last_catalogue_audit()
    if only is not None and previous is not None:  # a partial audit keeps the other checks' last answers
        answers = {**{row["check"]: {**row, "waiting": dict(ctx.waiting)} for row in previous.results}, **answers}
    db.add_catalogue_audit(fingerprint, [answers[cid] for cid in sorted(answers)])
    counts = {status: sum(1 for r in results if r.status == status) for status in CHECK_STATUSES}
    events.catalogue_audited(db, checks=len(results), passed=counts["pass"], with_findings=counts["findings"],
                             skipped=counts["skipped"] + counts["not_run"], raised=len(outcome.raised), actor=actor)
    return AuditOutcome(results, outcome.raised, outcome.fixed, audit_view(project.root, db, fingerprint=fingerprint))


def answer_row(result: CheckResult, ctx: attribution.RunContext) -> dict[str, object]:
    """A check's answer as the audit record keeps it, with what the per-run views need (for_run): the runs it
    judged, the runs each finding is about, and the runs that had no data yet."""
    judged: set[str] = set()
    for subject in result.subjects:
        judged |= attribution.runs_of(subject, ctx)
    placed = {f.subject: sorted(attribution.runs_of(f.subject, ctx)) for f in result.findings}
    return {"check": result.check, "name": result.name, "kind": result.kind, "status": result.status,
            "note": result.note, "findings": len(result.findings), "runs": sorted(judged), "placed": placed,
            "waiting": dict(ctx.waiting)}


def audit_if_changed(project: ProjectConfig, db: StateDB) -> AuditOutcome | None:
    """Audit again when an input changed since the last audit; None when nothing did, or when no audit ran yet
    (the first comes with the first verification, `rgt audit` or the dashboard's `u`, not from opening a
    project: a dashboard left open must not start work the user did not ask for)."""
    last = db.last_catalogue_audit()
    if last is None or last.inputs_sha256 == inputs_fingerprint(project.root, db):
        return None
    return run_audit(project, db)


def audit_view(root: Path, db: StateDB, now: datetime | None = None, *, fingerprint: str | None = None) -> AuditView:
    """The latest audit and every finding record, read only; `now` dates the caption ("audited 5m ago");
    `fingerprint` is the inputs' digest when the caller just took it (else it is taken here)."""
    last = db.last_catalogue_audit()
    records = db.finding_records()
    live: dict[str, int] = {}
    for record in records:
        if record.status in ("open", "acknowledged"):
            live[record.check] = live.get(record.check, 0) + 1
    answered = {row["check"]: row for row in (last.results if last is not None else [])}
    checks = tuple(
        CheckView(spec.id, spec.name, spec.kind, str(answered[cid]["status"]) if cid in answered else "not_run",
                  str(answered[cid]["note"]) if cid in answered else "no audit has run this check yet",
                  live.get(cid, 0), spec.title, tuple(answered.get(cid, {}).get("runs", (attribution.EVERY_RUN,))))
        for cid, spec in catalogue.specs().items())
    stale = last is not None and last.inputs_sha256 != (fingerprint or inputs_fingerprint(root, db))
    waiting = next((row.get("waiting") for row in answered.values() if "waiting" in row), None) or {}
    views = tuple(finding_view(r, _placed(answered.get(r.check), r.subject)) for r in records)
    return AuditView(last.at if last is not None else None, checks, views, stale,
                     audit_caption(last.at if last is not None else None, stale, now),
                     tuple(sorted((str(k), str(v)) for k, v in waiting.items())))


def _placed(row: dict[str, object] | None, subject: str) -> tuple[str, ...]:
    """The runs a finding is about, as the last audit placed it; a record that audit did not place (its check
    did not run this time) by its subject alone, where splits and claims read as every run: unknown is never
    "not this run"."""
    placed = row.get("placed") if row is not None else None
    if isinstance(placed, dict) and isinstance(placed.get(subject), list):
        return tuple(str(run) for run in placed[subject])
    return tuple(sorted(attribution.runs_of(subject, attribution.RunContext())))


def for_run(audit: AuditView, run_id: str) -> AuditView:
    """The audit as one run sees it (`rgt audit RUN`, the report's run block, that run's checklist): the findings
    about the run and each check's answer for it (attribution.run_status), by the one rule of
    audits/catalogue/attribution.py."""
    mine = tuple(f for f in audit.findings if attribution.applies_to(f.runs, run_id))
    waiting = dict(audit.waiting)
    checks = []
    for check in audit.checks:
        own = [f for f in mine if f.check == check.id and f.subject != "project"]
        fired = sum(1 for f in own if f.status in ("open", "acknowledged", "waived"))
        status, note = attribution.run_status(check.status, check.note, check.runs, fired, run_id, waiting)
        live = sum(1 for f in own if f.status in ("open", "acknowledged"))
        checks.append(replace(check, status=status, note=note, findings=live))
    return replace(audit, checks=tuple(checks), findings=mine)


def catalogue_findings(run_id: str, audit: AuditView) -> tuple[FindingView, ...]:
    """The VERIFY finding records about this run (audits/catalogue/attribution.py: its capsules and numbers, the
    splits it trained on, the claims over its cells, project-wide findings), in the report's run shape
    (services/audit/findings.py lists the other kinds; this one needs for_run, and the audit imports findings)."""
    return tuple(FindingView(id=f.id, check=f.check, severity=f.severity, status=f.status,
                             message=f"{f.subject}: {f.message}", fix=f.fix,
                             evidence=", ".join(path for path, _ in f.evidence[:3]))
                 for f in for_run(audit, run_id).findings if f.status != "fixed")


def audit_caption(at: datetime | None, stale: bool, now: datetime | None) -> str:
    """`audited 5m ago`, `audited 5m ago · inputs changed` or `not audited yet (u)`."""
    if at is None:
        return "not audited yet (u audits)"
    ago = f"{span(max(0.0, (now - at).total_seconds()))} ago" if now is not None else iso_z(at)
    return f"audited {ago}" + (" · inputs changed since (u)" if stale else "")


def finding_view(record: FindingRecord, runs: tuple[str, ...] = ()) -> AuditFindingView:
    body = record.body
    evidence = tuple((str(e.get("path", "")), e.get("sha256")) for e in body.get("evidence", []) if isinstance(e, dict))
    return AuditFindingView(
        id=record.id, check=record.check, check_name=str(body.get("check_name", "")), subject=record.subject,
        severity=record.severity, status=record.status, message=record.message, disclosure=record.disclosure,
        note=record.note, fix=str(body.get("fix", "")), values=dict(body.get("values", {})), evidence=evidence,
        claims=tuple(str(c) for c in body.get("claims", [])), integrity_class=str(body.get("integrity_class", "")),
        kind=str(body.get("kind", "auto")), scope=record.scope, fingerprint=record.fingerprint,
        first_seen=record.first_seen, last_seen=record.last_seen, status_changed_at=record.status_changed_at,
        status_by=record.status_by, reopened_reason=record.reopened_reason, runs=runs)


def finding_detail(f: AuditFindingView) -> str:
    """A finding's detail as a person reads it (the CLI and the TUI's finding screen): what, the numbers, the
    files, the fix, and what the user said. Unescaped: each face escapes box text for its own medium."""
    lines = [f"{f.id} [{f.check} {f.check_name}] {f.severity} · {f.status} ({f.status_by})",
             f"  subject: {f.subject}", f"  {f.message}"]
    lines += [f"  {key} = {value}" for key, value in f.values.items()]
    lines += [f"  evidence: {path}" + (f"  sha256 {sha[:12]}…" if sha else "") for path, sha in f.evidence]
    for label, text in (("fix", f.fix), ("disclosure", f.disclosure), ("note", f.note),
                        ("reopened", f.reopened_reason or "")):
        if text:
            lines.append(f"  {label}: {text}")
    return "\n".join(lines)


def inputs_fingerprint(root: Path, db: StateDB) -> str:
    """A digest of what the audits read, by path, size and modification time (a changed byte changes the time or
    size; V33 re-hashes the bytes themselves), plus the newest probe answer."""
    digest = hashlib.sha256()
    for path, info in sorted(_input_stats(root)):
        digest.update(f"{path}\0{info[0]}\0{info[1]}\n".encode("utf-8", "surrogateescape"))  # any name
    probes = db.probe_records()
    digest.update(repr(sorted(probes.items())).encode())
    return digest.hexdigest()


def _input_stats(root: Path) -> Iterable[tuple[str, tuple[int, int]]]:
    """(path relative to root, with /, (size, mtime)) of every input file: plain strings and one lstat per
    file, the relative folder computed once per folder (a Path, a join and relative_to per file were most of
    the fingerprint's ~4 ms for 50 capsules and a 600-file split)."""
    base = os.fspath(root)
    for name in INPUT_FILES:
        info = _stat(os.path.join(base, name))
        if info is not None:
            yield name, info
    for top in INPUT_TOPS:
        for folder, dirs, files in os.walk(os.path.join(base, top)):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            rel = Path(folder).relative_to(root).as_posix()
            for file in files:
                info = _stat(os.path.join(folder, file))
                if info is not None:
                    yield f"{rel}/{file}", info


def _stat(path: str) -> tuple[int, int] | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _run_dirs(root: Path) -> list[Path]:
    runs = root / "runs"
    return sorted(p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()) if runs.is_dir() else []


def _log_lines(run_dir: Path) -> Iterable[tuple[int, str]]:
    """Lines of the logs pulled with a run (`*.log` in its cells), numbered per file, bounded in size."""
    for path in sorted(run_dir.rglob("*.log")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_LOG_BYTES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        yield from enumerate(text.splitlines(), start=1)


def _case_insensitive(root: Path) -> bool:
    """Whether the project's file system folds case (macOS, Windows): V15 then compares files too."""
    config = root / "rgt.toml"
    swapped = root / "RGT.TOML"
    return config.exists() and swapped.exists() and os.path.samefile(config, swapped)
