"""The liveness look's answer is text from the box: a field that does not parse is absent, never a crash of
the refresh that asked (a log deleted between the look's test and its stat, during a teardown, prints
`LOG=`; a hostile box prints anything)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.services.watch.liveness import _LOOK_SCRIPT, parse_look


def test_a_log_that_vanished_mid_probe_reads_as_no_log() -> None:
    probed = parse_look("NOW=1700000000\nPID_STATE=gone\nLOG=\nEXIT_CODE=0\nFINISHED=1699999990\n")
    assert probed.error is None and (probed.log_size, probed.log_mtime) == (0, None)
    assert (probed.exit_code, probed.finished_at) == (0, 1699999990.0)


def test_garbled_fields_from_a_hostile_box_are_absent() -> None:
    probed = parse_look("NOW=1700000000\nLOG=lots yesterday\nCKPT=nan\nSTARTED=inf\nFINISHED=x\nEXIT_CODE=zero\n")
    assert probed.error is None
    assert (probed.log_size, probed.log_mtime, probed.newest_ckpt_mtime) == (0, None, None)
    assert (probed.started_at, probed.finished_at, probed.exit_code) == (None, None, None)


def test_a_well_formed_answer_is_read_whole() -> None:
    probed = parse_look("NOW=1700000000.5\nPID_STATE=alive\nLOG=1234 1699999999\nCKPT=1699999000\n"
                         "STARTED=1699990000\n")
    assert (probed.now, probed.pid_state) == (1700000000.5, "alive")
    assert (probed.log_size, probed.log_mtime) == (1234, 1699999999.0)
    assert (probed.newest_ckpt_mtime, probed.started_at, probed.exit_code) == (1699999000.0, 1699990000.0, None)


def test_no_time_is_an_error_not_a_guess() -> None:
    assert parse_look("NOW=\nPID_STATE=alive\n").error == "probe answered without a time"


async def test_the_real_probe_reads_times_to_the_fraction_as_the_sentinel_does(tmp_path: Path) -> None:
    """Whole seconds on both sides of an age made rgt read a job as running for up to a second after the on-box
    sentinel (float times) had said stalled: the probe reports the box's times with their fractions."""
    ctl, log, root = tmp_path / "ctl", tmp_path / "train.log", tmp_path / "results"
    ctl.mkdir()
    root.mkdir()
    log.write_text("started\n")
    (ctl / "launch.json").write_text("{}")
    moment = time.time() - 1.25
    os.utime(log, (moment, moment))
    result = await LocalTransport().run(f"bash -s -- {ctl} {log} {root}", stdin=_LOOK_SCRIPT.encode())
    probed = parse_look(result.text)
    assert probed.log_mtime is not None and abs(probed.log_mtime - moment) < 0.01, result.text
    assert probed.now - moment == pytest.approx(1.25, abs=0.5) and probed.now != int(probed.now)


async def look_at(ctl: Path, log: Path, root: Path) -> str:
    result = await LocalTransport().run(f"bash -s -- {ctl} {log} {root}", stdin=_LOOK_SCRIPT.encode())
    assert result.rc == 0, result.error_text
    return result.text


async def test_a_process_named_with_spaces_and_a_paren_is_read_by_its_own_fields(tmp_path: Path) -> None:
    """/proc/PID/stat's second field is the process name in parentheses, spaces and all: the look splits after
    the last ") ", so the start time it compares with pid_start is the process's own (a split on every space
    read another field, and a live job as gone)."""
    import shutil
    import subprocess

    ctl, log, root = tmp_path / "ctl", tmp_path / "train.log", tmp_path / "results"
    ctl.mkdir()
    odd = tmp_path / "my ) job x"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", odd)
    job = subprocess.Popen([str(odd), "30"])
    try:
        fields = (Path("/proc") / str(job.pid) / "stat").read_text().rsplit(") ", 1)[1].split()
        assert "my ) job x"[:15] in (Path("/proc") / str(job.pid) / "comm").read_text()
        (ctl / "pid").write_text(f"{job.pid}\n")
        (ctl / "pid_start").write_text(f"{fields[19]}\n")
        assert "PID_STATE=alive" in (await look_at(ctl, log, root)).splitlines()
        (ctl / "pid_start").write_text(f"{int(fields[19]) + 1}\n")  # another process that got the same pid
        assert "PID_STATE=gone" in (await look_at(ctl, log, root)).splitlines()
    finally:
        job.kill()
        job.wait()


