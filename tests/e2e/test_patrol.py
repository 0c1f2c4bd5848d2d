"""The patrol for cron (`rgt watch --all`), its notifications through apprise and the automatic follow-ups, run
as cron runs them: the installed module in its own process, no terminal, standard input /dev/null, no TERM.

The projects are real sim projects whose jobs really ran; the receiver is a local HTTP server (the one fake the
house allows) that apprise posts to.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from remote_gpu_trainer.services import project_registry
from remote_gpu_trainer.services.opening import open_session
from support.helpers import INSTANCE, RUN, launched_and_finished, write_project
from support.webhook_receiver import Receiver, receiver  # noqa: F401 - the fixture

LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (?P<project>[\w-]+)/(?P<run>\w+) box=(?P<box>\S+ \S+ \S+\)) '
                  r"run=(?P<run_state>[^ (]+)(\((?P<detail>[^)]*)\))? billing=(?P<billing>\S+) spent=\S+ "
                  r'idle=(?P<idle>\S+) sentinel=(?P<sentinel>\S+) auto=(?P<auto>\S+) next="(?P<next>[^"]*)"$')


def cron(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`rgt ARGS` as cron runs it: no terminal (pipes), stdin from /dev/null, TERM unset."""
    env = {key: value for key, value in os.environ.items() if key != "TERM"}
    return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def finished_project(root: Path, name: str, extra_run: str = "", extra: str = "") -> Path:
    """A sim project whose run r1 really ran to `finished` on its (billing) sim box."""
    write_project(root, extra_run=extra_run)
    text = (root / "rgt.toml").read_text().replace('name = "test-project"', f'name = "{name}"')
    (root / "rgt.toml").write_text(text + extra)

    async def launch() -> None:
        session = open_session(str(root))
        try:
            await launched_and_finished(session)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(launch())
    return root


def parsed(stdout: str) -> list[re.Match[str]]:
    lines = stdout.splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    return [m for m in matches if m is not None]


def event_rows(root: Path) -> list[tuple[str, str, str]]:
    result = cron("events", "--format", "json", cwd=root)
    assert result.returncode == 0, result.stderr
    return [(e["kind"], e["actor"], e["summary"]) for e in json.loads(result.stdout)["events"]]


