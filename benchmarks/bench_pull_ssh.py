"""Pull speed over SSH on loopback: the real `pull` with a manifest vs scp and rsync (docs/architecture.md §5).

Two scenarios, each a run's result root on the far side of a real OpenSSH sshd on 127.0.0.1 (started
exactly like the test fixture, tests/support/sshd_fixtures.py, with its own host and client keys; nothing reads or
writes the real ~/.ssh):
  - one large file of random bytes (1 GiB by default, `--big-mib`);
  - many small files (2,000 × 100 KB by default, `--small`, `--small-kib`), 100 per cell folder.
The manifest is built once on the box by the real builder (services/evidence/manifest.py). Every round then
starts from nothing: a fresh local root, a fresh state database (the manifest's hash recorded in it, as
`rgt pull` finds it after launch) and a fresh SSH connection, for every contender alike.

rgt: `pull` (services/evidence/pull.py) itself: manifest fetch and check, free-space check, per-file lstat,
SFTP stream with SHA-256 while streaming, fsync, rename, hash-cache seeding. Baselines, run in the same process:
`scp -r` then `sha256sum` of every file (a verified copy), `rsync -a` then `sha256sum`, and plain
`rsync -a` (no hashing at all: the floor), and `rsync -a --fsync` where rsync has it (no hashing, but every
file fsynced as rgt does). rsync is installed with apt if it is missing. Each round runs every contender once,
in turn; the medians are compared, and the 1-minute load average is printed with them.

    .venv/bin/python benchmarks/bench_pull_ssh.py [--big-mib 1024] [--small 2000] [--small-kib 100]
        [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from remote_gpu_trainer.config.project import InstanceConfig, ProjectConfig, RunConfig  # noqa: E402
from remote_gpu_trainer.providers.transports.ssh import SSHTransport  # noqa: E402
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool, SSHSettings  # noqa: E402
from remote_gpu_trainer.services.evidence.manifest import build_manifest  # noqa: E402
from remote_gpu_trainer.services.evidence.pull import pull  # noqa: E402
from remote_gpu_trainer.state.db import StateDB  # noqa: E402
from support.sshd_fixtures import Sshd, settings_for, start_sshd  # noqa: E402

PER_CELL = 100
RSYNC_BUDGET = 1.5  # many small files: rgt pull within this many times plain `rsync -a` (docs/architecture.md §5)


@dataclass
class Scenario:
    name: str
    box: Path  # the run's result root on the far side
    run: RunConfig
    manifest_sha256: str
    files: int
    bytes: int


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(64 << 20, left))
            handle.write(block)
            left -= len(block)


def big_files(box: Path, mib: int) -> tuple[str, ...]:
    write_random(box / "seed0" / "blob.bin", mib << 20)
    return ("seed0",)


def small_files(box: Path, count: int, kib: int) -> tuple[str, ...]:
    cells = tuple(f"cell{index:03d}" for index in range(-(-count // PER_CELL)))
    for index in range(count):
        write_random(box / cells[index // PER_CELL] / f"part{index:05d}.bin", kib << 10)
    return cells


async def build(name: str, box: Path, roster: tuple[str, ...], transport: SSHTransport, db: StateDB) -> Scenario:
    run = RunConfig(id=name, instance="box", workdir=str(box), command="true", log="train.log",
                    remote_root=str(box), roster=roster, required=(), python=sys.executable)
    sha = await build_manifest(transport, run, db)
    files = [path for path in box.rglob("*") if path.is_file() and path.name != "PULL_MANIFEST.json"]
    return Scenario(name, box, run, sha, len(files), sum(path.stat().st_size for path in files))


async def rgt_pull(scenario: Scenario, local_project: Path, server: Sshd, settings: SSHSettings) -> None:
    project = ProjectConfig(root=local_project, file=local_project / "rgt.toml", name="bench",
                            instances={"box": InstanceConfig(name="box", provider="ssh", id="box")},
                            runs={scenario.run.id: scenario.run})
    db = StateDB(project.state_db)
    db.record_manifest(scenario.run.id, scenario.manifest_sha256)
    transport = SSHTransport(server.target, settings, pool=SSHPool())
    try:
        result = await pull(project, scenario.run, transport, db)
    finally:
        await transport.close()
        db.close()
    if not result.ok or len(result.fetched) != scenario.files:
        raise SystemExit(f"rgt pull did not fetch everything: {result.failed[:3]}")


def ssh_options(server: Sshd, known_hosts: Path) -> list[str]:
    return ["-F", "/dev/null", "-i", str(server.client_key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}"]


def sha256_all(folder: Path) -> None:
    """sha256sum every file of the copy (xargs keeps argv bounded); the digests are checked by count."""
    listing = subprocess.run(["find", str(folder), "-type", "f", "-print0"], capture_output=True, check=True).stdout
    subprocess.run(["xargs", "-0", "sha256sum"], input=listing, capture_output=True, check=True)


def scp_pull(server: Sshd, known_hosts: Path, box: Path, local: Path) -> None:
    subprocess.run(["scp", "-q", "-r", "-P", str(server.port), *ssh_options(server, known_hosts),
                    f"root@127.0.0.1:{box}", str(local)], check=True)
    sha256_all(local)


def rsync_pull(server: Sshd, known_hosts: Path, box: Path, local: Path, hash_after: bool, *extra: str) -> None:
    shell = " ".join(["ssh", "-p", str(server.port), *ssh_options(server, known_hosts)])
    subprocess.run(["rsync", "-a", *extra, "-e", shell, f"root@127.0.0.1:{box}/", str(local)], check=True)
    if hash_after:
        sha256_all(local)


def ensure_rsync() -> bool:
    if shutil.which("rsync"):
        return True
    print("rsync missing: installing it with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "rsync"]):
        if subprocess.run(command, env=env, capture_output=True).returncode != 0:
            return False
    return shutil.which("rsync") is not None


def copied(local: Path) -> tuple[int, int]:
    files = [path for path in local.rglob("*") if path.is_file() and path.name != "PULL_MANIFEST.json"]
    return len(files), sum(path.stat().st_size for path in files)


def measure(scenario: Scenario, rounds: int, work: Path,
            pulls: list[tuple[str, Callable[[Path], Path]]]) -> dict[str, list[float]]:
    """Every contender once per round, in turn (a load that changes meanwhile falls on all of them alike).
    `copy(fresh_folder)` returns where the copy landed; its file count and bytes are checked."""
    times: dict[str, list[float]] = {name: [] for name, _ in pulls}
    for index in range(rounds):
        for number, (name, copy) in enumerate(pulls):
            fresh = work / f"{scenario.name}-{number}-{index}"
            subprocess.run(["sync"], check=True)
            started = time.perf_counter()
            landed = copy(fresh)
            times[name].append(time.perf_counter() - started)
            if copied(landed) != (scenario.files, scenario.bytes):
                raise SystemExit(f"{name}: copy incomplete: {copied(landed)} vs {(scenario.files, scenario.bytes)}")
            shutil.rmtree(fresh)
    return times


def contenders(scenario: Scenario, server: Sshd, settings: SSHSettings, known_hosts: Path,
               with_rsync: bool, profile: bool) -> list[tuple[str, Callable[[Path], Path]]]:
    def rgt(fresh: Path) -> Path:
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(asyncio.run, rgt_pull(scenario, fresh, server, settings))
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        else:
            asyncio.run(rgt_pull(scenario, fresh, server, settings))
        return fresh / "runs" / scenario.run.id

    def scp(fresh: Path) -> Path:
        fresh.mkdir()
        scp_pull(server, known_hosts, scenario.box, fresh / "copy")
        return fresh / "copy"

    def rsync(hash_after: bool, *extra: str) -> Callable[[Path], Path]:
        def go(fresh: Path) -> Path:
            fresh.mkdir()
            rsync_pull(server, known_hosts, scenario.box, fresh / "copy", hash_after, *extra)
            return fresh / "copy"
        return go

    out: list[tuple[str, Callable[[Path], Path]]] = [
        ("rgt pull (pull: sha256 while streaming, fsync)", rgt),
        ("scp -r + sha256sum (baseline)", scp),
    ]
    if with_rsync:
        out += [("rsync -a + sha256sum", rsync(True)), ("rsync -a (no hashing)", rsync(False))]
        if b"--fsync" in subprocess.run(["rsync", "--help"], capture_output=True).stdout:
            out.append(("rsync -a --fsync (no hashing, durable like rgt)", rsync(False, "--fsync")))
    return out


def report(scenario: Scenario, results: dict[str, list[float]], rounds: int, load: tuple[float, float]) -> None:
    mib = scenario.bytes / (1 << 20)
    base = statistics.median(results["scp -r + sha256sum (baseline)"])
    rsync = statistics.median(results["rsync -a (no hashing)"]) if "rsync -a (no hashing)" in results else None
    print(f"\n{scenario.name}: {scenario.files:,} files, {mib:,.0f} MiB over SSH on loopback, median of {rounds} "
          f"interleaved rounds ({os.cpu_count()} CPUs, 1-minute load {load[0]:.2f} before, {load[1]:.2f} after)")
    print(f"{'contender':58} {'median s':>9} {'best s':>8} {'MiB/s':>7} {'× scp':>6} {'× rsync':>8}")
    for name, times in results.items():
        median = statistics.median(times)
        versus_rsync = f"{median / rsync:8.2f}" if rsync else "       -"
        print(f"{name:58} {median:9.2f} {min(times):8.2f} {mib / median:7.0f} {median / base:6.2f} {versus_rsync}")
    rgt = statistics.median(results[next(iter(results))])
    print(f"aim: faster than scp + sha256sum: {'met' if rgt < base else 'NOT met'} ({rgt / base:.2f} ×)")
    if rsync and scenario.files > 1:
        print(f"budget: within {RSYNC_BUDGET:g} × rsync -a: {'met' if rgt <= RSYNC_BUDGET * rsync else 'NOT met'} "
              f"({rgt / rsync:.2f} ×)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=1024, help="size of the large file (0: leave it out)")
    parser.add_argument("--small", type=int, default=2000, help="how many small files (0: leave them out)")
    parser.add_argument("--small-kib", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of each rgt round")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rgt-bench-pull-"))
    os.environ["HOME"] = str(work / "home")  # nothing of the real ~/.ssh is read
    os.environ.pop("SSH_AUTH_SOCK", None)
    server = start_sshd(work / "sshd")
    try:
        asyncio.run(prepare_and_run(server, work, args))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


async def prepare_and_run(server: Sshd, work: Path, args: argparse.Namespace) -> None:
    settings = settings_for(server, work / "rgt-ssh")
    known_hosts = work / "known_hosts"
    known_hosts.write_text(server.known_hosts_line())
    transport = SSHTransport(server.target, settings, pool=SSHPool())
    db = StateDB(work / "builder.db")
    scenarios = []
    if args.small:
        box = work / "box" / "small"
        scenarios.append(await build("small", box, small_files(box, args.small, args.small_kib), transport, db))
    if args.big_mib:
        box = work / "box" / "big"
        scenarios.append(await build("big", box, big_files(box, args.big_mib), transport, db))
    await transport.close()
    db.close()
    subprocess.run(["cat", *[str(p) for s in scenarios for p in s.box.rglob("*") if p.is_file()]],
                   stdout=subprocess.DEVNULL, check=True)  # warm the page cache for everyone
    with_rsync = ensure_rsync()
    if not with_rsync:
        print("rsync could not be installed: its rows are left out")
    for scenario in scenarios:
        load = os.getloadavg()[0]
        pulls = contenders(scenario, server, settings, known_hosts, with_rsync, args.profile)
        runs = await asyncio.to_thread(measure, scenario, args.rounds, work / "local", pulls)
        report(scenario, runs, args.rounds, (load, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