async def test_a_control_file_cannot_add_a_line_to_the_answer(tmp_path: Path) -> None:
    """The box writes exit_code and sentinel.exited; what they hold past their first line (or 64 bytes) is
    never a line of the look's answer, so a job cannot say its own pid is alive or its log is elsewhere."""
    ctl, log, root = tmp_path / "ctl", tmp_path / "train.log", tmp_path / "results"
    ctl.mkdir()
    (ctl / "exit_code").write_text("0\nPID_STATE=alive\nLOG=1 1\n")
    (ctl / "sentinel.exited").write_text("killed\nPID_STATE=alive\n")
    lines = (await look_at(ctl, log, root)).splitlines()
    assert [line for line in lines if line.startswith(("PID_STATE=", "LOG=", "EXIT_CODE="))] == [
        "PID_STATE=gone", "EXIT_CODE=0"]
    assert "SENTINEL_EXIT=killedPID_STATE=alive" in lines  # one line, its newlines taken out
    probed = parse_look("\n".join(lines))
    assert (probed.pid_state, probed.exit_code, probed.log_size) == ("gone", 0, 0)


async def test_the_newest_checkpoint_is_the_newest_by_time_not_by_text(tmp_path: Path) -> None:
    """Times are compared as numbers: a checkpoint from 2001 (nine digits) is older than one from 2023, though its
    time sorts after it as text; only checkpoint files count, in folders with spaces too."""
    ctl, log, root = tmp_path / "ctl", tmp_path / "train.log", tmp_path / "results"
    ctl.mkdir()
    (root / "seed 0").mkdir(parents=True)
    old, new, other = root / "seed 0" / "old.pth", root / "seed 0" / "new best.pth", root / "notes.txt"
    for path, moment in ((old, 999_999_999.5), (new, 1_700_000_000.25), (other, 1_800_000_000.0)):
        path.write_text("x")
        os.utime(path, (moment, moment))
    probed = parse_look(await look_at(ctl, log, root))
    assert probed.newest_ckpt_mtime == pytest.approx(1_700_000_000.25, abs=1e-3)


async def test_the_newest_checkpoint_comes_with_its_own_birth_time(tmp_path: Path) -> None:
    """S94's write time is the newest checkpoint's birth-to-last-write gap: its birth is read in the one stat the
    look makes for the control files and the log (issue 29: a stat of its own cost a fork), and it is that
    checkpoint's birth, not another file's. Birth times are whole seconds, so the files are born a second apart."""
    ctl, log, root = tmp_path / "ctl", tmp_path / "train.log", tmp_path / "results"
    ctl.mkdir()
    root.mkdir()
    log.write_text("step 1\n")
    (ctl / "exit_code").write_text("0\n")
    newest, older = root / "newest.pt", root / "older.pt"
    next_second(birth(log))  # each file born in a second of its own: a birth read off another line differs
    newest.write_text("x")
    born = birth(newest)
    next_second(born)
    older.write_text("x")
    os.utime(older, (1_000_000_000, 1_000_000_000))
    os.utime(newest, (1_700_000_000, 1_700_000_000))
    text = await look_at(ctl, log, root)
    probed = parse_look(text)
    assert probed.newest_ckpt_mtime == pytest.approx(1_700_000_000, abs=1e-3)
    assert probed.newest_ckpt_birth == born, text
    assert probed.finished_at is not None and probed.log_size == len("step 1\n")  # the same stat's other lines
    if born:  # a file system that keeps birth times: the other files' are not the one read
        assert birth(log) < born < birth(older)


def birth(path: Path) -> int:
    """The file's birth time in whole seconds as GNU stat reads it (0 where the file system keeps none)."""
    import subprocess

    return int(subprocess.run(["stat", "-c", "%W", str(path)], capture_output=True, text=True, check=True).stdout)


def next_second(after: int) -> None:
    """Wait until the clock is 50 ms into a whole second past `after`: the file system stamps births with the
    kernel's coarse clock, which lags time.time() by up to a tick, so a file made right at the boundary would still
    be born in second `after`."""
    while time.time() < after + 1.05:
        time.sleep(0.05)