def test_one_line_per_run_per_tick_and_exit_1_while_an_idle_box_bills(tmp_path: Path) -> None:
    billing = finished_project(tmp_path / "billing", "billing")
    idle = tmp_path / "never-started"  # its run was never launched: its box was never created and bills nothing
    write_project(idle)
    (idle / "rgt.toml").write_text((idle / "rgt.toml").read_text().replace("test-project", "never-started"))
    project_registry.remember(idle)
    gone = tmp_path / "gone"
    write_project(gone)
    project_registry.remember(gone)
    (gone / "rgt.toml").unlink()
    assert {p.root for p in project_registry.known_projects()} == {billing.resolve(), idle.resolve(), gone.resolve()}

    first = cron("watch", "--all", "--once", cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # the finished run's sim box bills $0.89/h
    assert first.stderr == "" and "\x1b" not in first.stdout
    lines = first.stdout.splitlines()
    assert len(lines) == 3
    assert [line.split(" ", 1)[1] for line in lines if "project=" in line] == \
        [f"{gone.resolve()} project=gone(no rgt.toml there any more)"]
    done, never = sorted(parsed("\n".join(line for line in lines if "project=" not in line)),
                         key=lambda m: m["project"])
    assert (done["project"], done["run"], done["run_state"], done["detail"]) == \
        ("billing", RUN, "finished", "exit 0, artifacts present")
    assert done["box"] == "box(sim sim-box running)" and done["billing"] == "$0.89/h"
    assert done["idle"] != "-" and done["sentinel"] == "-" and done["auto"] == "off"
    assert done["next"] == f"rgt pull {RUN} {billing.resolve()}"
    assert (never["run_state"], never["detail"], never["billing"], never["idle"]) == \
        ("unknown", "not launched", "$0.00/h", "-")
    assert never["next"] == f"rgt run {RUN} {idle.resolve()}"

    second = cron("watch", "--all", "--once", cwd=tmp_path)  # nothing changed: the same lines again
    assert second.returncode == 1 and len(second.stdout.splitlines()) == 3

    for verb in (("pull", RUN), ("verify", RUN), ("down", RUN, "--confirm", "sim-box")):  # the real gate path
        assert cron(*verb, cwd=billing).returncode == 0
    after = cron("watch", "--all", "--once", str(billing), str(idle), cwd=tmp_path)
    assert after.returncode == 0, after.stdout  # nothing bills any more; the gone project is not named
    assert len(after.stdout.splitlines()) == 2
    assert parsed(after.stdout)[0]["billing"] == "$0.00/h"
    with_gone = cron("watch", "--all", "--once", str(billing), str(gone), cwd=tmp_path)
    assert with_gone.returncode == 4  # nothing idles, but a project could not be looked at


def test_bad_combinations_are_one_line_exit_2(tmp_path: Path) -> None:
    for args, message in ((("watch",), "required: run (or --all)"),
                          (("watch", RUN, "a", "b"), "one PROJECT per run (got 2)"),
                          (("watch", RUN, "--notify"), "--notify is for the patrol"),
                          (("watch", "--all", "--once", "--format", "json"), "--format json is for rgt watch RUN"),
                          (("watch", "--all", "--once"), "no project to watch")):
        result = cron(*args, cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_auto_pull_verify_once_notified_once_and_nothing_torn_down(tmp_path: Path,
                                                                  receiver: Receiver) -> None:  # noqa: F811
    secret_file = tmp_path / "apprise.txt"
    secret_file.write_text(f"# the patrol's channel\njson://127.0.0.1:{receiver.server.server_address[1]}"
                           f"/hook/{receiver.token}\n")
    root = finished_project(tmp_path / "auto", "auto", extra_run='auto = ["pull", "verify"]',
                            extra=f'\n[notify]\napprise_file = "{secret_file}"\n')
    racing = [subprocess.Popen([sys.executable, "-m", "remote_gpu_trainer", "watch", "--all", "--once", "--notify"],
                               cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ)) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in racing]
    assert sorted(p.returncode for p in racing) == [1, 1]  # the box still bills: nothing tears it down
    posts = receiver.wait_for(2)
    third = cron("watch", "--all", "--once", "--notify", cwd=tmp_path)
    watched = cron("watch", RUN, "--interval", "0.2", cwd=root)
    assert watched.returncode == 0 and "auto follow-up" not in watched.stdout

    assert len(receiver.requests) == 2  # one per event, across three patrols
    messages = [json.loads(post.body) for post in posts]
    assert sorted(m["title"] for m in messages) == [f"rgt: run {RUN} finished on {INSTANCE}",
                                                    f"rgt: run {RUN} verified on {INSTANCE}"]
    assert all("The box is still billing $0.89/h" in m["message"] and
               f"rgt down {RUN} {root.resolve()} --confirm sim-box" in m["message"] for m in messages)
    assert parsed(third.stdout)[0]["auto"] == "verified"
    assert parsed(third.stdout)[0]["next"] == f"rgt down {RUN} {root.resolve()} --confirm sim-box"

    rows = event_rows(root)
    assert [r for r in rows if r[0] == "pull" and "finished" in r[2]] == \
        [("pull", "auto", f"pull of run {RUN} finished: 6 file(s) here, each matching its manifest hash")]
    assert [(r[0], r[1]) for r in rows if r[0] == "verify"] == [("verify", "auto")]
    assert [r[0] for r in rows if r[0] == "notified"] == ["notified", "notified"]
    assert [r for r in rows if r[0] in ("approval", "action", "torn_down", "stopped", "refused")] == \
        [("approval", "user", "create instance box at $0.89/h")]  # the box's creation only: no teardown
    assert (root / "runs" / RUN / "PULL_VERIFIED.json").is_file()
    assert (root / ".rgt" / "sim" / INSTANCE).is_dir()  # the box's disk is still there
    status = json.loads(cron("--report", "--format", "json", cwd=root).stdout)
    assert status["instances"][0]["state"] == "running"

    token = receiver.token
    everything = [o for pair in outputs for o in pair] + [third.stdout, third.stderr, watched.stdout, watched.stderr]
    everything += [cron("events", cwd=root).stdout, cron("--report", "--format", "json", cwd=root).stdout]
    assert not [text for text in everything if token in text]
    assert token.encode() not in (root / ".rgt" / "state.db").read_bytes()


@pytest.mark.parametrize("auto", ['["pull", "down"]', '["verify", "pull"]'])
def test_auto_refuses_teardown_and_a_wrong_order(tmp_path: Path, auto: str) -> None:
    write_project(tmp_path, extra_run=f"auto = {auto}")
    result = cron("watch", RUN, "--once", cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    expected = "teardown never starts automatically" if "down" in auto else 'in that order'
    assert f"runs.{RUN}.auto: " in result.stderr and expected in result.stderr


def test_looping_it_prints_every_tick_and_exits_with_the_last_ticks_status_on_sigterm(tmp_path: Path) -> None:
    root = finished_project(tmp_path / "billing", "billing")
    env = {key: value for key, value in os.environ.items() if key != "TERM"}
    patrolling = subprocess.Popen([sys.executable, "-m", "remote_gpu_trainer", "watch", "--all", "--interval", "0.2"],
                                  cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
    assert patrolling.stdout is not None
    lines = [patrolling.stdout.readline() for _ in range(3)]  # three ticks, one run: each line flushed as printed
    patrolling.send_signal(signal.SIGTERM)
    rest, errors = patrolling.communicate(timeout=120)
    assert patrolling.returncode == 1 and errors == ""  # the last tick saw the idle box billing
    for line in lines + rest.splitlines():
        match = LINE.match(line.rstrip("\n"))
        assert match and match["run_state"] == "finished" and match["next"] == f"rgt pull {RUN} {root.resolve()}"
