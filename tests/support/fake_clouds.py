"""Local fake provider APIs for the cloud client tests (docs/architecture.md §3.3: no mocking of our own code).

Each fake is a real HTTP server (stdlib ThreadingHTTPServer on 127.0.0.1, port 0, daemon thread) that serves
its provider's documented paths under the documented base path, checks the documented auth header form
(wrong or missing auth gets the provider's status and error body), answers with the documented shapes, and
keeps a request log the tests assert on. Knobs reproduce what the spec warns about: 429 with Retry-After,
5xx, a call that hangs past the client's timeout (and may or may not have taken effect), a deleted instance
that lingers for N polls before it is gone, an instance that vanishes, and state words no table knows.

The server, the request log and the shared checks live in fake_cloud_server.py (re-exported here); each
provider's fake has its own module (fake_runpod.py, fake_vast.py, fake_lambda.py, fake_paperspace.py).

Test modules bind the fixtures they use by name (`runpod_fake = fake_clouds.runpod_fake`), which keeps ruff's
F811 quiet and needs no change to conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.fake_cloud_server import (
    FAKE_KEY,
    FakeCloud,
    Fault,
    Logged,
    Reply,
    VirtualTime,
    assert_no_key,
    exception_chain,
    fake_client,
)
from support.fake_lambda import FakeLambda
from support.fake_paperspace import FakePaperspace
from support.fake_runpod import FakeRunPod
from support.fake_vast import FakeVast

__all__ = [
    "FAKE_KEY", "KEY_ENV", "FakeAutoDL", "FakeCloud", "FakeLambda", "FakePaperspace", "FakeRunPod", "FakeVast",
    "Fault", "Logged", "Reply", "VirtualTime", "assert_no_key", "autodl_fake", "cloud_env", "exception_chain",
    "fake_client",
    "lambda_fake", "paperspace_fake", "runpod_fake", "vast_fake", "vtime",
]


# -- AutoDL (/api/v1, Pro developer API) --------------------------------------------------------------------

class FakeAutoDL(FakeCloud):
    """`/api/v1/dev/...`; `Authorization: <token>` with no scheme word; `{"code": "Success", "data"}`."""

    provider = "autodl"
    prefix = "/api/v1"

    def __init__(self, key: str = FAKE_KEY) -> None:
        super().__init__(key)
        self.instances: dict[str, dict[str, Any]] = {}
        self.assets = 123456

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == self.key

    def auth_error(self) -> Reply:
        return Reply(401, {"code": "AuthorizeFailed", "msg": "token is invalid", "data": None})

    def error_body(self, status: int, message: str) -> Any:
        return {"code": "Error", "msg": message, "data": None}

    def add_instance(self, uuid: str, status: str = "running") -> None:
        self.instances[uuid] = {"status": status, "proxy_host": "connect.westb.seetacloud.com", "ssh_port": 23456}

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        uuid = query.get("instance_uuid", [""])[0]
        if parts == ["dev", "wallet", "balance"] and method == "POST":
            return Reply(200, {"code": "Success", "msg": "", "data": {"assets": self.assets}})
        if parts[:3] == ["dev", "instance", "pro"] and method == "GET" and len(parts) == 4:
            row = self.instances.get(uuid)
            if row is None:
                return Reply(200, {"code": "InstanceNotFound", "msg": "instance does not exist", "data": None})
            if parts[3] == "status":
                return Reply(200, {"code": "Success", "msg": "", "data": row["status"]})
            if parts[3] == "snapshot":
                return Reply(200, {"code": "Success", "msg": "",
                                   "data": {"proxy_host": row["proxy_host"], "ssh_port": row["ssh_port"]}})
        return Reply(404, {"code": "NotFound", "msg": "no such path", "data": None})


# -- fixtures -----------------------------------------------------------------------------------------------

@pytest.fixture
def vtime() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def runpod_fake() -> Iterator[FakeRunPod]:
    with FakeRunPod() as fake:
        yield fake


@pytest.fixture
def vast_fake() -> Iterator[FakeVast]:
    with FakeVast() as fake:
        yield fake


@pytest.fixture
def lambda_fake() -> Iterator[FakeLambda]:
    with FakeLambda() as fake:
        yield fake


@pytest.fixture
def paperspace_fake() -> Iterator[FakePaperspace]:
    with FakePaperspace() as fake:
        yield fake


@pytest.fixture
def autodl_fake() -> Iterator[FakeAutoDL]:
    with FakeAutoDL() as fake:
        yield fake


KEY_ENV = ("RUNPOD_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "PAPERSPACE_API_KEY", "AUTODL_TOKEN")


@pytest.fixture
def cloud_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every provider key set to the fake one, an empty HOME (no CLI credential files), no agent and no
    base-URL overrides from the developer's shell; returns the HOME folder."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    for name in ("RUNPOD_API_URL", "VAST_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in KEY_ENV:
        monkeypatch.setenv(name, FAKE_KEY)
    return home
