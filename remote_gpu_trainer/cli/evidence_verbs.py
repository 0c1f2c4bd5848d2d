"""The verbs of the evidence path: pull, verify, down (docs/gate.md).

Each is `async (session, args) -> exit code`, run by cli/sessions.on_run. Whether a box may be torn down is
decided by services/teardown.py alone: `down` shows its plan and, at a terminal, asks for the id it needs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from remote_gpu_trainer.cli import printers, schemas
from remote_gpu_trainer.cli.terminal import ask, interactive
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, GateRefused, VerbFailed
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence import verbs as evidence_verbs
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.teardown import WaitStep
    from remote_gpu_trainer.views import TeardownPlan


async def pull(session: Session, args: argparse.Namespace) -> int:
    where = session.project.run_dir(args.run)
    with printers.pull_progress(args.run, lambda: evidence_verbs.manifest_sizes(session, args.run)) as progress:
        result = await evidence_verbs.pull_run(session, args.run, progress=progress, actor="cli")
    if args.format == "json":
        printers.print_json(schemas.pull_document(args.run, where, result))
    if not result.ok:
        for problem in result.failed:
            print(f"✖ {escape_control(problem.path)}: {escape_control(problem.detail)}", file=sys.stderr)
        raise VerbFailed(f"pull of {args.run} incomplete: {len(result.failed)} of {len(result.files)} file(s) "
                         f"were not fetched and verified against the manifest into {where}: fix the reasons "
                         f"above, then `rgt pull {args.run}` again")
    print(f"pulled {len(result.files)} file(s) into {where}: {len(result.fetched)} fetched, "
          f"{len(result.present)} already here, each matching its manifest hash", file=sys.stderr)
    _adopted_line(args.run, result.adopted_run_id)
    return EXIT_OK


def _adopted_line(run_id: str, adopted_run_id: str | None) -> None:
    """Say on stderr that the manifest was adopted, not built by rgt (docs/gate.md §2.1)."""
    if adopted_run_id is not None:
        print(f"manifest adopted: built on the box without rgt (the skill's build_pull_manifest.py; its run id "
              f"{escape_control(adopted_run_id)!r}), bound to run {run_id} by its sha256", file=sys.stderr)


async def verify(session: Session, args: argparse.Namespace) -> int:
    with printers.verify_progress() as progress:
        outcome = await evidence_verbs.verify_run(session, args.run, progress=progress, actor="cli")
    if args.format == "json":
        printers.print_json(schemas.verify_document(args.run, session.project.run_dir(args.run), outcome))
    else:
        for f in outcome.files:
            print(f"{f.status:<14} {escape_control(f.path)}  {escape_control(f.detail)}")
        for cell in outcome.cells:
            print(f"{cell.words():<14} {escape_control(cell.cell)}/  the box's job wrapper recorded it; what it "
                  "left is listed as it is, and VERIFY leaves it out of seeds and means")
    if not outcome.ok:
        first = outcome.errors[0]
        raise VerbFailed(f"verification of {args.run} failed: {len(outcome.errors)} problem(s), first: "
                         f"{first.code} {first.path} {first.detail}".rstrip())
    if args.format != "json":
        print(f"verified: {session.project.run_dir(args.run) / 'PULL_VERIFIED.json'}")
        _adopted_line(args.run, outcome.adopted_run_id)
        _audit_line(session)
    return EXIT_OK


def _audit_line(session: Session) -> None:
    """The audit that ran after the verification, in one line on stderr (details: `rgt audit`)."""
    last = session.db.last_catalogue_audit()
    if last is None:
        return
    counts = {s: sum(1 for r in last.results if r["status"] == s) for s in ("pass", "findings", "skipped")}
    live = [r for r in session.db.finding_records() if r.status == "open"]
    print(f"audit: {counts['pass']} pass, {counts['findings']} with findings, {counts['skipped']} skipped; "
          f"{len(live)} open finding(s) (rgt audit lists them)", file=sys.stderr)


async def down(session: Session, args: argparse.Namespace) -> int:
    """Tear down the run's instance. Without --confirm (the parser allows that at a terminal only) the plan
    is shown and the id asked for; the service refuses a wrong id, or a closed gate, with exit 3."""
    from remote_gpu_trainer.services import teardown

    run = run_config(session, args.run)
    action = "stop" if args.stop else "terminate"
    accepted = tuple(name.strip() for name in args.accept_loss.split(",") if name.strip())
    plan = await teardown.plan(session, run.instance, action, accepted)
    typed = args.confirm
    if typed is None and interactive():
        typed = _ask_for_id(plan)
    done = await teardown.execute(session, run.instance, typed, plan.lines, actor="cli", action_id=action,
                                  accept_loss=accepted, progress=_waiting)
    print(escape_control(done.message))
    return EXIT_OK if done.confirmed else EXIT_FAILED


def _waiting(step: WaitStep) -> None:
    """While the provider confirms the box gone: one line on stderr per look (docs/gate.md §7.1)."""
    print(f"rgt: {escape_control(step.line)}", file=sys.stderr, flush=True)


def _ask_for_id(plan: TeardownPlan) -> str:
    """Show the plan; ask for the instance id only when the gate is open (else the service refuses with
    the plan's reasons, and there is nothing to ask). A gated action's answer goes to the service, which
    refuses a wrong one on record; an ungated one (e.g. a reversible stop) takes no id there, so an answer
    that is not the id is the person cancelling, here."""
    printers.print_lines(plan.lines)
    if not plan.enabled:
        return ""
    typed = ask(f"Type the instance id ({escape_control(plan.provider_id)}) to {plan.action_id} it, "
                "anything else cancels: ")
    if not plan.gated and typed != plan.provider_id:
        reason = f"typed id {typed!r} is not the instance id {plan.provider_id!r}"
        raise GateRefused(f"{plan.action_id} of {plan.instance} cancelled: {reason}; nothing was done", [reason])
    return typed
