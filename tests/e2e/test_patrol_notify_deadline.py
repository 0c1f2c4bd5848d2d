"""The patrol's notifications always end (issue 26, item 3; docs/remote-ops.md §9.2): `rgt watch --all --once
--notify` launched as cron launches it (the console script, its own session with no terminal, standard input
closed, TERM unset) against an apprise channel that trickles one byte every 2 s, one that never answers and one
that answers something that is not HTTP. The process ends by itself, says the notification was not confirmed,
records nothing as sent; a good channel beside the bad one still gets its notification, once.

The receivers are real servers on 127.0.0.1 (support/hostile_receivers.py, support/webhook_receiver.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_patrol import finished_project, parsed

from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.state.events import EventKind
from support.helpers import RUN
from support.hostile_receivers import Hostile, hostile_receiver  # noqa: F401 (the fixture)
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

DEADLINE_S = 3  # [notify] send_timeout_seconds
ENDED_WITHIN_S = 120  # generous: the process must have ended by then, whatever the machine's speed


def cron_closed_stdin(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed `rgt` console script as some schedulers run it: a new session (no controlling terminal),
    pipes for output, standard input closed (`<&-`, not /dev/null), TERM unset. A process still running after
    ENDED_WITHIN_S fails the test."""
    rgt = Path(sys.executable).parent / "rgt"
    env = {key: value for key, value in os.environ.items() if key != "TERM"}
    try:
        return subprocess.run(["sh", "-c", 'exec "$0" "$@" <&-', str(rgt), *args], cwd=cwd, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, start_new_session=True,
                              timeout=ENDED_WITHIN_S)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"rgt {' '.join(args)} was still running after {ENDED_WITHIN_S} s") from exc


def notified_events(root: Path) -> list[dict[str, object]]:
    session = open_session(str(root))
    try:
        return [dict(e.detail) for e in session.db.events(run_id=RUN, kind=EventKind.NOTIFIED)]
    finally:
        session.close()


def channel_project(root: Path, urls: list[str]) -> tuple[Path, Path]:
    secret = root.parent / f"{root.name}-apprise.txt"
    secret.write_text("".join(url + "\n" for url in urls))
    os.chmod(secret, 0o600)
    finished_project(root, root.name, extra=f'\n[notify]\napprise_file = "{secret}"\n'
                                            f"send_timeout_seconds = {DEADLINE_S}\n")
    return root, secret


def json_url(port: int, path: str) -> str:
    return f"json://127.0.0.1:{port}{path}"


@pytest.mark.parametrize("hostile_receiver", ["trickle", "hang", "not-http"], indirect=True)
def test_a_channel_that_never_confirms_ends_the_patrol_which_says_so(tmp_path: Path,
                                                                     hostile_receiver: Hostile) -> None:  # noqa: F811
    root, secret = channel_project(tmp_path / "hostile", [json_url(hostile_receiver.port, "/hook/hostile")])
    result = cron_closed_stdin("watch", "--all", "--once", "--notify", str(root), cwd=tmp_path)

    assert result.returncode == 1, result.stderr  # the notification is not done (and the finished box bills)
    [line] = parsed(result.stdout)
    assert (line["run"], line["run_state"]) == (RUN, "finished")
    source = f"[notify] apprise_file: {secret}"
    silent = hostile_receiver.kind in ("trickle", "hang")
    said = (f"finished not notified: not confirmed within {DEADLINE_S} s ({source})" if silent
            else f"finished not notified: no channel took it ({source})")
    assert result.stderr == f"rgt watch: hostile/{RUN}: {said}; the next tick tries again\n"
    assert hostile_receiver.connections >= 1  # it was really tried
    assert notified_events(root) == []  # not confirmed: nothing recorded, the next tick tries again


@pytest.mark.parametrize("hostile_receiver", ["trickle", "hang"], indirect=True)
def test_a_hanging_channel_never_silences_a_good_one(tmp_path: Path, hostile_receiver: Hostile,  # noqa: F811
                                                     receiver: Receiver) -> None:  # noqa: F811
    good = json_url(receiver.server.server_address[1], f"/hook/{receiver.token}")
    root, _ = channel_project(tmp_path / "both", [json_url(hostile_receiver.port, "/hook/hostile"), good])
    first = cron_closed_stdin("watch", "--all", "--once", "--notify", str(root), cwd=tmp_path)
    assert first.returncode == 1 and first.stderr == f"rgt watch: both/{RUN}: notified finished\n", first.stderr
    [post] = receiver.wait_for(1)
    assert json.loads(post.body)["title"] == f"rgt: run {RUN} finished on box"
    [recorded] = notified_events(root)
    assert (recorded["event"], recorded["channels"]) == ("finished", 1)

    again = cron_closed_stdin("watch", "--all", "--once", "--notify", str(root), cwd=tmp_path)
    assert again.returncode == 1 and again.stderr == ""  # sent once: the next tick says nothing new
    assert len(receiver.requests) == 1
    assert receiver.token not in first.stdout + first.stderr + again.stdout + again.stderr
