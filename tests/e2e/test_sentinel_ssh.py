"""The sentinel over a real OpenSSH sshd (docs/remote-ops.md §9.1): `rgt run` starts it beside the job, every
rgt session and connection is closed, and a local HTTP receiver gets exactly one notification per event
(finished; stalled, then died for a job killed with -9). The URL, which holds a unique token, appears in no
process list, no file on the box but its 0600 secrets file (deleted when the watch ends), no rgt file, event or
report; the box is still running afterwards and `rgt down` stays refused for the unpulled run."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from test_ssh_arc import ALIAS, ssh_project, trusted_session

from remote_gpu_trainer.cli.main import main
from remote_gpu_trainer.services.launch.launch import launch_run
from support.helpers import RUN, copy_command, wait_file, wait_gone
from support.sshd_fixtures import Sshd
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

pytestmark = pytest.mark.sshd

POLL_S = 0.5


def notify_project(root: Path, box: Path, server: Sshd, home: Path, url: str, command: str,
                   stall_after: int = 900) -> Path:
    ssh_project(root, box, server, home, command, stall_after=stall_after)
    (root / "webhook.url").write_text(url + "\n")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(f'\n[notify]\nwebhook_file = "webhook.url"\nkind = "json"\npoll_seconds = {POLL_S}\n')
    return root


def launch_and_close(root: Path, server: Sshd) -> dict[str, object]:
    """Launch through the services the CLI uses, then close every session and connection: no rgt is watching."""
    async def go() -> dict[str, object]:
        session = await trusted_session(root, server)
        try:
            return await launch_run(session, RUN)
        finally:
            await session.close_transports()
            session.close()
    return asyncio.run(go())


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_nowhere(token: str, root: Path, ctl: Path, secret: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The watch is over: the secrets file (outside the control folder) is deleted, and the token is in no file
    rgt or the sentinel wrote, no event and no report format."""
    wait_gone(secret)
    assert not secret.is_relative_to(ctl)
    files = [p for p in [*ctl.rglob("*"), *(root / ".rgt").rglob("*"), root / "rgt.toml"] if p.is_file()]
    assert any(p.name == "state.db" for p in files) and any(p.name == "sentinel.log" for p in files)
    for path in files:
        assert token.encode() not in path.read_bytes(), path
    for argv in (("events", str(root)), ("events", str(root), "--format", "json"),
                 *(("--report", str(root), "--format", fmt) for fmt in ("text", "markdown", "json"))):
        code, out = rgt(capsys, *argv)
        assert code == 0 and token not in out, argv


def still_billing_and_gated(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    """The box is running, the results on it untouched, and the teardown gate still refuses; returns the
    report's run."""
    code, out = rgt(capsys, "down", RUN, str(root), "--confirm", ALIAS)
    assert code == 3, out
    code, out = rgt(capsys, "--report", str(root), "--format", "json")
    report = json.loads(out)
    assert code == 0 and [i["state"] for i in report["instances"]] == ["running"]
    [run] = report["runs"]
    assert run["gate"]["open"] is False
    return dict(run)


def test_a_run_that_finishes_unwatched_is_notified_once(sshd: Sshd, ssh_home: Path, tmp_path: Path,
                                                        receiver: Receiver,  # noqa: F811
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    notify_project(root, box, sshd, ssh_home, receiver.url, "sleep 3 && " + copy_command())
    detail = launch_and_close(root, sshd)
    facts = detail["sentinel"]
    assert isinstance(facts, dict)
    secret = Path(facts["secret_file"])
    try:
        assert secret.parent == sshd.home / ".rgt" / "secrets"  # the login's home on the box (sshd's SetEnv)
        processes = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        ctl = box / "job" / ".rgt" / RUN
        assert f"rgt_sentinel.py {ctl}/sentinel.json {secret}" in processes  # it runs, with paths only
        assert receiver.token not in processes

        [request] = receiver.wait_for(1)
        body = json.loads(request.body)
        assert {k: body[k] for k in ("run", "instance", "instance_id", "event", "burn_per_hour", "currency",
                                     "next")} == {
            "run": RUN, "instance": "box", "instance_id": ALIAS, "event": "finished", "burn_per_hour": 1.5,
            "currency": "USD",
            "next": [f"rgt pull {RUN} {root}", f"rgt verify {RUN} {root}", f"rgt down {RUN} {root} --confirm {ALIAS}"]}
        assert wait_file(ctl / "sentinel.exited") == "finished\n"
        time.sleep(4 * POLL_S)  # a few more polls' time: the sentinel has ended, nothing else arrives
        assert len(receiver.requests) == 1

        assert_nowhere(receiver.token, root, ctl, secret, capsys)
        run = still_billing_and_gated(root, capsys)
        assert (run["liveness"], run["sentinel"]) == ("finished", "exited after finished")
        assert (box / "rgt" / RUN / "seed0" / "best.pth").stat().st_size > 0  # the results are untouched
    finally:
        secret.unlink(missing_ok=True)


def test_a_frozen_then_killed_job_is_notified_stalled_then_died(sshd: Sshd, ssh_home: Path, tmp_path: Path,
                                                                receiver: Receiver,  # noqa: F811
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    notify_project(root, box, sshd, ssh_home, receiver.url, "echo started && sleep 120", stall_after=1)
    detail = launch_and_close(root, sshd)
    facts = detail["sentinel"]
    assert isinstance(facts, dict)
    secret, ctl, pid = Path(facts["secret_file"]), box / "job" / ".rgt" / RUN, int(str(detail["pid"]))
    try:
        [stalled] = receiver.wait_for(1)
        body = json.loads(stalled.body)
        assert (body["event"], body["run"], body["burn_per_hour"]) == ("stalled", RUN, 1.5)
        assert body["detail"].startswith("log last written ") and body["detail"].endswith("newest checkpoint never")
        assert f"({ALIAS}) stalled: alive, but its log and checkpoints went silent (log last written" in body["text"]
        run = still_billing_and_gated(root, capsys)
        assert (run["liveness"], run["sentinel"]) == ("stalled", "alive")
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and receiver.token in secret.read_text()  # still needed
        time.sleep(4 * POLL_S)
        assert len(receiver.requests) == 1  # still stalled: said once

        os.killpg(pid, signal.SIGKILL)  # the job dies without writing an exit code
        died = receiver.wait_for(2)[1]
        assert json.loads(died.body)["event"] == "died"
        assert json.loads(died.body)["detail"] == "no exit code: the job was killed or the box rebooted"
        assert wait_file(ctl / "sentinel.exited") == "died\n"
        time.sleep(4 * POLL_S)
        assert len(receiver.requests) == 2

        assert_nowhere(receiver.token, root, ctl, secret, capsys)
        run = still_billing_and_gated(root, capsys)
        assert (run["liveness"], run["sentinel"]) == ("dead", "exited after died")
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        secret.unlink(missing_ok=True)
