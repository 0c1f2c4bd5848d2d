"""Command line: dispatches to the TUI, `--report`, or a headless verb (DESIGN.md §3.1).

Errors are one line on stderr with the exit code of errors.py; a traceback only with --debug.
Textual is imported only when the TUI is actually opened, torch never.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer import __version__, text
from remote_gpu_trainer.clock import report_now
from remote_gpu_trainer.config import PROVIDERS
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ConfigError, GateRefused, RgtError, VerbFailed
from remote_gpu_trainer.services.evidence import PullProgress
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.env_audit import AuditRow
    from remote_gpu_trainer.services.log_monitor import Alert
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.views import Overview

VERBS = ("demo", "init", "info", "up", "push", "run", "watch", "pull", "verify", "down", "tick", "events", "trust",
         "help")
# One line per verb: `rgt help`, `rgt VERB --help` and the verb list say what each one does.
VERB_HELP = {
    "demo": "write the demo project and launch its run on a simulated rented box, then open the TUI",
    "init": "write a commented rgt.toml template for one provider (never overwrites a file)",
    "info": "show versions, and where the project file, the state database and the evidence live",
    "up": "start (or rent, with --approve-price) the run's instance and audit its environment",
    "push": "copy the run's `push` files into its workdir on the instance",
    "run": "audit the instance (phase 0) and launch the run detached on it",
    "watch": "print the run's state changes and log alerts until it finishes or dies",
    "pull": "pull the run's results into runs/RUN/, resumable and hashed while copying",
    "verify": "verify the pulled copy: file set, sizes, sha256, and every checkpoint loads",
    "down": "tear down the run's instance once the gate is open and the instance id is typed",
    "tick": "set a manual checklist item of a run (ticked, not_applicable or open) with a note",
    "events": "print the append-only event log: approvals and cost-affecting actions",
    "trust": "trust a first-contact SSH host key after comparing its fingerprint",
    "help": "show the help of rgt, or of one verb (rgt help VERB)",
}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    args_list = [a for a in args_list if a != "--debug"]
    try:
        return _dispatch(args_list)
    except RgtError as exc:
        if debug:
            raise
        # an error can quote the box (a file name, a provider's error body): never let it drive the terminal
        print(f"rgt: {escape_control(str(exc))}", file=sys.stderr)
        if isinstance(exc, GateRefused) and len(exc.reasons) > 1:
            for reason in exc.reasons:
                print(f"  - {escape_control(reason)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("rgt: interrupted (remote jobs keep running; pulls resume next time)", file=sys.stderr)
        return 130
    except sqlite3.DatabaseError as exc:  # damage found after the database opened
        if debug:
            raise
        print(f"rgt: the project's state database .rgt/state.db is damaged ({exc}): move it aside to start a new "
              "one (the teardown gate stays closed until then)", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if debug:
            raise
        print(f"rgt: internal error: {type(exc).__name__}: {escape_control(str(exc))} (run again with --debug)",
              file=sys.stderr)
        return EXIT_FAILED


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(f"{self.prog}: {message} (see {self.prog} --help)")


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] in VERBS:
        return _verb(argv[0], argv[1:])
    parser = _main_parser()
    args = parser.parse_args(argv)
    if args.report:
        return _report(args.project, args.format, args.output, args.strict, args.force)
    return _tui(args.project, read_only=args.read_only)


def _main_parser() -> _Parser:
    verbs = "\n".join(f"  {verb:<8} {VERB_HELP[verb]}" for verb in VERBS)
    parser = _Parser(prog="rgt", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="remote-gpu-trainer: RUN → VERIFY → DELIVER on a GPU you own or rent.",
                     epilog=f"verbs (rgt VERB --help, or rgt help VERB):\n{verbs}")
    parser.add_argument("project", nargs="?", help="project folder or rgt.toml (default: nearest upward)")
    parser.add_argument("--report", action="store_true", help="print a report instead of opening the TUI")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE (atomically) instead of "
                        "stdout; never rgt.toml, .rgt/ or runs/ of the project")
    parser.add_argument("--force", action="store_true", help="let --output replace an existing FILE")
    parser.add_argument("--strict", action="store_true", help="exit 1 when anything needs attention")
    parser.add_argument("--read-only", action="store_true", help="TUI with every cost-affecting action hidden")
    parser.add_argument("-V", "--version", action="version", version=f"rgt {__version__}")
    return parser


def _verb_parser(verb: str) -> _Parser:
    """The verb's arguments, with its one-line description: the same parser parses and prints the help."""
    parser = _Parser(prog=f"rgt {verb}", description=VERB_HELP[verb])
    if verb == "help":
        parser.add_argument("topic", nargs="?", choices=VERBS, metavar="VERB", help="the verb to describe")
    elif verb == "demo":
        parser.add_argument("dir", nargs="?", default="rgt-demo", help="where to write it (default ./rgt-demo)")
        parser.add_argument("--no-tui", action="store_true", help="launch the run and return at once")
        parser.add_argument("--quick", action="store_true", help="a few-second run (for tests and trying)")
    elif verb == "init":
        parser.add_argument("dir", nargs="?", default=".", help="the project folder (default: here)")
        parser.add_argument("--provider", default="ssh", metavar="NAME",
                            help=f"the instance's provider (default ssh): {', '.join(PROVIDERS)}")
    elif verb == "info":
        parser.add_argument("project", nargs="?", help="project folder or rgt.toml")
    elif verb == "trust":
        parser.add_argument("instance", help="the instance name in rgt.toml")
        parser.add_argument("project", nargs="?", help="project folder or rgt.toml")
        parser.add_argument("--fingerprint", help="the SHA256 fingerprint you compared (non-interactive)")
    elif verb == "events":
        parser.add_argument("project", nargs="?", help="project folder or rgt.toml")
        parser.add_argument("--run", help="only events of this run")
    elif verb == "tick":
        parser.add_argument("run", help="the run id")
        parser.add_argument("item", help="the checklist item id")
        parser.add_argument("project", nargs="?", help="project folder or rgt.toml")
        parser.add_argument("--status", default="ticked", choices=("open", "ticked", "not_applicable"))
        parser.add_argument("--note", default="", help="why (required to acknowledge)")
    else:
        _run_verb_arguments(parser, verb)
    return parser


