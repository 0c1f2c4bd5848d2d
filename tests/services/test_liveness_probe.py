"""The liveness probe's answer is text from the box: a field that does not parse is absent, never a crash of
the refresh that asked (a log deleted between the probe's test and its stat, during a teardown, prints
`LOG=`; a hostile box prints anything)."""

from __future__ import annotations

from remote_gpu_trainer.services.liveness import parse_probe


def test_a_log_that_vanished_mid_probe_reads_as_no_log() -> None:
    probed = parse_probe("NOW=1700000000\nPID_STATE=gone\nLOG=\nEXIT_CODE=0\nFINISHED=1699999990\n")
    assert probed.error is None and (probed.log_size, probed.log_mtime) == (0, None)
    assert (probed.exit_code, probed.finished_at) == (0, 1699999990.0)


def test_garbled_fields_from_a_hostile_box_are_absent() -> None:
    probed = parse_probe("NOW=1700000000\nLOG=lots yesterday\nCKPT=nan\nSTARTED=inf\nFINISHED=x\nEXIT_CODE=zero\n")
    assert probed.error is None
    assert (probed.log_size, probed.log_mtime, probed.newest_ckpt_mtime) == (0, None, None)
    assert (probed.started_at, probed.finished_at, probed.exit_code) == (None, None, None)


def test_a_well_formed_answer_is_read_whole() -> None:
    probed = parse_probe("NOW=1700000000.5\nPID_STATE=alive\nLOG=1234 1699999999\nCKPT=1699999000\n"
                         "STARTED=1699990000\n")
    assert (probed.now, probed.pid_state) == (1700000000.5, "alive")
    assert (probed.log_size, probed.log_mtime) == (1234, 1699999999.0)
    assert (probed.newest_ckpt_mtime, probed.started_at, probed.exit_code) == (1699999000.0, 1699990000.0, None)


def test_no_time_is_an_error_not_a_guess() -> None:
    assert parse_probe("NOW=\nPID_STATE=alive\n").error == "probe answered without a time"
