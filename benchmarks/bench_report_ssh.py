"""`rgt --report` with many SSH boxes vs the same number of parallel `ssh host true` (docs/architecture.md §5).

N real OpenSSH sshd servers on 127.0.0.1 (20 by default), each with its own host key, started exactly
like the test fixture (tests/sshd_fixtures.py). The user's ~/.ssh (a temporary HOME: nothing of the real
one is read) has one alias per box and their host keys in known_hosts; the project's rgt.toml has one
`ssh` instance per alias and one run on the first. Each round starts cold for everyone:

  - rgt: `rgt --report --format json` as a fresh process (interpreter start, imports, N connections,
    one status check per box, the report);
  - baseline: N `ssh -F ~/.ssh/config ALIAS true` processes started at once, waited for together (N connections, N
    remote shells).

The report is checked: every instance must read `running`. The budget (docs/architecture.md §5): rgt within
BUDGET × the baseline's median; the load average is printed with the figures (the machine may be shared).

    .venv/bin/python benchmarks/bench_report_ssh.py [--boxes 20] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from support.sshd_fixtures import Sshd, start_sshd, write_key  # noqa: E402

RGT = [sys.executable, "-m", "remote_gpu_trainer"]
BUDGET = 1.2  # rgt --report over N boxes within this many times N parallel `ssh ALIAS true`


def user_ssh(home: Path, servers: list[Sshd], key: Path) -> list[str]:
    """~/.ssh/config aliases box01…boxNN and their host keys in ~/.ssh/known_hosts; returns the aliases."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    aliases = [f"box{index:02d}" for index in range(1, len(servers) + 1)]
    (ssh / "config").write_text("".join(
        f"Host {alias}\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n  IdentityFile {key}\n"
        "  IdentitiesOnly yes\n  BatchMode yes\n  StrictHostKeyChecking yes\n"
        f"  UserKnownHostsFile {ssh / 'known_hosts'}\n"
        for alias, server in zip(aliases, servers, strict=True)))
    (ssh / "known_hosts").write_text("".join(server.known_hosts_line() for server in servers))
    return aliases


def project(root: Path, aliases: list[str], box: Path) -> None:
    root.mkdir(parents=True)
    instances = "".join(f'[instances.{alias}]\nprovider = "ssh"\nhost = "{alias}"\nprice_per_hour = 0.5\n\n'
                        for alias in aliases)
    (root / "rgt.toml").write_text(f"""[project]
name = "many-boxes"

{instances}[runs.r1]
instance = "{aliases[0]}"
workdir = "{box / 'job'}"
command = "python3 train.py"
log = "train.log"
remote_root = "{box / 'rgt' / 'r1'}"
roster = ["seed0"]
""", encoding="utf-8")


def rgt_report(root: Path, boxes: int) -> float:
    started = time.perf_counter()
    done = subprocess.run([*RGT, "--report", "--format", "json", str(root)], capture_output=True, text=True,
                          cwd=root)
    elapsed = time.perf_counter() - started
    report = json.loads(done.stdout)
    states = [instance["state"] for instance in report["instances"]]
    if states != ["running"] * boxes:
        raise SystemExit(f"rgt --report: not every box reads running: {states} {done.stderr[-500:]}")
    return elapsed


def parallel_ssh(aliases: list[str], config: Path) -> float:
    """OpenSSH finds ~ through the password database, not $HOME: the config is named with -F."""
    started = time.perf_counter()
    processes = [subprocess.Popen(["ssh", "-F", str(config), alias, "true"], stdin=subprocess.DEVNULL)
                 for alias in aliases]
    codes = [process.wait() for process in processes]
    elapsed = time.perf_counter() - started
    if any(codes):
        raise SystemExit(f"ssh host true failed: {codes}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one rgt --report")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rgt-bench-report-"))
    home = work / "home"
    os.environ["HOME"] = str(home)
    os.environ.pop("SSH_AUTH_SOCK", None)
    key = work / "client_key"
    write_key(key)
    servers: list[Sshd] = []
    try:
        servers = [start_sshd(work / f"sshd{index:02d}", client_key=key) for index in range(args.boxes)]
        aliases = user_ssh(home, servers, key)
        root = work / "project"
        project(root, aliases, work / "box")
        rgt, ssh = [], []
        load_before = os.getloadavg()[0]
        for _ in range(args.rounds):
            rgt.append(rgt_report(root, args.boxes))
            ssh.append(parallel_ssh(aliases, home / ".ssh" / "config"))
        show(args.boxes, args.rounds, rgt, ssh, (load_before, os.getloadavg()[0]))
        if args.profile:
            profile(root, work / "report.prof")
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def profile(root: Path, out: Path) -> None:
    """A cProfile of one more rgt --report (the report itself is not printed): the main thread only, so
    what asyncssh runs in its executor (config parsing, signing) shows as waiting."""
    import pstats

    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "remote_gpu_trainer", "--report",
                    "--format", "json", str(root)], cwd=root, check=True, stdout=subprocess.DEVNULL)
    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)


def show(boxes: int, rounds: int, rgt: list[float], ssh: list[float], load: tuple[float, float]) -> None:
    base = statistics.median(ssh)
    print(f"\n{boxes} SSH boxes on loopback, median of {rounds} interleaved rounds ({os.cpu_count()} CPUs, "
          f"1-minute load {load[0]:.2f} before, {load[1]:.2f} after)")
    print(f"{'contender':58} {'median s':>9} {'best s':>8} {'× ssh':>6}")
    for name, times in ((f"{boxes} × `ssh ALIAS true` at once (baseline)", ssh),
                        ("rgt --report --format json (fresh process)", rgt)):
        print(f"{name:58} {statistics.median(times):9.2f} {min(times):8.2f} {statistics.median(times) / base:6.2f}")
    ratio = statistics.median(rgt) / base
    print(f"budget: within {BUDGET:g} × the baseline: {'met' if ratio <= BUDGET else 'NOT met'} ({ratio:.2f} ×)")


if __name__ == "__main__":
    main()