def _run_verb_arguments(parser: _Parser, verb: str) -> None:
    """The verbs that act on one run: up, push, run, watch, pull, verify, down."""
    parser.add_argument("run", help="the run id in rgt.toml")
    parser.add_argument("project", nargs="?", help="project folder or rgt.toml (default: nearest upward)")
    if verb == "down":
        parser.add_argument("--confirm", required=True, metavar="INSTANCE_ID",
                            help="the instance id, typed exactly: the approval for this teardown")
        parser.add_argument("--stop", action="store_true", help="stop (keeps the disk) instead of terminate")
    if verb == "run":
        parser.add_argument("--ack", metavar="NOTE", help="launch despite failed phase-0 rows; NOTE says why")
        parser.add_argument("--rerun", action="store_true",
                            help="launch RUN again under a new id RUN-rN (its table is copied in rgt.toml with a "
                                 "sibling remote_root): run ids are append-only")
    if verb == "up":
        parser.add_argument("--approve-price", metavar="PRICE",
                            help="runpod/vastai/lambda: the hourly price the plan states, typed exactly: the "
                                 "approval to rent the instance (without it the plan is shown and nothing rented)")
    if verb == "watch":
        parser.add_argument("--once", action="store_true", help="print the state once and return")
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between polls (default 2)")


def _verb(verb: str, argv: list[str]) -> int:
    args = _verb_parser(verb).parse_args(argv)
    if verb == "help":
        print((_verb_parser(args.topic) if args.topic else _main_parser()).format_help(), end="")
        return EXIT_OK
    if verb == "demo":
        return _demo(Path(args.dir), args.no_tui, args.quick)
    if verb == "init":
        from remote_gpu_trainer.services.project_files import init_project

        target = init_project(Path(args.dir), args.provider)
        print(f"wrote {target} (provider {args.provider}): edit the instance and run tables, then "
              f"`rgt {args.dir}`")
        return EXIT_OK
    if verb == "info":
        print(_info(args.project))
        return EXIT_OK
    if verb == "trust":
        return _with_session(args.project, lambda s: asyncio.run(_trust(s, args.instance, args.fingerprint)))
    if verb == "events":
        return _with_session(args.project, lambda s: _events(s, args.run))
    if verb == "tick":
        return _with_session(args.project, lambda s: _tick(s, args.run, args.item, args.status, args.note))
    from remote_gpu_trainer.config import load_project, resolve_project_file
    from remote_gpu_trainer.providers.box_identity import check_distinct_boxes
    from remote_gpu_trainer.services.session import Session

    project = load_project(resolve_project_file(args.project))
    check_distinct_boxes(project)
    project.run(args.run)  # an unknown run is refused before anything is created
    session = Session(project)
    if session.folder_read_only and verb != "watch":
        session.close()
        raise ConfigError(f"rgt {verb}: the project folder {project.root} is read-only; only --report, events, "
                          "watch and --read-only work there")
    try:
        return asyncio.run(_headless_and_close(session, verb, args))
    finally:
        session.close()


