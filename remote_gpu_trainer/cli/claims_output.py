"""What `rgt build evidence` and `rgt build macros` print (docs/deliver.md §2, §5): per claim its ladder state
and why it stopped there, and per row the number in its inline form; `--format json` is one document.

rgt-build-evidence/v1  {schema, evidence: str, generated_at: str, macros: str|null,
                        reaudited: {fixed: int, raised: int}|null,
                        claims: [{id: str, state: str, stopped: str|null, disclosure: str|null, findings: [str],
                                  rows: [{subject: str, macro: str, value: float|null, inline: str,
                                          disclosure: str|null}]}]}

The strings come partly from files a box wrote (a metric's unit) and from notes people typed (a finding's
disclosure), so the text form escapes control characters like every other face.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remote_gpu_trainer.cli.printers import print_json
from remote_gpu_trainer.services.deliver.claims import BuildOutcome
from remote_gpu_trainer.text import escape_control

SCHEMA = "rgt-build-evidence/v1"


def evidence_document(outcome: BuildOutcome, root: Path) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "evidence": _rel(outcome.evidence_path, root), "generated_at": outcome.generated_at,
        "macros": _rel(outcome.macros_path, root) if outcome.macros_path is not None else None,
        "reaudited": None if outcome.reaudited is None else dict(zip(("fixed", "raised"), outcome.reaudited,
                                                                     strict=True)),
        "claims": [{"id": c.id, "state": c.state, "stopped": c.stopped, "disclosure": c.disclosure,
                    "findings": list(c.findings),
                    "rows": [{"subject": r.subject, "macro": "\\" + r.macro, "value": r.value, "inline": r.inline,
                              "disclosure": r.disclosure} for r in c.rows]} for c in outcome.claims],
    }


def print_outcome(outcome: BuildOutcome, root: Path, fmt: str) -> None:
    if fmt == "json":
        print_json(evidence_document(outcome, root))
        return
    rows = sum(len(c.rows) for c in outcome.claims)
    print(f"{_rel(outcome.evidence_path, root)}: {len(outcome.claims)} claim{'s' if len(outcome.claims) != 1 else ''}"
          f", {rows} row{'s' if rows != 1 else ''} generated at {outcome.generated_at}")
    for claim in outcome.claims:
        stopped = f"  ({escape_control(claim.stopped)})" if claim.stopped else ""
        print(f"  {claim.id}  {claim.state}{stopped}")
        for row in claim.rows:
            print(f"    \\{row.macro}  {escape_control(row.inline)}")
    if outcome.reaudited is not None:
        fixed, raised = outcome.reaudited
        print(f"re-audited after writing it: {fixed} finding{'s' if fixed != 1 else ''} fixed, {raised} raised; "
              "built again with them")
    if outcome.macros_path is not None:
        print(f"{_rel(outcome.macros_path, root)}: {rows} macro{'s' if rows != 1 else ''} with their …Disc companions")


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
