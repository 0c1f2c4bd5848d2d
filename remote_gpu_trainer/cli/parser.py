"""The command line's grammar: the main parser (TUI and `--report`), one parser per verb, and the checks
that need the parsed arguments but nothing else (docs/architecture.md §3.1).

Every verb has a one-line description (VERB_HELP) and an example (VERB_EXAMPLES): the same parser parses
the arguments, prints `rgt VERB --help` and `rgt help VERB`, lists the verbs in `rgt --help`, and is what
shell completion is generated from (cli/completion.py), so the four can never disagree.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from remote_gpu_trainer import __version__
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers import table

VERBS = ("demo", "init", "info", "up", "push", "run", "watch", "recover", "pull", "verify", "down", "audit", "finding",
         "probe",
         "accept", "tick", "events", "trust", "capsule", "splits", "build", "reconcile", "completeness", "completion",
         "help", "status", "adopt", "mcp", "approve", "reject", "skill")
# One line per verb: `rgt help`, `rgt VERB --help` and the verb list say what each one does.
VERB_HELP = {
    "demo": "write the demo project and launch its run on a simulated rented box, then open the TUI",
    "init": "write a commented rgt.toml template for one provider (never overwrites a file)",
    "info": "show versions, and where the project file, the state database and the evidence live",
    "up": "start (or rent, with --approve-price) the run's instance and audit its environment",
    "push": "copy the run's `push` files into its workdir on the instance",
    "run": "audit the instance (phase 0) and launch the run detached on it",
    "watch": "print the run's state changes, alerts and progress until it ends; --all: one line per run of every "
             "project, for cron",
    "pull": "pull the run's results into runs/RUN/, resumable and hashed while copying",
    "verify": "verify the pulled copy: file set, sizes, sha256, and every checkpoint loads",
    "down": "tear down the run's instance once the gate is open and the instance id is typed",
    "audit": "run the VERIFY audits over the project's evidence and list the checks and findings",
    "finding": "show a VERIFY finding, or acknowledge, waive, mark fixed or reopen it with a note",
    "probe": "run a VERIFY probe check (V20, V22, V27, V28) against the run's model through the rgt.toml hook",
    "accept": "accept the pulled bundle on a second machine (re-hash, load-check, core), or compare two acceptances",
    "tick": "set a manual checklist item of a run (ticked, not_applicable or open) with a note",
    "events": "print the append-only event log: approvals and cost-affecting actions",
    "trust": "trust a first-contact SSH host key after comparing its fingerprint",
    "capsule": "print the path of rgt_capsule.py, the helper a training script imports to write its run capsule",
    "splits": "build a split manifest splits/ID.json (member paths and sha256) from folders, a CSV or file lists",
    "build": "generate EVIDENCE.json values, figures, tables and LaTeX macros from the pulled evidence "
             "(all by default)",
    "reconcile": "compare the numbers in the documents of rgt.toml [deliver] docs against EVIDENCE.json",
    "completeness": "check every point of rgt.toml [grid] for its checkpoint, split, inputs and visuals; "
                    "list what to pull",
    "completion": "print a shell completion script for rgt, generated from this parser (bash, zsh or tcsh)",
    "help": "show the help of rgt, or of one verb (rgt help VERB)",
    "adopt": "rebuild this project's launch records from a box's ledger (after the state database was lost): "
             "then pull and verify those runs again",
    "mcp": "serve the project to an AI agent over the Model Context Protocol (stdio): everything that costs nothing; "
           "rents, stops, teardowns and finding decisions become requests a person approves",
    "approve": "approve an agent's request at a terminal (the plan is shown again, an irreversible one needs the "
               "instance id typed); --allowance: let rents and resumes within a price and a total through",
    "reject": "reject an agent's request at a terminal, with a note the agent reads",
    "recover": "show what rgt may do on its own when RUN is preempted (runs.RUN.recover), and what it did; approve or "
               "revoke those limits at a terminal",
    "skill": "print the SKILL.md that teaches an agent (Claude Code, Codex) to drive rgt; --install DIR writes it",
    "status": "list every box of the project (--all: of every project you opened) with its burn, cost and idle "
              "time, and, in each cloud account those projects configure, the boxes that bill and no project "
              "names",
}
# At least one example per verb, shown under `example:` in its --help.
VERB_EXAMPLES = {
    "demo": ("rgt demo ./rgt-demo --quick", "rgt demo ./rgt-demo-flawed --flawed"),
    "init": ("rgt init my-project --provider runpod",),
    "info": ("rgt info", "rgt info --format json"),
    "up": ("rgt up r1", "rgt up r1 --approve-price 1.49"),
    "push": ("rgt push r1",),
    "run": ("rgt run r1", 'rgt run r1 --ack "smoke test on a CPU box"',
            "rgt run r1 --resume                (a preempted run, with runs.r1.auto_resume = true)"),
    "watch": ("rgt watch r1", "rgt watch r1 --once --format json", "rgt watch r1 --progress-every 300",
              "rgt watch --all --once                (cron: 3,33 * * * *; exit 1 while a box idles and bills)",
              "rgt watch --all ~/proj-a ~/proj-b --interval 600 --notify"),
    "pull": ("rgt pull r1", "rgt pull r1 --format json"),
    "verify": ("rgt verify r1", "rgt verify r1 --format json"),
    "down": ("rgt down r1                        (at a terminal: shows the plan, then asks for the id)",
             "rgt down r1 --confirm i-0abc123    (anywhere: the id typed on the command line)"),
    "audit": ("rgt audit", "rgt audit r1 --format json", "rgt audit --check V04 --check V14"),
    "finding": ("rgt finding F-000003",
                'rgt finding F-000003 --ack --note "one seed by budget" --disclosure "single seed" --scope check',
                'rgt finding F-000007 --waive --note "not a classification task"'),
    "probe": ("rgt probe r1 V20", "rgt probe r1 grad_coverage --cell seed0", "rgt probe r1 V27 --on gpu-box"),
    "accept": ("rgt accept r1 --on spare-box", "rgt accept r1 --here",
               "rgt accept r1 --compare here spare-box --format json"),
    "tick": ('rgt tick r1 T01 --note "checked by hand"',),
    "events": ("rgt events", "rgt events --run r1 --format json"),
    "trust": ("rgt trust gpu-box --fingerprint SHA256:...",),
    "capsule": ("rgt capsule", "rgt capsule --write .        (copy it beside train.py, then `import rgt_capsule`)"),
    "splits": ("rgt splits build main --split train=data/train --split test=data/test",
               "rgt splits build main --csv splits.csv",
               "rgt splits build text-v1 --hash-unit record --csv records.csv --fields question,context"),
    "build": ("rgt build", "rgt build evidence", "rgt build figure main-curve",
              "rgt build table tab2-main --format json"),
    "reconcile": ("rgt reconcile", "rgt reconcile --mode exact --format json"),
    "completeness": ("rgt completeness", "rgt completeness --format json"),
    "completion": ("rgt completion bash > ~/.local/share/bash-completion/completions/rgt",
                   "rgt completion zsh > ~/.zfunc/_rgt"),
    "help": ("rgt help down",),
    "adopt": ("rgt adopt gpu-box", "rgt adopt gpu-box ~/proj --format json"),
    "mcp": ("rgt mcp ~/proj                     (in the agent's MCP configuration: docs/agents.md)",),
    "approve": ("rgt approve Q-000003", "rgt approve --list",
                "rgt approve --allowance --max-price 1.50 --total 20 --hours 12"),
    "reject": ('rgt reject Q-000003 --note "pull and verify first"',),
    "recover": ("rgt recover r1", "rgt recover r1 --approve", "rgt recover r1 --revoke",
                "rgt recover r1 --format json"),
    "skill": ("rgt skill", "rgt skill --install ~/.claude/skills"),
    "status": ("rgt status", "rgt status --all", "rgt status --all --format json --timeout 10"),
}
SHELLS = ("bash", "zsh", "tcsh")
FORMATS = ("text", "json")  # of the verbs that print a result; --report has markdown as well
RUN_VERBS = ("up", "push", "run", "watch", "recover", "pull", "verify", "down")


class Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are ConfigError: one line on stderr and exit 2 (errors.py)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (see {self.prog} --help)")


class PrintCompletion(argparse.Action):
    """`rgt --print-completion SHELL`: the same script as `rgt completion SHELL`, shtab's spelling."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        from remote_gpu_trainer.cli.completion import completion_script

        sys.stdout.write(completion_script(str(values)))
        parser.exit(0)


