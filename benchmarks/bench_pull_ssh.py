"""Pull throughput over SSH on loopback, hashing included: rgt's pull path vs scp vs rsync (DESIGN.md §5).

Budget: rgt at least 90% of scp's throughput. Every contender ends with a verified SHA-256 of the local
copy: rgt hashes while it streams (one pass, as services.evidence.pull does: SFTP read_chunks, append,
update the hash, fsync every 256 MiB and at the end); scp and rsync copy first and run `sha256sum` after.
Each contender opens its own connection in each round (connection setup counts for everyone).

The server is a real OpenSSH sshd on 127.0.0.1 started exactly like the test fixture (tests/sshd_fixtures.py)
with its own host and client keys; nothing reads or writes the real ~/.ssh. rsync is installed with apt
if it is missing.

    .venv/bin/python benchmarks/bench_pull_ssh.py [--size-mib 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from sshd_fixtures import Sshd, settings_for, start_sshd  # noqa: E402

from remote_gpu_trainer.providers.transport_ssh import SSHPool, SSHTransport  # noqa: E402

CHUNK = 4 << 20
FSYNC_EVERY = 256 << 20


def make_source(path: Path, size: int) -> str:
    """`size` random bytes (incompressible), and their sha256."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        left = size
        while left:
            block = os.urandom(min(64 << 20, left))
            handle.write(block)
            digest.update(block)
            left -= len(block)
    return digest.hexdigest()


def sha256sum(path: Path) -> str:
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout
    return out.split()[0]


def _append(fd: int, chunk: bytes, digest: hashlib._Hash) -> None:
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]
    digest.update(chunk)


async def rgt_pull(server: Sshd, settings_dir: Path, remote: Path, local: Path, fsync: bool) -> str:
    """What evidence.pull does per file: stream from an offset, append and hash in a worker thread."""
    transport = SSHTransport(server.target, settings_for(server, settings_dir), pool=SSHPool())
    digest = hashlib.sha256()
    fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    unsynced = 0
    try:
        async for chunk in transport.read_chunks(str(remote), 0, CHUNK):
            await asyncio.to_thread(_append, fd, chunk, digest)
            unsynced += len(chunk)
            if fsync and unsynced >= FSYNC_EVERY:
                await asyncio.to_thread(os.fsync, fd)
                unsynced = 0
        if fsync:
            await asyncio.to_thread(os.fsync, fd)
    finally:
        os.close(fd)
        await transport.close()
    return digest.hexdigest()


def ssh_options(server: Sshd, known_hosts: Path) -> list[str]:
    return ["-F", "/dev/null", "-i", str(server.client_key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known_hosts}"]


def scp_pull(server: Sshd, known_hosts: Path, remote: Path, local: Path, *extra: str) -> str:
    subprocess.run(["scp", "-q", "-P", str(server.port), *extra, *ssh_options(server, known_hosts),
                    f"root@127.0.0.1:{remote}", str(local)], check=True)
    return sha256sum(local)


def rsync_pull(server: Sshd, known_hosts: Path, remote: Path, local: Path) -> str:
    shell = " ".join(["ssh", "-p", str(server.port), *ssh_options(server, known_hosts)])
    subprocess.run(["rsync", "-a", "-e", shell, f"root@127.0.0.1:{remote}", str(local)], check=True)
    return sha256sum(local)


def ensure_rsync() -> bool:
    if shutil.which("rsync"):
        return True
    print("rsync missing: installing it with apt-get", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "rsync"]):
        if subprocess.run(command, env=env, capture_output=True).returncode != 0:
            return False
    return shutil.which("rsync") is not None


def measure(name: str, rounds: int, local: Path, expected: str, pull: Callable[[], str]) -> list[float]:
    times = []
    for _ in range(rounds):
        local.unlink(missing_ok=True)
        subprocess.run(["sync"], check=True)
        started = time.perf_counter()
        digest = pull()
        times.append(time.perf_counter() - started)
        if digest != expected:
            raise SystemExit(f"{name}: wrong sha256 {digest}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.size_mib << 20
    work = Path(tempfile.mkdtemp(prefix="rgt-bench-pull-"))
    os.environ["HOME"] = str(work / "home")  # nothing of the real ~/.ssh is read
    os.environ.pop("SSH_AUTH_SOCK", None)
    server = start_sshd(work / "sshd")
    try:
        run(server, work, size, args.rounds)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(server: Sshd, work: Path, size: int, rounds: int) -> None:
    remote, local = work / "remote" / "blob.bin", work / "local" / "blob.bin"
    local.parent.mkdir()
    expected = make_source(remote, size)
    known_hosts = work / "known_hosts"
    known_hosts.write_text(server.known_hosts_line())
    sha256sum(remote)  # warm the page cache for everyone
    contenders: list[tuple[str, Callable[[], str]]] = [
        ("rgt pull (SFTP read_chunks + sha256 while streaming, fsync)",
         lambda: asyncio.run(rgt_pull(server, work / "rgt", remote, local, fsync=True))),
        ("rgt pull without fsync",
         lambda: asyncio.run(rgt_pull(server, work / "rgt", remote, local, fsync=False))),
        ("scp + sha256sum", lambda: scp_pull(server, known_hosts, remote, local)),
        ("scp -c aes128-gcm + sha256sum",
         lambda: scp_pull(server, known_hosts, remote, local, "-c", "aes128-gcm@openssh.com")),
    ]
    if ensure_rsync():
        contenders.append(("rsync + sha256sum", lambda: rsync_pull(server, known_hosts, remote, local)))
    else:
        print("rsync could not be installed: skipped")
    results = {name: measure(name, rounds, local, expected, pull) for name, pull in contenders}
    report(results, size, "scp + sha256sum", rounds)


def report(results: dict[str, list[float]], size: int, baseline: str, rounds: int) -> None:
    mib = size / (1 << 20)
    base = statistics.median(results[baseline])
    print(f"\npull of {mib:.0f} MiB over SSH on loopback, {rounds} rounds, hashing included "
          f"({os.cpu_count()} CPUs)")
    print(f"{'contender':62} {'median s':>9} {'best s':>8} {'MiB/s':>7} {'vs scp':>7}")
    for name, times in results.items():
        median = statistics.median(times)
        print(f"{name:62} {median:9.2f} {min(times):8.2f} {mib / median:7.0f} {base / median:6.0%}")
    rgt = statistics.median(results[next(iter(results))])
    verdict = "meets" if base / rgt >= 0.9 else "MISSES"
    print(f"\nbudget (rgt >= 90% of scp throughput): {verdict} ({base / rgt:.0%})")


if __name__ == "__main__":
    main()
