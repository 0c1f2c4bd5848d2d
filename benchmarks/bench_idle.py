"""What an idle dashboard costs: CPU time of the `rgt` process over wall time (issue 29's budgets: ≤ 2 % of a
core watching one sim box, ≤ 25 % watching 50 SSH boxes over real sshd).

Each contender is a real `python -m remote_gpu_trainer PROJECT` (the TUI with its normal terminal driver) on a
pseudo-terminal of 120×40 whose output this process reads and throws away, so the frames are drawn and written
as for a user. After a warm-up (start-up, the first connections), its CPU time is read from /proc/PID/stat
(utime + stime, every thread) at the start and at the end of the measured window; the figure is the difference
over the window's wall time. The three contenders run at once (CPU time, not wall time, is what is compared, and
an idle process leaves the cores to the others):

  - baseline: a one-widget Textual app, idle on the same kind of terminal (what Textual itself costs);
  - 1 sim box: the demo project, its run finished, pulled and verified (benchmarks/bench_startup.py's): the box
    still bills, so the meter's spend moves, and the audit's age ticks;
  - 50 SSH boxes: 50 OpenSSH sshd on 127.0.0.1 started as the SSH tests start them (tests/support/sshd_fixtures.py),
    one `ssh` instance per box in rgt.toml (aliases in a temporary ~/.ssh/config, as benchmarks/bench_report_ssh.py),
    one run on the first.

Every contender is then asked to quit (ctrl+q) and must still be alive at the end: a crash is a failure.

    .venv/bin/python benchmarks/bench_idle.py [--seconds 300] [--warmup 20] [--boxes 50]
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import os
import pty
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
importlib.import_module("remote_gpu_trainer.providers.transports.quiet_asyncssh")  # before asyncssh: no warnings

from bench_report_ssh import project as ssh_project  # noqa: E402
from bench_report_ssh import user_ssh  # noqa: E402
from bench_startup import prepare_demo  # noqa: E402

from support.sshd_fixtures import Sshd, start_sshd, write_key  # noqa: E402

BUDGET_ONE_BOX = 0.02  # of one core: issue 29
BUDGET_MANY_BOXES = 0.25
TICK_S = os.sysconf("SC_CLK_TCK")
BASELINE_APP = """
from textual.app import App
from textual.widgets import Footer, Static
class Hello(App):
    def compose(self):
        yield Static("hello")
        yield Footer()
Hello().run()
"""


@dataclass
class Contender:
    """One process on its own pseudo-terminal, its output drained by a thread."""

    name: str
    budget: float | None
    proc: subprocess.Popen[bytes]
    master: int
    drained: int = 0

    def cpu_s(self) -> float:
        """utime + stime of every thread of the process so far, in seconds."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK_S

    def drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:
                return
            if not data:
                return
            self.drained += len(data)


def start(name: str, budget: float | None, command: list[str], cwd: Path) -> Contender:
    """`command` on a fresh 120×40 pseudo-terminal (its stdin, stdout and stderr), as a terminal would run it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                            start_new_session=True)
    os.close(slave)
    contender = Contender(name, budget, proc, master)
    threading.Thread(target=contender.drain, daemon=True).start()
    return contender


def measure(contenders: list[Contender], warmup: float, seconds: float) -> dict[str, float]:
    """CPU share of one core of each contender over the same window, after the warm-up."""
    time.sleep(warmup)
    for contender in contenders:
        if contender.proc.poll() is not None:
            raise SystemExit(f"{contender.name}: exited during the warm-up (code {contender.proc.returncode})")
    before = {c.name: c.cpu_s() for c in contenders}
    started = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - started
    shares = {c.name: (c.cpu_s() - before[c.name]) / wall for c in contenders}
    for contender in contenders:
        if contender.proc.poll() is not None:
            raise SystemExit(f"{contender.name}: exited while measured (code {contender.proc.returncode})")
    return shares


def stop(contender: Contender) -> None:
    """ctrl+q, as a user quits; killed only if it does not go."""
    try:
        os.write(contender.master, b"\x11")
        contender.proc.wait(20)
    except (OSError, subprocess.TimeoutExpired):
        contender.proc.kill()
        contender.proc.wait(5)
    os.close(contender.master)


def show(shares: dict[str, float], contenders: list[Contender], seconds: float) -> None:
    base = shares[contenders[0].name]
    print(f"\nidle CPU over {seconds:.0f} s ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f})")
    print(f"{'contender':44} {'% of a core':>11} {'× baseline':>10}  budget")
    for contender in contenders:
        share = shares[contender.name]
        verdict = "" if contender.budget is None else (
            f"≤ {contender.budget:.0%}: {'met' if share <= contender.budget else 'NOT met'}")
        print(f"{contender.name:44} {share * 100:10.2f}% {share / max(base, 1e-9):10.1f}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="the measured window (default 300)")
    parser.add_argument("--warmup", type=float, default=20.0, help="start-up left out of the window")
    parser.add_argument("--boxes", type=int, default=50)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rgt-bench-idle-"))
    os.environ["HOME"] = str(work / "home")  # ~/.ssh of the SSH boxes: nothing of the real one is read
    os.environ.pop("SSH_AUTH_SOCK", None)
    servers: list[Sshd] = []
    contenders: list[Contender] = []
    try:
        key = work / "client_key"
        write_key(key)
        servers = [start_sshd(work / f"sshd{index:02d}", client_key=key) for index in range(args.boxes)]
        aliases = user_ssh(work / "home", servers, key)
        ssh_project(work / "ssh", aliases, work / "box")
        prepare_demo(work / "sim")
        sim = work / "sim" / "rgt.toml"
        rgt = [sys.executable, "-m", "remote_gpu_trainer"]
        contenders = [start("baseline: one-widget Textual app", None, [sys.executable, "-c", BASELINE_APP], work),
                      start("rgt dashboard, 1 sim box", BUDGET_ONE_BOX, [*rgt, str(sim)], sim.parent),
                      start(f"rgt dashboard, {args.boxes} SSH boxes", BUDGET_MANY_BOXES,
                            [*rgt, str(work / "ssh" / "rgt.toml")], work / "ssh")]
        shares = measure(contenders, args.warmup, args.seconds)
        show(shares, contenders, args.seconds)
    finally:
        for contender in contenders:
            stop(contender)
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
