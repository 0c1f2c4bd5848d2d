"""The log pipeline on real frameworks' console output (the README of tests/fixtures/logs/captured/), written by a real
job on the sim box and followed by the session's own monitor: the chart's x, the steps the progress bar gives,
the ETA from a backlog read in bursts, and the rows the run raises (docs/log-signatures.md §3.3, §4)."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.log_monitor import LogUpdate
from remote_gpu_trainer.services.watch.monitors import log_monitor
from remote_gpu_trainer.services.watch.run_logs import follow_log, loss_chart
from support.helpers import FIXED_NOW, FIXTURES, INSTANCE, RUN, FixedClock, wait_for_liveness, write_project

CAPTURED = FIXTURES / "logs" / "captured"
HF5_LOSSES = (0.6936, 0.6908, 0.6927, 0.6919, 0.6908, 0.6928)


async def cat_run(root: Path, name: str) -> Session:
    """A job that writes a captured log as its own output, followed to its end."""
    write_project(root, f"cat {shlex.quote(str(CAPTURED / name))}", roster=("seed0",))
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    await follow_all(session)
    return session


async def follow_all(session: Session, max_reads: int = 8) -> list[LogUpdate]:
    updates = []
    while True:
        update = await follow_log(session, RUN, max_reads)
        assert update is not None
        updates.append(update)
        if not update.more:
            return updates


async def test_hf5_loss_is_charted_by_epoch_and_the_bar_still_counts_steps(tmp_path: Path) -> None:
    session = await cat_run(tmp_path / "p", "hf5_trainer.log")
    try:
        stored = session.db.metric_samples(RUN, "loss")
        assert [(s.step, s.epoch) for s in stored] == [(None, e) for e in (0.5, 1, 1.5, 2, 2.5, 3)]  # as the lines say
        # the bar's frames before tqdm's blank clearing frame are read (they were skipped as older redraws)
        assert [s.step for s in session.db.metric_samples(RUN, "throughput")] == [2, 4, 6, 8, 10, 12]
        chart = loss_chart(session, RUN)
        assert chart is not None and chart.x == "epoch"
        assert chart.steps == (0.5, 1.0, 1.5, 2.0, 2.5, 3.0) and chart.values == HF5_LOSSES
        monitor = log_monitor(session, RUN)
        assert monitor is not None and (monitor.progress.current_step, monitor.progress.total_steps) == (12, 12)
    finally:
        await session.close_transports()
        session.close()


async def test_hf5_nan_grad_norm_alerts_with_its_fix(tmp_path: Path) -> None:
    session = await cat_run(tmp_path / "p", "hf5_nan_grad.log")
    try:
        found = {f.signature: f for f in session.db.log_findings(RUN)}
        assert found["S95"].severity == "error" and found["S95"].count == 5
        assert "'grad_norm': 'nan'" in found["S95"].evidence and "S08" not in found  # the loss is logged as '0'
        chart = loss_chart(session, RUN)
        assert chart is not None and chart.x == "epoch" and chart.steps[-1] == 2.0
    finally:
        await session.close_transports()
        session.close()


async def test_lightning_rich_bar_gives_the_loss_at_its_step(tmp_path: Path) -> None:
    session = await cat_run(tmp_path / "p", "lightning_rich_file.log")
    try:
        assert [(s.step, s.value) for s in session.db.metric_samples(RUN, "val/loss")] == [(24, 3.114)]
        monitor = log_monitor(session, RUN)
        assert monitor is not None and monitor.loss.last == (24.0, 2.098)
        chart = loss_chart(session, RUN)
        assert chart is not None and chart.x == "step" and "loss 2.098" in chart.title
    finally:
        await session.close_transports()
        session.close()


async def test_torchrun_rank_failure_names_the_rank_and_raises_no_critical(tmp_path: Path) -> None:
    session = await cat_run(tmp_path / "p", "torchrun_rank_dies.log")
    try:
        found = {f.signature: f for f in session.db.log_findings(RUN)}
        assert "S47" not in found and not [f for f in found.values() if f.severity == "critical"]
        assert found["S96"].evidence.startswith("torchrun root cause: rank 1 (local_rank: 1), exitcode 1")
    finally:
        await session.close_transports()
        session.close()


BACKLOG = 50_000  # steps a job wrote before anyone read its log: about 1.3 MiB, more than one read (1 MiB)


async def test_a_backlog_read_in_bursts_gives_no_eta_until_steps_are_read_live(tmp_path: Path) -> None:
    """The TUI reads 1 MiB a poll: a backlog comes in two polls 50 ms apart. Timed by when it was read, 11,000
    steps in 50 ms made the ETA 0 s; now the backlog moves the counter only, and the ETA comes from steps read
    as they are written (20 s for 10 steps: 2 s a step, 49,990 to go)."""
    root = tmp_path / "p"
    backlog = (f'for i in $(seq 1 {BACKLOG}); do echo "step=$i/100000 loss=0.5"; done; '
               "for i in $(seq 600); do [ -f RELEASE ] && break; sleep 0.1; done")
    write_project(root, backlog, roster=("seed0",))
    clock = FixedClock(FIXED_NOW)
    session = Session(load_project(root / "rgt.toml"), clock=clock)
    try:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        await wait_for_liveness(session, states=("running",))
        log = Path(session.transport(INSTANCE).resolve("/workspace/job/train.log"))
        while f"step={BACKLOG}/" not in log.read_text()[-64:]:
            await asyncio.sleep(0.05)
        polls = 0
        while True:
            update = await follow_log(session, RUN, max_reads=1)
            assert update is not None
            polls += 1
            if not update.more:
                break
            clock.advance(seconds=0.05)
        monitor = log_monitor(session, RUN)
        assert monitor is not None and polls >= 2 and monitor.progress.current_step == BACKLOG
        assert monitor.snapshot.eta_at_t is None and monitor.progress.intervals_held == 0

        clock.advance(seconds=20)
        with log.open("a") as handle:
            handle.writelines(f"step={i}/100000 loss=0.5\n" for i in range(BACKLOG + 1, BACKLOG + 11))
        await follow_all(session, max_reads=1)
        assert monitor.progress.seconds_per_step(clock().timestamp()) == pytest.approx(2.0)
        assert monitor.snapshot.eta_at_t == pytest.approx((100_000 - BACKLOG - 10) * 2.0)
    finally:
        Path(session.transport(INSTANCE).resolve("/workspace/job/RELEASE")).write_text("go\n")
        await session.close_transports()
        session.close()
