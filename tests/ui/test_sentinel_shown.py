"""The dashboard shows the on-box sentinel's own liveness (docs/remote-ops.md §9.1): alive while its heartbeat
is fresh, silent once it is killed, in the run's checkpoint summary."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.widgets.checkpoints_panel import CheckpointsPanel
from support.helpers import INSTANCE, RUN, write_project
from support.tui_helpers import dashboard, wait_until
from support.webhook_receiver import Receiver, receiver  # noqa: F401 (the fixture)


async def test_the_dashboard_shows_the_sentinel_alive_then_silent(tmp_path: Path,
                                                                  receiver: Receiver) -> None:  # noqa: F811
    root = tmp_path / "proj"
    write_project(root, "echo started && sleep 120")
    (root / "webhook.url").write_text(receiver.url)
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write('\n[notify]\nwebhook_file = "webhook.url"\npoll_seconds = 0.3\n')
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    detail = await launch_run(session, RUN)
    ctl = root / ".rgt" / "sim" / INSTANCE / "workspace" / "job" / ".rgt" / RUN
    app = RgtApp(session)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_until(pilot, lambda: len(app.screen_stack) > 1 and dashboard(app).current_run() is not None)
            panel = dashboard(app).query_one(CheckpointsPanel)
            await wait_until(pilot, lambda: panel.summary.endswith(" · sentinel alive"))
            assert dashboard(app).current_run().sentinel == "alive"  # type: ignore[union-attr]
            os.kill(int((ctl / "sentinel.pid").read_text()), signal.SIGKILL)
            await wait_until(pilot, lambda: " · sentinel silent since " in panel.summary)
            assert receiver.requests == []
    finally:
        os.killpg(int(str(detail["pid"])), signal.SIGKILL)  # the test's own job
        await session.close_transports()
        session.close()
