"""Measure the UI's time to first frame and `rgt --report` on the demo project (docs/architecture.md §5).

Every figure is a median over fresh processes, printed next to a baseline measured the same way in the
same run, so the ratio means something on any machine:
  - first frame: rgt's dashboard vs a one-widget Textual app (both headless, both exit after their first
    refresh); also the first frame that shows data from the services;
  - `rgt --report`: vs starting Python and importing rgt's CLI (`rgt --version`).
It also checks that torch is never imported in the UI process.

Run: .venv/bin/python benchmarks/bench_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE_APP = """
import time, sys
from textual.app import App
from textual.widgets import Static
class Hello(App):
    def compose(self):
        yield Static("hello")
    def on_mount(self):
        self.call_after_refresh(self.exit)
Hello().run(headless=True, size=(120, 40))
"""

RGT_APP = """
import json, sys
from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.services.opening import open_session
MODE = sys.argv[2]

class Timed(RgtApp):
    def on_mount(self):
        super().on_mount()
        if MODE == "frame":
            self.call_after_refresh(self.exit)
        else:
            self.set_interval(0.005, self.check_data)

    def check_data(self):
        if isinstance(self.screen, DashboardScreen) and self.screen.overview is not None:
            self.call_after_refresh(self.exit)

Timed(open_session(sys.argv[1], read_only=True)).run(headless=True, size=(120, 40))
print(json.dumps({"torch": "torch" in sys.modules}))
"""


def timed(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(command[:3])}…\n{result.stderr[-2000:]}")
    return elapsed, result.stdout


def median_of(runs: int, command: list[str], env: dict[str, str]) -> tuple[float, str]:
    samples, out = [], ""
    for _ in range(runs):
        elapsed, out = timed(command, env)
        samples.append(elapsed)
    return statistics.median(samples), out


def prepare_demo(folder: Path) -> None:
    """A finished, pulled and verified demo project: the state the report is most often asked about."""
    from remote_gpu_trainer.services.demo_project import DEMO_RUN, create_demo
    from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
    from remote_gpu_trainer.services.opening import open_session
    from remote_gpu_trainer.services.watch.liveness import run_state

    create_demo(folder, quick=True)
    session = open_session(str(folder))

    async def arc() -> None:
        from remote_gpu_trainer.cli.project_verbs import start_demo as _start_demo

        await _start_demo(session)
        while (await run_state(session, DEMO_RUN)).liveness.state not in ("finished", "dead"):
            await asyncio.sleep(0.2)
        await pull_run(session, DEMO_RUN)
        if not (await verify_run(session, DEMO_RUN)).ok:
            raise SystemExit("demo verification failed")

    asyncio.run(arc())
    session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TEXTUAL")}
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        demo = Path(tmp) / "demo"
        prepare_demo(demo)
        base_frame, _ = median_of(args.runs, [python, "-c", BASELINE_APP], env)
        rgt_frame, out = median_of(args.runs, [python, "-c", RGT_APP, str(demo), "frame"], env)
        torch_in_ui = json.loads(out.strip().splitlines()[-1])["torch"]
        rgt_data, _ = median_of(args.runs, [python, "-c", RGT_APP, str(demo), "data"], env)
        base_cli, _ = median_of(args.runs, [python, "-m", "remote_gpu_trainer", "--version"], env)
        report_text, _ = median_of(args.runs, [python, "-m", "remote_gpu_trainer", "--report", str(demo)], env)
        report_json, _ = median_of(
            args.runs, [python, "-m", "remote_gpu_trainer", "--report", str(demo), "--format", "json"], env)
    rows = [
        ("first frame: hello-world Textual app (baseline)", base_frame, 1.0),
        ("first frame: rgt dashboard", rgt_frame, rgt_frame / base_frame),
        ("first frame with service data: rgt dashboard", rgt_data, rgt_data / base_frame),
        ("rgt --version (baseline: interpreter + CLI import)", base_cli, 1.0),
        ("rgt --report (text) on the verified demo", report_text, report_text / base_cli),
        ("rgt --report --format json on the verified demo", report_json, report_json / base_cli),
    ]
    print(f"median of {args.runs} fresh processes each; Python {sys.version.split()[0]}")
    print(f"{'measurement':<55} {'seconds':>8} {'× baseline':>11}")
    for name, seconds, ratio in rows:
        print(f"{name:<55} {seconds:>8.3f} {ratio:>10.2f}×")
    print(f"torch imported in the UI process: {'YES (budget broken)' if torch_in_ui else 'no'}")
    print(f"budget: first frame < 1 s: {'met' if rgt_frame < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
