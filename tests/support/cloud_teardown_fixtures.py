"""Fakes and fixtures for the cloud teardown tests (tests/test_cloud_teardown.py).

The fakes are the ones in fake_clouds.py with two additions a teardown test needs and the shared fakes do not
record: when each request arrived (wall time, arrival order, the reply status the route gave) and which event
kinds were already in the project's state database at that instant, read over a separate SQLite connection
from the server thread. That last part is the proof that the approval was written before the provider saw a
destroying call, independent of any clock. Two knobs reproduce the spec's bad answers after a terminate:
RunPod answering a DELETE and then showing a state word no table knows, and Lambda answering the terminate
operation and then showing its "alert" word instead of going away.
"""

from __future__ import annotations

import shlex
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import host_key_prompts, instance_status, trust_host_key
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from support.fake_clouds import FAKE_KEY, FakeCloud, FakeLambda, FakePaperspace, FakeRunPod, Reply
from support.helpers import FIXTURES, wait_for_liveness, write_project
from support.sshd_fixtures import Sshd

RUN, INSTANCE = "r1", "gpu"
POD = "p1"

KEY_ENV = ("RUNPOD_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "PAPERSPACE_API_KEY", "AUTODL_TOKEN")
WATCHED = frozenset({"DELETE", "POST", "PATCH", "PUT"})  # the methods that can change what bills


@dataclass
class Arrival:
    """One request as it arrived: order, wall time, and the state database's event kinds at that moment."""

    seq: int
    at: float
    method: str
    path: str
    events_then: tuple[str, ...] | None
    status: int | None = None  # what the route answered; None for an injected fault's canned reply


class Stamped(FakeCloud):
    """Mixin: keeps `arrivals` beside the fake's own request log; `events_db` is the project's state.db."""

    events_db: Path | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals: list[Arrival] = []
        self._current = threading.local()

    def _event_kinds(self) -> tuple[str, ...] | None:
        if self.events_db is None or not self.events_db.exists():
            return None
        with sqlite3.connect(self.events_db, timeout=10) as conn:
            return tuple(row[0] for row in conn.execute("SELECT kind FROM events ORDER BY seq"))

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        path = urlsplit(handler.path).path
        rel = path[len(self.prefix):] if path.startswith(self.prefix + "/") else path
        kinds = self._event_kinds() if handler.command in WATCHED else None
        with self.lock:
            arrival = Arrival(len(self.arrivals), time.time(), handler.command, rel, kinds)
            self.arrivals.append(arrival)
        self._current.arrival = arrival
        try:
            super()._handle(handler)
        finally:
            self._current.arrival = None

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        reply = super().route(method, parts, query, body)
        arrival: Arrival | None = getattr(self._current, "arrival", None)
        if arrival is not None:
            arrival.status = reply.status
        return reply

    def calls(self, method: str, path: str | None = None) -> list[Arrival]:
        with self.lock:
            return [a for a in self.arrivals if a.method == method and (path is None or a.path == path)]


class StampedRunPod(Stamped, FakeRunPod):
    """RunPod; `after_delete_state` makes a deleted pod stay listed with that status word."""

    after_delete_state: str | None = None

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        reply = super().route(method, parts, query, body)
        if (method == "DELETE" and len(parts) == 2 and parts[0] == "pods" and reply.status < 300
                and self.after_delete_state is not None):
            self.deleted.discard(parts[1])
            self.set_status(parts[1], self.after_delete_state)
        return reply


class StampedLambda(Stamped, FakeLambda):
    """Lambda; `after_terminate_status` makes a terminated instance stay listed with that status word."""

    after_terminate_status: str | None = None

    def _terminate(self, body: Any) -> Reply:
        reply = super()._terminate(body)
        if reply.status < 300 and self.after_terminate_status is not None:
            for ident in body["instance_ids"]:
                self.deleted.discard(ident)
                self.instances[ident]["status"] = self.after_terminate_status
        return reply


class StampedPaperspace(Stamped, FakePaperspace):
    """Paperspace, stamped."""


@pytest.fixture
def runpod_cloud() -> Iterator[StampedRunPod]:
    with StampedRunPod() as fake:
        yield fake


@pytest.fixture
def lambda_cloud() -> Iterator[StampedLambda]:
    with StampedLambda() as fake:
        yield fake


@pytest.fixture
def paperspace_cloud() -> Iterator[StampedPaperspace]:
    with StampedPaperspace(page_size=1) as fake:  # one item per page: the audits must follow the cursor
        yield fake


@pytest.fixture
def cloud_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sshd: Sshd) -> Path:
    """A temp HOME whose ~/.ssh/config gives the loopback sshd's client key to 127.0.0.1 (the address the
    fake APIs report), every provider key set to the fake one, no agent and no base-URL overrides."""
    home = tmp_path / "home"
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True)
    (ssh_dir / "config").write_text(
        f"Host {sshd.host}\n  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    for name in ("RUNPOD_API_URL", "VAST_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in KEY_ENV:
        monkeypatch.setenv(name, FAKE_KEY)
    return home


# -- a project on a cloud box reached over the loopback sshd ------------------------------------------------

def one_checkpoint_command() -> str:
    """The committed cell's best checkpoint and metrics, nothing else: one real torch load to verify per test
    (each probe is a fresh Python importing torch, about 2 s here)."""
    cells = shlex.quote(str(FIXTURES / "cells"))
    return (f"cp {cells}/{{cell}}/best.pth {cells}/{{cell}}/best_metrics.json {{out}}/ "
            "&& echo 'epoch=1 step=10/10 loss=0.500000 lr=0.001' && echo 'cell {cell} complete'")


def cloud_project(tmp_path: Path, instance_body: str) -> Path:
    """Project `r1` (one cell) on instance `gpu`; the box's folders are real folders under tmp_path/box."""
    root = tmp_path / "proj"
    write_project(root, one_checkpoint_command(), roster=("seed0",), instance=INSTANCE, instance_body=instance_body,
                  box=tmp_path / "box")
    return root


def runpod_project(tmp_path: Path, fake: StampedRunPod) -> Path:
    return cloud_project(tmp_path, f'provider = "runpod"\nid = "{POD}"\napi_base = "{fake.url}"')


def add_pod(fake: StampedRunPod, sshd: Sshd) -> None:
    """A running pod whose public IP and mapped port 22 are the loopback sshd, with a network volume."""
    fake.add_pod(POD, host=sshd.host, port=sshd.port, network_volume="nv-9")


async def finished_run(root: Path, sshd: Sshd, fake: Stamped) -> Session:
    """Open the project, trust the host key the API-reported address presents, launch `r1` over SSH and
    wait until it finished. The fake is told where the event log lives, so it can record what it held."""
    session = open_session(str(root))
    fake.events_db = session.project.state_db
    try:
        first = await instance_status(session, INSTANCE)
        assert first.state == "running" and INSTANCE in host_key_prompts(session), first.detail
        await trust_host_key(session, INSTANCE, sshd.host_public_key().get_fingerprint("sha256"))
        status = await instance_status(session, INSTANCE)
        assert status.detail.get("ssh_reachable") is True, status.detail
        await launch_run(session, RUN)
        await wait_for_liveness(session)
    except BaseException:
        await close(session)
        raise
    return session


async def pulled_and_verified(session: Session) -> None:
    await pull_run(session, RUN)
    result = await verify_run(session, RUN)
    assert result.ok, result.errors


async def close(session: Session) -> None:
    await session.close_transports()
    session.close()