def _open_session(project: str | None, read_only: bool = False) -> Session:
    """Session.open, then the check that needs ssh config: two entries naming one box are refused (exit 2)."""
    from remote_gpu_trainer.providers.box_identity import check_distinct_boxes
    from remote_gpu_trainer.services.session import Session

    session = Session.open(project, read_only=read_only)
    try:
        check_distinct_boxes(session.project)
    except ConfigError:
        session.close()
        raise
    return session


def _with_session(project: str | None, action: Callable[[Session], int]) -> int:
    session = _open_session(project)
    try:
        return action(session)
    finally:
        session.close()


def _tick(session: Session, run_id: str, item: str, status: str, note: str) -> int:
    from remote_gpu_trainer.services import checklist

    session.run_config(run_id)
    checklist.set_tick(session.db, run_id, item, status, note)
    print(f"{item}: {status}")
    return EXIT_OK


async def _trust(session: Session, name: str, fingerprint: str | None) -> int:
    """Trust a first-contact host key: the user states the fingerprint they compared, or confirms at a tty."""
    if name not in session.project.instances:
        raise ConfigError(f"{session.project.file}: no instance named {name!r}")
    try:
        await session.instance_status(name)
        presented = session.host_key_prompts.get(name)
        if presented is None:
            raise VerbFailed(f"{name}: no unknown host key to trust (already trusted, changed, or unreachable: "
                             "see `rgt --report`)")
        if fingerprint is None:
            shown = f"{presented.key_type} {presented.fingerprint_sha256}"
            if not sys.stdin.isatty():
                raise ConfigError(f"{name} presents {shown}: compare it, then run "
                                  f"`rgt trust {name} --fingerprint {presented.fingerprint_sha256}`")
            answer = input(f"{name} ({presented.host}:{presented.port}) presents {shown}. Trust it? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("not trusted")
                return EXIT_FAILED
            fingerprint = presented.fingerprint_sha256
        receipt = await session.trust_host_key(name, fingerprint, actor="cli")
        print(f"trusted {receipt['key_type']} {receipt['fingerprint_sha256']} for {name}")
        return EXIT_OK
    finally:
        await session.close_transports()


def _events(session: Session, run_id: str | None) -> int:
    """The append-only event log: every approval and cost-affecting action, with what the screen said."""

    for event in session.db.events(run_id=run_id):
        where = " ".join(part for part in (event.instance, event.run_id) if part)
        print(f"{event.seq:>5} {event.at.isoformat()} {event.kind:<10} {event.actor:<5} {where:<16} "
              f"{escape_control(event.summary)}")
        for line in event.detail.get("shown", []):
            print(f"{'':>6}│ {escape_control(str(line))}")
        for reason in event.detail.get("reasons", []):
            print(f"{'':>6}✖ {escape_control(str(reason))}")
    return EXIT_OK


async def _headless_and_close(session: Session, verb: str, args: argparse.Namespace) -> int:
    try:
        return await _headless(session, verb, args)
    finally:
        await session.close_transports()


async def _headless(session: Session, verb: str, args: argparse.Namespace) -> int:
    from remote_gpu_trainer.services import teardown

    run = session.run_config(args.run)
    if verb == "up":
        provider = session.provider(run.instance)
        if not hasattr(provider, "create"):
            from remote_gpu_trainer.services import rent as launcher  # not for sim: it loads the cloud clients

            if await launcher.wants_launch(session, run.instance):
                return await _up_launch(session, args.run, args.approve_price)
        status = (await session.create_instance(run.instance, actor="cli") if hasattr(provider, "create")
                  else await session.instance_status(run.instance))
        print(f"{run.instance}: {status.state} ({status.provider_id})")
        rows = await session.env_audit(args.run, actor="cli")
        _print_audit(rows)
        return EXIT_FAILED if any(r.status == "fail" for r in rows) else EXIT_OK
    if verb == "push":
        session.require_writable("push")
        from remote_gpu_trainer.services.launch import push

        written = await push(session.project, run, await session.remote(run.instance))
        print("\n".join(f"pushed {path}" for path in written) or "nothing to push")
        return EXIT_OK
    if verb == "run":
        if args.rerun:
            args.run = session.add_rerun(args.run, actor="cli")
            run = session.run_config(args.run)
            print(f"added [runs.{args.run}] to {session.project.file} (remote_root {run.remote_root})")
        await session.refuse_reused_id(run)  # before the audit: a reused id is refused at once
        rows = await session.env_audit(args.run, actor="cli")
        _print_audit(rows)
        failed = [r for r in rows if r.status == "fail"]
        if failed and not args.ack:
            raise VerbFailed(f"phase-0 audit: {len(failed)} row(s) failed, first: {failed[0].check}: "
                             f"{failed[0].detail}; fix it, or launch anyway with --ack \"why\"")
        if failed:
            session.db.append_event("env_ack", f"launched {args.run} despite {len(failed)} failed audit row(s)",
                                    run_id=args.run, instance=run.instance, actor="cli",
                                    detail={"note": args.ack, "rows": [r.check for r in failed]})
        detail = await session.launch(args.run, actor="cli")
        print(f"launched {args.run} on {run.instance}: pid {detail['pid']}, log {detail['log']}")
        return EXIT_OK
    if verb == "watch":
        return await _watch(session, args.run, args.once, args.interval)
    if verb == "pull":
        result = await session.pull(args.run, progress=_ProgressPrinter(), actor="cli")
        where = session.project.run_dir(args.run)
        if not result.ok:
            for problem in result.failed:
                print(f"✖ {escape_control(problem.path)}: {escape_control(problem.detail)}", file=sys.stderr)
            raise VerbFailed(f"pull of {args.run} incomplete: {len(result.failed)} of {len(result.files)} file(s) "
                             f"were not fetched and verified against the manifest into {where}: fix the reasons "
                             f"above, then `rgt pull {args.run}` again")
        print(f"pulled {len(result.files)} file(s) into {where}: {len(result.fetched)} fetched, "
              f"{len(result.present)} already here, each matching its manifest hash", file=sys.stderr)
        return EXIT_OK
    if verb == "verify":
        outcome = await session.verify(args.run, progress=lambda text: print(escape_control(text), file=sys.stderr),
                                       actor="cli")
        for f in outcome.files:
            print(f"{f.status:<14} {escape_control(f.path)}  {escape_control(f.detail)}")
        if not outcome.ok:
            first = outcome.errors[0]
            raise VerbFailed(f"verification of {args.run} failed: {len(outcome.errors)} problem(s), first: "
                             f"{first.code} {first.path} {first.detail}".rstrip())
        print(f"verified: {session.project.run_dir(args.run) / 'PULL_VERIFIED.json'}")
        return EXIT_OK
    if verb == "down":
        action = "stop" if args.stop else "terminate"
        plan = await teardown.plan(session, run.instance, action)
        done = await teardown.execute(session, run.instance, args.confirm, plan.lines, actor="cli",
                                      action_id=action)
        print(escape_control(done.message))
        return EXIT_OK if done.confirmed else EXIT_FAILED
    raise ConfigError(f"unknown verb {verb!r}")


async def _up_launch(session: Session, run_id: str, approved_price: str | None) -> int:
    """Rent the run's instance: the smoke gate here first, then the plan, then only the stated price launches."""
    from remote_gpu_trainer.services import rent as launcher

    run = session.run_config(run_id)
    launcher.check_launchable(session, run.instance)
    if run.smoke:
        print(f"smoke gate: running `{run.smoke}` here on the CPU …", file=sys.stderr, flush=True)
    smoke = await launcher.run_smoke(session.project, run)
    if not smoke.passed:
        for line in smoke.output_tail.splitlines()[-10:]:
            print(f"  │ {escape_control(line)}", file=sys.stderr)
        raise VerbFailed(f"smoke gate failed: {smoke.summary()}; nothing was rented")
    print(f"smoke gate passed: {smoke.summary()}")
    plan = await launcher.plan_launch(session, run.instance)
    print("\n".join(plan.lines))
    if approved_price is None:
        raise VerbFailed(f"not launched: to rent {run.instance} at {text.price(plan.price, plan.currency)}/h, "
                         f"run `rgt up {run_id} --approve-price {plan.price_text}`")
    created = await launcher.launch(session, plan, run_id, approved_price, smoke, actor="cli")
    price = "?" if created.price_per_hour is None else text.price(created.price_per_hour, plan.currency)
    print(f"launched {run.instance}: {plan.provider} {created.provider_id} ({created.state}) at {price}/h, billing now")
    print(f"next: put {launcher.config_line(created.provider_id)} under [instances.{run.instance}] in "
          f"{session.project.file} (rgt does not edit it), then `rgt up {run_id}` again once it runs for the "
          f"environment audit; remove it with `rgt down {run_id} --confirm {created.provider_id}`")
    return EXIT_OK


def _print_audit(rows: Sequence[AuditRow]) -> None:
    glyph = {"pass": "✔", "warn": "▲", "fail": "✖", "skipped": "·"}
    for row in rows:
        print(f"{glyph.get(row.status, '?')} {row.status:<7} {row.id:>2} {row.check:<22} {escape_control(row.detail)}")


def _print_alerts(session: Session, alerts: Sequence[Alert]) -> None:
    from remote_gpu_trainer.clock import iso_z

    for alert in alerts:
        text = f"{alert.severity.upper()} {alert.title}: {alert.message}" + (f" → fix: {alert.fix}" * bool(alert.fix))
        print(f"{iso_z(session.clock())} {escape_control(text)}", flush=True)


async def _watch(session: Session, run_id: str, once: bool, interval: float) -> int:
    from remote_gpu_trainer.clock import iso_z

    last: tuple[str, str] | None = None
    while True:
        update = await session.follow_log(run_id)
        if update is not None:
            _print_alerts(session, update.alerts)
        state = await session.run_state(run_id)
        await session.evaluate_rules(run_id, state)
        _print_alerts(session, session.take_alerts())
        current = (state.liveness.state, state.liveness.detail if state.liveness.state != "running" else "")
        if current != last or once:
            print(f"{iso_z(session.clock())} run {run_id}: {state.liveness.state} "
                  f"({escape_control(state.liveness.detail)})", flush=True)
            last = current
        if once:
            return EXIT_OK
        if state.liveness.state in ("finished", "dead"):
            return EXIT_OK if state.liveness.state == "finished" else EXIT_FAILED
        if state.liveness.detail == "not launched":
            raise VerbFailed(f"run {run_id} was never launched: `rgt run {run_id}` first")
        await asyncio.sleep(interval)


class _ProgressPrinter:
    """Pull progress on stderr: every file's outcome and every resume or retry, downloading figures at
    most twice a second."""

    def __init__(self) -> None:
        self._last = 0.0

    def __call__(self, progress: PullProgress) -> None:
        now = time.monotonic()
        text = progress.line()
        always = progress.phase in ("done", "failed", "resuming", "retrying")
        if always or now - self._last > 0.5:
            self._last = now
            print(text, file=sys.stderr, flush=True)


def _report(project: str | None, fmt: str, output: str | None, strict: bool, force: bool = False) -> int:
    from remote_gpu_trainer.report import needs_attention, render

    session = _open_session(project, read_only=True)
    try:
        target = _output_target(output, session.project.root, session.project.file, force) if output else None
        overview = asyncio.run(_overview_and_close(session))
    finally:
        session.close()
    text = render(dataclasses.replace(overview, generated_at=report_now()), fmt)
    if target is not None:
        _write_output(target, text.encode("utf-8"), output or "", force)
    else:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    if strict and needs_attention(overview):
        return EXIT_FAILED
    return EXIT_OK


def _output_target(output: str, root: Path, project_file: Path, force: bool) -> Path:
    """Where `--output` may write: never the project's rgt.toml, `.rgt/` (state, known hosts, sim disks) or
    `runs/` (the evidence the gate trusts), judged after symlinks are resolved; an existing file only with
    --force. Checked before the report is built, so a refusal costs nothing."""
    target = Path(output).expanduser().resolve()
    root = root.resolve()
    protected = [(project_file.resolve(), "the project file"), (root / "rgt.toml", "the project file"),
                 (root / ".rgt", "rgt's state folder .rgt/"), (root / "runs", "the evidence store runs/")]
    for path, what in protected:
        if target == path or target.is_relative_to(path):
            raise ConfigError(f"--output {output}: refused: it is {what} of {root} (resolved: {target}); "
                              "write the report elsewhere")
    if target.is_dir():
        raise ConfigError(f"--output {output}: is a folder: name a file")
    if target.exists() and not force:
        raise ConfigError(f"--output {output}: exists: add --force to replace it")
    return target


def _write_output(target: Path, data: bytes, shown: str, force: bool) -> None:
    """Write through a temp file beside the target: replaced in one step with --force, else linked in so a
    file created meanwhile is never overwritten; the temp file never outlives the call."""
    temp = target.with_name(f".rgt-tmp-{target.name}.{os.getpid()}")
    try:
        with open(temp, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if force:
            os.replace(temp, target)
        else:
            os.link(temp, target)
    except FileExistsError:
        raise ConfigError(f"--output {shown}: exists: add --force to replace it") from None
    except OSError as exc:
        raise ConfigError(f"--output {shown}: cannot write: {exc.strerror or exc}") from None
    finally:
        temp.unlink(missing_ok=True)


async def _overview_and_close(session: Session) -> Overview:
    try:
        await session.catch_up_logs()  # findings and the ETA reflect the log as it is now
        return await session.overview()
    finally:
        await session.close_transports()


def _demo(folder: Path, no_tui: bool, quick: bool) -> int:
    from remote_gpu_trainer.services.project_files import DEMO_RUN, create_demo

    target = create_demo(folder, quick=quick)
    session = _open_session(str(target))
    try:
        asyncio.run(_start_demo(session))
    finally:
        session.close()
    if no_tui:
        print(f"demo running in {folder}: `rgt watch {DEMO_RUN} {folder}`, then `rgt pull {DEMO_RUN} {folder}`,"
              f" `rgt verify {DEMO_RUN} {folder}`, or open the TUI with `rgt {folder}`")
        return EXIT_OK
    return _tui(str(target), read_only=False)


async def _start_demo(session: Session) -> None:
    """Rent the sim box and launch the run, unless it already ran: re-opening re-attaches instead."""
    from remote_gpu_trainer.services.project_files import DEMO_INSTANCE, DEMO_RUN

    status = await session.instance_status(DEMO_INSTANCE)
    if status.state == "terminated":
        return
    if session.db.launch(DEMO_RUN) is not None:
        return
    await session.create_instance(DEMO_INSTANCE, actor="demo")
    await session.env_audit(DEMO_RUN, actor="demo")  # shown in the checklist panel; the demo never blocks on it
    await session.launch(DEMO_RUN, actor="demo")


def _tui(project: str | None, read_only: bool) -> int:
    session = _open_session(project, read_only=read_only)
    from remote_gpu_trainer.app import RgtApp

    try:
        RgtApp(session).run()
    finally:
        session.close()
    return EXIT_OK


def _info(project: str | None) -> str:
    from remote_gpu_trainer.config import find_project_file

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    found = Path(project).resolve() if project else find_project_file(Path.cwd())
    if found is not None and found.is_dir():
        found = found / "rgt.toml"
    lines = [
        f"rgt {__version__}",
        f"python {sys.version.split()[0]} ({sys.executable})",
        f"textual {version('textual')} · asyncssh {version('asyncssh')} · torch {version('torch')}"
        f" · rich {version('rich')}",
        "",
        f"project file: {found if found and found.exists() else 'none found (nearest rgt.toml upward)'}",
    ]
    if found and found.exists():
        root = found.parent
        lines += [f"state database: {root / '.rgt' / 'state.db'}", f"evidence store: {root / 'runs'}",
                  f"simulated disks: {root / '.rgt' / 'sim'}"]
    lines += [
        "",
        "credentials: local and sim need none; cloud keys are read only from environment variables or the",
        "  provider CLI's own credential file, never from rgt.toml (values are never shown)",
        "",
        f"terminal: TERM={os.environ.get('TERM', '')} NO_COLOR={'set' if 'NO_COLOR' in os.environ else 'unset'}"
        f" ESCDELAY={os.environ.get('ESCDELAY', '100 (default)')}"
        " (raise ESCDELAY on slow links if esc is misread)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
