"""`rgt recover RUN`: what recovery may do for a run and what it did; `--approve` and `--revoke`, a person's word on
its limits at a terminal (docs/remote-ops.md §10.1).

`--approve` shows the limits rgt.toml states (`runs.<id>.recover`) and what the approval binds, then asks the person
to type the max_spend figure shown: the approval is recorded for exactly those limits and that launch configuration
(services/recover/approval.py). Like `rgt approve`, it needs a person at a terminal: an agent running shell commands
gets pipes and is refused (exit 2) with nothing recorded. Exit codes: 0 done, 1 not approved, 2 usage.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from remote_gpu_trainer.cli import printers
from remote_gpu_trainer.cli.approval_verbs import person_at_terminal
from remote_gpu_trainer.cli.terminal import ask
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

SCHEMA = "rgt-recover/v1"


async def recover(session: Session, args: argparse.Namespace) -> int:
    """One form per call: show (default), --approve or --revoke."""
    from remote_gpu_trainer.services.recover import approval

    if args.approve and args.revoke:
        raise ConfigError("rgt recover: --approve and --revoke are separate forms: one at a time")
    if args.approve or args.revoke:
        actor = person_at_terminal("recover " + ("--approve" if args.approve else "--revoke"))
        if args.revoke:
            approval.revoke(session, args.run, actor)
            print(f"recovery of {args.run} revoked by {escape_control(actor)}: nothing is recovered until a person "
                  "approves again")
            return EXIT_OK
        limits = run_config(session, args.run).recover  # the limits shown are the limits approved
        for line in approval.approval_prompt(session, args.run):
            print(escape_control(line))
        assert limits is not None  # approval_prompt refused a run without limits
        typed = ask(f"type the max_spend shown ({limits.max_spend:.2f}) to approve, anything else to cancel: ")
        if typed.strip() != f"{limits.max_spend:.2f}":
            print("not approved: nothing was recorded")
            return EXIT_FAILED
        event = approval.approve(session, args.run, limits, actor)
        print(f"recovery of {args.run} approved by {escape_control(actor)} (event {event.seq})")
        return EXIT_OK
    return _show(session, args.run, args.format)


def _show(session: Session, run_id: str, fmt: str) -> int:
    """The limits, whether the approval stands, restarts and spending, and the recovery events of the run."""
    from remote_gpu_trainer.services.recover.approval import check_approval
    from remote_gpu_trainer.services.recover.ledger import history, restarts_used, spent

    run = run_config(session, run_id)
    limits = run.recover
    check = check_approval(session, run, limits) if limits is not None else None
    used = restarts_used(session, run_id, check.seq if check else None)
    cost = spent(session, run_id)
    if fmt == "json":
        printers.print_json({
            "schema": SCHEMA, "run": run_id,
            "limits": None if limits is None else json.loads(limits.canonical()),
            "approved": bool(check and check.ok), "approval_event": check.seq if check else None,
            "why_not": None if check is None or check.ok else check.reason,
            "restarts_used": used, "spent": round(cost, 6), "events": history(session, run_id)})
        return EXIT_OK
    if limits is None:
        print(f"run {run_id}: runs.{run_id}.recover is not set: a preemption waits for a person")
    else:
        currency = session.profile(run.instance).pricing.currency
        print(f"run {run_id}: recovery within runs.{run_id}.recover:")
        for line in limits.lines(currency):
            print(f"  {line}")
        assert check is not None
        print("approved" + (f" (event {check.seq})" if check.ok else f": no: {escape_control(check.reason)}"))
        print(f"restarts used: {used} of {limits.max_restarts}; spent by recovery: {cost:.2f} {currency}")
    for item in history(session, run_id):
        print(f"  {item['at']} {escape_control(str(item['summary']))} ({escape_control(str(item['actor']))})")
    return EXIT_OK
