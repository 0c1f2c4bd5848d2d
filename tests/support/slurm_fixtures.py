"""A private loopback Slurm cluster for the test session (munged, MariaDB, slurmdbd, slurmctld, slurmd).

Started by .ci/setup-slurm.sh in its own folder on free ports, shared by every test that asks for
`cluster`, stopped at the end of the session. If it cannot start the fixture fails (never skips).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[2] / ".ci" / "setup-slurm.sh"


@dataclass(frozen=True)
class Cluster:
    conf: Path


def _free_port_base(count: int = 4) -> int:
    """A base port with `count` free ports after it (slurmctld, slurmd, slurmdbd, MariaDB)."""
    for _ in range(50):
        base = random.randrange(20000, 60000)
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no four consecutive free ports on loopback")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A private loopback cluster for this module (own folder, own ports), stopped again at the end.

    Private because pytest sessions run side by side: a shared cluster would let one session's preemption
    test preempt another's jobs and one session's teardown stop the other's daemons. The folder is short and
    under /tmp because the munge and MariaDB sockets live in it (unix socket paths stop at 107 bytes).
    """
    folder = tempfile.mkdtemp(prefix="rgt-slurm-", dir="/tmp")
    env = {**os.environ, "RGT_SLURM_DIR": folder, "RGT_SLURM_PORT": str(_free_port_base())}

    def setup(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SETUP), action], capture_output=True, text=True, timeout=900, env=env)

    answer = setup("start")
    try:
        if answer.returncode != 0:
            pytest.fail("the loopback Slurm cluster did not start: `bash .ci/setup-slurm.sh start` said:\n"
                        f"{answer.stdout[-2000:]}\n{answer.stderr[-4000:]}", pytrace=False)
        match = re.search(r"^SLURM_CONF=(.+)$", answer.stdout, re.MULTILINE)
        assert match, f"setup-slurm.sh printed no SLURM_CONF line: {answer.stdout!r}"
        previous = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = match[1]
        try:
            yield Cluster(Path(match[1]))
        finally:
            if previous is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = previous
    finally:
        stopped = setup("stop")
        if stopped.returncode == 0:
            shutil.rmtree(folder, ignore_errors=True)
