"""Issue 14 under attack: one idle time for `rgt status` and the patrol, next commands a reader can paste, secret
files that cannot hang or be read whole, a box's hostile times, a damaged registry, and a patrol that says so
(exit 1) when its follow-ups or notifications did not go through. Real sim and local projects, real files, a
real FIFO, the real CLI; nothing here stops or terminates a box (the gate test at the end shows it)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.liveness import Liveness, sentinel_state
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.config.notify import NotifyConfig, read_webhook_url
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.services import overview, project_registry
from remote_gpu_trainer.services.fleet import notify as local_notify
from remote_gpu_trainer.services.fleet import patrol
from remote_gpu_trainer.services.fleet import status as fleet
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch import recovery
from remote_gpu_trainer.services.watch.liveness import RunState, parse_look, run_state
from remote_gpu_trainer.state.events import EventKind
from support.helpers import (
    FIXED_NOW,
    RUN,
    FixedClock,
    copy_command,
    launched_and_finished,
    wait_for_liveness,
    write_project,
)

LOCAL = 'provider = "local"'


def _finished(root: Path, **kwargs: object) -> Path:
    """A project whose run r1 really ran to `finished`."""
    write_project(root, **kwargs)  # type: ignore[arg-type]

    async def launch() -> None:
        session = open_session(str(root))
        try:
            if kwargs.get("instance_body") == LOCAL:  # this machine: nothing to create
                await launch_run(session, RUN)
                await wait_for_liveness(session)
            else:
                await launched_and_finished(session)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(launch())
    return root.resolve()


def _state(state: str, finished: datetime | None) -> RunState:
    return RunState(Liveness(state, ""), finished)


def test_one_idle_rule_for_every_face() -> None:
    end, later = FIXED_NOW - timedelta(hours=2), FIXED_NOW - timedelta(minutes=5)
    idle = overview.idle_seconds
    assert idle(0.89, [_state("finished", end), _state("dead", later)], FIXED_NOW) == 300.0  # the latest end
    assert idle(0.89, [_state("finished", end), _state("running", None)], FIXED_NOW) is None  # one still busy
    assert idle(0.89, [_state("finished", end), _state("stalled", None)], FIXED_NOW) is None
    assert idle(0.0, [_state("finished", end)], FIXED_NOW) is None  # bills nothing
    assert idle(0.89, [_state("unknown", None)], FIXED_NOW) is None  # no run recorded an end
    assert idle(0.89, [_state("finished", FIXED_NOW + timedelta(seconds=9))], FIXED_NOW) == 0.0  # box clock ahead
    assert overview.latest_finish([_state("finished", end), _state("dead", later)]) == later


def test_status_and_the_patrol_print_the_same_idle_time(tmp_path: Path) -> None:
    root = _finished(tmp_path / "p")
    session = open_session(str(root))
    try:
        finished_at = asyncio.run(run_state(session, RUN)).finished_at
    finally:
        session.close()
    assert finished_at is not None
    clock = FixedClock(finished_at + timedelta(hours=2, minutes=10, seconds=7))

    view = asyncio.run(fleet.fleet_view([root], clock=clock, timeout_s=5.0))
    [box] = view.instances
    looks = asyncio.run(patrol.tick([root], clock=clock, wait_s=5.0))
    try:
        [line] = looks[0].lines
    finally:
        asyncio.run(patrol.close(looks[0]))
    assert box.idle_s == line.idle_s == 7807.0  # one function, one figure, to the second
    assert line.idle_billing and box.burn_per_hour == line.burn_per_hour == 0.89


def test_the_patrols_next_command_is_shell_quoted(tmp_path: Path) -> None:
    root = _finished(tmp_path / "my project")  # a folder name with a space
    looks = asyncio.run(patrol.tick([root], wait_s=5.0))
    try:
        [line] = looks[0].lines
    finally:
        asyncio.run(patrol.close(looks[0]))
    assert line.next == f"rgt pull {RUN} '{root}'"
    assert shlex.split(line.next) == ["rgt", "pull", RUN, str(root)]  # pasted, it names the folder


@pytest.mark.parametrize("key", ["webhook_file", "apprise_file"])
def test_a_secret_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path, key: str) -> None:
    fifo = tmp_path / "secret"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def read() -> None:
        try:
            if key == "webhook_file":
                read_webhook_url(tmp_path, NotifyConfig(webhook_file="secret"))
            else:
                local_notify.channels(tmp_path, NotifyConfig(apprise_file="secret"))
        except ConfigError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # the old reader waited for a writer: release it, then fail
        os.close(os.open(fifo, os.O_WRONLY))
        reader.join(timeout=10)
        pytest.fail(f"{key}: reading a FIFO blocked")
    shape = ("must hold one http:// or https:// URL on one line (nothing else)" if key == "webhook_file"
             else "must hold apprise URLs, one a line (nothing else)")
    assert outcome == [f"[notify] {key}: {fifo}: is not a regular file; it {shape}"]


def test_a_hostile_boxs_times_are_absent_never_a_crash() -> None:
    probed = parse_look("NOW=1764417600\nPID_STATE=gone\nEXIT_CODE=0\nFINISHED=1e18\nDONE=1\n"
                         "SENTINEL=-10000000000000\nSTARTED=1e300\nLOG=10 -5\nCKPT=99999999999999\n")
    assert (probed.finished_at, probed.sentinel_beat, probed.started_at) == (None, None, None)
    assert (probed.log_mtime, probed.newest_ckpt_mtime) == (None, None)
    assert sentinel_state(probed, 30.0) == "not started"
    assert parse_look("NOW=-1\n").error == "probe answered without a time"
    fine = parse_look("NOW=1764417600\nFINISHED=1764417000\nSENTINEL=1764417590\n")
    assert (fine.finished_at, sentinel_state(fine, 30.0)) == (1764417000.0, "alive")


def test_a_registry_entry_that_is_not_an_absolute_path_names_no_project(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "cwd"
    write_project(here / "proj")  # what a relative entry "proj" would find from this folder
    write_project(here)  # and what "" (the current folder) would
    real = tmp_path / "real"
    write_project(real)
    path = project_registry.registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "rgt-projects/v1", "projects": {
        "proj": "2026-11-29T12:00:00Z", "": "2026-11-29T12:00:00Z", str(real): "2026-11-29T12:00:00Z"}}))
    monkeypatch.chdir(here)
    assert fleet.registered_roots() == [real]
    assert main(["watch", "--all", "--once"]) == 0  # real's run was never launched: nothing bills
    assert not (here / ".rgt").exists() and not (here / "proj" / ".rgt").exists()  # never opened


def test_the_recovery_note_is_never_written_through_a_symlinked_folder(tmp_path: Path) -> None:
    root = _finished(tmp_path / "p")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    notes = root / ".rgt" / "recovery"
    for name in os.listdir(notes):
        os.unlink(notes / name)
    notes.rmdir()
    notes.symlink_to(elsewhere)
    session = open_session(str(root))
    try:
        assert recovery.refresh(session, RUN, Liveness("finished", "exit 0")) is None
    finally:
        session.close()
    assert os.listdir(elsewhere) == []


def _notify_project(tmp_path: Path, apprise: str) -> Path:
    secret = tmp_path / "apprise.txt"
    secret.write_text(apprise)
    root = _finished(tmp_path / "local", command=copy_command(), instance_body=LOCAL, box=tmp_path / "box")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write(f'\n[notify]\napprise_file = "{secret}"\n')
    return root


def test_the_patrol_exits_1_when_no_channel_took_a_notification(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    token = "tok3n-review-5e6f"
    root = _notify_project(tmp_path, f"json://127.0.0.1:9/hook/{token}\n")  # the discard port: nobody answers
    code = main(["watch", "--all", "--once", "--notify", str(root)])
    out, err = capsys.readouterr()
    assert code == 1  # the local box bills nothing: only the unsent notification makes it 1
    assert "billing=$0.00/h" in out and "idle=-" in out
    assert err == (f"rgt watch: test-project/{RUN}: finished not notified: no channel took it ([notify] "
                   f"apprise_file: {tmp_path / 'apprise.txt'}); the next tick tries again\n")
    session = open_session(str(root))
    try:
        assert session.db.events(run_id=RUN, kind=EventKind.NOTIFIED) == []  # tried again at the next tick
        assert token not in json.dumps([e.detail for e in session.db.events()])
    finally:
        session.close()


def test_the_patrol_exits_1_when_its_channels_cannot_be_read(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = _notify_project(tmp_path, "not a url\n")
    code = main(["watch", "--all", "--once", "--notify", str(root)])
    _, err = capsys.readouterr()
    assert code == 1
    assert err == (f"rgt watch: test-project: not notified: [notify] apprise_file: {tmp_path / 'apprise.txt'}: "
                   "must hold apprise URLs, one a line (nothing else)\n")
    assert main(["watch", "--all", "--once", str(root)]) == 0  # without --notify the same tick is fine


def test_nothing_of_this_review_opened_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _finished(tmp_path / "p")
    assert main(["watch", "--all", "--once", str(root)]) == 1  # the sim box idles and bills
    assert main(["status", str(root)]) == 0
    capsys.readouterr()
    assert main(["down", RUN, str(root), "--confirm", "sim-box"]) == 3  # nothing pulled or verified
    capsys.readouterr()
    session = Session(load_project(root / "rgt.toml"))
    try:
        status = asyncio.run(instance_status(session, "box"))
    finally:
        session.close()
    assert status.state == "running"
