"""The command line (`rgt`, docs/architecture.md §3.1): `main` is the console script's entry point.

main.py dispatches and maps errors to exit codes; parser.py holds the grammar (every verb's description,
example and arguments; completion.py generates shell completion from it); project_verbs.py,
launch_verbs.py and evidence_verbs.py hold one function per verb; faces.py the TUI and `--report`;
printers.py and schemas.py what is printed (progress, tables, the JSON documents).
"""

from typing import NoReturn

from remote_gpu_trainer.cli.main import main
from remote_gpu_trainer.runtime import exit_now

__all__ = ["main", "run"]


def run() -> NoReturn:
    """The `rgt` program (console scripts and `python -m remote_gpu_trainer`): main(), then the end of the
    process without the interpreter's teardown of its memory (runtime.exit_now). What argparse ends itself
    (`--help`, `--version`, a usage error) exits the usual way."""
    exit_now(main())
