"""The sentinel over a real OpenSSH sshd against receivers that misbehave (issue 26, items 1 and 2;
docs/remote-ops.md §9.1): `rgt run` starts it beside a job that finishes, every rgt session and connection is
closed, and a receiver on 127.0.0.1 answers something that is not HTTP, redirects (302, 307), trickles one byte
every 2 s, never answers, or floods headers. Each attempt fails, the event is recorded as "gave up" after the
configured retries, the redirect is not followed, the sentinel ends and deletes its secrets file, and the report
says it exited; the box still bills and the gate still refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_sentinel_ssh import launch_and_close, notify_project, still_billing_and_gated

from remote_gpu_trainer.remote import rgt_sentinel
from support.helpers import RUN, copy_command, wait_file, wait_gone
from support.hostile_receivers import KINDS, Hostile, hostile_receiver  # noqa: F401 (the fixture)
from support.sshd_fixtures import Sshd
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)

pytestmark = pytest.mark.sshd

ATTEMPT_S = 3  # [notify] send_timeout_seconds: longer than the trickle's 2 s between bytes
REASON = {
    "not-http": "no HTTP answer (BadStatusLine)",
    "302": "HTTP 302 (a redirect, not followed: not a delivery)",
    "307": "HTTP 307 (a redirect, not followed: not a delivery)",
    "trickle": f"no full answer within {ATTEMPT_S} s",
    "hang": f"no full answer within {ATTEMPT_S} s",
    "flood": f"an answer longer than {rgt_sentinel.MAX_ANSWER_BYTES} bytes",
}
ENDED_WITHIN_S = 120  # generous: the sentinel must have ended by then, whatever the machine's speed


@pytest.mark.parametrize("hostile_receiver", KINDS, indirect=True)
def test_over_ssh_a_receiver_that_does_not_take_it_is_given_up_and_the_watch_ends(
        sshd: Sshd, ssh_home: Path, tmp_path: Path, hostile_receiver: Hostile, receiver: Receiver,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    hostile_receiver.redirect_to = receiver.url  # a redirect leads to a receiver that would take the GET
    root, box = tmp_path / "proj", tmp_path / "box"
    notify_project(root, box, sshd, ssh_home, hostile_receiver.url, "sleep 1 && " + copy_command())
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:  # [notify] is the file's last table
        handle.write(f"send_timeout_seconds = {ATTEMPT_S}\nretry_seconds = [0.2, 0.2]\n")
    detail = launch_and_close(root, sshd)
    facts = detail["sentinel"]
    assert isinstance(facts, dict)
    secret, ctl = Path(str(facts["secret_file"])), box / "job" / ".rgt" / RUN
    try:
        assert wait_file(ctl / "sentinel.exited", timeout=ENDED_WITHIN_S) == "finished\n"
        sent = json.loads((ctl / "sentinel.sent.json").read_text())
        assert {k: sent["finished"][k] for k in ("outcome", "attempts")} == {"outcome": "gave up", "attempts": 3}
        assert hostile_receiver.connections == 3 and receiver.requests == []  # no redirect followed
        log = (ctl / "sentinel.log").read_text()
        assert [line.split(" ", 1)[1] for line in log.splitlines() if ": the receiver answered " in line] == \
            [f"finished: the receiver answered {REASON[hostile_receiver.kind]} (attempt {n})" for n in (1, 2, 3)]
        assert log.splitlines()[-1].endswith(" exiting after finished") and "poll failed" not in log
        wait_gone(secret)
        run = still_billing_and_gated(root, capsys)
        assert (run["liveness"], run["sentinel"]) == ("finished", "exited after finished")
    finally:
        secret.unlink(missing_ok=True)
