"""The dashboard shows a run's Young/Daly checkpoint line (docs/remote-ops.md §10) under its checkpoints, and
marks it OVERDUE once the job stops writing checkpoints for longer than twice the interval: in the real app,
driven by Pilot, on a sim run."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from pathlib import Path

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.widgets.checkpoints_panel import CheckpointsPanel
from support.helpers import INSTANCE, RUN, write_project
from support.tui_helpers import dashboard, wait_until

# one checkpoint whose write the log times at 1.0 s, then training lines and no checkpoint for 60 s
STALE_JOB = """\
import pathlib, sys, time
out = pathlib.Path(sys.argv[1])
(out / "ckpt_1.pt").write_bytes(b"weights")
print("checkpoint saved in 1.0s", flush=True)
for i in range(300):
    print(f"step={i} loss={1.0 / (i + 1):.4f}", flush=True)
    time.sleep(0.2)
"""


async def test_the_cadence_line_is_shown_and_overdue_once_checkpoints_stop(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    job = tmp_path / "job.py"
    job.write_text(STALE_JOB)
    # μ = 0.001 h = 3.6 s and C = 1.0 s from the log: W = sqrt(2 · 3.6 · 1) ≈ 2.7 s, overdue after ≈ 5.4 s
    write_project(root, f"{sys.executable} {job} {{out}}", roster=("seed0",), extra_run="mtbp_hours = 0.001")
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    detail = await launch_run(session, RUN)
    app = RgtApp(session)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: len(app.screen_stack) > 1 and dashboard(app).current_run() is not None)
            panel = dashboard(app).query_one(CheckpointsPanel)
            formula = " · W = sqrt(2 · μ 3s (rgt.toml runs.r1.mtbp_hours) · C 1 s (log))"
            await wait_until(pilot, lambda: panel.summary.endswith(" · OVERDUE (older than 2 × W)"), timeout=60)
            line = panel.summary.split("\n")[-1]
            # the interval, the iterations it spans at the log's measured pace, and where μ and C came from
            assert line.startswith("checkpoint every 2s (") and " iterations at " in line and formula in line, line
            newest = panel.summary.split(" · newest ")[1].split(" old")[0]
            assert re.fullmatch(r"([5-9]|[1-5]\d)s|\d+m\d\ds", newest), newest  # older than 2 × W ≈ 5.4 s
    finally:
        with contextlib.suppress(ProcessLookupError):  # the test's own job, unless it already ended
            os.killpg(int(str(detail["pid"])), signal.SIGKILL)
        await session.close_transports()
        session.close()
