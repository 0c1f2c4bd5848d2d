"""Command line: dispatches to the TUI, `--report`, or a headless verb (docs/architecture.md §3.1).

Errors are one line on stderr with the exit code of errors.py; a traceback only with --debug.
Textual is imported only when the TUI is actually opened, torch never.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any

from remote_gpu_trainer.cli.parser import VERBS, main_parser, parse_verb
from remote_gpu_trainer.cli.sessions import RunVerb, on_run
from remote_gpu_trainer.cli.terminal import interactive, standard_streams
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_USAGE, GateRefused, RgtError
from remote_gpu_trainer.runtime import tune_process
from remote_gpu_trainer.text import escape_control

INTERRUPTED = 130
BROKEN_PIPE = 141  # 128 + SIGPIPE

# Where each verb's function lives: (module under cli/, function). A verb's module is imported only when that verb
# runs, so `rgt --version` or `rgt --report` never pays for the imports of `rgt up` (docs/architecture.md §5).
PROJECT_VERBS: dict[str, tuple[str, str]] = {
    "help": ("project_verbs", "help_verb"), "completion": ("project_verbs", "completion"),
    "demo": ("project_verbs", "demo"), "init": ("project_verbs", "init"), "info": ("project_verbs", "info"),
    "trust": ("project_verbs", "trust"), "adopt": ("project_verbs", "adopt"),
    "events": ("project_verbs", "events"), "tick": ("project_verbs", "tick"),
    "audit": ("audit_verbs", "audit"), "finding": ("audit_verbs", "finding"), "probe": ("probe_verbs", "probe"),
    "accept": ("accept_verbs", "accept"),
    "capsule": ("evidence_tools", "capsule"), "splits": ("evidence_tools", "splits"),
    "build": ("deliver_verbs", "build"), "reconcile": ("deliver_verbs", "reconcile"),
    "completeness": ("deliver_verbs", "completeness"), "status": ("status_verbs", "status"),
    "mcp": ("agent_verbs", "mcp"), "skill": ("agent_verbs", "skill"),
    "approve": ("approval_verbs", "approve"), "reject": ("approval_verbs", "reject"),
}
RUN_VERBS: dict[str, tuple[str, str]] = {
    "up": ("launch_verbs", "up"), "push": ("launch_verbs", "push"), "run": ("launch_verbs", "run"),
    "watch": ("launch_verbs", "watch"), "pull": ("evidence_verbs", "pull"), "verify": ("evidence_verbs", "verify"),
    "down": ("evidence_verbs", "down"), "recover": ("recover_verbs", "recover"),
}


def verb_function(home: tuple[str, str]) -> Callable[..., Any]:
    """The function a verb table names, from its module (imported now, on first use)."""
    module, name = home
    function: Callable[..., Any] = getattr(importlib.import_module(f"remote_gpu_trainer.cli.{module}"), name)
    return function


def main(argv: Sequence[str] | None = None) -> int:
    standard_streams()  # a scheduler's `<&-`: a closed stream reads as /dev/null, never as None (terminal.py)
    tune_process()  # the interpreter settings the log budget is measured with (runtime.py)
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    args_list = [a for a in args_list if a != "--debug"]
    try:
        return dispatch(args_list)
    except RgtError as exc:
        if debug:
            raise
        return _refused(exc)
    except KeyboardInterrupt:
        print("rgt: interrupted (remote jobs keep running; pulls resume next time)", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `rgt events | head -1`: the reader left; say nothing more, as a shell's writer would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
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


def dispatch(argv: list[str]) -> int:
    """A verb when the first word is one; otherwise the TUI, or the report with --report."""
    if argv and argv[0] in VERBS:
        return run_verb(argv[0], argv[1:])
    args = main_parser().parse_args(argv)
    from remote_gpu_trainer.cli import faces

    if args.report:
        return faces.report(args.project, args.format, args.output, args.strict, args.force)
    return faces.tui(args.project, read_only=args.read_only)


def run_verb(verb: str, argv: list[str]) -> int:
    args = parse_verb(verb, argv, interactive=interactive())
    if verb == "watch" and args.all:  # the patrol: every project, no one run
        return int(verb_function(("patrol_verbs", "patrol"))(args))
    if verb in PROJECT_VERBS:
        project_verb: Callable[[argparse.Namespace], int] = verb_function(PROJECT_VERBS[verb])
        return project_verb(args)
    run_verb_function: RunVerb = verb_function(RUN_VERBS[verb])
    return on_run(verb, args, run_verb_function)


def _refused(exc: RgtError) -> int:
    """One line on stderr (and each reason of a gate refusal), with the error's exit code."""
    # an error can quote the box (a file name, a provider's error body): never let it drive the terminal
    print(f"rgt: {escape_control(str(exc))}", file=sys.stderr)
    if isinstance(exc, GateRefused) and len(exc.reasons) > 1:
        for reason in exc.reasons:
            print(f"  - {escape_control(reason)}", file=sys.stderr)
    if isinstance(exc, GateRefused) and exc.hint:
        print(f"rgt: {escape_control(exc.hint)}", file=sys.stderr)
    return exc.exit_code
