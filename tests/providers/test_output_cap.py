"""A command's output is held up to a cap (docs/pull.md, "Bounded output"): a box that floods gets a one-line
error at the cap, its command is stopped, and rgt's memory never grows with the flood.

Real parts only: the local transport and a real sshd on loopback run `head -c 600000000 /dev/zero` (600 MB,
the flood that once made `rgt pull` a 1.25 GB process), each in a child process (support/flood_child.py) that
reports how much its peak resident memory (VmHWM) grew during the call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.providers.base import STDERR_CAP, STDOUT_CAP, OutputCapped
from remote_gpu_trainer.providers.transports.local import LocalTransport
from support.sshd_fixtures import Sshd, settings_for

FLOOD = 600_000_000
TESTS = Path(__file__).resolve().parents[1]


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "support.flood_child", json.dumps(spec)], cwd=TESTS,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{TESTS.parent}"})
    assert done.returncode == 0, done.stderr[-2000:]
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def ssh_spec(server: Sshd, folder: Path) -> dict[str, Any]:
    settings = settings_for(server, folder)
    assert settings.client_keys is not None
    return {"transport": "ssh", "target": server.target, "known_hosts": str(settings.known_hosts_file),
            "user_known_hosts": str(settings.user_known_hosts[0]), "client_key": str(settings.client_keys[0])}


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid: int) -> bool:
    """Whether the process is gone within a few seconds (a kill takes effect at once; its reaping may lag)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


def flood_command(pidfile: Path, stream: str) -> str:
    redirect = " >&2" if stream == "stderr" else ""
    return f"echo $$ > {pidfile}; exec head -c {FLOOD} /dev/zero{redirect}"


def check_flood(outcome: dict[str, Any], pidfile: Path, stream: str, cap: int, where: str) -> None:
    assert outcome["grew"] < cap + (48 << 20), f"peak memory grew {outcome['grew']:,} bytes for a {FLOOD:,}-byte flood"
    error = outcome["error"]
    assert error is not None, f"the flood was accepted whole: {outcome}"
    assert error["type"] == OutputCapped.__name__
    text = error["text"]
    assert "\n" not in text
    assert text.startswith(f"{where}: `echo $$`") and f"more than {cap:,} bytes on {stream}" in text, text
    assert wait_gone(int(pidfile.read_text())), "the flooding command still runs"


@pytest.mark.parametrize("stream, cap", [("stdout", STDOUT_CAP), ("stderr", STDERR_CAP)])
def test_a_local_command_that_floods_is_stopped_at_the_cap(tmp_path: Path, stream: str, cap: int) -> None:
    pidfile = tmp_path / "pid"
    outcome = run_child({"transport": "local", "command": flood_command(pidfile, stream)})
    check_flood(outcome, pidfile, stream, cap, "localhost")


@pytest.mark.parametrize("stream, cap", [("stdout", STDOUT_CAP), ("stderr", STDERR_CAP)])
def test_an_ssh_command_that_floods_is_stopped_at_the_cap(sshd: Sshd, ssh_home: Path, tmp_path: Path,
                                                          stream: str, cap: int) -> None:
    pidfile = tmp_path / "pid"
    outcome = run_child({**ssh_spec(sshd, tmp_path / "ssh"), "command": flood_command(pidfile, stream)})
    check_flood(outcome, pidfile, stream, cap, sshd.target)


async def test_output_up_to_the_cap_comes_back_whole_and_a_caller_may_ask_for_more() -> None:
    transport = LocalTransport()
    exact = await transport.run("head -c 1000 /dev/zero", stdout_cap=1000)
    assert exact.rc == 0 and exact.stdout == bytes(1000)
    with pytest.raises(OutputCapped, match="more than 999 bytes on stdout"):
        await transport.run("head -c 1000 /dev/zero", stdout_cap=999)
    larger = await transport.run(f"head -c {STDOUT_CAP + 1} /dev/zero", stdout_cap=STDOUT_CAP + 1)
    assert len(larger.stdout) == STDOUT_CAP + 1
