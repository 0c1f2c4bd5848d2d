"""`rgt approve` and `rgt reject`: a person's word on an agent's request, at a terminal (docs/agents.md).

A decision is a person's, so these verbs need a person at a terminal: stdin and stdout must both be one (the
notion `rgt down` asks its question under, cli/terminal.interactive). An agent running shell commands gets pipes,
not a terminal, and is refused with exit 2 before anything is opened. `--list` only reads, and runs anywhere.

`rgt approve ID` computes the request's plan now (services/inbox/decide.current_plan), shows it with who filed it
and why, and asks as `rgt down` asks: the instance id typed for an irreversible action, `yes` for the others. The
approval is bound to the plan shown (its digest): the service runs it, with the gate evaluated at that moment,
or runs nothing. Exit codes: 0 done, 1 failed or not approved, 2 usage (no terminal among them), 3 the gate
refused (the request stays pending).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.cli import printers
from remote_gpu_trainer.cli.sessions import with_session
from remote_gpu_trainer.cli.terminal import ask, interactive
from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.errors import EXIT_OK, ConfigError, GateRefused, VerbFailed
from remote_gpu_trainer.text import escape_control, money

if TYPE_CHECKING:
    from remote_gpu_trainer.request_views import AllowanceView, RequestView
    from remote_gpu_trainer.services.session import Session

INBOX_SCHEMA = "rgt-inbox/v1"
GATED_KINDS = ("teardown", "stop")  # their plan's `blocked` are the teardown gate's reasons (services/inbox/plans.py)


def approve(args: argparse.Namespace) -> int:
    """`rgt approve ID`, `--list`, `--allowance`, `--revoke A-…`: one form per call (usage errors name the mix)."""
    project = _project(args)
    if args.format == "json" and not args.list:
        raise ConfigError("rgt approve: --format json is for --list (see rgt approve --help)")
    if args.list:
        return with_session(project, lambda session: _list(session, args.format))
    actor = person_at_terminal("approve")
    if args.allowance:
        terms = _allowance_terms(args)
        return with_session(project, lambda session: _grant(session, actor, *terms), writes="approve --allowance")
    if args.revoke:
        return with_session(project, lambda session: _revoke(session, args.revoke, actor), writes="approve --revoke")
    if not args.request:
        raise ConfigError("rgt approve: name the request (e.g. Q-000003), or --list, --allowance or --revoke "
                          "(see rgt approve --help)")
    accepted = tuple(name.strip() for name in args.accept_loss.split(",") if name.strip())
    return _async_session(project, lambda session: _approve_request(session, args.request, actor, accepted),
                          "approve")


def reject(args: argparse.Namespace) -> int:
    """`rgt reject ID --note TEXT`: the request ends rejected, with the note the agent reads."""
    actor = person_at_terminal("reject")

    def body(session: Session) -> int:
        from remote_gpu_trainer.services.inbox import decide

        view = decide.reject(session, args.request, actor=actor, note=args.note)
        print(f"{view.id} ({view.kind}) rejected by {escape_control(actor)}"
              + (f": {escape_control(view.outcome)}" if view.outcome else ""))
        return EXIT_OK

    return with_session(args.project, body, writes="reject")


def person_at_terminal(verb: str) -> str:
    """The actor `person:<tty>` of the person at this terminal; without one, the one-line refusal (exit 2)."""
    from remote_gpu_trainer.services.inbox.model import person_actor

    if not interactive():
        raise ConfigError(f"rgt {verb} needs a person at a terminal: stdin and stdout are not one, so nothing "
                          "was decided (an agent running shell commands cannot approve; `rgt approve --list` reads "
                          "the inbox anywhere)")
    try:
        terminal = os.ttyname(sys.stdin.fileno())
    except OSError:
        terminal = "terminal"
    return person_actor(terminal)


def _project(args: argparse.Namespace) -> str | None:
    """The project of `--list`, `--allowance` and `--revoke`, which take no request: `rgt approve --list ~/proj`
    parses ~/proj as the request slot, so it is the project there."""
    if args.list or args.allowance or args.revoke:
        forms = [name for name, on in (("--list", args.list), ("--allowance", args.allowance),
                                       ("--revoke", bool(args.revoke))) if on]
        if len(forms) > 1:
            raise ConfigError(f"rgt approve: {' and '.join(forms)} are separate forms: one at a time")
        if args.request and args.project:
            raise ConfigError(f"rgt approve {forms[0]} takes no request id, only the PROJECT")
        project: str | None = args.project or args.request
        return project
    if any(value is not None for value in (args.max_price, args.total, args.hours)):
        raise ConfigError("rgt approve: --max-price, --total and --hours are the terms of --allowance")
    return str(args.project) if args.project else None


def _async_session(project: str | None, body: Callable[[Session], Awaitable[int]], writes: str) -> int:
    """Run `body` in the project's Session, the transports it opened closed before the Session is."""

    async def closing(session: Session) -> int:
        try:
            return await body(session)
        finally:
            await session.close_transports()

    return with_session(project, lambda session: asyncio.run(closing(session)), writes=writes)


