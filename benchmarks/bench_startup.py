"""Measure the UI's time to first frame and `rgt --report` on the demo project (docs/architecture.md §5).

Every figure is a median over fresh processes, printed next to a baseline measured the same way in the
same run, so the ratio means something on any machine:
  - first frame: rgt's dashboard vs a one-widget Textual app (both headless, both exit after their first
    refresh); also the first frame that shows data from the services;
  - `rgt --report`: vs starting Python and importing rgt's CLI (`rgt --version`).
It also checks that torch is never imported in the UI process.

Bytecode is cached, as on any machine after the first run: PYTHONDONTWRITEBYTECODE is dropped from the children's
environment and every command runs once untimed first (a process that compiles rgt's 600 modules from source
measures the compiler, not the start-up). The commands then take turns, run after run, so a load that comes and
goes weighs on the baseline and on rgt alike. Each ratio is printed against its budget (docs/architecture.md §5).

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
from remote_gpu_trainer.runtime import tune_process
tune_process()  # as `rgt` does before it imports the app (cli/main.py's main, then cli/faces.py's tui)
from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.services.opening import open_session
MODE = sys.argv[2]

class Timed(RgtApp):
    def on_mount(self):  # textual calls RgtApp.on_mount too (every class's handler): calling it here made 2 dashboards
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


def interleaved(runs: int, commands: dict[str, list[str]], env: dict[str, str]) -> tuple[dict[str, float], str]:
    """The median of `runs` fresh processes per command, the commands taking turns; each runs once untimed first
    (it writes the bytecode caches). Returns the medians and the last output of the first command named "frame"."""
    for command in commands.values():
        timed(command, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    frame_out = ""
    for _ in range(runs):
        for name, command in commands.items():
            elapsed, out = timed(command, env)
            samples[name].append(elapsed)
            frame_out = out if name == "frame" else frame_out
    return {name: statistics.median(values) for name, values in samples.items()}, frame_out


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


BUDGETS = {"frame": 2.0, "data": 3.0, "report": 2.5, "report_json": 2.5}  # docs/architecture.md §5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TEXTUAL", "PYTHONDONTWRITEBYTECODE")}
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        demo = Path(tmp) / "demo"
        prepare_demo(demo)
        rgt = [python, "-m", "remote_gpu_trainer"]
        medians, out = interleaved(args.runs, {
            "hello": [python, "-c", BASELINE_APP],
            "frame": [python, "-c", RGT_APP, str(demo), "frame"],
            "data": [python, "-c", RGT_APP, str(demo), "data"],
            "version": [*rgt, "--version"],
            "report": [*rgt, "--report", str(demo)],
            "report_json": [*rgt, "--report", str(demo), "--format", "json"],
        }, env)
    torch_in_ui = json.loads(out.strip().splitlines()[-1])["torch"]
    rows = [
        ("first frame: hello-world Textual app (baseline)", "hello", "hello"),
        ("first frame: rgt dashboard", "frame", "hello"),
        ("first frame with service data: rgt dashboard", "data", "hello"),
        ("rgt --version (baseline: interpreter + CLI import)", "version", "version"),
        ("rgt --report (text) on the verified demo", "report", "version"),
        ("rgt --report --format json on the verified demo", "report_json", "version"),
    ]
    print(f"median of {args.runs} fresh processes each, interleaved; Python {sys.version.split()[0]}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'measurement':<55} {'seconds':>8} {'× baseline':>11}  budget")
    for name, key, base in rows:
        ratio = medians[key] / medians[base]
        budget = BUDGETS.get(key)
        verdict = "" if budget is None else f"≤ {budget:g}× {'met' if ratio <= budget else 'NOT met'}"
        print(f"{name:<55} {medians[key]:>8.3f} {ratio:>10.2f}×  {verdict}")
    print(f"torch imported in the UI process: {'YES (budget broken)' if torch_in_ui else 'no'}")
    print(f"first frame under 1 s: {'met' if medians['frame'] < 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
