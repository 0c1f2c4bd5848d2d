"""LambdaClient against the local Lambda Cloud fake (docs/providers.md §5): auth, Alert, LAM14, NFS, launch.

The fake serves the recorded instance object (tests/fixtures/providers/lambda); test_lambda_recorded.py replays
every recorded body on its own."""

from __future__ import annotations

import email.utils
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.client import TeardownUnconfirmed, UnsupportedAction
from remote_gpu_trainer.providers.cloud.http import CloudAuthError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.lambda_cloud import LAMBDA_STATES, LambdaClient
from remote_gpu_trainer.providers.cloud.types import GpuRequest
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeLambda, VirtualTime, assert_no_key, exception_chain, fake_client

lambda_fake = fake_clouds.lambda_fake
vtime = fake_clouds.vtime
WALL = 1_780_000_000.0


def make(fake: FakeLambda, vtime: VirtualTime, **kwargs: object) -> LambdaClient:
    client: LambdaClient = fake_client(LambdaClient, fake, vtime, "LAMBDA_API_KEY",
                                       **{"wall_clock": lambda: WALL, "rate_limit_per_s": 0, **kwargs})
    return client


@pytest.fixture
async def client(lambda_fake: FakeLambda, vtime: VirtualTime) -> AsyncIterator[LambdaClient]:
    lc = make(lambda_fake, vtime)
    yield lc
    await lc.close()


