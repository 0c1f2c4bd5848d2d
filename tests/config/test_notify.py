"""rgt.toml `[notify]` and `runs.<id>.notify` (config/notify.py, docs/formats.md): strict at load, the URL read
from its file only at launch, every problem naming its key without echoing the URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.config.notify import NotifyConfig, read_webhook_url, webhook_path
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from support.helpers import write_project


def project(tmp_path: Path, notify: str, extra_run: str = "") -> Path:
    path = write_project(tmp_path / "proj", extra_run=extra_run)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n[notify]\n" + notify)
    return path


def test_notify_loads_with_its_defaults(tmp_path: Path) -> None:
    loaded = load_project(project(tmp_path, 'webhook_file = "hook.url"\n'))
    assert loaded.notify == NotifyConfig(webhook_file="hook.url", kind="json", poll_seconds=30.0)
    assert loaded.notify.enabled and loaded.run("r1").notify is True
    full = load_project(project(tmp_path, 'webhook_file = "~/h"\nkind = "ntfy"\npoll_seconds = 2.5\n',
                                extra_run="notify = false"))
    assert full.notify == NotifyConfig(webhook_file="~/h", kind="ntfy", poll_seconds=2.5)
    assert full.run("r1").notify is False


def test_without_notify_no_run_is_watched(tmp_path: Path) -> None:
    loaded = load_project(write_project(tmp_path / "proj"))
    assert loaded.notify == NotifyConfig() and not loaded.notify.enabled


@pytest.mark.parametrize(("body", "extra_run", "problem"), [
    ('kind = "json"\n', "", "notify.webhook_file: missing required key 'webhook_file'"),
    ('webhook_file = "h"\nkind = "teams"\n', "", "notify.kind: 'teams' is not one of json, ntfy, slack, discord"),
    ('webhook_file = "h"\npoll_seconds = 0\n', "", "notify.poll_seconds: must be a number of seconds > 0"),
    ('webhook_file = "h"\nurl = "x"\n', "", "notify.url: unknown key"),
    ('webhook_file = "h"\n', 'notify = "yes"', "runs.r1.notify: must be true or false"),
])
def test_bad_notify_names_the_key(tmp_path: Path, body: str, extra_run: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_project(project(tmp_path, body, extra_run))
    assert problem in str(raised.value)


def test_a_url_in_rgt_toml_is_refused_without_echo(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_project(project(tmp_path, 'webhook_file = "https://ntfy.sh/private-topic-9f2"\n'))
    assert "notify.webhook_file: looks like a URL" in str(raised.value)
    assert "private-topic" not in str(raised.value)


def test_the_url_file_is_read_strictly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    notify = NotifyConfig(webhook_file="hook.url")
    (root / "hook.url").write_text("  https://hooks.example/T/abc \n")
    assert read_webhook_url(root, notify) == "https://hooks.example/T/abc"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert webhook_path(root, NotifyConfig(webhook_file="~/x")) == tmp_path / "x"
    assert webhook_path(root, NotifyConfig(webhook_file="/etc/h")) == Path("/etc/h")
    (root / "hook.url").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"hook.url: is not UTF-8 text; it must hold one http:// or https:// URL "
                       r"on one line \(nothing else\)$"):
        read_webhook_url(root, notify)
    (root / "hook.url").write_text("https://a.example/" + "x" * 5000)
    with pytest.raises(ConfigError, match="must hold one http:// or https:// URL on one line") as raised:
        read_webhook_url(root, notify)
    assert "xxxx" not in str(raised.value)
