"""V31 `reconcile` (docs/verify.md §2, section G): the configured documents against EVIDENCE.json.

The algorithm is audits/catalogue/reconcile/; this module turns its answer into findings. A stale number is
an `error` on the line that states it (`doc:<path>:<line>`), an anchor several claims share is a `warn`, a
claim no document shows is an `info`. EVIDENCE.json may also declare `strings` (method and dataset names, the
version, the author list) that documents must spell verbatim, with `deprecated` spellings they must no
longer use; either failing is a `warn`.

`strings` is read in any of these shapes (the field is optional and its layout is not fixed elsewhere):
`{"method": "SR-Net"}`, `{"authors": ["A. Smith", "B. Jones"]}`,
`{"method": {"value": "SR-Net", "deprecated": ["SRNet"]}}`, or a list of `"SR-Net"` /
`{"name": "method", "value": "SR-Net", "deprecated": [...]}` entries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import (
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    result,
    skipped,
)
from remote_gpu_trainer.audits.catalogue.reconcile.compare import reconcile
from remote_gpu_trainer.audits.catalogue.reconcile.files import read_documents
from remote_gpu_trainer.audits.catalogue.reconcile.model import Document, DocumentProblem, Drift, ReconcileReport
from remote_gpu_trainer.audits.catalogue.reconcile.text import WINDOW, lines

CHECK, NAME = "V31", "reconcile"
NO_DOCS = "no documents configured ([deliver] docs or [verify.reconcile] docs in rgt.toml)"
DRIFT_FIX = "Update the line from EVIDENCE.json (or generate it: a macro from tables/macros), never the reverse."
ALIAS_FIX = "Give each claim its own alias in EVIDENCE.json (e.g. \"PSNR on Set5\") so a number names its claim."
RANGE_FIX = "Store the value in its own unit so that value × display_scale is a number a document can show."
STRING_FIX = "Spell names, version and authors as EVIDENCE.json's strings declare them."


@dataclass(frozen=True)
class ExpectedString:
    """A string documents must contain verbatim (`values`, each of them) and spellings they must not."""

    name: str
    values: tuple[str, ...]
    deprecated: tuple[str, ...] = ()


def check(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """Reconcile every configured document; skipped when none is configured or EVIDENCE.json is absent."""
    docs = params.get("docs") or []
    docs = [docs] if isinstance(docs, str) else list(docs)
    if not docs:
        return skipped(CHECK, NAME, NO_DOCS)
    if project.evidence is None:
        return skipped(CHECK, NAME, "EVIDENCE.json missing or unreadable")
    window = params.get("window", WINDOW)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        return skipped(CHECK, NAME, f"window must be a positive number of characters, not {window!r}")
    documents, problems = read_documents(project.root, docs)
    try:
        report = reconcile(project.evidence, documents, problems=problems, window=window,
                           mode=str(params.get("mode", "rounding")))
    except ValueError as exc:
        return skipped(CHECK, NAME, str(exc))
    strings = expected_strings(project.evidence.get("strings"))
    if not report.claims and not strings:
        return skipped(CHECK, NAME, "EVIDENCE.json has no numeric evidence value and no strings to reconcile")
    checked = tuple(dict.fromkeys(c.claim for c in report.claims))  # what every document is read against
    if not documents:  # nothing was read: no claim can be said to be missing from the documents
        unread = problem_findings(problems, checked)
        return result(CHECK, NAME, unread, [f.subject for f in unread])
    evidence_ref = EvidenceRef(project.evidence_path or "EVIDENCE.json", project.evidence_sha256)
    doc_refs = {d.path: EvidenceRef(d.path, d.sha256) for d in documents}
    findings = (drift_findings(report, evidence_ref, doc_refs) + ambiguity_findings(report, evidence_ref)
                + missing_findings(report, evidence_ref) + problem_findings(problems, checked)
                + string_findings(strings, documents, doc_refs))
    subjects = judged_subjects(report, documents, bool(strings))
    return result(CHECK, NAME, findings, subjects, keep_parts=True)  # a drift and a name keep their own values


def drift_findings(report: ReconcileReport, evidence_ref: EvidenceRef,
                   doc_refs: Mapping[str, EvidenceRef]) -> list[Finding]:
    """One `error` per (document, line) holding at least one number that no claim's value reads as."""
    by_line: dict[tuple[str, int], list[Drift]] = {}
    for drift in report.drifts:
        by_line.setdefault((drift.doc, drift.line), []).append(drift)
    findings = []
    for (doc, line), drifts in by_line.items():
        where = f"{doc}:{line}"
        said = "; ".join(f"reads {d.reported_text} where EVIDENCE.json {_says(d)}" for d in drifts)
        claims = tuple(dict.fromkeys(_claim_of(report, cid) for d in drifts for cid in d.claim_ids))
        findings.append(Finding(
            CHECK, f"doc:{where}", "error", f"{where} {said}",
            values={"drifts": [_drift_values(d) for d in drifts]},
            evidence=(evidence_ref, doc_refs[doc]) if doc in doc_refs else (evidence_ref,),
            disclosure=f"cross-document drift: {where}", fix=DRIFT_FIX, integrity_class="negligence",
            claims=claims))
    return findings


