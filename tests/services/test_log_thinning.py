"""A long dense log through the real monitor on a sim run: the stored series is thinned to an exact, bounded
row count, keeps the spike, the NaN and the last step, and the rules fire on the live windows as they did
before thinning; a restarted rgt draws the chart to the last step and does not store a full head again."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.monitors import log_monitor
from remote_gpu_trainer.services.watch.run_logs import evaluate_rules, follow_log, loss_chart, take_alerts
from support.helpers import INSTANCE, RUN, wait_for_liveness, write_project

STEPS = 20_000
SPIKE, NAN = 19_970, 19_980  # both in the last 50 steps, where the event rows look (RunSignals.since)
# every step a loss line: decreasing, one spike to 50 and one NaN; the first line also states the total
COMMAND = (f"seq 1 {STEPS} | awk '{{{{ if ($1 == {SPIKE}) l = \"50.0\"; else if ($1 == {NAN}) l = \"nan\"; "
           f"else l = sprintf(\"%.6f\", 2.0 * 0.9999 ^ $1); printf \"step=%d/{STEPS} loss=%s\\n\", $1, l }}}}'")


async def follow_all(session: Session) -> None:
    while True:
        update = await follow_log(session, RUN)
        assert update is not None
        if not update.more:
            return


async def test_a_dense_log_is_stored_thinned_with_its_spike_nan_and_last_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "p"
    write_project(root, COMMAND, roster=("seed0",))
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    await follow_all(session)
    # 2,000 as they came; 18,000 in 281 full buckets of 64 (falling: first = max and last = min, two rows;
    # the last full one holds the spike as max, the NaN and its last: three) and 16 in the open bucket;
    # plus the one total_steps sample
    assert session.db.metric_counts(RUN) == {"loss": 2_000 + 281 * 2 + 1, "total_steps": 1}

    await evaluate_rules(session, RUN, await run_state(session, RUN))
    raised = {alert.signature for alert in take_alerts(session)}
    assert {"S70", "S71"} <= raised  # NaN and spike, from the live windows (unthinned)
    await session.close_transports()
    session.close()  # closing stores the open bucket: max and last (= min), two rows

    reopened = open_session(str(root))
    stored = reopened.db.metric_samples(RUN, "loss")
    assert len(stored) == 2_000 + 281 * 2 + 1 + 2
    assert [s.step for s in stored if math.isnan(s.value)] == [NAN]
    assert max(s.value for s in stored if math.isfinite(s.value)) == 50.0
    assert [s.step for s in stored if s.value == 50.0] == [SPIKE]
    assert stored[-1].step == STEPS and stored[-1].value == round(2.0 * 0.9999 ** STEPS, 6)
    chart = loss_chart(reopened, RUN)
    assert chart is not None and chart.steps[-1] == float(STEPS) and f"step {STEPS}/{STEPS}" in chart.title
    monitor = log_monitor(reopened, RUN)
    assert monitor is not None and monitor.thinner.add(
        [stored[-1]._replace(step=STEPS + 1)]) == []  # the head is full: a new sample goes into a bucket
    reopened.close()

    # following and thinning touched nothing on the box, and the gate still refuses teardown
    monkeypatch.chdir(root)
    assert await asyncio.to_thread(main, ["down", RUN, "--confirm", INSTANCE]) == 3
    assert (root / ".rgt" / "sim" / INSTANCE).is_dir()
