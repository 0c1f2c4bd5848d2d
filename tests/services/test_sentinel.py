"""The on-box sentinel on a simulated box (docs/remote-ops.md §9.1): started by `rgt run` beside the job, it
notifies a real HTTP receiver once per event after every rgt session is closed; a bad `[notify]` stops the
launch before anything runs; its heartbeat is the sentinel's own liveness in the report."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.cli.main import main
from remote_gpu_trainer.remote import rgt_sentinel
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.watch.liveness import run_state
from support.helpers import INSTANCE, RUN, copy_command, wait_file, wait_for_liveness, wait_gone, write_project
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

POLL_S = 0.3


def notify_project(root: Path, url: str, command: str | None = None, kind: str = "json", extra_run: str = "") -> Path:
    write_project(root, command, extra_run=extra_run)
    (root / "webhook.url").write_text(url + "\n")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(f'\n[notify]\nwebhook_file = "webhook.url"\nkind = "{kind}"\npoll_seconds = {POLL_S}\n')
    return root


def box_ctl(root: Path) -> Path:
    return root / ".rgt" / "sim" / INSTANCE / "workspace" / "job" / ".rgt" / RUN


async def launched(root: Path) -> dict[str, object]:
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
        return await launch_run(session, RUN)
    finally:
        await session.close_transports()
        session.close()


async def created(root: Path) -> None:
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
    finally:
        session.close()


async def test_a_finished_run_is_notified_once_after_rgt_closed(tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811
    root = notify_project(tmp_path / "proj", receiver.url, "sleep 1 && " + copy_command())
    detail = await launched(root)  # every session and transport is closed from here on
    facts = detail["sentinel"]
    assert isinstance(facts, dict)
    secret = Path(facts.pop("secret_file"))
    assert facts == {"poll_s": POLL_S, "kind": "json", "where": "box"}
    assert secret.parent == root / ".rgt/sim/box/root/.rgt/secrets" and secret.name.startswith(f"notify-{RUN}-")
    [request] = receiver.wait_for(1)
    assert request.path == f"/hook/{receiver.token}" and request.headers["Content-Type"] == "application/json"
    body = json.loads(request.body)
    assert {k: body[k] for k in ("run", "instance", "instance_id", "event", "detail", "burn_per_hour", "currency",
                                 "next")} == {
        "run": RUN, "instance": INSTANCE, "instance_id": "sim-box", "event": "finished", "detail": "",
        "burn_per_hour": 0.89, "currency": "USD",
        "next": [f"rgt pull {RUN} {root}", f"rgt verify {RUN} {root}", f"rgt down {RUN} {root} --confirm sim-box"]}
    assert wait_file(box_ctl(root) / "sentinel.exited") == "finished\n"
    time.sleep(5 * POLL_S)
    assert len(receiver.requests) == 1  # the sentinel exited after the run's end: nothing more
    sent = json.loads((box_ctl(root) / "sentinel.sent.json").read_text())
    assert list(sent) == ["finished"] and sent["finished"]["outcome"] == "sent" and sent["finished"]["attempts"] == 1

    wait_gone(secret)  # the watch is over: the URL does not stay on the box
    assert stat.S_IMODE(secret.parent.stat().st_mode) == 0o700
    for path in box_ctl(root).rglob("*"):
        assert receiver.token.encode() not in path.read_bytes(), path

    # a restarted sentinel never sends the end twice: it reads what was sent and exits, needing no URL
    restarted = subprocess.run([sys.executable, str(box_ctl(root) / "rgt_sentinel.py"),
                                str(box_ctl(root) / "sentinel.json"), str(secret)], timeout=30,
                               capture_output=True, text=True)
    assert (restarted.returncode, restarted.stderr) == (0, "") and len(receiver.requests) == 1
    log = (box_ctl(root) / "sentinel.log").read_text()
    assert log.count("deleted the secrets file") == 1 and "<url>" not in log
    assert log.splitlines()[-1].endswith(" finished was already sent: exiting")


async def test_a_failing_receiver_is_retried_and_still_gets_one_notification(
        tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811
    receiver.fail_first = 2
    root = notify_project(tmp_path / "proj", receiver.url, copy_command(), kind="slack")
    await launched(root)
    [request] = receiver.wait_for(1)
    assert json.loads(request.body)["text"].startswith(f"*rgt: run {RUN} finished on {INSTANCE}*\n")
    assert wait_file(box_ctl(root) / "sentinel.exited") == "finished\n"
    sent = json.loads((box_ctl(root) / "sentinel.sent.json").read_text())
    assert (sent["finished"]["outcome"], sent["finished"]["attempts"]) == ("sent", 3)
    log = (box_ctl(root) / "sentinel.log").read_text()
    assert log.count("finished: the receiver answered HTTP 500") == 2 and receiver.token not in log


async def test_a_died_job_names_its_exit_code(tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811
    root = notify_project(tmp_path / "proj", receiver.url, "echo boom && exit 3", kind="ntfy")
    await launched(root)
    [request] = receiver.wait_for(1)
    assert request.headers["Title"] == f"rgt: run {RUN} died on {INSTANCE}"
    assert (request.headers["Priority"], request.headers["Tags"]) == ("high", "x")
    assert request.body.decode().startswith(f"Run {RUN} on {INSTANCE} (sim-box) died (exit 3).\n"
                                            "The box is still billing $0.89/h until it is torn down.\n")


@pytest.mark.parametrize(("content", "reason"), [
    (None, "cannot be read"), ("ftp://example.org/x\n", "must hold one http:// or https:// URL"),
    ("https://a.example/x https://b.example/y\n", "must hold one http:// or https:// URL")])
def test_a_bad_webhook_file_stops_the_launch_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, reason: str) -> None:
    root = notify_project(tmp_path / "proj", "https://hooks.example/unused")
    if content is None:
        (root / "webhook.url").unlink()
    else:
        (root / "webhook.url").write_text(content)
    asyncio.run(created(root))
    code = main(["run", RUN, str(root)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"[notify] webhook_file: {root / 'webhook.url'}: {reason}" in err
    assert "example" not in err  # what the file holds is never echoed
    assert not box_ctl(root).exists()  # nothing was pushed or started
    session = open_session(str(root))
    try:
        assert session.db.launch(RUN) is None
    finally:
        session.close()


def test_the_url_itself_in_rgt_toml_is_refused_without_echoing_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "proj"
    write_project(root)
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write('\n[notify]\nwebhook_file = "https://hooks.slack.com/services/T0/B0/SECRETPART"\n'
                     'kind = "teams"\n')
    assert main(["--report", str(root)]) == 2
    err = capsys.readouterr().err
    assert "notify.webhook_file" in err and "looks like a URL" in err and "SECRETPART" not in err


async def test_a_run_opted_out_gets_no_sentinel(tmp_path: Path, receiver: Receiver) -> None:  # noqa: F811
    root = notify_project(tmp_path / "proj", receiver.url, copy_command(), extra_run="notify = false")
    detail = await launched(root)
    assert "sentinel" not in detail
    session = open_session(str(root))
    try:
        assert await wait_for_liveness(session) == "finished"
        assert (await run_state(session, RUN)).sentinel is None
    finally:
        await session.close_transports()
        session.close()
    assert not (box_ctl(root) / "sentinel.json").exists() and receiver.requests == []


def test_the_report_shows_the_sentinel_alive_then_silent_once_killed(
        tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    root = notify_project(tmp_path / "proj", receiver.url, "echo started && sleep 120")
    detail = asyncio.run(launched(root))

    def sentinel_in_report() -> str:
        assert main(["--report", str(root), "--format", "json"]) == 0
        [run] = json.loads(capsys.readouterr().out)["runs"]
        return str(run["sentinel"])

    try:
        assert sentinel_in_report() == "alive"
        facts = detail["sentinel"]
        assert isinstance(facts, dict)
        secret = Path(str(facts["secret_file"]))  # while the watch lasts, the URL is in its 0600 file only
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.read_text() == receiver.url + "\n"
        assert main(["--report", str(root)]) == 0
        assert "  sentinel: alive\n" in capsys.readouterr().out
        pid = int(wait_file(box_ctl(root) / "sentinel.pid"))
        os.kill(pid, signal.SIGKILL)
        beat = os.stat(box_ctl(root) / "sentinel.heartbeat").st_mtime
        deadline = time.monotonic() + 30
        while (shown := sentinel_in_report()) == "alive" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert shown == "silent since " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(beat)))
    finally:
        os.killpg(int(str(detail["pid"])), signal.SIGKILL)  # the test's own job
    assert receiver.requests == []  # alive, log fresh: nothing to say before it was killed


def test_decide_disk_full_once_and_never_twice() -> None:
    config = {"durable": "/data/rgt/r1", "stall_after": 60, "started_at": 0.0, "disk_full_percent": 95}
    facts = {"now": 1000.0, "process": "alive", "log_mtime": 990.0, "ckpt_mtime": None, "disk_percent": 96.4}
    assert rgt_sentinel.decide(facts, config, {}) == [("disk_full", "/data/rgt/r1 at 96 % used")]
    assert rgt_sentinel.decide(facts, config, {"disk_full": {}}) == []
    assert rgt_sentinel.decide({**facts, "disk_percent": 94.9}, config, {}) == []


def test_decide_each_ending_and_the_stall() -> None:
    config = {"durable": "/d", "stall_after": 60, "started_at": 0.0}
    alive = {"now": 1000.0, "process": "alive", "log_mtime": 900.0, "ckpt_mtime": 700.0, "disk_percent": 10.0}
    assert rgt_sentinel.decide(alive, config, {}) == [
        ("stalled", "log last written 1 min ago, newest checkpoint 5 min ago")]
    assert rgt_sentinel.decide({**alive, "ckpt_mtime": 950.0}, config, {}) == []  # a fresh checkpoint: quiet
    assert rgt_sentinel.decide({**alive, "log_mtime": 990.0}, config, {}) == []
    assert rgt_sentinel.decide(alive, {**config, "started_at": 950.0}, {}) == []  # launched a moment ago
    gone = {**alive, "process": "gone"}
    assert rgt_sentinel.decide({**gone, "exit_code": 0, "done": True}, config, {}) == [("finished", "exit 0")]
    assert rgt_sentinel.decide({**gone, "exit_code": 0, "done": False}, config, {}) == [
        ("died", "incomplete: exit 0 but required files missing")]
    assert rgt_sentinel.decide({**gone, "exit_code": 137}, config, {}) == [
        ("died", "exit 137 (SIGKILL: out of memory or killed)")]
    assert rgt_sentinel.decide({**gone, "process": "zombie"}, config, {}) == [
        ("died", "no exit code: the job was killed or the box rebooted")]
    assert rgt_sentinel.decide({**gone, "exit_code": 1}, config, {"finished": {}}) == []
    assert rgt_sentinel.decide({**alive, "process": None}, config, {}) == []  # unreadable: decides nothing


def test_the_detail_is_escaped_for_json_bodies_and_plain_for_ntfy() -> None:
    body = b'{"detail": "' + rgt_sentinel.DETAIL.encode() + b'"}'
    assert json.loads(rgt_sentinel.render(body, 'say "hi"\n', "json")) == {"detail": 'say "hi"\n'}
    assert rgt_sentinel.render(b"died (" + rgt_sentinel.DETAIL.encode() + b")", "exit 3", "ntfy") == b"died (exit 3)"


@pytest.fixture
def small_durable(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs where the sim box's result root lives; fails (never skips) when the machine refuses it."""
    mount = tmp_path / "proj" / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt"
    mount.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"this machine refuses a tmpfs mount (needed for a small disk; .ci/run runs as root): "
                    f"{done.stderr.strip()}", pytrace=False)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


async def test_a_durable_disk_filling_up_is_notified_once(tmp_path: Path, receiver: Receiver,  # noqa: F811
                                                          small_durable: Path) -> None:
    command = "head -c 4000000 /dev/zero > {out}/fill.bin; echo filled; sleep 120"
    root = notify_project(tmp_path / "proj", receiver.url, command)
    detail = await launched(root)
    try:
        [request] = receiver.wait_for(1)
        body = json.loads(request.body)
        durable = small_durable / RUN
        assert body["event"] == "disk_full"  # the file grows while the sentinel looks: 95 % or more
        assert re.fullmatch(f"{re.escape(str(durable))} at (9[5-9]|100) % used", body["detail"]), body["detail"]
        assert body["text"].startswith(f"Run {RUN} on {INSTANCE} (sim-box) is filling its durable disk "
                                       f"({body['detail']}).\n")
        time.sleep(4 * POLL_S)
        assert len(receiver.requests) == 1  # still full: said once
        assert (small_durable / RUN / "seed0" / "fill.bin").exists()  # nothing was deleted to make room
    finally:
        os.killpg(int(str(detail["pid"])), signal.SIGKILL)  # the test's own job