# -- approving a request ----------------------------------------------------------------------------------------

async def _approve_request(session: Session, request: str, actor: str, accepted: tuple[str, ...]) -> int:
    """Show the plan as it is now, ask, and hand the answer to the service with the digest of what was shown;
    `accepted` are the runs whose results the person gives up (`--accept-loss`), shown before the question."""
    from remote_gpu_trainer.services.inbox import decide
    from remote_gpu_trainer.services.inbox.requests import get_request

    view = await decide.current_plan(session, request, accepted)
    if view.state != "pending":
        raise ConfigError(f"{view.id} is {view.state}"
                          + (f" ({view.outcome})" if view.outcome else "") + ": only a pending request can be approved")
    print_request(view)
    if accepted:
        print(f"Giving up: the results of {', '.join(escape_control(name) for name in accepted)} that are not home")
    _refuse_blocked(view)
    typed = _ask_consent(view)
    try:
        done = await decide.approve(session, view.id, actor=actor, shown_digest=view.plan.digest, typed_id=typed,
                                    accept_loss=accepted)
    except decide.PlanChanged as exc:
        print("The plan now:")
        printers.print_lines(get_request(session, view.id).plan.lines)
        raise VerbFailed(str(exc)) from None
    return _outcome(done)


def _refuse_blocked(view: RequestView) -> None:
    """A plan that cannot run now is not asked about: the gate's reasons (exit 3), or why not (exit 1)."""
    blocked = view.plan.blocked
    if not blocked:
        return
    more = f" (+{len(blocked) - 1} more)" if len(blocked) > 1 else ""
    if view.kind in GATED_KINDS:
        raise GateRefused(f"{view.id} cannot run now, the teardown gate is closed: {blocked[0]}{more}; nothing ran "
                          "and it stays pending", list(blocked))
    raise VerbFailed(f"{view.id} cannot run now: {blocked[0]}{more}; nothing ran and it stays pending")


def _ask_consent(view: RequestView) -> str | None:
    """The instance id typed for an irreversible action (as `rgt down` asks it), `yes` for the others; any other
    answer is the person declining: nothing runs and the request stays pending (exit 1)."""
    expected = view.plan.type_to_confirm
    if expected is not None:
        typed = ask(f"Type the instance id ({escape_control(expected)}) to approve {view.id} ({view.kind}), "
                    "anything else cancels: ").strip()
        if typed != expected:
            raise VerbFailed(f"{view.id} not approved: typed id {escape_control(typed)!r} is not the instance id "
                             f"{escape_control(expected)!r}; nothing ran and it stays pending")
        return typed
    answer = ask("approve? type yes: ").strip().lower()
    if answer != "yes":
        raise VerbFailed(f"{view.id} not approved (the answer was not yes); nothing ran and it stays pending")
    return None


