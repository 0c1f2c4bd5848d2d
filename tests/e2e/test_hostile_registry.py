"""One hostile project among good ones never silences the others (issue 26, item 4).

A registered project's rgt.toml nests an array 50,000 deep: tomllib recurses once per level and raised
RecursionError, which ended the whole patrol and `rgt status --all` as "internal error: RecursionError" with no
line for any other project, and made `rgt --report` on it exit 1. Now the file is that project's ConfigError
(exit 2, one line naming the file), and each project's look is isolated. Run as cron runs the patrol: the
installed module in its own process, no terminal, standard input /dev/null.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote_gpu_trainer.services import project_registry
from support.fleet_projects import sim_project

DEPTH = 50_000


def cron(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "TERM"}
    return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def hostile_project(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "rgt.toml").write_text(
        '[project]\nname = "hostile"\nx = ' + "[" * DEPTH + "]" * DEPTH + '\n\n[instances.box]\nprovider = "sim"\n',
        encoding="utf-8")
    return root


def test_a_deeply_nested_rgt_toml_is_its_own_project_s_error_and_every_good_project_keeps_its_line(
        tmp_path: Path) -> None:
    first = sim_project(tmp_path / "first", "good-first")
    hostile = hostile_project(tmp_path / "hostile")
    last = sim_project(tmp_path / "last", "good-last")
    for root in (first, hostile, last):
        project_registry.remember(root)
    refused = f"{hostile / 'rgt.toml'}: malformed TOML: arrays or tables nested more than"

    status = cron("status", "--all", "--timeout", "10", cwd=tmp_path)
    assert status.returncode == 1, (status.stdout, status.stderr)  # a project could not be read: not complete
    assert "internal error" not in status.stdout + status.stderr
    projects = status.stdout.split("\nprojects:\n", 1)[1].splitlines()
    assert any("good-first" in line and "ok" in line for line in projects), status.stdout
    assert any("good-last" in line and "ok" in line for line in projects), status.stdout
    assert any(str(hostile) in line and "unreadable" in line and refused in line for line in projects), \
        status.stdout

    patrol = cron("watch", "--all", "--once", cwd=tmp_path)
    lines = patrol.stdout.splitlines()
    assert patrol.returncode == 4, (patrol.stdout, patrol.stderr)  # nothing idles; a project could not be read
    assert "internal error" not in patrol.stdout + patrol.stderr
    assert len(lines) == 3, lines  # one line per run of each good project, one for the hostile project
    assert " good-first/r1 " in lines[0] and " good-last/r1 " in lines[2], lines
    assert f" {hostile} project=unreadable({refused}" in lines[1], lines

    report = cron("--report", str(hostile), cwd=tmp_path)
    assert report.returncode == 2, (report.stdout, report.stderr)
    assert report.stdout == "" and report.stderr.startswith(f"rgt: {refused} ") and report.stderr.count("\n") == 1, \
        report.stderr


def test_nesting_is_bounded_below_python_s_own_limit() -> None:
    """100 levels parse in tomllib, but the first recursive walk after it could still overflow: refused too,
    while 64 levels (the top table and 63 arrays) are read."""
    from remote_gpu_trainer.errors import ConfigError
    from remote_gpu_trainer.toml_table import MAX_DEPTH, parse_toml

    assert MAX_DEPTH == 64
    assert parse_toml("ok.toml", "a = " + "[" * 63 + "]" * 63)["a"] is not None
    for depth in (64, 100, DEPTH):
        with pytest.raises(ConfigError, match=r"^deep\.toml: malformed TOML: arrays or tables nested more than 64 "):
            parse_toml("deep.toml", "a = " + "[" * depth + "]" * depth)
