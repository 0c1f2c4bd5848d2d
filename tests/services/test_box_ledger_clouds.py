"""Unknown is never empty, on every cloud (docs/gate.md §7.2): the cases that made `rgt down` send the destroying
call for a box rgt could not ask, and a box shared by two projects.

Each cloud is its local HTTP fake (tests/support/fake_clouds.py, shapes from the provider's published API);
the box's SSH is a loopback port nobody listens on (refused), a server that accepts and never speaks (a
timeout), or the real loopback sshd. `rgt down` is the installed console script, as a user types it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.services.opening import open_session
from support import cloud_teardown_fixtures
from support.cloud_teardown_fixtures import (
    POD,
    RUN,
    StampedLambda,
    StampedPaperspace,
    StampedRunPod,
    add_pod,
    close,
    cloud_project,
    finished_run,
    pulled_and_verified,
)
from support.fake_clouds import FakeCloud, FakeVast
from support.gate_helpers import rgt
from support.sshd_fixtures import Sshd, free_port

pytestmark = pytest.mark.sshd

cloud_home = cloud_teardown_fixtures.cloud_home

VAST_ID, LAMBDA_ID, MACHINE = "4242", "lam-7", "m1"


def _runpod() -> tuple[FakeCloud, str, str]:
    fake = StampedRunPod()
    fake.add_pod(POD)
    return fake, "runpod", POD


def _vast() -> tuple[FakeCloud, str, str]:
    fake = FakeVast()
    fake.add_instance(VAST_ID)
    return fake, "vastai", VAST_ID


def _lambda() -> tuple[FakeCloud, str, str]:
    fake = StampedLambda()
    fake.add_instance(LAMBDA_ID)
    return fake, "lambda", LAMBDA_ID


def _paperspace() -> tuple[FakeCloud, str, str]:
    fake = StampedPaperspace()
    fake.add_machine(MACHINE)
    return fake, "paperspace", MACHINE


CLOUDS: dict[str, Callable[[], tuple[FakeCloud, str, str]]] = {
    "runpod": _runpod, "vastai": _vast, "lambda": _lambda, "paperspace": _paperspace}


@pytest.fixture(params=sorted(CLOUDS))
def cloud(request: pytest.FixtureRequest) -> Iterator[tuple[FakeCloud, str, str]]:
    fake, provider, ident = CLOUDS[request.param]()
    with fake:
        yield fake, provider, ident


def acting(fake: FakeCloud) -> list[str]:
    """Every request that can change what bills (anything but a read)."""
    return [f"{r.method} {r.path}" for r in fake.requests() if r.method != "GET"]


def kinds(root: Path) -> list[str]:
    session = open_session(str(root))
    try:
        return [event.kind for event in session.db.events()]
    finally:
        session.close()


def approval_detail(root: Path) -> dict[str, object]:
    session = open_session(str(root))
    try:
        return dict(session.db.events(kind="approval")[-1].detail)
    finally:
        session.close()


def unreachable_project(tmp_path: Path, provider: str, ident: str, url: str, port: int) -> Path:
    """Run r1 declared on the cloud box, never launched by this rgt; the box's SSH is at `port`."""
    return cloud_project(tmp_path, f'provider = "{provider}"\nid = "{ident}"\napi_base = "{url}"\n'
                                   f'host = "root@127.0.0.1:{port}"')


async def test_a_box_that_refuses_ssh_is_not_taken_as_empty_on_any_cloud(
        cloud: tuple[FakeCloud, str, str], cloud_home: Path, tmp_path: Path) -> None:
    fake, provider, ident = cloud
    root = unreachable_project(tmp_path, provider, ident, fake.url, free_port())
    result = rgt("down", RUN, str(root), "--confirm", ident, cwd=root, env=dict(os.environ))
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert acting(fake) == [], "the destroying call was sent for a box nobody could ask"
    assert "unknown is not empty" in result.stderr and "--accept-loss r1" in result.stderr, result.stderr

    result = rgt("down", RUN, str(root), "--confirm", ident, "--accept-loss", RUN, cwd=root, env=dict(os.environ))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert acting(fake), "the user accepted the loss: the action goes ahead"
    waived = approval_detail(root)["accepted_loss"]
    assert isinstance(waived, dict) and list(waived) == [RUN] and "unknown is not empty" in waived[RUN][0]
    events = kinds(root)
    assert events.index("approval") < events.index("action"), events


async def test_a_box_whose_ssh_never_answers_is_not_taken_as_empty_on_any_cloud(
        cloud: tuple[FakeCloud, str, str], cloud_home: Path, tmp_path: Path, silent_server: int) -> None:
    """The box accepts the connection and never says a word: each question waits the connect timeout (15 s)
    and the answer is unknown, never empty."""
    fake, provider, ident = cloud
    root = unreachable_project(tmp_path, provider, ident, fake.url, silent_server)
    result = rgt("down", RUN, str(root), "--confirm", ident, cwd=root, env=dict(os.environ), timeout=300)
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert acting(fake) == [], "the destroying call was sent for a box that never answered"
    assert "unknown is not empty" in result.stderr, result.stderr


runpod_cloud = cloud_teardown_fixtures.runpod_cloud


async def test_another_projects_unpulled_run_on_the_same_pod_keeps_the_gate_closed(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path) -> None:
    """Two projects rent one pod: B pulled and verified its own run; A's run is only on the box. B's `rgt down`
    must not destroy A's results: the box's ledger names them, whichever project asks."""
    add_pod(runpod_cloud, sshd)
    body = f'provider = "runpod"\nid = "{POD}"\napi_base = "{runpod_cloud.url}"'
    root_a = cloud_project(tmp_path / "a", body)
    root_b = cloud_project(tmp_path / "b", body)
    session = await finished_run(root_a, sshd, runpod_cloud)
    await close(session)  # A's run is finished on the box and never pulled
    session = await finished_run(root_b, sshd, runpod_cloud)
    try:
        await pulled_and_verified(session)
    finally:
        await close(session)
    result = rgt("down", RUN, str(root_b), "--confirm", POD, cwd=root_b, env=dict(os.environ))
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert runpod_cloud.calls("DELETE") == []
    assert f"of {root_a}" in result.stderr and "another project" in result.stderr, result.stderr
    a_id = (root_a / ".rgt" / "project-id").read_text().strip()
    name = f"{a_id[:8]}/{RUN}"
    assert f"--accept-loss {name}" in result.stderr

    result = rgt("down", RUN, str(root_b), "--confirm", POD, "--accept-loss", name, cwd=root_b,
                 env=dict(os.environ))
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert len(runpod_cloud.calls("DELETE")) == 1
    waived = approval_detail(root_b)["accepted_loss"]
    assert isinstance(waived, dict) and list(waived) == [name]

