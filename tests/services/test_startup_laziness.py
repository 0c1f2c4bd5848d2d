"""What start-up no longer does twice or too early (issue 29, docs/architecture.md §5): the catalogue's log
matchers are compiled once and shared, and a monitor that only catches up with a log it read already makes no
detector (the report on a finished run, the dashboard's first look). Real sim runs, no fakes."""

from __future__ import annotations

from pathlib import Path

from test_log_monitor import cat_then_fail, follow_all, launched

from remote_gpu_trainer.audits.log.detector import LogDetector, matchers_of
from remote_gpu_trainer.services.audit.findings import log_findings
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.watch import monitors
from remote_gpu_trainer.services.watch.log_monitor import RunLogMonitor
from remote_gpu_trainer.services.watch.monitors import catalogue, forget_monitor, log_monitor
from remote_gpu_trainer.services.watch.run_logs import current_alerts, follow_log, log_backfill
from support.helpers import RUN, write_project


def test_detectors_of_one_catalogue_share_its_compiled_matchers(tmp_path: Path) -> None:
    write_project(tmp_path / "p", "true", roster=("seed0",))
    session = open_session(str(tmp_path / "p"))
    try:
        found = catalogue(session)
        assert matchers_of(found) is matchers_of(found)
        first, second = LogDetector(found), LogDetector(found)
        # the shared matchers classify as their own would: an OOM line hits S01 in both
        line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
        assert [h.signature for h in first.feed(line, 1, 0.0)] == [h.signature for h in second.feed(line, 1, 0.0)]
        assert "S01" in [h.signature for h in LogDetector(found).feed(line, 1, 0.0)]
    finally:
        session.close()


async def test_a_monitor_catching_up_with_a_read_log_makes_no_detector(tmp_path: Path) -> None:
    session = await launched(tmp_path / "p", cat_then_fail("oom_after_training.log"))
    try:
        await follow_all(session)  # every line read and recorded
        forget_monitor(session, RUN)  # as a new rgt process would find it: the cursor at the log's end
        monitor = log_monitor(session, RUN)
        assert isinstance(monitor, RunLogMonitor)
        update = await follow_log(session, RUN)
        assert update is not None and update.lines == () and not update.more
        assert monitor._detector is None  # nothing new: the catalogue's regexes were never needed
        assert monitor._parser is None  # nor the metric parser's
        backfill = await log_backfill(session, RUN)  # a log view opening: the old lines, classified again
        assert any(line.level == "error" and "OutOfMemoryError" in line.text for line in backfill)
    finally:
        session.close()


async def test_a_report_of_a_clean_read_log_never_reads_the_catalogue(tmp_path: Path) -> None:
    """The catalogue (its TOML parsed, each pattern checked: ~20 ms of an `rgt --report`) is read when a line
    must be classified or a finding worded; a finished run whose log was read and found nothing needs neither."""
    session = await launched(tmp_path / "p", "echo 'epoch 1 loss 0.5'; echo 'epoch 2 loss 0.4'; exit 0")
    try:
        await follow_all(session)
        session.close()
        session = open_session(str(tmp_path / "p"))  # a new `rgt --report`
        update = await follow_log(session, RUN)
        assert update is not None and update.lines == ()
        assert log_findings(session, RUN) == () and current_alerts(session, RUN) == []
        assert monitors._kept(session).catalogue is None
    finally:
        session.close()


async def test_findings_read_later_are_still_worded_from_the_catalogue(tmp_path: Path) -> None:
    session = await launched(tmp_path / "p", cat_then_fail("oom_after_training.log"))
    try:
        await follow_all(session)
        session.close()
        session = open_session(str(tmp_path / "p"))
        await follow_log(session, RUN)
        assert monitors._kept(session).catalogue is None  # nothing new was read
        worded = {view.id: view for view in log_findings(session, RUN)}
        assert "S01" in worded and worded["S01"].fix == catalogue(session).rows["S01"].fix != ""
        assert "S01" in {alert.signature for alert in current_alerts(session, RUN)}
    finally:
        session.close()


async def test_a_poll_that_reads_nothing_writes_nothing(tmp_path: Path) -> None:
    """A caught-up log's poll (each refresh, each report) commits no transaction: its commit, cursor unchanged,
    was ~3 ms of an `rgt --report`. A poll that reads a line stores the new cursor."""
    session = await launched(tmp_path / "p", "echo 'epoch 1 loss 0.5'; sleep 0.2; exit 0")
    try:
        await follow_all(session)
        monitor = log_monitor(session, RUN)
        assert monitor is not None
        changes = monitor.db._conn.total_changes
        cursor = session.db.log_cursor(RUN)
        assert (await follow_log(session, RUN)) is not None
        assert monitor.db._conn.total_changes == changes and session.db.log_cursor(RUN) == cursor
    finally:
        session.close()