def main_parser(*, project_argument: bool = True) -> Parser:
    """`rgt [PROJECT]` (the TUI) and `rgt --report`; the epilog lists every verb with its description.
    Completion leaves out the PROJECT argument: there the first word completes as a verb."""
    verbs = "\n".join(f"  {verb:<8} {VERB_HELP[verb]}" for verb in VERBS)
    parser = Parser(prog="rgt", formatter_class=argparse.RawDescriptionHelpFormatter,
                    description="remote-gpu-trainer: RUN → VERIFY → DELIVER on a GPU you own or rent.",
                    epilog=f"verbs (rgt VERB --help, or rgt help VERB):\n{verbs}")
    if project_argument:
        _project_argument(parser)
    parser.add_argument("--report", action="store_true", help="print a report instead of opening the TUI")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE (atomically) instead of "
                        "stdout; never rgt.toml, .rgt/ or runs/ of the project")
    parser.add_argument("--force", action="store_true", help="let --output replace an existing FILE")
    parser.add_argument("--strict", action="store_true", help="exit 1 when anything needs attention")
    parser.add_argument("--read-only", action="store_true", help="TUI with every cost-affecting action hidden")
    parser.add_argument("--print-completion", choices=SHELLS, action=PrintCompletion, metavar="SHELL",
                        help="print a shell completion script (bash, zsh, tcsh) and exit")
    parser.add_argument("-V", "--version", action="version", version=f"rgt {__version__}")
    return parser


