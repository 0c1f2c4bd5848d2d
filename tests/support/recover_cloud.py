"""A recoverable run on a cloud box whose provider API is a local fake (tests/support/fake_clouds.py) and whose SSH
is a real sshd on this machine (tests/support/sshd_fixtures.py): the user's ssh config names the box by an alias,
which a test points at the sshd or at a port nobody listens on (the box is away while its provider holds it).

The run is the real torch trainer of tests/fixtures/resumable_trainer.py, resuming from `{resume}`, with `recover`
limits; the test preempts it as the provider does (vast.ai: pause at once, no signal, so SIGKILL; RunPod: SIGTERM,
exit 143) and changes the fake's instance as the provider's API then shows it."""

from __future__ import annotations

import shlex
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from remote_gpu_trainer.services.instances import instance_status, trust_host_key
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.recover import approval
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import RunState
from remote_gpu_trainer.services.watch.watched_state import watched_run_state
from support.helpers import FIXTURES, INSTANCE, RUN, kill_group, toml_string, wait_exists, wait_file, write_project
from support.sshd_fixtures import Sshd, free_port

TRAINER = FIXTURES / "resumable_trainer.py"
ALIAS = "spot-box"
PERSON = "person:/dev/pts/test"
OUTBID = "Instance outbid, paused"  # vast.ai's status_msg for an instance that lost its bid


def point_alias(home: Path, server: Sshd, port: int) -> None:
    """The user's ssh config: the alias rgt.toml names, at `port` (the sshd's, or one nobody listens on)."""
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "config").write_text(f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n"
                                    f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n")


async def box_away(session: Session, home: Path, server: Sshd) -> None:
    """The box stops answering SSH (its provider paused or stopped it): new connections find nobody."""
    point_alias(home, server, free_port())
    await session.close_transports()


async def box_back(session: Session, home: Path, server: Sshd) -> None:
    point_alias(home, server, server.port)
    await session.close_transports()


def project(root: Path, box: Path, provider: str, provider_id: str, api: str, *, restarts: int = 3) -> Path:
    """rgt.toml: the box by provider and id, reached over the alias; interruptible; the run with `recover` limits."""
    body = (f'provider = "{provider}"\nid = "{provider_id}"\napi_base = {toml_string(api)}\nhost = "{ALIAS}"\n'
            "interruptible = true")
    return _write(root, box, body, restarts=restarts, max_price=1.0)


def rent_project(root: Path, box: Path, provider_id: str, api: str, *, max_price: float = 1.0) -> Path:
    """rgt.toml for a vast.ai box reached where its API says (no `host`), with the launch constraint `rgt up` rents
    by: what recovery rents a replacement with."""
    body = (f'provider = "vastai"\nid = "{provider_id}"\napi_base = {toml_string(api)}\n'
            'launch = { gpu = "RTX 4090", max_price_per_hour = 1.0, image = "pytorch/pytorch", interruptible = true }')
    return _write(root, box, body, restarts=3, max_price=max_price)


def _write(root: Path, box: Path, body: str, *, restarts: int, max_price: float) -> Path:
    until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0).isoformat()
    limits = (f'recover = {{ max_price_per_hour = {max_price}, max_spend = 25, max_restarts = {restarts}, '
              f'until = "{until}" }}')
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(TRAINER))} {{out}} {{resume}}"
    write_project(root, command, roster=("seed0",), extra_run=limits, instance_body=body, box=box)
    return root


def loopback_key(home: Path, server: Sshd) -> None:
    """The user's ssh config: the client key for every box on this machine (the boxes the fake's API points at)."""
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "config").write_text(f"Host 127.0.0.1\n  User root\n  IdentityFile {server.client_key}\n"
                                    "  IdentitiesOnly yes\n")


def checkpoint(box: Path, step: int) -> Path:
    return box / "rgt" / RUN / "seed0" / f"ckpt_{step:03d}.pt"


def hold(box: Path, step: int | None) -> None:
    """Make the trainer wait at `step` (None: let it run to the end)."""
    path = box / "job" / "hold"
    if step is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(step))


def kill_job(box: Path, sig: signal.Signals) -> None:
    """What the provider does to the job: `sig` to its process group; returns once no process of it is left."""
    kill_group(box / "job" / ".rgt" / RUN / "pgid", sig)


def exit_code(box: Path) -> str:
    return wait_file(box / "job" / ".rgt" / RUN / "exit_code").strip()


async def launched_holding(session: Session, server: Sshd, box: Path, at_step: int) -> None:
    """The box's host key trusted as a person does (the fingerprint compared), the run launched and waiting at
    `at_step` with the checkpoint of the step before written."""
    await instance_status(session, INSTANCE)  # first contact: rgt asks before it trusts
    await trust_host_key(session, INSTANCE, server.host_public_key().get_fingerprint("sha256"))
    hold(box, at_step)
    await launch_run(session, RUN)
    wait_exists(checkpoint(box, at_step - 1))


def approve(session: Session) -> None:
    """A person approves the run's limits as rgt.toml states them now."""
    limits = session.project.run(RUN).recover
    assert limits is not None
    approval.approve(session, RUN, limits, PERSON)


async def launched_approved(session: Session, home: Path, server: Sshd, box: Path) -> None:
    """The alias at the box, the run launched and waiting at step 2, and recovery approved by a person."""
    await box_back(session, home, server)
    await launched_holding(session, server, box, at_step=2)
    approve(session)


def outbid(row: dict[str, Any]) -> None:
    """vast.ai's instance once the bid is lost: paused at once, still meant to run, its message saying why."""
    row.update(actual_status="stopped", intended_status="running", status_msg=OUTBID)


def bid_won(row: dict[str, Any]) -> None:
    row.update(actual_status="running", status_msg="success, running")


async def seen(session: Session) -> RunState:
    """The run as `rgt watch RUN` reads it: the box's answer and, when it is dead or unknown, the provider's."""
    return await watched_run_state(session, RUN)