def _says(drift: Drift) -> str:
    claim = drift.claim_ids[0]
    others = f"; also compared with {', '.join(drift.claim_ids[1:])}" if len(drift.claim_ids) > 1 else ""
    return f"has {drift.metric} = {drift.expected} ({claim}: {drift.authoritative!r}{others})"


def _drift_values(drift: Drift) -> dict[str, Any]:
    return {"col": drift.col, "claim_ids": list(drift.claim_ids), "metric": drift.metric,
            "authoritative": drift.authoritative, "expected": drift.expected, "reported": drift.reported,
            "decimals": drift.decimals, "context": drift.context}


def _claim_of(report: ReconcileReport, scalar_id: str) -> str:
    """The EVIDENCE claim id of a scalar claim id (`C1#0` → `C1`)."""
    return next((c.claim for c in report.claims if c.id == scalar_id), scalar_id)


def ambiguity_findings(report: ReconcileReport, evidence_ref: EvidenceRef) -> list[Finding]:
    """A `warn` per anchor shared by claims with different values: a number after it is accepted when it
    fits any of them, so it cannot show which one it reports; and one per row whose scaled value is beyond a
    double (skipped, so not reconciled)."""
    findings = []
    for note in report.warnings:
        if note.kind != "ambiguous_anchor":
            findings.append(Finding(CHECK, f"claim:{note.claim_ids[0]}", "warn",
                                    f"{note.claim_ids[0]}: {note.detail}", values={"kind": note.kind},
                                    evidence=(evidence_ref,), fix=RANGE_FIX,
                                    claims=(note.claim_ids[0].partition("#")[0],)))
            continue
        claims = tuple(dict.fromkeys(_claim_of(report, cid) for cid in note.claim_ids))
        findings.append(Finding(
            CHECK, f"claim:{note.claim_ids[0]}", "warn",
            f"anchor {note.anchor!r} is shared by {', '.join(note.claim_ids)} with different values",
            values={"anchor": note.anchor, "claim_ids": list(note.claim_ids)}, evidence=(evidence_ref,),
            disclosure=f"ambiguous document anchor {note.anchor!r}", fix=ALIAS_FIX, claims=claims))
    return findings


def missing_findings(report: ReconcileReport, evidence_ref: EvidenceRef) -> list[Finding]:
    """An `info` per claim no document shows consistently (docs/verify.md §2 sets info for V31, whatever
    reconcile.json's own severity for a claim with a paper anchor)."""
    return [Finding(CHECK, f"claim:{m.claim_id}", "info",
                    f"{m.claim_id} ({m.metric} = {m.authoritative!r}) is quoted consistently in no configured document",
                    values={"metric": m.metric, "authoritative": m.authoritative, "paper_anchor": m.paper_anchor},
                    evidence=(evidence_ref,), integrity_class="negligence", claims=(m.claim,))
            for m in report.missing_from_docs]


