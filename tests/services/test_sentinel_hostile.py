"""The sentinel against receivers that misbehave (issue 26, items 1 and 2; docs/remote-ops.md §9.1), on a simulated
box: an answer that is not HTTP, a redirect (302, 307), an answer trickled one byte every 2 s, a receiver that
never answers and one that floods headers are each a failed attempt; after the configured retries the event is
recorded as "gave up", the sentinel ends after `finished`, deletes its secrets file, and the report says so. A
redirect is never followed. A URL with a control character is refused by rgt at launch and by the sentinel itself.

The receivers are real TCP servers on 127.0.0.1 (support/hostile_receivers.py); nothing of rgt is replaced.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_sentinel import box_ctl, created, launched, notify_project

from remote_gpu_trainer.cli.main import main
from remote_gpu_trainer.remote import rgt_sentinel
from remote_gpu_trainer.services.opening import open_session
from support.helpers import RUN, copy_command, wait_file, wait_gone, write_project
from support.hostile_receivers import KINDS, Hostile, hostile_receiver  # noqa: F401 (the fixture)
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

ATTEMPT_S = 3  # [notify] send_timeout_seconds: longer than the trickle's 2 s between bytes
RETRIES = [0.2, 0.2]  # [notify] retry_seconds: three attempts in all
# what the sentinel's log says of each failed attempt, per receiver
REASON = {
    "not-http": "no HTTP answer (BadStatusLine)",
    "302": "HTTP 302 (a redirect, not followed: not a delivery)",
    "307": "HTTP 307 (a redirect, not followed: not a delivery)",
    "trickle": f"no full answer within {ATTEMPT_S} s",
    "hang": f"no full answer within {ATTEMPT_S} s",
    "flood": f"an answer longer than {rgt_sentinel.MAX_ANSWER_BYTES} bytes",
}
ENDED_WITHIN_S = 120  # generous: the process must have ended by then, whatever the machine's speed


def bounded_project(root: Path, url: str, command: str | None = None) -> Path:
    notify_project(root, url, command)
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:  # [notify] is the file's last table
        handle.write(f"send_timeout_seconds = {ATTEMPT_S}\nretry_seconds = {json.dumps(RETRIES)}\n")
    return root


def wait_process_gone(pid: int, timeout: float = ENDED_WITHIN_S) -> None:
    """Until `pid` has ended (gone, or a zombie nobody reaped yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                state = handle.read().rsplit(")", 1)[-1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):
            return
        assert time.monotonic() < deadline, f"process {pid} is still running"
        time.sleep(0.1)


@pytest.mark.parametrize("hostile_receiver", KINDS, indirect=True)
def test_a_receiver_that_does_not_take_it_is_given_up_and_the_watch_ends(
        tmp_path: Path, hostile_receiver: Hostile, receiver: Receiver,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    hostile_receiver.redirect_to = receiver.url  # a redirect leads to a receiver that would take the GET
    root = bounded_project(tmp_path / "proj", hostile_receiver.url, copy_command())
    detail = asyncio.run(launched(root))
    facts = detail["sentinel"]
    assert isinstance(facts, dict)
    secret, ctl = Path(str(facts["secret_file"])), box_ctl(root)
    pid = int(wait_file(ctl / "sentinel.pid"))

    assert wait_file(ctl / "sentinel.exited", timeout=ENDED_WITHIN_S) == "finished\n"
    wait_process_gone(pid)
    sent = json.loads((ctl / "sentinel.sent.json").read_text())
    assert {k: sent["finished"][k] for k in ("outcome", "attempts")} == {"outcome": "gave up", "attempts": 3}
    assert hostile_receiver.connections == 3  # one connection per attempt, no more
    assert receiver.requests == []  # the redirect was not followed
    log = (ctl / "sentinel.log").read_text()
    reason = REASON[hostile_receiver.kind]
    assert [line.split(" ", 1)[1] for line in log.splitlines() if ": the receiver answered " in line] == \
        [f"finished: the receiver answered {reason} (attempt {n})" for n in (1, 2, 3)]
    assert "finished (exit 0): gave up after 3 attempt(s)" in log and "poll failed" not in log
    assert log.splitlines()[-1].endswith(" exiting after finished")
    wait_gone(secret)  # the watch is over: the URL does not stay on the box

    assert main(["--report", str(root), "--format", "json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert (run["liveness"], run["sentinel"]) == ("finished", "exited after finished")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook/a\x01b", "http://127.0.0.1:9/hook/a\x7fb",
                                 "http://127.0.0.1:9/hook\x1b[2J", "http:///hook/no-host"])
def test_a_url_with_a_control_character_or_no_host_stops_the_launch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str) -> None:
    root = notify_project(tmp_path / "proj", "https://hooks.example/unused")
    (root / "webhook.url").write_text(url + "\n")
    asyncio.run(created(root))
    code = main(["run", RUN, str(root)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"[notify] webhook_file: {root / 'webhook.url'}: must hold one http:// or https:// URL" in err
    assert "hook/" not in err and "\x01" not in err  # what the file holds is never echoed
    assert not box_ctl(root).exists()  # nothing was pushed or started
    session = open_session(str(root))
    try:
        assert session.db.launch(RUN) is None
    finally:
        session.close()


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook/a\x01b", "http://127.0.0.1:9/hook\x1b[2J",
                                 "gopher://127.0.0.1:9/hook"])
def test_the_sentinel_itself_refuses_such_a_url_ends_and_deletes_it(tmp_path: Path, url: str) -> None:
    """A secrets file written by anything but rgt: the sentinel checks the URL itself, says why without
    echoing it, deletes the file and ends (it would otherwise fail every attempt of every event)."""
    write_project(tmp_path / "proj")
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    config = {"version": rgt_sentinel.VERSION, "run": RUN, "instance": "box", "kind": "json", "ctl": str(ctl),
              "log": str(ctl / "log"), "root": str(tmp_path), "durable": str(tmp_path), "stall_after": 900,
              "poll_s": 0.2, "started_at": time.time(), "payloads": {}}
    (ctl / "sentinel.json").write_text(json.dumps(config))
    secret = tmp_path / "secret"
    secret.write_text(url + "\n")
    os.chmod(secret, 0o600)
    program = Path(rgt_sentinel.__file__)
    ended = subprocess.run([sys.executable, str(program), str(ctl / "sentinel.json"), str(secret)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=ENDED_WITHIN_S)
    problem = ("holds no http(s) URL" if url.startswith("gopher") else
               "holds a URL with a space or a control character")
    assert ended.returncode != 0 and ended.stderr == f"sentinel: the secrets file {problem}\n"
    assert not secret.exists()
    log = (ctl / "sentinel.log").read_text()
    assert f"the secrets file {problem}: exiting" in log and "deleted the secrets file" in log
    assert "127.0.0.1" not in log and "hook" not in log
    assert not (ctl / "sentinel.sent.json").exists()  # nothing was sent, nothing recorded as sent


TIMEOUT_BOUND = f"must be a number of seconds > 0, at most {rgt_sentinel.MAX_ATTEMPT_S}"
RETRY_BOUND = (f"must be a list of at most {rgt_sentinel.MAX_RETRIES} numbers of seconds, each from 0 to "
               f"{rgt_sentinel.MAX_RETRY_S}")


@pytest.mark.parametrize(("line", "problem"), [
    ("send_timeout_seconds = 0", f"notify.send_timeout_seconds: {TIMEOUT_BOUND}"),
    ("send_timeout_seconds = 301", f"notify.send_timeout_seconds: {TIMEOUT_BOUND}"),
    ("send_timeout_seconds = inf", f"notify.send_timeout_seconds: {TIMEOUT_BOUND}"),
    ("retry_seconds = [1, -1]", f"notify.retry_seconds: {RETRY_BOUND}"),
    ("retry_seconds = [3601]", f"notify.retry_seconds: {RETRY_BOUND}"),
    (f"retry_seconds = {[1] * 11}", f"notify.retry_seconds: {RETRY_BOUND}"),
    ('retry_seconds = "2, 5"', f"notify.retry_seconds: {RETRY_BOUND}")])
def test_the_bounds_are_bounded_where_rgt_toml_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       line: str, problem: str) -> None:
    """A receiver that never answers must be given up within a bound: rgt.toml cannot ask for no bound."""
    root = notify_project(tmp_path / "proj", "https://hooks.example/unused")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    assert main(["--report", str(root)]) == 2
    assert problem in capsys.readouterr().err
