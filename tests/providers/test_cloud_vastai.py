"""VastAIClient against the local vast.ai REST fake (docs/providers.md §4), which serves vast's recorded bodies:
shapes, states, VAST15, offers, launch. Every recorded body replayed one by one: test_vast_recorded.py."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.types import GpuRequest
from remote_gpu_trainer.providers.cloud.vastai import VAST_STATES, VastAIClient, parse_instance
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeVast, VirtualTime, assert_no_key, exception_chain, fake_client

vast_fake = fake_clouds.vast_fake
vtime = fake_clouds.vtime


def make(fake: FakeVast, vtime: VirtualTime, **kwargs: object) -> VastAIClient:
    client: VastAIClient = fake_client(VastAIClient, fake, vtime, "VAST_API_KEY", **kwargs)
    return client


@pytest.fixture
async def client(vast_fake: FakeVast, vtime: VirtualTime) -> AsyncIterator[VastAIClient]:
    vc = make(vast_fake, vtime)
    yield vc
    await vc.close()


def offer(ident: int, gpu: str = "RTX 4090", num: int = 1, price: float = 0.4) -> dict[str, object]:
    return {"id": ident, "gpu_name": gpu, "num_gpus": num, "dph_total": price, "rentable": True}


async def test_list_reads_the_v1_list_and_maps_rows(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.add_instance("101")
    [inst] = await client.list_instances()
    assert (inst.provider_id, inst.state, inst.raw_state, inst.gpu, inst.gpu_count) == (
        "101", "running", "running", "RTX A5000", 1)
    assert (inst.price_per_hour, inst.price_source) == (1.0020740740740741, "api")
    assert (inst.ssh_host, inst.ssh_port, inst.public_ip) == ("ssh2281.vast.ai", 10882, "63.135.50.11")
    assert inst.started_at == "2025-10-21T01:03:38.225083+00:00"
    [disk] = inst.storage
    assert (disk.name, disk.size_gb, disk.bills_while_stopped, disk.price_per_gb_month, disk.price_per_hour) == (
        "instance-disk", 10.0, True, 0.14933333333333335, 0.002074074074074074)
    assert vast_fake.requests("GET", "/v0/instances/") == []  # the list vast-cli calls deprecated
    [logged] = vast_fake.requests("GET", "/v1/instances/")
    assert logged.query == {"limit": ["25"]}
    assert logged.headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_empty_account_lists_nothing(client: VastAIClient) -> None:
    assert await client.list_instances() == []


@pytest.mark.parametrize(("actual", "intended", "state"), [
    ("running", "running", "running"), ("loading", "running", "pending"), ("stopped", "stopped", "stopped"),
    ("running", "stopped", "stopping"), ("exited", "running", "unknown"), ("offline", "running", "unknown"),
    ("frobnicated", "running", "unknown"), ("destroyed", "stopped", "unknown"), ("scheduling", "running", "unknown"),
])
async def test_state_words(client: VastAIClient, vast_fake: FakeVast, actual: str, intended: str,
                           state: str) -> None:
    vast_fake.add_instance("7", actual, intended_status=intended)
    inst = await client.get("7")
    assert (inst.state, inst.raw_state) == (state, actual)


def test_state_table_values_are_instance_states() -> None:
    assert set(VAST_STATES.values()) <= set(INSTANCE_STATES)
    assert parse_instance({"id": 1, "actual_status": None}).state == "pending"  # null: being provisioned
    assert parse_instance({"id": 1}).state == "unknown"  # no status at all is not a documented answer
    assert set(VAST_STATES) == {"loading", "running", "stopped"}  # vast's documented words, nothing made up


async def test_stop_puts_state_stopped(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.add_instance("7")
    await client.stop("7")
    [put] = vast_fake.requests("PUT", "/v0/instances/7/")
    assert put.body == {"state": "stopped"}
    stopped = await client.get("7")
    assert (stopped.state, stopped.raw_state) == ("stopped", "stopped")


async def test_success_false_in_a_200_is_an_error(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.add_instance("7")
    vast_fake.fail("PUT", "/v0/instances/7/", 200, {"success": False, "error": "invalid_args", "msg": "cannot stop"})
    with pytest.raises(CloudAPIError, match="cannot stop"):
        await client.stop("7")


async def test_destroy_is_polled_until_gone(client: VastAIClient, vast_fake: FakeVast, vtime: VirtualTime) -> None:
    vast_fake.add_instance("7")
    vast_fake.linger["7"] = 2  # VAST15: eventually consistent
    await client.terminate("7")
    outcome = await client.wait_gone("7", timeout_s=100, poll_s=2)
    assert outcome.gone and outcome.polls == 3 and vtime.sleeps == [2, 2]
    assert outcome.meter_stopped
    assert len(vast_fake.requests("DELETE", "/v0/instances/7/")) == 1


async def test_exited_and_absent_from_the_list_is_gone(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.add_instance("7", "exited")
    vast_fake.linger["7"] = 10
    await client.terminate("7")
    outcome = await client.wait_gone("7", timeout_s=100, poll_s=2)
    assert outcome.gone and outcome.polls == 1 and outcome.raw_state == "exited"
    assert vast_fake.requests("GET", "/v1/instances/")  # the list was asked to tell "destroyed" from "stopped"


async def test_exited_and_still_listed_is_not_gone_and_its_disk_bills(client: VastAIClient,
                                                                     vast_fake: FakeVast) -> None:
    vast_fake.add_instance("7", "exited", disk_space=120)
    outcome = await client.wait_gone("7", timeout_s=4, poll_s=2)
    assert not outcome.gone and (outcome.state, outcome.raw_state) == ("unknown", "exited")
    kinds = {r.kind: r for r in outcome.residuals}
    assert set(kinds) == {"instance", "disk"}
    assert "120 GB instance disk bills indefinitely" in kinds["disk"].detail


async def test_unknown_word_after_destroy_is_never_gone(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.add_instance("7", "zombie")
    vast_fake.linger["7"] = 50
    await client.terminate("7")
    outcome = await client.wait_gone("7", timeout_s=6, poll_s=2)
    assert not outcome.gone and outcome.state == "unknown" and outcome.raw_state == "zombie"


async def test_vanished_instance(client: VastAIClient, vast_fake: FakeVast) -> None:
    with pytest.raises(CloudNotFound, match="instances: null") as info:
        await client.get("99")
    assert info.value.status == 200  # vast answers a GET of no instance with 200 {"instances": null}


async def test_timeout_mid_destroy_requeries(vast_fake: FakeVast, vtime: VirtualTime) -> None:
    vast_fake.add_instance("7")
    vast_fake.hang("DELETE", "/v0/instances/7/", 1.5, apply=True)
    vc = make(vast_fake, vtime, terminate_timeout_s=0.5)
    try:
        await vc.terminate("7")
    finally:
        await vc.close()
    assert [(r.method, r.path) for r in vast_fake.log] == [
        ("GET", "/v0/instances/7/"), ("DELETE", "/v0/instances/7/"), ("GET", "/v0/instances/7/")]


async def test_429_then_success(client: VastAIClient, vast_fake: FakeVast, vtime: VirtualTime) -> None:
    vast_fake.rate_limit("GET", "/v1/instances/", "2")
    await client.list_instances()
    assert vtime.sleeps == [2.0]


async def test_wrong_key(vast_fake: FakeVast, vtime: VirtualTime) -> None:
    vc = make(vast_fake, vtime, environ={"VAST_API_KEY": "not-the-key-123"})
    try:
        with pytest.raises(CloudAuthError, match="auth_error: Invalid user key"):
            await vc.list_instances()
    finally:
        await vc.close()


@pytest.mark.parametrize("rel", [".config/vastai/vast_api_key", ".vast_api_key"])
async def test_key_from_the_cli_key_files(vast_fake: FakeVast, vtime: VirtualTime, tmp_path: Path,
                                          rel: str) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FAKE_KEY + "\n")
    vc = VastAIClient(api_base=vast_fake.url, environ={}, home=tmp_path, http=HttpOptions(sleep=vtime.sleep))
    try:
        assert await vc.list_instances() == []
    finally:
        await vc.close()


async def test_launch_rents_the_cheapest_fitting_offer(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.offers = [offer(11, price=0.55), offer(12, price=0.31), offer(13, price=0.9)]
    inst = await client.launch(GpuRequest("RTX 4090", image="pytorch/pytorch", max_price_per_hour=0.6,
                                          disk_gb=64, name="exp1"))
    [search] = vast_fake.requests("POST", "/v0/bundles/")
    assert search.body["gpu_name"] == {"eq": "RTX 4090"} and search.body["num_gpus"] == {"eq": 1}
    assert search.body["dph_total"] == {"lte": 0.6} and search.body["order"] == [["dph_total", "asc"]]
    assert search.body["type"] == "on-demand"
    [rent] = vast_fake.requests("PUT", "/v0/asks/12/")
    assert rent.body == {"client_id": "me", "image": "pytorch/pytorch", "disk": 64, "label": "exp1",
                         "runtype": "ssh_direct ssh_proxy"}
    assert (inst.provider_id, inst.state, inst.price_per_hour) == ("5001", "pending", 0.31)


async def test_launch_rechecks_offers_a_sloppy_server_returns(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.filter_offers = False
    vast_fake.offers = [offer(1, gpu="RTX 3090", price=0.1), offer(2, num=2, price=0.2),
                        offer(3, price=0.99), offer(4, price=0.5)]
    await client.launch(GpuRequest("RTX_4090", image="img", max_price_per_hour=0.6))
    assert [r.path for r in vast_fake.requests("PUT")] == ["/v0/asks/4/"]


async def test_interruptible_launch_sends_the_bid(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.offers = [offer(4, price=0.2)]
    await client.launch(GpuRequest("RTX 4090", image="img", max_price_per_hour=0.25, interruptible=True))
    assert vast_fake.requests("POST", "/v0/bundles/")[0].body["type"] == "bid"
    assert vast_fake.requests("PUT", "/v0/asks/4/")[0].body["price"] == 0.25


async def test_no_fitting_offer_rents_nothing(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.offers = [offer(1, price=2.0)]
    with pytest.raises(VerbFailed, match=r"no rentable offer of 1x RTX 4090 under \$0\.500/h"):
        await client.launch(GpuRequest("RTX 4090", image="img", max_price_per_hour=0.5))
    assert vast_fake.requests("PUT") == []


async def test_the_key_appears_nowhere(vast_fake: FakeVast, vtime: VirtualTime,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    vast_fake.add_instance("7")
    vast_fake.fail("DELETE", "/v0/instances/7/", 500, {"success": False, "error": "x", "msg": f"token {FAKE_KEY}"},
                   times=9)
    vc = make(vast_fake, vtime)
    try:
        with pytest.raises(CloudAPIError) as info:
            await vc.terminate("7")
    finally:
        await vc.close()
    assert "HTTP 500" in str(info.value)
    assert_no_key(repr(vc), *exception_chain(info.value), *(r.getMessage() for r in caplog.records))
