"""`rgt accept`: independent acceptance of a pulled bundle on a second machine, and comparing two acceptances
(docs/gate.md §2 for the bundle; the record and the core are described in audits/acceptance.py).

    rgt accept RUN [PROJECT] --on INSTANCE | --here     accept runs/RUN/ there, write its ACCEPTANCE record
    rgt accept [RUN] --compare A B [PROJECT]            A, B: record files, or machine names for RUN

Accept exits 0 when that machine found nothing wrong, 1 when it did (the record is written either way) or gave
no answer; compare exits 0 on MATCH, 1 on DIFF or INDEPENDENCE_FAILED, 2 when a record is unreadable or malformed
(one line naming the file). The service writes the record and the event; this module only prints.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.cli.printers import print_json
from remote_gpu_trainer.cli.sessions import with_session
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError, VerbFailed
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.audit.acceptance import AcceptOutcome, Comparison
    from remote_gpu_trainer.services.session import Session

COMPARE_SCHEMA = "rgt-accept-compare/v1"


def accept(args: argparse.Namespace) -> int:
    run, project = _run_and_project(args.run, args.project)
    if args.compare:
        return _compare(run, project, args.compare, args.format)
    if not args.on and not args.here:
        raise ConfigError("rgt accept: say where: --on INSTANCE or --here (or --compare A B to compare two "
                          "records; see rgt help accept)")
    if run is None:
        raise ConfigError("rgt accept: name the RUN to accept (rgt accept RUN --on INSTANCE)")
    return with_session(project, lambda session: asyncio.run(_accept(session, run, args.on, args.format)),
                        writes="accept")


def _run_and_project(run: str | None, project: str | None) -> tuple[str | None, str | None]:
    """`rgt accept --compare A B PROJECT` works too: a lone argument that is a folder or a .toml is the project."""
    if run is not None and project is None and (Path(run).is_dir() or Path(run).suffix == ".toml"):
        return None, run
    return run, project


async def _accept(session: Session, run: str, on: str | None, fmt: str) -> int:
    from remote_gpu_trainer.services.audit.acceptance import accept_run

    try:
        outcome = await accept_run(session, run, on=on, actor="cli")
    finally:
        await session.close_transports()
    if fmt == "json":
        print_json(outcome.document)
    else:
        _print_accept(outcome)
    if not outcome.ok:
        first = outcome.problems[0]
        raise VerbFailed(f"acceptance of {run} on {outcome.document['machine']}: {len(outcome.problems)} "
                         f"problem(s), first: {first.line()} (record: {outcome.path})")
    return EXIT_OK


def _print_accept(outcome: AcceptOutcome) -> None:
    document = outcome.document
    for problem in outcome.problems:
        print(escape_control(f"✖ {problem.line()}"))
    identity = document["identity"]
    checkpoints = document["checkpoints"]
    loaded = sum(1 for verdict in checkpoints.values() if verdict.get("ok"))
    print(escape_control(f"{document['machine']} ({identity['hostname']}): {len(document['files'])} file(s) "
                         f"re-hashed, {loaded}/{len(checkpoints)} checkpoint(s) loaded, {len(document['core'])} "
                         f"core entries"))
    if outcome.ok:
        print(escape_control(f"accepted: {outcome.path}"))


def _compare(run: str | None, project: str | None, names: list[str], fmt: str) -> int:
    from remote_gpu_trainer.config.project import load_project, resolve_project_file
    from remote_gpu_trainer.services.audit.acceptance import compare_names

    config = None
    if not all(Path(name).is_file() for name in names):
        config = load_project(resolve_project_file(project))
    comparison = compare_names(config, run, names)
    if fmt == "json":
        print_json(compare_document(comparison))
    else:
        _print_compare(comparison)
    return EXIT_OK if comparison.verdict.verdict == "MATCH" else EXIT_FAILED


def compare_document(comparison: Comparison) -> dict[str, Any]:
    verdict = comparison.verdict
    sides = {}
    for label, record in (("a", comparison.a), ("b", comparison.b)):
        sides[label] = {"path": record.path, "run": record.run, "machine": record.machine,
                        "identity": record.identity.to_dict(), "manifest_sha256": record.manifest_sha256,
                        "ok": record.ok}
    return {"schema": COMPARE_SCHEMA, "verdict": verdict.verdict, "reason": verdict.reason, **sides,
            "differences": [{"key": d.key, "a": d.a, "b": d.b, "missing": d.missing} for d in verdict.differences]}


def _print_compare(comparison: Comparison) -> None:
    verdict = comparison.verdict
    print(escape_control(f"{verdict.verdict}: {comparison.a.machine} vs {comparison.b.machine}: {verdict.reason}"))
    for difference in verdict.differences:
        if difference.missing is not None:
            print(escape_control(f"  {difference.key}: only in {'b' if difference.missing == 'a' else 'a'}"))
        else:
            print(escape_control(f"  {difference.key}: {difference.a!r} vs {difference.b!r}"))
    for record in (comparison.a, comparison.b):
        if not record.ok:
            print(escape_control(f"  note: {record.path} records problems (its acceptance failed)"))
