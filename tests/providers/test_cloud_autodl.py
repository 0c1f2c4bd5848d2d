"""AutoDLClient against the local AutoDL Pro-API fake (docs/providers.md §2): console-only unless the flag is on."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.autodl import AUTODL_STATES, CONSOLE_URL, AutoDLClient
from remote_gpu_trainer.providers.cloud.client import UnsupportedAction
from remote_gpu_trainer.providers.cloud.credentials import CredentialsMissing
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, HttpOptions
from remote_gpu_trainer.providers.cloud.types import Money
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeAutoDL, VirtualTime, assert_no_key, exception_chain

autodl_fake = fake_clouds.autodl_fake
vtime = fake_clouds.vtime


def make(fake: FakeAutoDL, vtime: VirtualTime, **kwargs: object) -> AutoDLClient:
    scheme = kwargs.pop("auth_scheme", None)
    http = HttpOptions(sleep=vtime.sleep, clock=vtime.clock, auth_scheme=str(scheme) if scheme else None)
    options: dict[str, object] = {"api_base": fake.url, "environ": {"AUTODL_TOKEN": FAKE_KEY}, "http": http,
                                  "pro_api": True}
    options.update(kwargs)
    return AutoDLClient(**options)  # type: ignore[arg-type]


@pytest.fixture
async def client(autodl_fake: FakeAutoDL, vtime: VirtualTime) -> AsyncIterator[AutoDLClient]:
    ac = make(autodl_fake, vtime)
    yield ac
    await ac.close()


async def test_without_the_flag_every_read_names_the_console(autodl_fake: FakeAutoDL, vtime: VirtualTime) -> None:
    autodl_fake.add_instance("u-1")
    ac = make(autodl_fake, vtime, pro_api=False)
    try:
        with pytest.raises(UnsupportedAction, match="console-only") as info:
            await ac.get("u-1")
        with pytest.raises(UnsupportedAction):
            await ac.balance()
    finally:
        await ac.close()
    assert CONSOLE_URL in str(info.value)
    assert autodl_fake.log == []


async def test_pro_status_and_snapshot(client: AutoDLClient, autodl_fake: FakeAutoDL) -> None:
    autodl_fake.add_instance("u-1")
    inst = await client.get("u-1")
    assert (inst.state, inst.raw_state, inst.currency) == ("running", "running", "CNY")
    assert (inst.ssh_host, inst.ssh_port) == ("connect.westb.seetacloud.com", 23456)
    assert (inst.price_per_hour, inst.price_source) == (None, "none")
    paths = [(r.path, r.query) for r in autodl_fake.log]
    assert paths == [("/dev/instance/pro/status", {"instance_uuid": ["u-1"]}),
                     ("/dev/instance/pro/snapshot", {"instance_uuid": ["u-1"]})]
    assert autodl_fake.log[0].headers["authorization"] == FAKE_KEY  # no "Bearer" word


@pytest.mark.parametrize(("word", "state"), [
    ("running", "running"), ("shutdown", "stopped"), ("starting", "pending"), ("released", "unknown"),
    ("maintaining", "unknown"),
])
async def test_state_words(client: AutoDLClient, autodl_fake: FakeAutoDL, word: str, state: str) -> None:
    autodl_fake.add_instance("u-1", word)
    inst = await client.get("u-1")
    assert (inst.state, inst.raw_state) == (state, word)


def test_state_table_values() -> None:
    assert set(AUTODL_STATES.values()) <= set(INSTANCE_STATES)
    assert "terminated" not in AUTODL_STATES.values()  # release was never seen in the API: never claim it


async def test_error_code_in_a_200_is_an_error(client: AutoDLClient) -> None:
    with pytest.raises(CloudAPIError) as info:
        await client.get("u-404")
    assert str(info.value) == ("autodl: GET /dev/instance/pro/status?instance_uuid=… failed: HTTP 200: "
                               "InstanceNotFound: instance does not exist")


async def test_balance_in_thousandths_of_a_yuan(client: AutoDLClient, autodl_fake: FakeAutoDL) -> None:
    assert await client.balance() == Money(123.456, "CNY")
    assert autodl_fake.log[0].method == "POST"


async def test_teardown_verbs_name_the_console_step(client: AutoDLClient, autodl_fake: FakeAutoDL) -> None:
    with pytest.raises(UnsupportedAction, match="关机"):
        await client.stop("u-1")
    with pytest.raises(UnsupportedAction, match="释放") as info:
        await client.terminate("u-1")
    assert "irreversible" in str(info.value)
    with pytest.raises(UnsupportedAction, match="user-attested"):
        await client.wait_gone("u-1", timeout_s=1, poll_s=1)
    with pytest.raises(UnsupportedAction, match="no instance list"):
        await client.list_instances()
    assert autodl_fake.log == []


async def test_bearer_form_is_refused(autodl_fake: FakeAutoDL, vtime: VirtualTime) -> None:
    autodl_fake.add_instance("u-1")
    ac = make(autodl_fake, vtime, auth_scheme="bearer")
    try:
        with pytest.raises(CloudAuthError, match="HTTP 401: token is invalid"):
            await ac.get("u-1")
    finally:
        await ac.close()


async def test_429_retried(client: AutoDLClient, autodl_fake: FakeAutoDL, vtime: VirtualTime) -> None:
    autodl_fake.rate_limit("POST", "/dev/wallet/balance", "6")
    await client.balance()
    assert vtime.sleeps == [6.0]


def test_missing_token_names_the_env_var(tmp_path: Path) -> None:
    with pytest.raises(CredentialsMissing, match="AUTODL_TOKEN"):
        AutoDLClient(environ={}, home=tmp_path)


async def test_the_key_appears_nowhere(autodl_fake: FakeAutoDL, vtime: VirtualTime,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    autodl_fake.fail("POST", "/dev/wallet/balance", 200, {"code": "Bad", "msg": f"token {FAKE_KEY} expired"})
    ac = make(autodl_fake, vtime)
    try:
        with pytest.raises(CloudAPIError) as info:
            await ac.balance()
    finally:
        await ac.close()
    assert "<redacted>" in str(info.value)
    assert_no_key(repr(ac), *exception_chain(info.value), *(r.getMessage() for r in caplog.records))
