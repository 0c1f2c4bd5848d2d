"""The claims of EVIDENCE.json as the Deliver panel and `rgt --report` show them (docs/deliver.md §8, §9), and the
careful reader of the project's JSON files that the Deliver view (services/deliver/build.py) shares.

Its own module so that the report, which shows the claims and nothing else of DELIVER, does not import what the
Deliver view needs to judge figures and tables (provenance, sources, the evidence store): issue 29 measured that
at ~10 ms of each `rgt --report` (docs/architecture.md §5). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.generated_row import GeneratedRow
from remote_gpu_trainer.audits.catalogue.load import finite
from remote_gpu_trainer.deliver import disclosure, evidence
from remote_gpu_trainer.deliver.evidence import RowSpec
from remote_gpu_trainer.deliver.inputs import read_input
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import lstat_or_none
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.views import ClaimView

EVIDENCE_FILE = "EVIDENCE.json"


@dataclass
class ProjectJson:
    """The project's JSON files as one view build reads them, and the lines it could not read, in order."""

    root: Path
    problems: list[str] = field(default_factory=list)

    def json(self, rel: str) -> Any:
        """A JSON file of the project, or None (absent: silently; unreadable: one problem line). Read like
        evidence (deliver/inputs.read_input): a symlink at any step of the path is refused, never read through."""
        if lstat_or_none(self.root / rel) is None:
            return None
        try:
            data = read_input(self.root, rel, "Deliver panel").data
        except ConfigError as exc:
            self.problems.append(str(exc))
            return None
        try:
            return loads_strict(data)
        except (ValueError, UnicodeDecodeError) as exc:
            self.problems.append(f"{rel}: not readable JSON ({exc})")
            return None


def claim_views(root: Path) -> tuple[tuple[ClaimView, ...], tuple[str, ...]]:
    """The claims alone, as the panel shows them, and what could not be read: the evidence section of
    `rgt --report` (services/deliver/results.py), without hashing any figure or table."""
    read = ProjectJson(root)
    return claims_of(read.json(EVIDENCE_FILE), read), tuple(read.problems)


def claims_of(document: Any, read: ProjectJson) -> tuple[ClaimView, ...]:
    if document is None:
        return ()
    try:
        specs = {spec.id: spec for spec in evidence.validate(document)}
    except ConfigError as exc:
        read.problems.append(str(exc))
        return ()
    views = []
    for claim in document["claims"]:
        spec = specs[claim["id"]]
        stored = claim.get("evidence") or []
        findings = strings_of(claim.get("findings"))
        views.append(ClaimView(
            id=spec.id, statement=text_of(claim.get("statement")),
            state=text_of(claim.get("state")) or "not_built",
            numbers=tuple(_inline(row, stored[row.index], findings) for row in spec.rows),
            disclosure=text_of(claim.get("disclosure")), findings=findings,
            items=tuple(_items(stored[row.index]) for row in spec.rows)))
    return tuple(views)


def _inline(spec: RowSpec, stored: Mapping[str, Any], findings: tuple[str, ...]) -> str:
    """A row's number with its disclosure in the inline form of deliver/disclosure.py, from the generated
    fields `rgt build evidence` stored (the findings and drifts it weighed are in the claim's disclosure)."""
    if not isinstance(stored.get("seeds"), int):
        return f"{spec.metric}: not built (rgt build evidence)"
    variance = stored.get("variance")
    row = GeneratedRow(value=finite(stored.get("value")), direction=text_of(stored.get("direction")) or None,
                       split=text_of(stored.get("split")) or None,
                       n=stored["n"] if isinstance(stored.get("n"), int) else None, seeds=stored["seeds"],
                       variance=variance if isinstance(variance, dict) else None, sources=())
    notes = tuple(disclosure.FindingNote(finding, "") for finding in findings)
    facts = disclosure.RowFacts(spec, row, findings=notes)
    stored_items = _items(stored)
    said = disclosure.Disclosure(tuple((code, text) for code, text in stored_items if text), findings) \
        if stored_items else disclosure.disclose(facts)  # as built; recomputed only for a file that lacks them
    return f"{spec.metric} {disclosure.inline(facts, said)}"


def _items(stored: Mapping[str, Any]) -> tuple[tuple[str, str | None], ...]:
    """The row's D1…D8 as `rgt build evidence` stored them (empty before the first build)."""
    said = stored.get("disclosures")
    if not isinstance(said, Mapping):
        return ()
    return tuple((code, text if isinstance(text, str) else None) for code, text in said.items()
                 if isinstance(code, str))


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def list_of(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def strings_of(value: Any) -> tuple[str, ...]:
    """The strings of a JSON list; anything else (a hand-edited string, a number) holds none."""
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list) else ()