def verb_parser(verb: str) -> Parser:
    """The verb's arguments, with its one-line description and its examples: the same parser parses and
    prints the help."""
    examples = "\n".join(f"  {line}" for line in VERB_EXAMPLES[verb])
    parser = Parser(prog=f"rgt {verb}", description=VERB_HELP[verb], epilog=f"example:\n{examples}",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    _ARGUMENTS.get(verb, _run_arguments)(parser)
    if verb in RUN_VERBS:
        _RUN_OPTIONS.get(verb, _no_options)(parser)
    if verb in ("info", "events", "watch", "recover", "pull", "verify", "audit", "finding"):
        parser.add_argument("--format", choices=FORMATS, default="text",
                            help="text for people (default) or json: one document with a versioned schema")
    return parser


def parse_verb(verb: str, argv: Sequence[str], *, interactive: bool) -> argparse.Namespace:
    """Parse a verb's arguments, then the rules between them; `interactive` says whether stdin and stdout
    are a terminal (then `rgt down` may ask for the id instead of requiring --confirm)."""
    parser = verb_parser(verb)
    args = parser.parse_args(list(argv))
    if verb == "down" and args.confirm is None and not interactive:
        parser.error("the following arguments are required: --confirm")
    if verb == "watch":
        _watch_rules(parser, args)
    return args


def _project_argument(parser: Parser) -> None:
    parser.add_argument("project", nargs="?", help="project folder or rgt.toml (default: nearest upward)")


def _help_arguments(parser: Parser) -> None:
    parser.add_argument("topic", nargs="?", choices=VERBS, metavar="VERB", help="the verb to describe")


def _completion_arguments(parser: Parser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def _demo_arguments(parser: Parser) -> None:
    parser.add_argument("dir", nargs="?", default="rgt-demo", help="where to write it (default ./rgt-demo)")
    parser.add_argument("--no-tui", action="store_true", help="launch the run and return at once")
    parser.add_argument("--quick", action="store_true", help="a few-second run (for tests and trying)")
    parser.add_argument("--flawed", action="store_true", help="add a second run with planted problems for the "
                        "VERIFY checklist to find (a leaked test item, one seed, a stale evaluation)")


def _init_arguments(parser: Parser) -> None:
    parser.add_argument("dir", nargs="?", default=".", help="the project folder (default: here)")
    parser.add_argument("--provider", default="ssh", metavar="NAME",
                        help=f"the instance's provider (default ssh): {', '.join(table.available())}")


def _trust_arguments(parser: Parser) -> None:
    parser.add_argument("instance", help="the instance name in rgt.toml")
    _project_argument(parser)
    parser.add_argument("--fingerprint", help="the SHA256 fingerprint you compared (non-interactive)")


def _adopt_arguments(parser: Parser) -> None:
    parser.add_argument("instance", help="the instance name in rgt.toml whose box's ledger is read")
    _project_argument(parser)
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: what was adopted, known, and not this project's")


def _events_arguments(parser: Parser) -> None:
    _project_argument(parser)
    parser.add_argument("--run", help="only events of this run")


def _tick_arguments(parser: Parser) -> None:
    parser.add_argument("run", help="the run id")
    parser.add_argument("item", help="the checklist item id")
    _project_argument(parser)
    parser.add_argument("--status", default="ticked", choices=("open", "ticked", "not_applicable"))
    parser.add_argument("--note", default="", help="why (required to acknowledge)")


def _audit_arguments(parser: Parser) -> None:
    parser.add_argument("run", nargs="?", help="only this run's checks and findings (default: the whole project)")
    _project_argument(parser)
    parser.add_argument("--check", action="append", metavar="ID", help="run only this check (V04 or seed_count); "
                        "repeatable")
    parser.add_argument("--strict", action="store_true", help="exit 1 while a finding at warn or above is open")


def _finding_arguments(parser: Parser) -> None:
    parser.add_argument("id", help="the finding id, e.g. F-000003 (rgt audit lists them)")
    _project_argument(parser)
    moves = parser.add_mutually_exclusive_group()
    moves.add_argument("--ack", dest="status", action="store_const", const="acknowledged",
                       help="acknowledge it: needs --note and --disclosure")
    moves.add_argument("--waive", dest="status", action="store_const", const="waived",
                       help="it does not apply: needs --note saying why")
    moves.add_argument("--fixed", dest="status", action="store_const", const="fixed",
                       help="mark it fixed (provisional until the next audit)")
    moves.add_argument("--reopen", dest="status", action="store_const", const="open", help="open it again")
    parser.add_argument("--note", default="", help="why")
    parser.add_argument("--disclosure", default="", help="the text that rides with the claims it touches")
    parser.add_argument("--scope", choices=("subject", "check"), default="subject",
                        help="check: the acknowledgement covers the whole check for the project")


def _probe_arguments(parser: Parser) -> None:
    parser.add_argument("run", help="the run id in rgt.toml")
    parser.add_argument("check", help="V20, V22, V27 or V28 (or output_cosine, input_spread, train_eval_parity, "
                        "grad_coverage)")
    _project_argument(parser)
    parser.add_argument("--cell", help="only this cell of the run (default: every cell of its roster)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--here", action="store_true", help="on the pulled copy runs/RUN/CELL/ (the default)")
    where.add_argument("--on", metavar="INSTANCE", help="on the instance, in the run's workdir with its python")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: one document with a versioned schema")


def _accept_arguments(parser: Parser) -> None:
    parser.add_argument("run", nargs="?", help="the run id in rgt.toml (with --compare: to resolve machine names)")
    _project_argument(parser)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--on", metavar="INSTANCE", help="push the bundle to this other instance and accept it there")
    where.add_argument("--here", action="store_true", help="accept runs/RUN/ on this machine (the second one when "
                       "the run ran on a box)")
    where.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two acceptance records (files, or "
                       "machine names of RUN): exit 0 MATCH, 1 DIFF or INDEPENDENCE_FAILED, 2 unreadable")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: the record, or the verdict document")


def _capsule_arguments(parser: Parser) -> None:
    parser.add_argument("--write", metavar="DIR", help="copy the helper into DIR as rgt_capsule.py")
    parser.add_argument("--force", action="store_true", help="replace a different rgt_capsule.py in DIR")


def _splits_arguments(parser: Parser) -> None:
    parser.add_argument("action", choices=("build",), help="build: write splits/ID.json")
    parser.add_argument("split_set_id", metavar="ID", help="the split set id (the file is splits/ID.json)")
    _project_argument(parser)
    parser.add_argument("--split", action="append", default=[], metavar="NAME=FOLDER",
                        help="every regular file under FOLDER (dotfiles skipped) is a member of split NAME; its id "
                             "is its path relative to FOLDER without the extension (repeatable)")
    parser.add_argument("--split-list", action="append", default=[], metavar="NAME=FILE",
                        help="FILE lists split NAME's files, one project-relative path a line; id = the path "
                             "without the extension (repeatable)")
    parser.add_argument("--csv", metavar="FILE", help="a CSV with columns split,path[,id,group,time] (project-"
                        "relative paths); with --hash-unit record: split,id[,group,time] and the --fields")
    parser.add_argument("--jsonl", metavar="FILE", help="--hash-unit record: one JSON object a line, with split, "
                        "id and the --fields")
    parser.add_argument("--hash-unit", choices=("file_bytes", "record"), default="file_bytes",
                        help="file_bytes (default): sha256 of each file; record: sha256 of the canonical JSON of "
                             "each record's --fields")
    parser.add_argument("--fields", metavar="A,B", help="--hash-unit record: the input fields hashed (never id "
                        "or label)")
    parser.add_argument("--dataset", help="the dataset's name (default: ID)")
    parser.add_argument("--method", default="official",
                        choices=("official", "random", "stratified", "group", "temporal"),
                        help="how the split was made (default official: the dataset's own split)")
    parser.add_argument("--seed", type=int, help="the seed of a random split")
    parser.add_argument("--force", action="store_true", help="replace an existing splits/ID.json (runs that "
                        "cite its old sha256 then no longer match it)")


BUILD_TARGETS = ("all", "evidence", "figure", "table", "macros")


def _build_arguments(parser: Parser) -> None:
    parser.add_argument("what", nargs="?", default="all", metavar="WHAT",
                        help=f"what to build: {', '.join(BUILD_TARGETS)} (default all, in the order figures, tables, "
                             "evidence, macros)")
    parser.add_argument("id", nargs="?", metavar="ID",
                        help="figure or table: its folder name under figures/ or tables/")
    _project_argument(parser)
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: one document with a versioned schema")


def _reconcile_arguments(parser: Parser) -> None:
    _project_argument(parser)
    parser.add_argument("--mode", choices=("rounding", "exact"), default=None,
                        help="rounding (the default, unless rgt.toml [deliver] mode says otherwise): a number "
                             "matches at the decimals it is written with; exact: equal within a relative 1e-9")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: reconcile.json as written")


def _completeness_arguments(parser: Parser) -> None:
    _project_argument(parser)
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: completeness.json as written")


def _status_arguments(parser: Parser) -> None:
    _project_argument(parser)
    parser.add_argument("--all", action="store_true", help="every project this user opened (the registry under "
                        "$XDG_STATE_HOME/rgt), not only PROJECT")
    parser.add_argument("--timeout", type=float, default=20.0, metavar="S",
                        help="seconds each box and each cloud account may take to answer (default 20)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text for people (default) or json: one document with a versioned schema")


def _run_arguments(parser: Parser) -> None:
    """The verbs that act on one run: up, push, run, watch, pull, verify, down."""
    parser.add_argument("run", help="the run id in rgt.toml")
    _project_argument(parser)


def _down_options(parser: Parser) -> None:
    parser.add_argument("--confirm", metavar="INSTANCE_ID",
                        help="the instance id, typed exactly: the approval for this teardown (required unless "
                             "at a terminal, where rgt shows the plan and asks for it)")
    parser.add_argument("--stop", action="store_true", help="stop (keeps the disk) instead of terminate")
    parser.add_argument("--accept-loss", metavar="RUNS", default="",
                        help="comma-separated names of the runs whose results you accept to lose, exactly as "
                             "the plan's 'At risk' line names them: only their reasons are waived, and the "
                             "waiver is logged before the provider call (docs/gate.md §7.2)")


def _launch_options(parser: Parser) -> None:
    parser.add_argument("--ack", metavar="NOTE", help="launch despite failed phase-0 rows; NOTE says why")
    parser.add_argument("--rerun", action="store_true",
                        help="launch RUN again under a new id RUN-rN (its table is copied in rgt.toml with a "
                             "sibling remote_root): run ids are append-only")
    parser.add_argument("--resume", action="store_true",
                        help="relaunch a preempted RUN on its still-billing box (needs runs.RUN.auto_resume = true; "
                             "never rents: a new box needs `rgt up`)")


def _up_options(parser: Parser) -> None:
    parser.add_argument("--approve-price", metavar="PRICE",
                        help="runpod/vastai/lambda: the hourly price the plan states, typed exactly: the "
                             "approval to rent the instance (without it the plan is shown and nothing rented)")


def _watch_arguments(parser: Parser) -> None:
    parser.add_argument("run", nargs="?", help="the run id in rgt.toml (with --all: the first PROJECT)")
    parser.add_argument("project", nargs="*", metavar="PROJECT",
                        help="project folder or rgt.toml (default: the nearest upward; with --all: every project "
                             "you opened)")


def _watch_options(parser: Parser) -> None:
    parser.add_argument("--once", action="store_true", help="print the state once and return")
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between polls (default 2; with --all 1800)")
    parser.add_argument("--all", action="store_true", help="the patrol: one plain line per run of every project "
                        "per tick, even when nothing changed; exit 1 while a box idles and bills (docs/remote-ops.md "
                        "§9.2)")
    parser.add_argument("--notify", action="store_true", help="with --all: send each new event once through "
                        "apprise, to the URLs in the file rgt.toml [notify] apprise_file names")
    parser.add_argument("--progress-every", type=float, default=60.0, metavar="SECONDS",
                        help="at most one progress line (step, loss, ETA, cost to finish) per SECONDS (default 60)")


def _watch_rules(parser: Parser, args: argparse.Namespace) -> None:
    """`rgt watch RUN [PROJECT]` or `rgt watch --all [PROJECT ...]`; the options each form takes."""
    if args.interval is not None and args.interval < 0 or args.progress_every < 0:
        parser.error("--interval and --progress-every are seconds >= 0")
    if args.all:
        args.projects = ([args.run] if args.run else []) + list(args.project)
        args.interval = 1800.0 if args.interval is None else args.interval
        if args.format == "json":
            parser.error("--all prints one line per run: --format json is for rgt watch RUN --once")
        return
    if args.run is None:
        parser.error("the following arguments are required: run (or --all)")
    if len(args.project) > 1:
        parser.error(f"one PROJECT per run (got {len(args.project)}); several projects: rgt watch --all P1 P2")
    if args.notify:
        parser.error("--notify is for the patrol: rgt watch --all --notify")
    args.project = args.project[0] if args.project else None
    args.interval = 2.0 if args.interval is None else args.interval
    if args.format == "json" and not args.once:
        parser.error("--format json prints one document: add --once")


def _mcp_arguments(parser: Parser) -> None:
    _project_argument(parser)
    parser.add_argument("--client-name", metavar="NAME", help="the agent's name in the event log when its MCP "
                        "client does not send one (default: the client's own name)")


def _approve_arguments(parser: Parser) -> None:
    parser.add_argument("request", nargs="?", help="the request id, e.g. Q-000003 (--list shows them); with --list, "
                        "--allowance or --revoke there is none, and a single folder here is the PROJECT")
    _project_argument(parser)
    parser.add_argument("--list", action="store_true", help="list the pending requests and the allowances")
    parser.add_argument("--allowance", action="store_true", help="grant the agent a spending allowance for "
                        "rents and resumes (never teardowns, stops or finding decisions)")
    parser.add_argument("--max-price", type=float, metavar="PER_HOUR", help="the allowance's highest price per hour")
    parser.add_argument("--total", type=float, metavar="AMOUNT", help="the allowance's total (price × hours asked)")
    parser.add_argument("--hours", type=float, metavar="H", help="the allowance expires after H hours")
    parser.add_argument("--revoke", metavar="ALLOWANCE", help="end an allowance now (e.g. A-000001)")
    parser.add_argument("--accept-loss", metavar="RUNS", default="",
                        help="for a teardown or stop request: give up these runs' results not known to be home "
                             "(comma-separated names the plan shows at risk), as `rgt down --accept-loss` does")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="with --list: text for people (default) or json: one document (rgt-inbox/v1)")


def _reject_arguments(parser: Parser) -> None:
    parser.add_argument("request", help="the request id, e.g. Q-000003")
    _project_argument(parser)
    parser.add_argument("--note", default="", help="why, for the agent to read")


def _skill_arguments(parser: Parser) -> None:
    parser.add_argument("--install", metavar="DIR", help="write DIR/remote-gpu-trainer/SKILL.md (never overwrites "
                        "a file it did not write)")


def _recover_options(parser: Parser) -> None:
    parser.add_argument("--approve", action="store_true", help="approve the limits runs.RUN.recover states, at a "
                        "terminal: you type the max_spend shown (an agent's shell cannot approve)")
    parser.add_argument("--revoke", action="store_true", help="withdraw the approval: nothing is recovered until a "
                        "person approves again")


def _no_options(parser: Parser) -> None:
    """push, pull and verify take the run and the project only."""


_ARGUMENTS: dict[str, Callable[[Parser], None]] = {
    "help": _help_arguments, "completion": _completion_arguments, "demo": _demo_arguments,
    "init": _init_arguments, "info": _project_argument, "trust": _trust_arguments, "events": _events_arguments,
    "adopt": _adopt_arguments,
    "tick": _tick_arguments, "audit": _audit_arguments, "finding": _finding_arguments, "probe": _probe_arguments,
    "accept": _accept_arguments, "capsule": _capsule_arguments, "splits": _splits_arguments,
    "build": _build_arguments, "reconcile": _reconcile_arguments, "completeness": _completeness_arguments,
    "status": _status_arguments, "watch": _watch_arguments, "mcp": _mcp_arguments, "approve": _approve_arguments,
    "reject": _reject_arguments, "skill": _skill_arguments,
}
_RUN_OPTIONS: dict[str, Callable[[Parser], None]] = {
    "down": _down_options, "run": _launch_options, "up": _up_options, "watch": _watch_options,
    "recover": _recover_options,
}