def problem_findings(problems: Sequence[DocumentProblem], claims: Sequence[str] = ()) -> list[Finding]:
    """A `warn` per configured document that could not be read: it was not reconciled. It touches every claim
    the document was read against (`claims`, every claim with a numeric value), so the ladder and each number's
    disclosure carry it: an unread document checked nothing, and a drift it held must not vanish unsaid."""
    return [Finding(CHECK, f"doc:{p.path}", "warn", f"{p.path}: {p.message}; not reconciled",
                    values={"problem": p.message},
                    disclosure=f"document not reconciled: {p.path} ({p.message})",
                    fix="Fix the path in rgt.toml [deliver] docs (project-relative, inside the project).",
                    claims=tuple(claims))
            for p in problems]


def judged_subjects(report: ReconcileReport, documents: Sequence[Document], strings: bool) -> list[str]:
    """Every line of every document read and every claim: a drift fixed on a line, or a claim now shown,
    passes, so its record can be marked fixed."""
    subjects = [f"doc:{d.path}:{n}" for d in documents for n in range(1, len(lines(d.text)) + 1)]
    subjects += [f"claim:{c.id}" for c in report.claims]
    return subjects + (["project"] if strings else [])


# --- strings -------------------------------------------------------------------------------------------------

def expected_strings(raw: Any) -> list[ExpectedString]:
    """EVIDENCE.json `strings` in any of the shapes the module docstring lists; anything else is ignored."""
    if isinstance(raw, Mapping):
        return [s for name, spec in raw.items() if (s := _expected(str(name), spec)) is not None]
    if isinstance(raw, list):
        found = []
        for entry in raw:
            name = entry.get("name") or entry.get("id") if isinstance(entry, Mapping) else entry
            spec = _expected(str(name), entry) if isinstance(name, str) else None
            if spec is not None:
                found.append(spec)
        return found
    return []


def _expected(name: str, spec: Any) -> ExpectedString | None:
    if isinstance(spec, Mapping):
        values, deprecated = _texts(spec.get("value", spec.get("text"))), _texts(spec.get("deprecated"))
    else:
        values, deprecated = _texts(spec), ()
    return ExpectedString(name, values, deprecated) if values or deprecated else None


def _texts(raw: Any) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return tuple(item for item in items if isinstance(item, str) and item.strip())


def string_findings(strings: Sequence[ExpectedString], documents: Sequence[Document],
                    doc_refs: Mapping[str, EvidenceRef]) -> list[Finding]:
    """`warn` for a declared string no document spells verbatim (subject `project`) and for every line that
    still uses a deprecated spelling (its `doc:<path>:<line>`)."""
    findings = []
    absent = [(s.name, v) for s in strings for v in s.values if not any(v in d.text for d in documents)]
    if absent and documents:
        listed = ", ".join(f"{name} {value!r}" for name, value in absent)
        findings.append(Finding(CHECK, "project", "warn", f"not spelled verbatim in any document: {listed}",
                                values={"absent": [{"name": n, "value": v} for n, v in absent]},
                                evidence=tuple(doc_refs.values()), fix=STRING_FIX, integrity_class="negligence"))
    for spec in strings:
        for doc in documents:
            findings += _deprecated_uses(spec, doc, doc_refs[doc.path])
    return findings


def _deprecated_uses(spec: ExpectedString, doc: Document, ref: EvidenceRef) -> list[Finding]:
    """Lines using a deprecated spelling as a whole word, outside an occurrence of the current one (an old
    name inside the new one, `SRNet` in `SRNet-v2`, is not a use)."""
    findings = []
    for number, line in enumerate(lines(doc.text), 1):
        current = [m.span() for v in spec.values for m in re.finditer(re.escape(v), line)]
        used = [old for old in spec.deprecated for m in _word(old).finditer(line)
                if not any(a <= m.start() and m.end() <= b for a, b in current)]
        if used:
            now = " / ".join(repr(v) for v in spec.values) or "no longer used"
            findings.append(Finding(
                CHECK, f"doc:{doc.path}:{number}", "warn",
                f"{doc.path}:{number} uses the deprecated {spec.name} {', '.join(map(repr, dict.fromkeys(used)))} "
                f"(now {now})", values={"name": spec.name, "deprecated": list(dict.fromkeys(used)),
                                        "current": list(spec.values)},
                evidence=(ref,), fix=STRING_FIX, integrity_class="negligence"))
    return findings


def _word(text: str) -> re.Pattern[str]:
    return re.compile(r"(?<![^\W_])" + re.escape(text) + r"(?![^\W_])")


CHECKS = {CHECK: check}
