"""The patrol's service (services/fleet/patrol.py) and its notification channels (services/fleet/notify.py): a box
that never answers reads unknown on its own line while the others get theirs, and the apprise URLs come from
their file without ever being echoed."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.config.notify import NotifyConfig
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.services.fleet import notify as local_notify
from remote_gpu_trainer.services.fleet import patrol
from remote_gpu_trainer.services.session import Session
from support.helpers import HUNG, INSTANCE, RUN, launched_and_finished, two_box_project

HUNG_RUN = """
[runs.r2]
instance = "hung"
workdir = "/tmp/rgt-hung/job"
command = "true"
remote_root = "/tmp/rgt-hung/r2"
roster = ["a"]
"""


async def test_a_hung_box_reads_unknown_and_the_other_runs_still_get_their_lines(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = two_box_project(tmp_path / "p", silent_server, tmp_path / "home")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(HUNG_RUN)
    session = Session(load_project(root / "rgt.toml"))
    try:
        await launched_and_finished(session)
    finally:
        await session.close_transports()
        session.close()
    looks = await patrol.tick([root], wait_s=1.0)
    try:
        lines = {line.run: line for line in looks[0].lines}
        assert sorted(lines) == [RUN, "r2"] and looks[0].problem is None
        assert (lines[RUN].liveness, lines[RUN].box_state, lines[RUN].burn_per_hour) == ("finished", "running", 0.89)
        assert (lines["r2"].instance, lines["r2"].box_state, lines["r2"].liveness) == (HUNG, "unknown", "unknown")
        assert lines[RUN].idle_billing and looks[0].idle_billing  # the sim box still bills: exit 1
        assert lines[RUN].text().split(" ", 1)[1].startswith(f"test-project/{RUN} box={INSTANCE}(sim sim-box running)")
    finally:
        await patrol.close(looks[0])


def test_the_apprise_urls_come_from_their_file_and_are_never_echoed(tmp_path: Path) -> None:
    secret = "tok3n-9f8e7d6c"
    urls = tmp_path / "apprise.txt"
    urls.write_text(f"# mine\njsons://hooks.example/{secret}\n\nntfys://ntfy.example/{secret}\n")
    found = local_notify.channels(tmp_path, NotifyConfig(apprise_file="apprise.txt"))
    assert found is not None and found.urls == (f"jsons://hooks.example/{secret}", f"ntfys://ntfy.example/{secret}")
    assert secret not in repr(found) and repr(found) == f"Channels(2 URL(s) from [notify] apprise_file: {urls})"

    urls.write_text(f"not a url {secret}\n")
    with pytest.raises(ConfigError) as bad:
        local_notify.channels(tmp_path, NotifyConfig(apprise_file=str(urls)))
    assert str(bad.value) == f"[notify] apprise_file: {urls}: must hold apprise URLs, one a line (nothing else)"
    with pytest.raises(ConfigError) as missing:
        local_notify.channels(tmp_path, NotifyConfig(apprise_file="nowhere.txt"))
    assert str(missing.value) == f"[notify] apprise_file: {tmp_path / 'nowhere.txt'}: cannot be read " \
                                 "(No such file or directory)"
    assert local_notify.channels(tmp_path, NotifyConfig()) is None


@pytest.mark.parametrize(("url", "kind", "expected"), [
    ("http://127.0.0.1:8080/hook/x", "json", "json://127.0.0.1:8080/hook/x"),
    ("https://hooks.example/x", "json", "jsons://hooks.example/x"),
    ("https://ntfy.sh/my-topic", "ntfy", "ntfys://ntfy.sh/my-topic"),
    ("https://hooks.slack.com/services/T0/B0/X0", "slack", "https://hooks.slack.com/services/T0/B0/X0"),
    ("https://discord.com/api/webhooks/1/abc", "discord", "https://discord.com/api/webhooks/1/abc"),
])
def test_the_sentinels_webhook_in_apprises_spelling(tmp_path: Path, url: str, kind: str, expected: str) -> None:
    (tmp_path / "webhook").write_text(url + "\n")
    found = local_notify.channels(tmp_path, NotifyConfig(webhook_file="webhook", kind=kind))
    assert found is not None and found.urls == (expected,) and found.source == "[notify] webhook_file"
