"""The whole arc against a real OpenSSH sshd on loopback, through the `ssh` provider and the Session.

The box is reached by an alias from the user's ~/.ssh/config (a temp HOME), its host key is trusted on
first use through the same call the TUI makes, and the job, the pull, the gate and the teardown all go
through the services the TUI and CLI use.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import GateRefused
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import host_key_prompts, instance_status, trust_host_key
from remote_gpu_trainer.services.launch.env_audit import audit_run_environment
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from support.helpers import copy_command, toml_string, write_project
from support.sshd_fixtures import Sshd, session_pid

pytestmark = pytest.mark.sshd

RUN, INSTANCE, ALIAS = "r1", "box", "gpu-box"


def ssh_project(root: Path, box: Path, server: Sshd, home: Path, command: str, stall_after: int = 900,
                instance_extra: str = "") -> Path:
    """A project whose instance is an ssh-config alias; the box's folders live under `box`."""
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "config").write_text(
        f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
        f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n"
    )
    body = f'provider = "ssh"\nhost = "{ALIAS}"\nprice_per_hour = 1.5\n{instance_extra}'
    return write_project(root, command, extra_run=f"stall_after = {stall_after}", instance=INSTANCE,
                         instance_body=body, box=box)


async def trusted_session(root: Path, server: Sshd) -> Session:
    session = open_session(str(root))
    status = await instance_status(session, INSTANCE)
    assert status.state == "unknown" and INSTANCE in host_key_prompts(session)  # first contact: ask
    fingerprint = server.host_public_key().get_fingerprint("sha256")
    receipt = await trust_host_key(session, INSTANCE, fingerprint)
    assert receipt["fingerprint_sha256"] == fingerprint and receipt["first_contact_authenticated"] is False
    assert (await instance_status(session, INSTANCE)).state == "running"
    return session


async def wait_for(session: Session, states: tuple[str, ...], timeout: float = 60) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        state = (await run_state(session, RUN)).liveness
        if state.state in states:
            return state.state
        assert asyncio.get_running_loop().time() < deadline, f"still {state}"
        await asyncio.sleep(0.2)


async def test_arc_over_ssh_with_a_dropped_connection(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, sshd, ssh_home, "sleep 2 && " + copy_command())
    session = await trusted_session(root, sshd)
    try:
        rows = {row.check: row for row in await audit_run_environment(session, RUN)}  # phase 0, over SSH
        assert len(rows) == 17 and rows["disk_bytes"].status == "pass" and rows["durable_mount"].status == "pass"
        assert rows["gpus"].detail.startswith("no GPU") and rows["torch"].status == "pass"
        await launch_run(session, RUN)
        assert await wait_for(session, ("running",)) == "running"
        transport = session.transport(INSTANCE)
        assert isinstance(transport, SSHTransport)
        os.kill(await session_pid(transport), signal.SIGKILL)  # the connection drops mid-run
        assert await wait_for(session, ("finished",)) == "finished"  # the job kept running; we re-attached

        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, ALIAS, ["test"])
        await pull_run(session, RUN)
        result = await verify_run(session, RUN)
        assert result.ok, result.errors
        overview = await observe_and_build(session)
        run = overview.run(RUN)
        instance = overview.instance(INSTANCE)
        assert run is not None and run.gate.open and {c.status for c in run.checkpoints} == {"verified"}
        assert instance is not None and instance.price_source == "user" and instance.burn_per_hour == 1.5

        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open and plan.provider_id == ALIAS
        assert any("user-attested" in line for line in plan.lines)
        outcome = await teardown.execute(session, INSTANCE, ALIAS, plan.lines)
        assert outcome.confirmed and outcome.final_state == "terminated"
        trusted = session.db.events(kind="host_key_trusted")
        assert len(trusted) == 1 and trusted[0].detail["host"] == "127.0.0.1"
        assert session.db.events(kind="torn_down")[-1].detail["evidence"] == "user-attested"
    finally:
        await session.close_transports()
        session.close()


async def test_killed_and_frozen_jobs_over_ssh(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, sshd, ssh_home, "echo started && sleep 60", stall_after=1)
    session = await trusted_session(root, sshd)
    try:
        detail = await launch_run(session, RUN)
        assert await wait_for(session, ("stalled",), timeout=30) == "stalled"  # alive, log frozen, no checkpoint
        os.killpg(int(detail["pid"]), signal.SIGKILL)
        assert await wait_for(session, ("dead",)) == "dead"
        assert (await run_state(session, RUN)).liveness.detail.startswith("no exit code")
    finally:
        await session.close_transports()
        session.close()


