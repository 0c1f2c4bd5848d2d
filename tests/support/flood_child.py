"""Runs one command through a transport in a process of its own and reports its outcome and how much its
peak memory grew (VmHWM), for tests/providers/test_output_cap.py: a flood is measured where nothing else
of the test run shares the process.

Usage: python -m support.flood_child '<json>' with keys command, transport ("local" or "ssh"), and for SSH
target, known_hosts, user_known_hosts, client_key. Prints one JSON line: error (type and text, or null),
rc, stdout_bytes, grew (bytes of peak resident memory added by the call).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import Backoff, SSHPool, SSHSettings


def peak_rss() -> int:
    """The process's peak resident set so far (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def make_transport(spec: dict[str, Any]) -> Transport:
    if spec["transport"] == "local":
        return LocalTransport()
    settings = SSHSettings(known_hosts_file=Path(spec["known_hosts"]),
                           user_known_hosts=(Path(spec["user_known_hosts"]),), config_paths=(),
                           client_keys=(Path(spec["client_key"]),), use_agent=False, connect_timeout=5.0,
                           backoff=Backoff(attempts=1, first_delay=0.0, cooldown_first=0.0, cooldown_max=0.0))
    return SSHTransport(spec["target"], settings, pool=SSHPool())


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    transport = make_transport(spec)
    warm = await transport.run("true")  # connected (SSH) and every import done before the baseline
    assert warm.rc == 0, warm
    before = peak_rss()
    outcome: dict[str, Any] = {"error": None, "rc": None, "stdout_bytes": None}
    try:
        result = await transport.run(spec["command"], timeout=float(spec.get("timeout", 120)))
        outcome.update(rc=result.rc, stdout_bytes=len(result.stdout))
        del result
    except Exception as exc:  # the test asserts which one, and its text
        outcome["error"] = {"type": type(exc).__name__, "text": str(exc)}
    outcome["grew"] = peak_rss() - before
    await transport.close()
    return outcome


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
