"""The verbs about the project rather than one run: help, completion, demo, init, info, trust, events, tick.

One function per verb, taking the parsed arguments and returning the exit code (errors.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer import __version__
from remote_gpu_trainer.cli import printers, schemas
from remote_gpu_trainer.cli.parser import main_parser, verb_parser
from remote_gpu_trainer.cli.sessions import open_session, with_session
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError, VerbFailed
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.box_ledger import LedgerEntry
    from remote_gpu_trainer.services.session import Session

VERSIONS_SHOWN = ("textual", "asyncssh", "torch", "rich")


def help_verb(args: argparse.Namespace) -> int:
    print((verb_parser(args.topic) if args.topic else main_parser()).format_help(), end="")
    return EXIT_OK


def completion(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.cli.completion import completion_script

    sys.stdout.write(completion_script(args.shell))
    return EXIT_OK


def init(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.services.project_files import init_project

    target = init_project(Path(args.dir), args.provider)
    print(f"wrote {target} (provider {args.provider}): edit the instance and run tables, then `rgt {args.dir}`")
    return EXIT_OK


def info(args: argparse.Namespace) -> int:
    facts = info_facts(args.project)
    if facts["project_file"] is not None:  # the file every other verb reads: refused here the same way (exit 2)
        from remote_gpu_trainer.config.project import load_project

        load_project(Path(facts["project_file"]))
    if args.format == "json":
        printers.print_json(schemas.info_document(facts))
    else:
        print(info_text(facts))
    return EXIT_OK


def trust(args: argparse.Namespace) -> int:
    return with_session(args.project, lambda s: asyncio.run(_trust(s, args.instance, args.fingerprint)))


def adopt(args: argparse.Namespace) -> int:
    return with_session(args.project, lambda s: asyncio.run(_adopt(s, args.instance, args.format)), writes="adopt")


async def _adopt(session: Session, name: str, output: str) -> int:
    """`rgt adopt INSTANCE`: the box's ledger back into this project's launch log (docs/gate.md §7.2)."""
    from remote_gpu_trainer.services.adopt import adopt as adopt_ledger

    if name not in session.project.instances:
        raise ConfigError(f"{session.project.file}: no instance named {name!r}")
    try:
        found = await adopt_ledger(session, name, actor="cli")
    finally:
        await session.close_transports()
    if output == "json":
        print(json.dumps({"schema": "rgt-adopt/v1", "instance": name,
                          "adopted": [_adopted_dict(e) for e in found.adopted],
                          "known": [_adopted_dict(e) for e in found.known],
                          "other_projects": [_adopted_dict(e) for e in found.foreign]}, indent=2, ensure_ascii=True))
        return EXIT_OK
    for entry in found.adopted:
        print(f"adopted  {escape_control(entry.run_id)}: launched {escape_control(entry.started_at)}; pull and "
              "verify it again before any teardown")
    for entry in found.known:
        print(f"known    {escape_control(entry.run_id)}: this launch is already recorded")
    for entry in found.foreign:
        print(f"other    {entry.shown()}: not this project's; its own project adopts it")
    if not (found.adopted or found.known or found.foreign):
        print(f"{name}: the box's ledger is empty: no run of rgt's was launched there with a ledger")
    return EXIT_OK


def _adopted_dict(entry: LedgerEntry) -> dict[str, object]:
    return {"run_id": entry.run_id, "project_id": entry.project_id, "project_root": entry.project_root,
            "launch_id": entry.launch_id, "started_at": entry.started_at, "result_root": entry.result_root}


def events(args: argparse.Namespace) -> int:
    return with_session(args.project, lambda s: _events(s, args.run, args.format))


def tick(args: argparse.Namespace) -> int:
    return with_session(args.project, lambda s: _tick(s, args.run, args.item, args.status, args.note),
                        writes="tick")


def demo(args: argparse.Namespace) -> int:
    from remote_gpu_trainer.cli.faces import tui
    from remote_gpu_trainer.services.demo_project import DEMO_FLAWED_RUN, DEMO_RUN, create_demo

    folder = Path(args.dir)
    target = create_demo(folder, quick=args.quick, flawed=args.flawed)
    session = open_session(str(target))
    try:
        asyncio.run(start_demo(session))
    finally:
        session.close()
    if args.no_tui:
        print(demo_next_steps(folder, [run for run in (DEMO_RUN, DEMO_FLAWED_RUN) if run in session.project.runs]))
        return EXIT_OK
    return tui(str(target), read_only=False)


def demo_next_steps(folder: Path, runs: list[str]) -> str:
    """What `rgt demo --no-tui` tells the user to do next, for every run it launched (the flawed twin too)."""
    where = shlex.quote(str(folder))
    arcs = "; ".join(f"`rgt watch {run} {where}`, then `rgt pull {run} {where}` and `rgt verify {run} {where}`"
                     for run in runs)
    audit = f", `rgt audit demo-flawed {where}` lists its planted findings" if "demo-flawed" in runs else ""
    return (f"demo running in {folder}: {arcs}{audit}; then `rgt build {where}` and `rgt reconcile {where}` "
            f"(paper.md quotes one stale number), or open the TUI with `rgt {where}`")


async def start_demo(session: Session) -> None:
    """Rent the sim box and launch the demo's runs (the flawed twin too when the project has it), unless they
    already ran: re-opening re-attaches instead."""
    from remote_gpu_trainer.services.demo_project import DEMO_FLAWED_RUN, DEMO_INSTANCE, DEMO_RUN
    from remote_gpu_trainer.services.instances import create_instance, instance_status
    from remote_gpu_trainer.services.launch.env_audit import audit_run_environment
    from remote_gpu_trainer.services.launch.launch import launch_run

    status = await instance_status(session, DEMO_INSTANCE)
    if status.state == "terminated":
        return
    runs = [run for run in (DEMO_RUN, DEMO_FLAWED_RUN) if run in session.project.runs]
    if all(session.db.launch(run) is not None for run in runs):
        return
    if status.state != "running":
        await create_instance(session, DEMO_INSTANCE, actor="demo")
    for run in runs:
        if session.db.launch(run) is None:
            # shown in the checklist panel; the demo never blocks on it
            await audit_run_environment(session, run, actor="demo")
            await launch_run(session, run, actor="demo")


def _tick(session: Session, run_id: str, item: str, status: str, note: str) -> int:
    from remote_gpu_trainer.services.audit import checklist
    from remote_gpu_trainer.services.bindings import run_config

    run_config(session, run_id)
    checklist.set_tick(session.db, run_id, item, status, note)
    print(f"{item}: {status}")
    return EXIT_OK


async def _trust(session: Session, name: str, fingerprint: str | None) -> int:
    """Trust a first-contact host key: the user states the fingerprint they compared, or confirms at a tty."""
    from remote_gpu_trainer.services.instances import host_key_prompts, instance_status, trust_host_key

    if name not in session.project.instances:
        raise ConfigError(f"{session.project.file}: no instance named {name!r}")
    try:
        await instance_status(session, name)
        presented = host_key_prompts(session).get(name)
        if presented is None:
            raise VerbFailed(f"{name}: no unknown host key to trust (already trusted, changed, or unreachable: "
                             "see `rgt --report`)")
        if fingerprint is None:
            shown = f"{presented.key_type} {presented.fingerprint_sha256}"
            if sys.stdin is None or not sys.stdin.isatty():
                raise ConfigError(f"{name} presents {shown}: compare it, then run "
                                  f"`rgt trust {name} --fingerprint {presented.fingerprint_sha256}`")
            answer = input(f"{name} ({presented.host}:{presented.port}) presents {shown}. Trust it? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("not trusted")
                return EXIT_FAILED
            fingerprint = presented.fingerprint_sha256
        receipt = await trust_host_key(session, name, fingerprint, actor="cli")
        print(f"trusted {receipt['key_type']} {receipt['fingerprint_sha256']} for {name}")
        return EXIT_OK
    finally:
        await session.close_transports()


def _events(session: Session, run_id: str | None, fmt: str) -> int:
    """The append-only event log: every approval and cost-affecting action, with what the screen said."""
    found = session.db.events(run_id=run_id)
    if fmt == "json":
        printers.print_json(schemas.events_document(found, run_id))
    else:
        printers.print_events(found)
    return EXIT_OK


def info_facts(project: str | None) -> dict[str, Any]:
    """Versions and where things live; the values of credentials are never read, let alone shown."""
    from remote_gpu_trainer.config.project import find_project_file

    found = Path(project).resolve() if project else find_project_file(Path.cwd())
    if found is not None and found.is_dir():
        found = found / "rgt.toml"
    root = found.parent if found is not None and found.exists() else None
    return {
        "version": __version__,
        "python": {"version": sys.version.split()[0], "executable": sys.executable},
        "packages": {name: _version(name) for name in VERSIONS_SHOWN},
        "project_file": str(found) if root is not None else None,
        "state_database": str(root / ".rgt" / "state.db") if root is not None else None,
        "evidence_store": str(root / "runs") if root is not None else None,
        "simulated_disks": str(root / ".rgt" / "sim") if root is not None else None,
        "terminal": {"TERM": os.environ.get("TERM", ""), "NO_COLOR": "NO_COLOR" in os.environ,
                     "ESCDELAY": os.environ.get("ESCDELAY")},
    }


def info_text(facts: dict[str, Any]) -> str:
    packages, terminal = facts["packages"], facts["terminal"]
    lines = [
        f"rgt {facts['version']}",
        f"python {facts['python']['version']} ({facts['python']['executable']})",
        " · ".join(f"{name} {packages[name]}" for name in VERSIONS_SHOWN),
        "",
        f"project file: {facts['project_file'] or 'none found (nearest rgt.toml upward)'}",
    ]
    if facts["project_file"]:
        lines += [f"state database: {facts['state_database']}", f"evidence store: {facts['evidence_store']}",
                  f"simulated disks: {facts['simulated_disks']}"]
    lines += [
        "",
        "credentials: local and sim need none; cloud keys are read only from environment variables or the",
        "  provider CLI's own credential file, never from rgt.toml (values are never shown)",
        "",
        f"terminal: TERM={terminal['TERM']} NO_COLOR={'set' if terminal['NO_COLOR'] else 'unset'}"
        f" ESCDELAY={'100 (default)' if terminal['ESCDELAY'] is None else terminal['ESCDELAY']}"
        " (raise ESCDELAY on slow links if esc is misread)",
    ]
    return "\n".join(lines)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"