async def test_a_changed_host_key_is_refused_and_reads_as_unknown(sshd_factory: object, ssh_home: Path,
                                                                  tmp_path: Path) -> None:
    server = sshd_factory("changing")  # type: ignore[operator]
    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, server, ssh_home, copy_command())
    session = await trusted_session(root, server)
    try:
        await session.close_transports()
        server.stop()
        from support.sshd_fixtures import write_key

        write_key(server.host_key)  # the box was re-created: same host:port, new key
        server.start()
        status = await instance_status(session, INSTANCE)
        assert status.state == "unknown"
        assert "HOST KEY CHANGED" in status.detail["error"]
        assert INSTANCE not in host_key_prompts(session)  # a mismatch is never offered as a first contact
    finally:
        await session.close_transports()
        session.close()


async def test_the_tui_asks_once_for_an_unknown_host_key(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    from textual.widgets import Static

    from remote_gpu_trainer.app import RgtApp
    from remote_gpu_trainer.screens.confirm import ConfirmScreen

    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, sshd, ssh_home, copy_command())
    fingerprint = sshd.host_public_key().get_fingerprint("sha256")
    session = open_session(str(root))
    app = RgtApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            if isinstance(app.screen, ConfirmScreen):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.pause()
        assert fingerprint in str(app.screen.query_one("#confirm-lines", Static).render())
        assert app.focused is not None and app.focused.id == "no"
        await pilot.press("right", "enter")  # move to "Trust key" and press it
        for _ in range(200):
            if session.db.events(kind="host_key_trusted"):
                break
            await pilot.pause(0.05)
    trusted = session.db.events(kind="host_key_trusted")
    assert len(trusted) == 1 and trusted[0].detail["fingerprint_sha256"] == fingerprint
    assert fingerprint.split(":")[1][:10] not in (ssh_home / ".ssh" / "config").read_text()
    assert (root / ".rgt" / "known_hosts").read_text().startswith(f"[127.0.0.1]:{sshd.port} ssh-ed25519 ")
    await session.close_transports()
    session.close()


def test_cli_trust_needs_the_fingerprint_when_not_at_a_terminal(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    import subprocess

    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, sshd, ssh_home, copy_command())
    fingerprint = sshd.host_public_key().get_fingerprint("sha256")
    env = {**os.environ, "HOME": str(ssh_home)}
    rgt = [sys.executable, "-m", "remote_gpu_trainer"]
    asked = subprocess.run([*rgt, "trust", INSTANCE, str(root)], capture_output=True, text=True, env=env,
                           stdin=subprocess.DEVNULL, timeout=60)
    assert asked.returncode == 2 and fingerprint in asked.stderr and "--fingerprint" in asked.stderr
    wrong = subprocess.run([*rgt, "trust", INSTANCE, str(root), "--fingerprint", "SHA256:nope"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert wrong.returncode == 1 and "nothing was trusted" in wrong.stderr
    assert not (root / ".rgt" / "known_hosts").exists()
    done = subprocess.run([*rgt, "trust", INSTANCE, str(root), "--fingerprint", fingerprint],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    watch = subprocess.run([*rgt, "--report", str(root), "--format", "json"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert '"state": "running"' in watch.stdout


async def test_no_gpu_is_a_state_on_the_instances_panel(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """Over SSH to a box without nvidia-smi: the panel says so instead of failing."""
    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, sshd, ssh_home, copy_command())
    session = await trusted_session(root, sshd)
    try:
        overview = await observe_and_build(session)
        instance = overview.instance(INSTANCE)
        assert instance is not None and instance.gpu == "no GPU"  # this machine has no nvidia-smi
    finally:
        await session.close_transports()
        session.close()


async def test_a_configured_teardown_command_runs_only_after_the_gate(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    marker, flag = tmp_path / "destroyed", tmp_path / "allow"
    command = f"bash -c 'test -e {flag} && touch {marker}'"  # fails until the flag exists, like a refused API call
    ssh_project(root, box, sshd, ssh_home, copy_command(), instance_extra=f"teardown_command = {toml_string(command)}")
    session = await trusted_session(root, sshd)
    try:
        await launch_run(session, RUN)
        assert await wait_for(session, ("finished",)) == "finished"
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, ALIAS, ["test"])
        assert not marker.exists()  # the gate refused before the command could run
        await pull_run(session, RUN)
        assert (await verify_run(session, RUN)).ok
        plan = await teardown.plan(session, INSTANCE)
        assert any(line.startswith("Command:") and command in line for line in plan.lines)
        from remote_gpu_trainer.errors import RgtError

        with pytest.raises(RgtError, match="teardown_command exited 1"):
            await teardown.execute(session, INSTANCE, ALIAS, plan.lines)
        assert (await instance_status(session, INSTANCE)).state == "running"  # a failed command ends nothing
        flag.touch()
        outcome = await teardown.execute(session, INSTANCE, ALIAS, plan.lines)
        assert outcome.final_state == "terminated" and marker.exists()
        assert session.db.events(kind="torn_down")[-1].detail["evidence"] == "command"
        assert [e.kind for e in session.db.events() if e.kind in ("action", "action_failed")] == [
            "action", "action_failed", "action"]
    finally:
        await session.close_transports()
        session.close()
