"""`rgt probe RUN CHECK`: a VERIFY probe check (V20, V22, V27, V28) run against the user's model, from the command
line (docs/verify.md §1).

The service (services/audit/model_probe.py) runs the probe program for each cell, stores the answers and audits the
check; this prints each cell's answer and what the check then said about it. A probe that fails is one line on
stderr and exit 1, with nothing stored; a bad check or cell is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.cli.printers import print_json
from remote_gpu_trainer.cli.sessions import with_session
from remote_gpu_trainer.errors import EXIT_OK
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.audit.model_probe import CellAnswer, ProbeOutcome
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import AuditFindingView

PROBE_SCHEMA = "rgt-probe/v1"
LIVE = ("open", "acknowledged", "waived")


def probe(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.services.audit.model_probe import probe_check

    probe_check(args.check)  # a bad check name is refused before the project is even opened
    return with_session(args.project, lambda session: asyncio.run(_probe(session, args)), writes="probe")


async def _probe(session: Session, args: argparse.Namespace) -> int:
    from remote_gpu_trainer.services.audit.model_probe import probe_run

    try:
        outcome = await probe_run(session, args.run, args.check, cell=args.cell, on=args.on)
    finally:
        await session.close_transports()
    if args.format == "json":
        print_json(probe_document(outcome))
    else:
        _print_probe(outcome)
    return EXIT_OK


def cell_finding(outcome: ProbeOutcome, answer: CellAnswer) -> AuditFindingView | None:
    """The cell's live finding of this check (a fixed record means the check now passes)."""
    return next((f for f in outcome.findings if f.subject == answer.subject and f.status in LIVE), None)


def probe_document(outcome: ProbeOutcome) -> dict[str, Any]:
    from remote_gpu_trainer.report import finding_dict

    result = outcome.result
    cells = []
    for answer in outcome.answers:
        found = cell_finding(outcome, answer)
        cells.append({"cell": answer.cell, "subject": answer.subject, "where": answer.where,
                      "answer": dict(answer.answer), "verdict": found.severity if found else _verdict(outcome, answer),
                      "finding": finding_dict(found) if found else None})
    return {"schema": PROBE_SCHEMA, "run": outcome.run_id, "check": outcome.check, "name": outcome.name,
            "status": result.status if result else "not_run", "note": result.note if result else "",
            "cells": cells}


def _verdict(outcome: ProbeOutcome, answer: CellAnswer) -> str:
    """A cell without a live finding passed, unless the check did not judge it (no pulled capsule, a batch
    below the check's minimum: its note says why)."""
    return "pass" if outcome.result is not None and answer.subject in outcome.result.subjects else "not judged"


def _print_probe(outcome: ProbeOutcome) -> None:
    for answer in outcome.answers:
        fields = " ".join(f"{key}={_short(value)}" for key, value in answer.answer.items())
        print(escape_control(f"{answer.subject} ({answer.where}): {fields}"))
        found = cell_finding(outcome, answer)
        if found is not None:
            print(escape_control(f"  → {found.severity} {found.id} {found.status}: {found.message}"))
        else:
            print(f"  → {_verdict(outcome, answer)}")
    result = outcome.result
    if result is not None:
        note = f" ({result.note})" if result.note else ""
        print(escape_control(f"{outcome.check} {outcome.name}: {result.status}{note}. `rgt finding ID` shows one."))


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value[:8]) + (", …" if len(value) > 8 else "") + "]"
    return str(value)
