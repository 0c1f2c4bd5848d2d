"""A stuck sftp-server behind a live SSH connection (docs/pull.md, "Stalled SFTP"): an SFTP request that gets no
answer for SFTP_STALL_S drops the connection, and the pull goes on over a fresh one from the `.part` it left.

Real parts: a real sshd on loopback serving a real run, and a real stall: the connection's internal-sftp process
(`sshd: root@internal-sftp`, a child of the connection's session) is stopped with SIGSTOP mid-file, so the
connection itself stays alive (its keepalives are answered) while no SFTP request is. SFTP_STALL_S is lowered
for the test (a module constant read at call time); nothing of rgt is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from remote_gpu_trainer.providers.transports import ssh as ssh_module
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool
from remote_gpu_trainer.services.evidence.pull import PullProgress, pull
from remote_gpu_trainer.services.evidence.verify import verify
from support.evidence_helpers import Env, keep_probe_verdicts, make_env, write_run
from support.sshd_fixtures import Sshd, settings_for

BIG = ("seed0/best.pth", "seed1/best.pth")  # over 1 MiB: fetched over SFTP, not in a batch
STOP_AT = 4 << 20
STALL_S = 2.0
HANG_GUARD_S = 120.0  # only so that a pull that hangs (the old code) fails the test instead of hanging it


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A finished two-cell run whose checkpoints are big enough (~16 MiB each) to be stopped mid-transfer; the
    run's remote root is the box folder's real path, as the far side of SSH sees it."""
    made = make_env(tmp_path)
    write_run(made.box)
    for index, path in enumerate(BIG):
        torch.manual_seed(index)
        torch.save({"model_state_dict": {"encoder.0.weight": torch.randn(4 << 20)}, "epoch": 3}, made.box / path)
    made = made.with_run(remote_root=str(made.box))
    yield made
    keep_probe_verdicts(made)


@pytest.fixture
def short_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh_module, "SFTP_STALL_S", STALL_S)


def sftp_servers(server: Sshd) -> list[int]:
    """The pids of this sshd's internal-sftp processes (one per connection that started SFTP)."""
    assert server.proc is not None
    parents: dict[int, int] = {}
    names: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            names[int(entry.name)] = (entry / "cmdline").read_bytes()
    found = []
    for pid, cmdline in names.items():
        if b"internal-sftp" not in cmdline:
            continue
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, server.proc.pid):
            ancestor = parents.get(ancestor)
        if ancestor == server.proc.pid:
            found.append(pid)
    return found


class Stopper:
    """SIGSTOPs sftp-server processes and, at the end, resumes and kills every one it stopped."""

    def __init__(self, server: Sshd) -> None:
        self.server = server
        self.stopped: list[int] = []

    def stop_all(self) -> None:
        for pid in sftp_servers(self.server):
            if pid not in self.stopped:
                os.kill(pid, signal.SIGSTOP)
                self.stopped.append(pid)

    def release(self) -> None:
        for pid in self.stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def stopper(sshd_factory: Callable[..., Sshd]) -> Iterator[Stopper]:
    made = Stopper(sshd_factory())
    yield made
    made.release()


def ssh_to(server: Sshd, tmp_path: Path) -> SSHTransport:
    return SSHTransport(server.target, settings_for(server, tmp_path / "ssh"), pool=SSHPool())


async def test_a_pull_whose_sftp_server_is_stopped_mid_file_resumes_on_a_fresh_connection(
        env: Env, stopper: Stopper, short_stall: None, ssh_home: Path, tmp_path: Path) -> None:
    transport = ssh_to(stopper.server, tmp_path)
    seen: list[PullProgress] = []

    def stop_mid_file(progress: PullProgress) -> None:
        seen.append(progress)
        if progress.path == BIG[0] and progress.phase == "downloading" and progress.done >= STOP_AT \
                and not stopper.stopped:
            stopper.stop_all()

    try:
        result = await asyncio.wait_for(pull(env.project, env.run, transport, env.db, stop_mid_file), HANG_GUARD_S)
    finally:
        await transport.close()
    assert stopper.stopped, "the pull never reached the point where its sftp-server is stopped"
    assert result.ok, result.failed
    mine = [p for p in seen if p.path == BIG[0]]
    phases = [p.phase for p in mine]
    assert "retrying" in phases, phases
    again = mine[phases.index("retrying"):]
    assert "resuming" in [p.phase for p in again], "the next try did not resume the .part"
    assert next(p.done for p in again if p.phase == "downloading") >= STOP_AT, "resumed from the part's size"
    for path in result.files:
        assert (env.local / path).read_bytes() == (env.box / path).read_bytes(), path
    assert not list(env.local.rglob("*.part"))
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors


async def test_a_box_whose_sftp_server_stays_stopped_fails_the_pull_within_its_tries(
        env: Env, stopper: Stopper, short_stall: None, ssh_home: Path, tmp_path: Path) -> None:
    """Every try of a large file stops the sftp-server it is about to read from (the progress report at the
    start of each stream does it, before the first read is sent): each try stalls, and the pull ends with each
    large file failed, the reason one line; the try whose stall dropped the connection names the stall, the
    files whose reads it cut say the connection was lost."""
    transport = ssh_to(stopper.server, tmp_path)

    def stop_each_try(progress: PullProgress) -> None:
        if progress.path in BIG and progress.phase in ("resuming", "downloading"):
            stopper.stop_all()

    try:
        result = await asyncio.wait_for(pull(env.project, env.run, transport, env.db, stop_each_try), HANG_GUARD_S)
    finally:
        await transport.close()
    assert len(stopper.stopped) >= 2, "the tries did not go on over fresh connections"
    failed = {problem.path: problem for problem in result.failed}
    assert sorted(failed) == sorted(BIG), result.failed
    stall = f"got no answer for {STALL_S:g} s: connection dropped"
    for path in BIG:
        detail = failed[path].detail
        assert failed[path].code == "transfer_failed" and "\n" not in detail and "(after 3 tries)" in detail, detail
        assert stall in detail or "connection lost" in detail, detail
        assert not (env.local / path).exists()
    assert any(stall in failed[path].detail for path in BIG), result.failed