async def test_list_and_get_map_the_instance_objects(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    lambda_fake.add_instance("i-1", file_system_names=["shared-nfs"], file_system_mounts=[])
    [listed] = await client.list_instances()
    got = await client.get("i-1")
    assert listed == got
    assert (got.state, got.raw_state, got.gpu, got.gpu_count) == ("running", "active", "A100 (40 GB SXM4)", 8)
    assert (got.price_per_hour, got.price_source) == (10.32, "api")  # integer cents → dollars
    assert (got.public_ip, got.region) == ("198.51.100.2", "us-west-1")
    [nfs] = [s for s in got.storage if s.name == "nfs"]
    assert nfs.ident == "shared-nfs" and nfs.survives_terminate
    assert lambda_fake.requests("GET", "/instances")[0].headers["authorization"] == f"Bearer {FAKE_KEY}"


@pytest.mark.parametrize(("word", "state"), [
    ("booting", "pending"), ("active", "running"), ("terminating", "terminating"), ("terminated", "terminated"),
    ("unhealthy", "unknown"), ("Alert", "unknown"), ("preempted", "unknown"),
])
async def test_state_words(client: LambdaClient, lambda_fake: FakeLambda, word: str, state: str) -> None:
    lambda_fake.add_instance("i-1", word)
    inst = await client.get("i-1")
    assert (inst.state, inst.raw_state) == (state, word)


def test_state_table_keeps_alert_unmapped() -> None:
    assert set(LAMBDA_STATES.values()) <= set(INSTANCE_STATES)
    assert "unhealthy" not in LAMBDA_STATES and "alert" not in LAMBDA_STATES and "preempted" not in LAMBDA_STATES


async def test_basic_user_auth_is_switchable(vtime: VirtualTime) -> None:
    with FakeLambda(auth="basic") as fake:
        fake.add_instance("i-1")
        bearer = make(fake, vtime)
        basic = make(fake, vtime, auth_scheme="basic-user")
        try:
            with pytest.raises(CloudAuthError, match="API key was invalid, expired, or deleted"):
                await bearer.get("i-1")
            assert (await basic.get("i-1")).provider_id == "i-1"
        finally:
            await bearer.close()
            await basic.close()
        assert fake.requests()[-1].headers["authorization"].startswith("Basic ")


async def test_there_is_no_stop(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    with pytest.raises(UnsupportedAction, match="Alert"):
        await client.stop("i-1")
    assert lambda_fake.log == []


async def test_terminate_then_poll_terminating_until_gone(client: LambdaClient, lambda_fake: FakeLambda,
                                                          vtime: VirtualTime) -> None:
    lambda_fake.add_instance("i-1", file_system_names=[], file_system_mounts=[])
    lambda_fake.linger["i-1"] = 2
    await client.terminate("i-1")
    [post] = lambda_fake.requests("POST", "/instance-operations/terminate")
    assert post.body == {"instance_ids": ["i-1"]}
    assert (await client.get("i-1")).state == "terminating"
    outcome = await client.wait_gone("i-1", timeout_s=60, poll_s=3)
    assert outcome.gone and outcome.polls == 2 and vtime.sleeps == [3]
    assert outcome.meter_stopped


async def test_nfs_is_a_residual_after_terminate(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    lambda_fake.add_instance("i-1", file_system_names=["ckpts"], file_system_mounts=[])
    await client.terminate("i-1")
    outcome = await client.wait_gone("i-1", timeout_s=10, poll_s=1)
    assert outcome.gone and not outcome.meter_stopped
    [nfs] = outcome.residuals
    assert (nfs.kind, nfs.ident) == ("nfs", "ckpts") and "console" in nfs.ended_by


async def test_alert_state_is_billing_and_called_out(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    lambda_fake.add_instance("i-1", "unhealthy", file_system_names=[], file_system_mounts=[])
    outcome = await client.wait_gone("i-1", timeout_s=2, poll_s=1)
    assert not outcome.gone and outcome.state == "unknown" and outcome.raw_state == "unhealthy"
    kinds = [r.kind for r in outcome.residuals]
    assert kinds == ["instance", "alert"]
    assert "still billing" in outcome.residuals[1].detail


async def test_lam14_hanging_terminate_that_took_is_not_resent(lambda_fake: FakeLambda,
                                                              vtime: VirtualTime) -> None:
    lambda_fake.add_instance("i-1")
    lambda_fake.linger["i-1"] = 5
    lambda_fake.hang("POST", "/instance-operations/terminate", 1.5, apply=True)
    lc = make(lambda_fake, vtime, terminate_timeout_s=0.5)
    try:
        await lc.terminate("i-1")
    finally:
        await lc.close()
    assert [(r.method, r.path) for r in lambda_fake.log] == [
        ("GET", "/instances/i-1"), ("POST", "/instance-operations/terminate"), ("GET", "/instances/i-1")]


async def test_lam14_hanging_terminate_that_did_not_take_is_resent_after_requery(lambda_fake: FakeLambda,
                                                                                vtime: VirtualTime) -> None:
    lambda_fake.add_instance("i-1")
    lambda_fake.hang("POST", "/instance-operations/terminate", 1.5, apply=False)
    lc = make(lambda_fake, vtime, terminate_timeout_s=0.5)
    try:
        await lc.terminate("i-1")
    finally:
        await lc.close()
    assert [(r.method, r.path) for r in lambda_fake.log] == [
        ("GET", "/instances/i-1"), ("POST", "/instance-operations/terminate"), ("GET", "/instances/i-1"),
        ("POST", "/instance-operations/terminate")]


async def test_lam14_requery_failure_is_unconfirmed(lambda_fake: FakeLambda, vtime: VirtualTime) -> None:
    lambda_fake.add_instance("i-1")
    lambda_fake.hang("POST", "/instance-operations/terminate", 1.5, apply=False)
    lambda_fake.fail("GET", "/instances/i-1", 500, lambda_fake.error_body(500), times=99, after=1)
    lc = make(lambda_fake, vtime, terminate_timeout_s=0.5)
    try:
        with pytest.raises(TeardownUnconfirmed) as info:
            await lc.terminate("i-1")
    finally:
        await lc.close()
    assert "re-query failed: Provider unavailable" in str(info.value) and "it may still bill" in str(info.value)
    assert len(lambda_fake.requests("POST", "/instance-operations/terminate")) == 1  # never resent blind


async def test_rate_limit_defaults_to_one_request_per_second(lambda_fake: FakeLambda, vtime: VirtualTime) -> None:
    lambda_fake.add_instance("i-1")
    lc = LambdaClient(api_base=lambda_fake.url, environ={"LAMBDA_API_KEY": FAKE_KEY},
                      http=HttpOptions(sleep=vtime.sleep, clock=vtime.clock))
    try:
        for _ in range(3):
            await lc.get("i-1")
    finally:
        await lc.close()
    assert vtime.sleeps == [1.0, 1.0]


async def test_429_with_http_date(client: LambdaClient, lambda_fake: FakeLambda, vtime: VirtualTime) -> None:
    lambda_fake.rate_limit("GET", "/instances", email.utils.formatdate(WALL + 5, usegmt=True))
    await client.list_instances()
    assert vtime.sleeps == [pytest.approx(5.0)]


async def test_vanished_instance_is_gone_at_once(client: LambdaClient) -> None:
    with pytest.raises(CloudNotFound, match="Specified instance does not exist"):
        await client.get("i-404")
    outcome = await client.wait_gone("i-404", timeout_s=60, poll_s=5)
    assert outcome.gone and outcome.polls == 1


async def test_key_from_skypilot_file(lambda_fake: FakeLambda, vtime: VirtualTime, tmp_path: Path) -> None:
    (tmp_path / ".lambda_cloud").mkdir()
    (tmp_path / ".lambda_cloud" / "lambda_keys").write_text(f"api_key = {FAKE_KEY}\n")
    lc = LambdaClient(api_base=lambda_fake.url, environ={}, home=tmp_path,
                      http=HttpOptions(sleep=vtime.sleep, clock=vtime.clock))
    try:
        assert await lc.list_instances() == []
    finally:
        await lc.close()


def add_types(fake: FakeLambda) -> None:
    fake.add_type("gpu_1x_a100", "A100 (40 GB SXM4)", 1, 129, ["us-east-1", "us-west-2"])
    fake.add_type("gpu_1x_a100_sxm4", "A100 (40 GB SXM4)", 1, 110, [])  # cheaper, no capacity
    fake.add_type("gpu_2x_a100", "A100 (40 GB SXM4)", 2, 258, ["us-west-2"])
    fake.add_type("gpu_1x_h100_pcie", "H100 (80 GB PCIe)", 1, 249, ["us-west-2"])


async def test_launch_picks_cheapest_type_with_capacity(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    add_types(lambda_fake)
    inst = await client.launch(GpuRequest("A100", gpu_count=1, max_price_per_hour=2.0, name="exp1",
                                          ssh_key_names=("me",)))
    [post] = lambda_fake.requests("POST", "/instance-operations/launch")
    assert post.body == {"region_name": "us-east-1", "instance_type_name": "gpu_1x_a100", "ssh_key_names": ["me"],
                         "quantity": 1, "name": "exp1"}
    assert (inst.state, inst.raw_state, inst.price_per_hour) == ("pending", "booting", 1.29)
    assert inst.provider_id == lambda_fake.launched[0] and re.fullmatch(r"[0-9a-f]{32}", inst.provider_id)


async def test_launch_respects_price_ceiling_and_region(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    add_types(lambda_fake)
    with pytest.raises(VerbFailed, match=r"no instance type with 1x H100 under \$2\.00/h"):
        await client.launch(GpuRequest("H100", max_price_per_hour=2.0, ssh_key_names=("me",)))
    await client.launch(GpuRequest("A100", region="us-west-2", ssh_key_names=("me",)))
    assert lambda_fake.requests("POST", "/instance-operations/launch")[0].body["region_name"] == "us-west-2"


async def test_second_launch_waits_twelve_seconds(client: LambdaClient, lambda_fake: FakeLambda,
                                                  vtime: VirtualTime) -> None:
    """Spec 1.8.3: one launch per 12 s (five per minute); the old pacing of 10 s would draw a 429."""
    add_types(lambda_fake)
    request = GpuRequest("A100", ssh_key_names=("me",))
    await client.launch(request)
    assert vtime.sleeps == []
    await client.launch(request)
    assert vtime.sleeps == [12.0]


async def test_launch_needs_an_ssh_key(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    with pytest.raises(VerbFailed, match="SSH key"):
        await client.launch(GpuRequest("A100"))
    assert lambda_fake.log == []


async def test_the_key_appears_nowhere(lambda_fake: FakeLambda, vtime: VirtualTime,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    lambda_fake.add_instance("i-1", "unhealthy")
    basic = make(lambda_fake, vtime, auth_scheme="basic-user")  # the bearer fake refuses the Basic form
    bearer = make(lambda_fake, vtime)
    try:
        with pytest.raises(CloudAuthError) as info:
            await basic.list_instances()
        outcome = await bearer.wait_gone("i-1", timeout_s=1, poll_s=1)
    finally:
        await basic.close()
        await bearer.close()
    assert_no_key(repr(basic), repr(bearer), *exception_chain(info.value), outcome,
                  *(r.getMessage() for r in caplog.records))
