"""Two runs on one box, one home and verified, the other not pulled: teardown is not the box's next step
(`rgt down` refuses while any run on the box holds unverified results), so neither the patrol nor the dashboard's
$ BURN line suggests it; both name the sibling's pull."""

from __future__ import annotations

import asyncio
from pathlib import Path

from remote_gpu_trainer.services.fleet import patrol
from support.demo_replay import replayed_demo
from support.helpers import FIXED_NOW, FixedClock


def test_the_patrol_and_the_burn_line_name_the_unpulled_siblings_pull(tmp_path: Path) -> None:
    root = replayed_demo(tmp_path / "rgt-demo", flawed=True, pull=("demo",))
    looks = asyncio.run(patrol.tick([root], clock=FixedClock(FIXED_NOW), wait_s=5.0))  # money to the cent
    try:
        lines = {line.run: line for line in looks[0].lines}
        alerts = looks[0].view.alerts if looks[0].view is not None else []
    finally:
        asyncio.run(patrol.close(looks[0]))
    assert lines["demo"].next == f"rgt pull demo-flawed {root}", lines["demo"].next
    assert lines["demo-flawed"].next == f"rgt pull demo-flawed {root}"
    assert [a for a in alerts if a.startswith("$ BURN")] == [
        "$ BURN gpu-box: job finished, box still billing $0.89/h ($0.00 since it finished) → next: pull (p) → "
        "verify (v) of run demo-flawed (n: next run)"], alerts
