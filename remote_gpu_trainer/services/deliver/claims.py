"""`rgt build evidence` and `rgt build macros` as a service (docs/deliver.md §2, §5): gather from the project's
state what the pure DELIVER code needs, then write EVIDENCE.json's generated fields and the LaTeX macros.

What is gathered, and from where: the capsules and EVIDENCE.json through VERIFY's one loader (services/audit/audit.py
`gather`); the VERIFY findings and their status from the state database; whether each source file is bytes a
pull of rgt brought and each source run is pull-verified by the teardown gate's own evidence conditions
(services/deliver/sources.py, so the ladder and the gate can never disagree about a verification); the last
audit's answers; the documents rgt.toml names for
reconcile (the list V31 reads), reconciled against the values being written; and each figure's and table's
`qa` from its figure.json / table.json. Nothing here decides a rule: deliver/ does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.generated import generate_row
from remote_gpu_trainer.audits.catalogue.generated_row import GeneratedRow
from remote_gpu_trainer.audits.catalogue.model import Number, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.reconcile.compare import reconcile
from remote_gpu_trainer.audits.catalogue.reconcile.files import read_documents
from remote_gpu_trainer.audits.catalogue.reconcile.model import ReconcileReport
from remote_gpu_trainer.audits.catalogue.runner import params_for, specs
from remote_gpu_trainer.audits.catalogue.statistics import required_seeds
from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.config.project import ProjectConfig
from remote_gpu_trainer.deliver import disclosure, evidence, ladder, macros
from remote_gpu_trainer.deliver.disclosure import FindingNote, OutputQA, RowFacts
from remote_gpu_trainer.deliver.evidence import ClaimSpec, RowSpec
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import atomic_write, read_regular
from remote_gpu_trainer.services.audit import audit
from remote_gpu_trainer.services.deliver.sources import SourceJudge, Unchecked, grouped, words
from remote_gpu_trainer.state.audit import FindingRecord
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.strict_json import loads_strict

LIVE = ("open", "acknowledged")


@dataclass(frozen=True)
class RowOutcome:
    """One evidence row after a build: its number, its shown and inline forms, its disclosures, and the macro that
    carries it."""

    subject: str
    macro: str  # the macro's name, without the backslash
    value: float | None
    shown: str  # the number at its precision and display scale (n/a without a value)
    rest: str  # the inline form after the number
    disclosure: str | None  # the row's joined D-texts
    companion: str  # what the `…Disc` macro holds: `rest` with each finding's disclosure text as well
    items: Mapping[str, str | None]  # D1…D8: each item's text, None when it has nothing to disclose

    @property
    def inline(self) -> str:
        return f"{self.shown} {self.rest}"


@dataclass(frozen=True)
class ClaimOutcome:
    """One claim after a build: its ladder state and why it stopped, its disclosure and findings, and its rows."""

    id: str
    state: str
    stopped: str | None  # why the ladder stopped where it did
    disclosure: str | None
    findings: tuple[str, ...]
    rows: tuple[RowOutcome, ...]


@dataclass(frozen=True)
class BuildOutcome:
    """What `rgt build evidence` wrote and found: the EVIDENCE.json path, every claim, the macros file, and any
    re-audit or unread document to report."""

    evidence_path: Path
    generated_at: str
    claims: tuple[ClaimOutcome, ...]
    macros_path: Path | None = None
    reaudited: tuple[int, int] | None = None  # (fixed, raised) when a re-audit moved findings and it built again
    unread: tuple[str, ...] = ()  # configured documents that could not be read (`<doc> (<why>)`): not reconciled


@dataclass(frozen=True)
class _Context:
    """What every claim of one build is judged against, gathered once."""

    project: ProjectConfig
    found: ProjectEvidence
    records: tuple[FindingRecord, ...]  # open or acknowledged
    unverified: Mapping[str, str]  # run -> why it is not pull-verified (every run the claims cite)
    audit_gap: Mapping[str, str]  # run -> why the last audit does not cover it
    seed_params: Mapping[str, Any]
    sources: SourceJudge  # whether each source file was pulled and verified (services/deliver/sources.py)


def build_evidence(project: ProjectConfig, db: StateDB, now: datetime, *, with_macros: bool = False,
                   reaudit: bool = False) -> BuildOutcome:
    """Fill EVIDENCE.json's generated fields from the capsules (and, `with_macros`, write final.tex from the
    same rows), both atomically; a bad EVIDENCE.json is refused before anything is written.

    With `reaudit`, a project audited before is audited again when an input changed (the file just written is
    one), and built again when that fixed or raised a finding: the checks that read EVIDENCE.json judged it
    before its fields were generated, so the disclosures and the ladder then quote the audit of the numbers
    written (a "missing n, seeds" finding on an unbuilt row is never disclosed beside the built row)."""
    outcome = _build(project, db, now, with_macros)
    audited = audit.audit_if_changed(project, db) if reaudit else None
    if audited is None or not (audited.fixed or audited.raised):
        return outcome
    return replace(_build(project, db, now, with_macros), reaudited=(len(audited.fixed), len(audited.raised)))


def _build(project: ProjectConfig, db: StateDB, now: datetime, with_macros: bool) -> BuildOutcome:
    found = audit.gather(project, db)
    claims = evidence.validate(_evidence_of(found))
    context = _context(project, db, found, claims)
    generated = {(c, row.index): generate_row(found, _number(found, row)) for c, claim in enumerate(claims)
                 for row in claim.rows}
    stamp = iso_z(now)
    source = found.evidence or {}
    rows = {key: row.fields() for key, row in generated.items()}
    draft = evidence.filled(source, stamp, rows, [{} for _ in claims])
    report = _reconciled(project, draft)
    outcomes = [_claim(context, claim, c, generated, report) for c, claim in enumerate(claims)]
    fields = [{"disclosure": o.disclosure, "findings": list(o.findings), "state": o.state} for o in outcomes]
    for c, outcome in enumerate(outcomes):
        for r, row in enumerate(outcome.rows):
            rows[(c, r)] = {**rows[(c, r)], "disclosures": dict(row.items)}
    document = evidence.filled(source, stamp, rows, fields)
    macro_bytes = macros.render([macros.MacroRow(r.subject, r.macro, r.shown, r.companion)
                                 for o in outcomes for r in o.rows],
                                _captions(project.root, claims, outcomes)) if with_macros else None
    macros_path = _macros_target(project.root) if with_macros else None
    target = project.root / evidence.FILE
    atomic_write(target, evidence.render(document))
    if macros_path is not None and macro_bytes is not None:
        macros_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(macros_path, macro_bytes)
    return BuildOutcome(target, stamp, tuple(outcomes), macros_path, unread=unread_documents(report))


def _evidence_of(found: ProjectEvidence) -> Mapping[str, Any]:
    if found.evidence is not None:
        return found.evidence
    problem = next((p for p in found.problems if p.path == evidence.FILE), None)
    if problem is not None:
        raise ConfigError(f"{evidence.FILE}: {problem.message}")
    if (found.root / evidence.FILE).exists():
        raise ConfigError(f"{evidence.FILE}: not a regular file (a link or a folder): write the claims map there")
    raise ConfigError(f"no {evidence.FILE} in {found.root}: write the claims map first (docs/deliver.md §2)")


def _number(found: ProjectEvidence, row: RowSpec) -> Number:
    """The row as VERIFY reads it (so V29 recomputes exactly what is written here)."""
    number = next((n for n in found.numbers if n.subject == row.subject), None)
    if number is None:  # validate() accepts only rows the loader reads; this would be a bug in one of them
        raise ConfigError(f"{evidence.FILE}: {row.subject} is not read by VERIFY's loader")
    return number


def _context(project: ProjectConfig, db: StateDB, found: ProjectEvidence, claims: Sequence[ClaimSpec]) -> _Context:
    runs = sorted({cell.split("/")[0] for claim in claims for row in claim.rows for cell in row.cells})
    records = tuple(r for r in db.finding_records() if r.status in LIVE)
    sources = SourceJudge(project, db)
    unverified = {run: why for run in runs if (why := sources.not_verified(run)) is not None}
    return _Context(project, found, records, unverified, _audit_gaps(db, runs),
                    params_for(specs()["V04"], project.audit.overrides), sources)


def _audit_gaps(db: StateDB, runs: Sequence[str]) -> dict[str, str]:
    """Per run, why the last audit does not cover its capsules: none ran, a check never answered, or the run
    was verified (its capsules pulled) after it."""
    last = db.last_catalogue_audit()
    if last is None:
        return {run: "no VERIFY audit yet: run rgt audit" for run in runs}
    answered = {str(row.get("check")) for row in last.results}
    unanswered = [cid for cid in specs() if cid not in answered]
    gaps = {}
    for run in runs:
        record = db.last_verification_record(run)
        if unanswered:
            gaps[run] = f"VERIFY checks never run: {', '.join(unanswered)}: run rgt audit"
        elif record is not None and record.at > last.at:
            gaps[run] = f"run {run} was verified after the last audit: run rgt audit"
    return gaps


def _reconciled(project: ProjectConfig, draft: Mapping[str, Any]) -> ReconcileReport | None:
    """The documents V31 reads, against the values being written now (a reconcile.json on disk may be older
    than them); None when rgt.toml names no document."""
    params = project.audit.overrides.get("V31", {})
    docs = params.get("docs") or []
    docs = [docs] if isinstance(docs, str) else list(docs)
    if not docs:
        return None
    documents, problems = read_documents(project.root, docs)
    return reconcile(draft, documents, problems=problems, mode=str(params.get("mode", "rounding")))


def _claim(context: _Context, claim: ClaimSpec, position: int, generated: Mapping[tuple[int, int], GeneratedRow],
           report: ReconcileReport | None) -> ClaimOutcome:
    rows: list[RowOutcome] = []
    finding_ids: list[str] = []
    texts: list[str] = []
    for spec in claim.rows:
        facts = _facts(context, spec, generated[(position, spec.index)], report)
        said = disclosure.disclose(facts)
        finding_ids += said.finding_ids
        texts += [text for _, text in said.items]
        rows.append(RowOutcome(spec.subject, macros.macro_name(claim.id, spec.index, len(claim.rows)),
                               facts.row.value, disclosure.shown_value(facts), disclosure.inline_rest(facts, said),
                               said.text, disclosure.inline_rest(facts, said, finding_texts=True), said.by_item()))
    touching = _touching(context, claim, None)
    runs = {cell.split("/")[0] for row in claim.rows for cell in row.cells}
    unpulled = grouped((u for spec in claim.rows for u in _unchecked(context, generated[(position, spec.index)])
                        if not u.pulled), kind=False)  # no measurement at all: the claim stays planned
    climbed = ladder.climb(ladder.ClaimEvidence(
        rows=len(claim.rows),
        missing_cells=tuple(c for key, g in generated.items() if key[0] == position for c in g.missing),
        unpulled=tuple(unpulled),
        unverified={run: why for run, why in context.unverified.items() if run in runs},
        audit_gap=next((why for run, why in sorted(context.audit_gap.items()) if run in runs), None),
        open_findings=tuple(r.id for r in touching if r.status == "open"),
        not_quoted=_not_quoted(claim, report)))
    return ClaimOutcome(claim.id, climbed.state, climbed.stopped, "; ".join(dict.fromkeys(texts)) or None,
                        tuple(sorted(set(finding_ids) | {r.id for r in touching})), tuple(rows))


def _facts(context: _Context, spec: RowSpec, row: GeneratedRow, report: ReconcileReport | None) -> RowFacts:
    used = list(row.used)
    number = _number(context.found, spec)
    required, _ = required_seeds(number, used, context.seed_params)
    capsules = [c for c in (context.found.capsule(key) for key in spec.cells) if c is not None]
    claim_spec = ClaimSpec(spec.claim, None, (spec,))
    return RowFacts(
        spec=spec, row=row, required_seeds=required,
        legacy=tuple(c.key for c in capsules if c.source == "legacy"),
        no_results=tuple(v.capsule.key for v in used if v.test.results is None and v.capsule.source != "legacy"),
        findings=tuple(FindingNote(r.id, _disclosed(r)) for r in _touching(context, claim_spec, spec)),
        drifts=tuple(f"{d.doc}:{d.line}" for d in (report.drifts if report else ())
                     if spec.subject.removeprefix("claim:") in d.claim_ids),
        unread=unread_documents(report),
        outputs=tuple(_output(context.project.root, kind, ident)
                      for kind, ids in (("figure", spec.figures), ("table", spec.tables)) for ident in ids),
        dirty=tuple(c.key for c in capsules if c.prov("code", "dirty") is True),
        unverified=words(found) if (found := _unchecked(context, row)) else "")


def _unchecked(context: _Context, row: GeneratedRow) -> list[Unchecked]:
    """The row's source files that no pull of rgt brought, or whose run is not pull-verified: each number
    built from one says so (D8), and the ladder keeps its claim below the step it lacks."""
    return context.sources.judge_all((str(source.get("path")), source.get("sha256")) for source in row.sources)


def unread_documents(report: ReconcileReport | None) -> tuple[str, ...]:
    """`<doc> (<why>)` of every configured document the build's reconcile could not read (a FIFO, a link out of
    the project, a missing file): each checked nothing, so every number it was meant to check says so."""
    return tuple(f"{p.path} ({p.message})" for p in (report.problems if report else ()))


def _touching(context: _Context, claim: ClaimSpec, row: RowSpec | None) -> list[FindingRecord]:
    """Open or acknowledged findings about the claim (or just this row of it): their subject is the claim, the
    row, a source capsule or number, or their `claims` name the claim."""
    rows = claim.rows if row is None else (row,)
    subjects = {f"claim:{claim.id}"} | {r.subject for r in rows}
    subjects |= {f"capsule:{cell}" for r in rows for cell in r.cells}
    subjects |= {f"number:{cell.split('/')[0]}/{r.test_id}/{r.metric}" for r in rows for cell in r.cells}
    return [record for record in context.records
            if record.subject in subjects or claim.id in record.body.get("claims", [])]


def _disclosed(record: FindingRecord) -> str:
    """An acknowledged finding's disclosure as the user wrote it; an open one's as the check worded it."""
    if record.status == "acknowledged" and record.disclosure:
        return record.disclosure
    return str(record.body.get("finding_disclosure") or record.message)


def _not_quoted(claim: ClaimSpec, report: ReconcileReport | None) -> str | None:
    """Why the claim is not quoted consistently in the document its paper_anchor names (None: it is)."""
    if report is None:
        return "no documents to reconcile: name them in rgt.toml [deliver] docs"
    if not claim.paper_anchor:
        return "no paper_anchor: the claim names no document that asserts it"
    if report.problems:
        return f"document unreadable: {report.problems[0].path} ({report.problems[0].message})"
    named = [doc for doc in report.documents if doc in claim.paper_anchor or Path(doc).name in claim.paper_anchor]
    ids = [row.subject.removeprefix("claim:") for row in claim.rows]
    drifts = [f"{d.doc}:{d.line}" for d in report.drifts if any(i in d.claim_ids for i in ids)]
    if drifts:
        return f"cross-document drift: {', '.join(drifts)}"
    for scalar in ids:
        where = report.coverage.get(scalar, ())
        if not any(not named or place.rsplit(":", 1)[0] in named for place in where):
            return f"{scalar} not quoted in {', '.join(named) if named else 'any reconciled document'}"
    return None


def _output(root: Path, kind: str, ident: str) -> OutputQA:
    """D7's view of a figure or table folder: its contract's `qa`, or not built. A folder that leads out of
    the project (a link) is not read: what it holds is no output of this project."""
    folder = root / f"{kind}s" / ident
    if folder.exists() and not folder.resolve().is_relative_to(root.resolve()):
        return OutputQA(kind, ident, True, False, (("folder", "outside the project root, not read"),))
    data = read_regular(folder / f"{kind}.json")
    if data is None:
        return OutputQA(kind, ident, built=False)
    try:
        body = loads_strict(data)
    except (ValueError, UnicodeDecodeError):
        return OutputQA(kind, ident, True, False, (("qa", f"{kind}.json unreadable"),))
    qa = body.get("qa") if isinstance(body, dict) else None
    if not isinstance(qa, dict):
        return OutputQA(kind, ident, True, False, (("qa", "not checked"),))
    checks = qa.get("checks")
    checks = checks if isinstance(checks, dict) else {}
    flagged = tuple((str(name), str(status)) for name, status in sorted(checks.items()) if status != "pass")
    own = body.get("disclosure")
    return OutputQA(kind, ident, True, qa.get("passed") is True, flagged, str(qa.get("notes") or ""),
                    own if isinstance(own, str) else "", deterministic=qa.get("deterministic") is not False)


def _captions(root: Path, claims: Sequence[ClaimSpec], outcomes: Sequence[ClaimOutcome]) -> list[macros.Caption]:
    """Each figure and table an evidence row names gets the disclosures its caption must carry (docs/deliver.md
    §5): the folder's own, then every number it shows in the inline form, `C1-main-psnr: psnr 31.42 dB ↑ (...)`."""
    shown: dict[tuple[str, str], list[str]] = {}
    for claim, outcome in zip(claims, outcomes, strict=True):
        for spec, row in zip(claim.rows, outcome.rows, strict=True):
            for kind, ids in (("figure", spec.figures), ("table", spec.tables)):
                for ident in ids:
                    shown.setdefault((kind, ident), []).append(f"{claim.id}: {spec.metric} {row.inline}")
    captions = []
    for (kind, ident), numbers in sorted(shown.items()):
        own = _output(root, kind, ident).disclosure
        captions.append(macros.Caption(f"{kind}:{ident}", macros.caption_name(kind, ident),
                                       "; ".join(([own] if own else []) + numbers)))
    return captions


def _macros_target(root: Path) -> Path:
    """tables/macros/final.tex, refused (before anything is written) when a folder on the way is a link out of
    the project."""
    target = root / macros.PATH
    top = root.resolve()
    for folder in (target.parent.parent, target.parent):
        if folder.exists() and not folder.resolve().is_relative_to(top):
            raise ConfigError(f"{macros.PATH}: {folder.relative_to(root)} leads out of the project root; refused")
    return target
