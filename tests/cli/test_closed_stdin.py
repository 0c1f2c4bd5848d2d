"""Standard input closed, as some schedulers start their jobs (issue 26, item 5): `rgt VERB ... <&-`.

Python then sets sys.stdin to None, and every verb died in cli/terminal.interactive() with "AttributeError:
'NoneType' object has no attribute 'isatty'" before doing anything. Run here through the installed console
script under a real shell whose `<&-` really closes descriptor 0 (and, for two verbs, stdout too: `>&-`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from remote_gpu_trainer.services import project_registry
from support.fleet_projects import sim_project
from support.gate_helpers import RGT
from support.helpers import RUN


def closed(command: str, cwd: Path, redirections: str = "<&-") -> subprocess.CompletedProcess[str]:
    """`rgt COMMAND` under sh with the given redirections; the child's own fd 0 is checked closed first."""
    script = f"if [ -e /dev/fd/0 ] || [ -e /proc/self/fd/0 ]; then echo fd0-open >&2; fi; " \
             f"exec {shlex.quote(str(RGT))} {command} {redirections}"
    env = {key: value for key, value in os.environ.items() if key != "TERM"}
    return subprocess.run(["sh", "-c", f"( {script} ) <&-"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_every_kind_of_verb_runs_with_standard_input_closed(tmp_path: Path) -> None:
    root = sim_project(tmp_path / "proj", "closed-stdin")
    project_registry.remember(root)
    proj = shlex.quote(str(root))
    expected = {
        f"up {RUN} {proj}": 0, f"info {proj}": 0, "help": 0, f"events {proj}": 0, f"status {proj} --timeout 10": 0,
        "status --all --timeout 10": 0, f"--report {proj}": 0, "watch --all --once": 0, f"audit {proj}": 0,
        f"down {RUN} {proj}": 2,  # no terminal to ask: the typed id is required, said in one line
        f"trust box {proj}": 1,  # a sim box has no host key to trust: said, not asked
    }
    for command, code in expected.items():
        done = closed(command, tmp_path)
        assert "fd0-open" not in done.stderr, "the shell did not close standard input"
        assert "AttributeError" not in done.stderr and "internal error" not in done.stderr, (command, done.stderr)
        assert done.returncode == code, (command, done.returncode, done.stdout, done.stderr)
        if code:
            assert done.stderr.startswith("rgt: "), (command, done.stderr)

    for command in (f"events {proj}", "watch --all --once"):  # stdout closed as well: nothing to say it on
        done = closed(command, tmp_path, "<&- >&-")
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