def _outcome(view: RequestView) -> int:
    outcome = escape_control(view.outcome)
    if view.state == "done":
        print(f"{view.id} ({view.kind}) done: {outcome}")
        return EXIT_OK
    if view.state == "pending":  # the gate's look at execution refused: nothing ran (services/inbox/decide.py)
        raise GateRefused(f"{view.id}: {view.outcome}; it stays pending", [view.outcome])
    raise VerbFailed(f"{view.id} ({view.kind}) {view.state}: {view.outcome}")


def print_request(view: RequestView) -> None:
    """What the person decides on: the request, who filed it and why, then the plan's own lines."""
    print(f"{view.id} · {view.kind} of {escape_control(view.subject)} · {view.state}")
    print(f"Filed:     {iso_z(view.filed_at)} by {escape_control(view.filed_by)}")
    print(f"Why:       {escape_control(view.why)}")
    printers.print_lines(view.plan.lines)


# -- allowances ---------------------------------------------------------------------------------------------------

def _allowance_terms(args: argparse.Namespace) -> tuple[float, float, float]:
    missing = [flag for flag, value in (("--max-price", args.max_price), ("--total", args.total),
                                        ("--hours", args.hours)) if value is None]
    if missing:
        raise ConfigError(f"rgt approve --allowance needs {', '.join(missing)} (e.g. --max-price 1.50 --total 20 "
                          "--hours 12)")
    return float(args.max_price), float(args.total), float(args.hours)


def _grant(session: Session, actor: str, max_price: float, total: float, hours: float) -> int:
    from remote_gpu_trainer.services.inbox import allowances

    print(f"Allowance: the agent's rents and resumes run without asking you while each is at most "
          f"{money(max_price)}/h and what they asked for (price × hours) fits {money(total)} in all, for {hours:g} h")
    print("Never covered: a teardown, a stop or a finding decision; a box it rents bills until a person ends it")
    if ask("grant? type yes: ").strip().lower() != "yes":
        raise VerbFailed("allowance not granted (the answer was not yes); nothing changed")
    granted = allowances.grant(session, actor=actor, max_price_per_hour=max_price, total=total, hours=hours)
    print(f"granted {granted.id}: up to {money(max_price)}/h, {money(total)} in all, until "
          f"{iso_z(granted.expires_at)} (`rgt approve --revoke {granted.id}` ends it)")
    return EXIT_OK


def _revoke(session: Session, allowance: str, actor: str) -> int:
    from remote_gpu_trainer.services.inbox import allowances

    revoked = allowances.revoke(session, allowance, actor=actor)
    print(f"revoked {revoked.id}: {money(revoked.used)} of {money(revoked.total)} was used")
    return EXIT_OK


# -- the list -----------------------------------------------------------------------------------------------------

def _list(session: Session, fmt: str) -> int:
    """The pending requests, each with its plan as filed, and every allowance; reads only."""
    from remote_gpu_trainer.services.inbox import allowances
    from remote_gpu_trainer.services.inbox.requests import list_requests

    pending = list_requests(session, ["pending"])
    granted = allowances.allowances(session)
    if fmt == "json":
        printers.print_json(inbox_document(pending, granted))
        return EXIT_OK
    if not pending:
        print("no pending requests")
    for view in pending:
        print_request(view)
        print(f"  decide: rgt approve {view.id}  or  rgt reject {view.id} --note TEXT")
    for allowance in granted:
        print(allowance_line(allowance))
    return EXIT_OK


def allowance_line(allowance: AllowanceView) -> str:
    state = "active" if allowance.active else ("revoked" if allowance.revoked_at else "spent or expired")
    return (f"{allowance.id} {state}: up to {money(allowance.max_price_per_hour)}/h, {money(allowance.used)} of "
            f"{money(allowance.total)} used, until {iso_z(allowance.expires_at)}, granted by "
            f"{escape_control(allowance.granted_by)}")


def inbox_document(pending: list[RequestView], granted: list[AllowanceView]) -> dict[str, Any]:
    return {"schema": INBOX_SCHEMA, "requests": [view.as_dict() for view in pending],
            "allowances": [allowance.as_dict() for allowance in granted]}
