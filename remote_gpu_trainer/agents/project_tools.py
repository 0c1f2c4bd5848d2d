"""The handlers about the project rather than one run's arc: status, report, events, findings, recovery note, and
VERIFY's and DELIVER's verbs (audit, build, reconcile, completeness). tools.py lists them.

Each returns the document its CLI verb prints with `--format json`, built by the same function (cli/schemas.py,
report.py, cli/audit_verbs.py, cli/deliver_verbs.py, cli/claims_output.py) from the same service.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Annotated, Any, Literal

from pydantic import Field

from remote_gpu_trainer.agents.calls import Call, Outcome
from remote_gpu_trainer.errors import ConfigError, VerbFailed

OptionalRun = Annotated[str | None, Field(description="a run id ([runs.ID] of rgt.toml); none: the whole project")]
RECOVERY_SCHEMA = "rgt-recovery-note/v1"
FINDINGS_SCHEMA = "rgt-findings/v1"  # the report's `verify` block (report.audit_dict), for the project or one run


async def status(call: Call, every_project: Annotated[bool, Field(
        description="every project this user opened (rgt status --all), not only this one")] = False) -> Outcome:
    """`rgt status [--all] --format json`: every box with its burn, cost and idle time, and the orphans."""
    from remote_gpu_trainer.cli import schemas
    from remote_gpu_trainer.services.fleet import status as fleet

    roots = fleet.registered_roots() if every_project else [call.project_file.parent]
    view = await fleet.fleet_view(roots, timeout_s=20.0, known_roots=fleet.registered_roots())
    return Outcome(schemas.status_document(view))


async def report(call: Call) -> Outcome:
    """`rgt --report --format json`: the whole view model (results, meter, instances, runs, gate, VERIFY)."""
    return Outcome(await report_document(call))


async def report_document(call: Call) -> dict[str, Any]:
    """The report's document, as cli/faces.py builds it: the logs caught up, every box asked, the results read."""
    from remote_gpu_trainer.clock import report_now
    from remote_gpu_trainer.report import to_dict
    from remote_gpu_trainer.services.report_overview import report_overview

    overview = dataclasses.replace(await report_overview(call.session()), generated_at=report_now())
    return to_dict(overview)


async def events(call: Call, run: OptionalRun = None, limit: Annotated[int, Field(
        ge=1, le=2000, description="the newest N events")] = 200) -> Outcome:
    """`rgt events --format json`: the append-only event log, with each event's actor."""
    from remote_gpu_trainer.cli import schemas

    if run is not None:
        call.run(run)
    found = call.session().db.events(run_id=run, limit=limit)
    return Outcome(schemas.events_document(found, run))


async def findings(call: Call, finding: Annotated[str | None, Field(
        description="one finding's id (e.g. F-0003): its full record; none: every finding")] = None,
        run: OptionalRun = None) -> Outcome:
    """One VERIFY finding as `rgt finding ID --format json`, or every finding with each check's last answer (the
    report's `verify` block, with its schema and run), for one run when `run` is given."""
    from remote_gpu_trainer.report import audit_dict, finding_dict
    from remote_gpu_trainer.services.audit.audit import audit_view, finding_view, for_run

    session = call.session()
    if finding is not None:
        record = session.db.finding_record(finding)
        if record is None:
            raise ConfigError(f"no VERIFY finding {finding} (rgt_findings without an id lists them)")
        return Outcome(finding_dict(finding_view(record)))
    if run is not None:
        call.run(run)
    view = await asyncio.to_thread(audit_view, session.project.root, session.db, session.clock())
    shown = for_run(view, run) if run is not None else view
    return Outcome({"schema": FINDINGS_SCHEMA, "run": run, **audit_dict(shown)})


async def recovery_note(call: Call, run: Annotated[str, Field(description="the run's id")]) -> Outcome:
    """The run's recovery note (in .rgt/recovery/, named for the run): what to do after a crash or a preemption,
    kept current by every look at the run."""
    from remote_gpu_trainer.services.watch.recovery import note_path

    config = call.run(run)
    path = note_path(call.session().project, config.id)
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    return Outcome({"schema": RECOVERY_SCHEMA, "run": config.id, "path": str(path), "exists": text is not None,
                    "lines": text.splitlines() if text is not None else []})


