"""`rgt reconcile` as a service (docs/deliver.md §6): the documents of rgt.toml `[deliver] docs` against
EVIDENCE.json, answered in `reconcile.json` at the project root.

The algorithm is VERIFY's (audits/catalogue/reconcile/, which V31 runs over the same merged document list), so
the verb and the audit can never disagree about a number. This module only gathers the inputs, refuses an
answer that would be incomplete (an unreadable document or EVIDENCE.json, nothing to reconcile: exit 2, and
nothing written) and writes the answer atomically. It never edits a document.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.catalogue.reconcile.compare import MODES, reconcile
from remote_gpu_trainer.audits.catalogue.reconcile.files import read_documents
from remote_gpu_trainer.audits.catalogue.reconcile.model import ReconcileReport
from remote_gpu_trainer.audits.catalogue.reconcile.text import WINDOW
from remote_gpu_trainer.deliver.document import read_json_object
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import atomic_write

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import ProjectConfig

RECONCILE_NAME = "reconcile.json"
EVIDENCE_NAME = "EVIDENCE.json"


@dataclass(frozen=True)
class ReconcileOutcome:
    """The answer and where it was written (project-relative)."""

    report: ReconcileReport
    written: str = RECONCILE_NAME


def reconcile_project(project: ProjectConfig, mode: str | None = None) -> ReconcileOutcome:
    """Reconcile every configured document and write reconcile.json; ConfigError (exit 2, nothing written)
    when the answer could not be complete. `mode` overrides rgt.toml's (`[deliver] mode`, else rounding)."""
    chosen = mode or project.deliver.mode or "rounding"
    if chosen not in MODES:
        raise ConfigError(f"rgt reconcile: mode {chosen!r} is not one of {', '.join(MODES)}")
    if not project.deliver.docs:
        raise ConfigError(f"{project.file}: no documents to reconcile: list them in [deliver] docs "
                          '(e.g. docs = ["paper.md", "paper/*.tex"])')
    evidence = read_evidence(project.root)
    documents, problems = read_documents(project.root, project.deliver.docs)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"{first.path}: {first.message}; not reconciled ([deliver] docs in {project.file}){more}")
    report = reconcile(evidence, documents, window=_window(project), mode=chosen)
    if not report.claims:
        raise ConfigError(f"{project.root / EVIDENCE_NAME}: no evidence row holds a numeric value: nothing to "
                          "reconcile (run `rgt build evidence` first)")
    try:
        atomic_write(project.root / RECONCILE_NAME, report.to_json().encode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{project.root / RECONCILE_NAME}: cannot write: {exc.strerror or exc}") from None
    return ReconcileOutcome(report)


def read_evidence(root: Path) -> dict[str, object]:
    """EVIDENCE.json as a JSON object, read only as a regular file (a link could point anywhere), strictly
    (NaN, Infinity and duplicate keys are not evidence)."""
    return read_json_object(root / EVIDENCE_NAME,
                            "write the claims (docs/deliver.md §2), then `rgt build evidence`")


def _window(project: ProjectConfig) -> int:
    """V31's window when rgt.toml sets one ([verify.reconcile] window), so both read the same characters."""
    value = project.audit.overrides.get("V31", {}).get("window", WINDOW)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else WINDOW
