"""The evidence chain over SSH: build the manifest on the box, pull resumably, verify locally.

The services are exactly the ones the LocalTransport tests use (services.evidence); only the transport
differs: a real sshd on loopback serving a real run of tiny torch checkpoints. Faults are real too: the
connection is cut by killing its sshd process from a progress callback, with the listener stopped so
every retry in that pull fails, and the remote file is changed while it streams.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool
from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import PullProgress, pull
from remote_gpu_trainer.services.evidence.verify import verify
from support.evidence_helpers import Env, keep_probe_verdicts, make_env, status_of, write_run
from support.sshd_fixtures import NO_DAC_OVERRIDE, Sshd, session_pid, settings_for

BIG = "seed0/best.pth"
CUT_AT = 4 << 20


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A finished two-cell run whose seed0 checkpoint is big enough (~16 MiB) to be cut mid-transfer;
    the run's remote root is the box folder's real path, as the far side of SSH sees it."""
    made = make_env(tmp_path)
    write_run(made.box)
    payload = {"model_state_dict": {"encoder.0.weight": torch.randn(4 << 20)}, "epoch": 3}
    torch.save(payload, made.box / BIG)
    made = made.with_run(remote_root=str(made.box))
    yield made
    keep_probe_verdicts(made)


def ssh_to(server: Sshd, tmp_path: Path) -> SSHTransport:
    return SSHTransport(server.target, settings_for(server, tmp_path / "ssh"), pool=SSHPool())


async def test_a_full_pull_over_ssh_verifies(env: Env, sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    transport = ssh_to(sshd, tmp_path)
    seen: list[PullProgress] = []
    result = await pull(env.project, env.run, transport, env.db, seen.append)
    await transport.close()
    assert result.ok, result.failed
    assert len(result.fetched) == 6
    assert (env.local / BIG).read_bytes() == (env.box / BIG).read_bytes()
    assert not list(env.local.rglob("*.part"))
    assert {p.phase for p in seen if p.path == BIG} >= {"downloading", "done"}
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert status_of(verified.files, BIG) == "verified"
    assert (env.local / MARKER_NAME).is_file()


async def test_a_pull_cut_mid_file_leaves_a_part_that_the_next_pull_resumes(
        env: Env, sshd_factory: Callable[..., Sshd], ssh_home: Path, tmp_path: Path) -> None:
    server = sshd_factory()
    transport = ssh_to(server, tmp_path)
    serving = await session_pid(transport)
    cut: list[int] = []

    def cut_mid_file(progress: PullProgress) -> None:
        if progress.path == BIG and progress.phase == "downloading" and progress.done >= CUT_AT and not cut:
            cut.append(progress.done)
            server.stop()  # nothing to reconnect to: every retry of this pull fails
            os.kill(serving, signal.SIGKILL)

    first = await pull(env.project, env.run, transport, env.db, cut_mid_file)
    assert cut and not first.ok
    assert BIG in [problem.path for problem in first.failed]
    assert all("cannot connect" in problem.detail and "\n" not in problem.detail for problem in first.failed)
    part = env.local / (BIG + ".part")
    kept = part.stat().st_size
    size = (env.box / BIG).stat().st_size
    assert CUT_AT <= kept < size
    assert not (env.local / BIG).exists()
    assert not (await verify(env.project, env.run, env.db)).ok
    assert not (env.local / MARKER_NAME).exists()

    server.start()  # same port, same host key: the box is back
    seen: list[PullProgress] = []
    second = await pull(env.project, env.run, transport, env.db, seen.append)
    await transport.close()
    assert second.ok, second.failed
    mine = [p for p in seen if p.path == BIG]
    assert mine[0].phase == "resuming"
    assert [p.done for p in mine if p.phase == "downloading"][0] == kept, "resumed from the part's size"
    assert not part.exists()
    assert (env.local / BIG).read_bytes() == (env.box / BIG).read_bytes()
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert (env.local / MARKER_NAME).is_file()


def flip_last_byte(path: Path) -> None:
    """Same size, different bytes, in a part not streamed yet. (A change behind the read position is
    harmless: the bytes already pulled are the manifest's, and the hash proves it.)"""
    with open(path, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0xFF]))


def append_bytes(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(b"more")


@pytest.mark.parametrize("change", [flip_last_byte, append_bytes])
async def test_a_file_changed_while_it_is_pulled_is_never_verified(
        env: Env, change: Callable[[Path], None], sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    transport = ssh_to(sshd, tmp_path)
    changed: list[int] = []

    def change_mid_file(progress: PullProgress) -> None:
        if progress.path == BIG and progress.phase == "downloading" and progress.done >= CUT_AT and not changed:
            changed.append(progress.done)
            change(env.box / BIG)

    result = await pull(env.project, env.run, transport, env.db, change_mid_file)
    await transport.close()
    assert changed
    assert [problem.path for problem in result.failed] == [BIG]
    assert not (env.local / BIG).exists() and not (env.local / (BIG + ".part")).exists()
    verified = await verify(env.project, env.run, env.db)
    assert not verified.ok
    assert status_of(verified.files, BIG) != "verified"
    assert not (env.local / MARKER_NAME).exists()


async def test_permission_denied_on_the_box_is_one_clear_line(
        env: Env, sshd_factory: Callable[..., Sshd], ssh_home: Path, tmp_path: Path) -> None:
    server = sshd_factory(wrapper=NO_DAC_OVERRIDE)  # root on that box meets file permissions
    transport = ssh_to(server, tmp_path)
    os.chmod(env.box, 0)
    try:
        with pytest.raises(VerbFailed) as caught:
            await pull(env.project, env.run, transport, env.db)
    finally:
        os.chmod(env.box, 0o755)
    message = str(caught.value)
    assert "\n" not in message and "Permission denied" in message and str(env.box) in message
    assert "Traceback" not in message and "unreadable" in message

    await build_manifest(transport, env.run, env.db)
    os.chmod(env.box / "seed1", 0)  # the manifest is built; then a folder becomes unreadable
    try:
        result = await pull(env.project, env.run, transport, env.db)
    finally:
        os.chmod(env.box / "seed1", 0o755)
        await transport.close()
    assert not result.ok
    assert sorted(problem.path for problem in result.failed) == [
        "seed1/best.pth", "seed1/best_metrics.json", "seed1/seed1.log"]
    for problem in result.failed:
        assert "\n" not in problem.detail
        assert "permission denied on the instance" in problem.detail and problem.path in problem.detail