async def audit(call: Call, run: OptionalRun = None, checks: Annotated[list[str] | None, Field(
        description="only these VERIFY checks (V01...V33, or names like seed_count)")] = None) -> Outcome:
    """`rgt audit [RUN] --format json`: the VERIFY catalogue over the project; findings disclose, never block."""
    from remote_gpu_trainer.audits.catalogue.runner import by_name
    from remote_gpu_trainer.cli.audit_verbs import audit_document
    from remote_gpu_trainer.services.audit.audit import for_run, run_audit

    if run is not None:
        call.run(run)
    session = call.writable("audit")
    only = None
    if checks:
        specs = {name: by_name(name) for name in checks}
        unknown = [name for name, spec in specs.items() if spec is None]
        if unknown:
            raise ConfigError(f"rgt_audit: no VERIFY check {unknown[0]!r} (V01...V33, or a name like seed_count)")
        only = {spec.id for spec in specs.values() if spec is not None}
    call.progress(0, None, "auditing")
    outcome = await asyncio.to_thread(run_audit, session.project, session.db, only=only, actor=call.actor)
    view = for_run(outcome.view, run) if run is not None else outcome.view
    ran = {r.check for r in outcome.results}
    answers = [c for c in view.checks if c.id in ran]
    shown = [f for f in view.sorted_findings() if f.status != "fixed" and f.subject != "project"]
    return Outcome(audit_document(outcome, run, answers, shown))


BuildWhat = Literal["all", "figure", "table", "evidence", "macros"]


async def build(call: Call, what: Annotated[BuildWhat, Field(
        description="all (every figure, table, EVIDENCE.json, macros), or one kind")] = "all",
        id: Annotated[str | None, Field(description="the figure's or table's id (its folder name)")] = None,
        ) -> Outcome:
    """`rgt build [WHAT] [ID] --format json`: DELIVER's generated outputs from the verified evidence."""
    session = call.writable("build")
    if what in ("figure", "table"):
        if not id:
            raise ConfigError(f"rgt_build: name the {what} (its folder under {what}s/), or build what=all")
        return await asyncio.to_thread(_build_output, call, what, id)
    if id is not None:
        raise ConfigError(f"rgt_build {what}: takes no id (only figure and table do)")
    if what in ("evidence", "macros"):
        from remote_gpu_trainer.cli.claims_output import evidence_document
        from remote_gpu_trainer.clock import report_now
        from remote_gpu_trainer.services.deliver.claims import build_evidence

        built = await asyncio.to_thread(build_evidence, session.project, session.db, report_now(),
                                        with_macros=what == "macros", reaudit=True)
        return Outcome(evidence_document(built, session.project.root))
    return await asyncio.to_thread(_build_all, call)


def _build_output(call: Call, kind: str, ident: str) -> Outcome:
    from remote_gpu_trainer.cli.deliver_verbs import output_document

    session = call.session()
    if kind == "figure":
        from remote_gpu_trainer.services.deliver.figures import build_figure

        figure = build_figure(session.project, ident, db=session.db)
        folder, passed, same, document = figure.folder, figure.passed, figure.deterministic, figure.document
    else:
        from remote_gpu_trainer.services.deliver.tables import build_table

        table = build_table(session.project, ident, db=session.db)
        folder, passed, same, document = table.folder, table.passed, table.deterministic, table.document
    result = output_document(kind, ident, folder, passed, same, document)
    failure = None if passed else VerbFailed(f"{kind} {ident}: built, but its QA did not pass (see qa)")
    return Outcome(result, failure)


def _build_all(call: Call) -> Outcome:
    """rgt-build/v1, the document `rgt build --format json` prints, each step posted as progress."""
    from remote_gpu_trainer.cli.deliver_verbs import BUILD_SCHEMA
    from remote_gpu_trainer.clock import report_now
    from remote_gpu_trainer.services.deliver.build import build_all
    from remote_gpu_trainer.views import BuildStep

    session = call.session()
    steps = [0]

    def progress(step: BuildStep | str) -> None:
        if isinstance(step, BuildStep):
            steps[0] += 1
            call.progress(steps[0], None, step.line)

    outcome = build_all(session.project, session.db, report_now(), progress=progress)
    document = {"schema": BUILD_SCHEMA, "exit_code": outcome.exit_code, "summary": outcome.summary,
                "steps": [dataclasses.asdict(step) for step in outcome.steps]}
    if outcome.exit_code == 0:
        return Outcome(document)
    failure = ConfigError(outcome.summary) if outcome.exit_code == 2 else VerbFailed(outcome.summary)
    return Outcome(document, failure)


async def reconcile(call: Call, mode: Annotated[Literal["rounding", "exact"] | None, Field(
        description="rounding: a number matches at the decimals it is written with; exact: equal within a relative "
                    "1e-9; none: rgt.toml's [deliver] mode, else rounding")] = None) -> Outcome:
    """`rgt reconcile --format json`: every number the documents quote against EVIDENCE.json; a drift is a status
    (exit_code 1 in the document), never a refusal."""
    from remote_gpu_trainer.services.deliver.reconcile import reconcile_project

    session = call.writable("reconcile")
    outcome = await asyncio.to_thread(reconcile_project, session.project, mode)
    return Outcome(outcome.report.to_dict())


async def completeness(call: Call) -> Outcome:
    """`rgt completeness --format json`: which grid points are complete, to pull, incomplete or unknown."""
    from remote_gpu_trainer.services.deliver.completeness import run_completeness

    report = await run_completeness(call.writable("completeness"))
    return Outcome(report.to_dict())
