"""Contract tests (issue 25): every body recorded from vast.ai's own docs and vast-cli
(tests/fixtures/providers/vastai/, sources in its README) replayed through the real VastAIClient and the
CloudProvider adapter, served by the local fake: state, raw state, price, price source, GPU and the stopped
disk's rate of each documented `actual_status`; the v1 list across pages; each recorded error body.

Each point of the README's "Where rgt reads it differently" list for vast.ai has a test here or in
tests/cli/test_vast_recorded_cli.py that fails on the code before issue 25 (named in the test's docstring).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from remote_gpu_trainer.providers.cloud.vastai import LIST_MAX_PAGES, VastAIClient
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeVast, VirtualTime, fake_client
from support.recorded import names, recorded

vast_fake = fake_clouds.vast_fake
vtime = fake_clouds.vtime

ID = "883"  # the recorded instance's own id
PRICE = 1.0020740740740741  # dph_total of every recorded instance
DISK_PER_HOUR = 0.002074074074074074  # storage_total_cost = instance.diskHour = 0.149333 $/GB/month x 10 GB / 720 h
PER_GB_MONTH = 0.14933333333333335

# recorded GET body → (state rgt shows, raw word kept): vast's documented actual_status list
STATES: dict[str, tuple[str, str]] = {
    "v0_get_instance_provisioning_null_status": ("pending", ""),  # null: being provisioned
    "v0_get_instance_loading": ("pending", "loading"),
    "v0_get_instance_running": ("running", "running"),
    "v0_get_instance_stopped": ("stopped", "stopped"),
    "v0_get_instance_frozen": ("unknown", "frozen"),  # GPU charges apply: never stopped
    "v0_get_instance_exited": ("unknown", "exited"),  # unexpected exit, intended_status stays running
    "v0_get_instance_rebooting": ("unknown", "rebooting"),
    "v0_get_instance_unknown": ("unknown", "unknown"),
    "v0_get_instance_offline": ("unknown", "offline"),
}


def make(fake: FakeVast, vtime: VirtualTime, **kwargs: object) -> VastAIClient:
    client: VastAIClient = fake_client(VastAIClient, fake, vtime, "VAST_API_KEY", **kwargs)
    return client


@pytest.fixture
async def client(vast_fake: FakeVast, vtime: VirtualTime) -> AsyncIterator[VastAIClient]:
    vc = make(vast_fake, vtime)
    yield vc
    await vc.close()


@pytest.fixture
async def adapter(vast_fake: FakeVast, vtime: VirtualTime, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[CloudProvider]:
    monkeypatch.setenv("VAST_API_KEY", FAKE_KEY)
    monkeypatch.delenv("VAST_URL", raising=False)
    provider = CloudProvider("vastai", tmp_path / ".rgt", api_base=vast_fake.url, check_ssh=False,
                             http=HttpOptions(sleep=vtime.sleep, clock=vtime.clock))
    yield provider
    await provider.close()


def serve(fake: FakeVast, name: str) -> dict[str, Any]:
    """The recorded body's instance, unchanged, as the one instance of the account."""
    row: dict[str, Any] = recorded("vastai", name)["instances"]
    fake.instances[str(row["id"])] = row
    return row


def box(ident: str = ID) -> InstanceConfig:
    return InstanceConfig(name="gpu", provider="vastai", id=ident)


def test_every_recorded_get_body_is_replayed() -> None:
    assert set(STATES) | {"v0_get_instance_destroyed_null"} == set(names("vastai", "v0_get_instance_"))


@pytest.mark.parametrize("name", sorted(STATES))
async def test_each_recorded_state_through_the_client(client: VastAIClient, vast_fake: FakeVast, name: str) -> None:
    """Before issue 25: `exited` read stopped (README point 1), a null status read unknown (point 2)."""
    serve(vast_fake, name)
    inst = await client.get(ID)
    assert (inst.state, inst.raw_state) == STATES[name]
    assert (inst.price_per_hour, inst.price_source, inst.currency) == (PRICE, "api", "USD")
    assert (inst.gpu, inst.gpu_count) == ("RTX A5000", 1)
    [disk] = inst.storage
    assert (disk.name, disk.size_gb, disk.bills_while_stopped, disk.survives_terminate) == (
        "instance-disk", 10.0, True, False)
    assert (disk.price_per_gb_month, disk.price_per_hour) == (PER_GB_MONTH, DISK_PER_HOUR)
    [logged] = vast_fake.requests("GET")
    assert logged.path == f"/v0/instances/{ID}/" and logged.query == {"owner": ["me"]}


@pytest.mark.parametrize("name", sorted(STATES))
async def test_each_recorded_state_through_the_provider(adapter: CloudProvider, vast_fake: FakeVast,
                                                        name: str) -> None:
    """The adapter keeps the API's price in every state (an unmapped state is billed at it as an estimate by
    the meter) and says what the disk bills while stopped: vast's own storage_total_cost, not
    storage_cost x 10 / 730 = 0.0020457 as before issue 25 (README point 4)."""
    serve(vast_fake, name)
    status = await adapter.get(box())
    assert (status.state, status.detail["raw_state"]) == STATES[name]
    assert (status.price_per_hour, status.price_source, status.gpu) == (PRICE, "api", "RTX A5000")
    assert status.storage_per_hour == DISK_PER_HOUR
    assert status.detail["api"]["intended_status"] == recorded("vastai", name)["instances"]["intended_status"]


async def test_a_stopped_instance_bills_its_disk_not_dph_total(adapter: CloudProvider, vast_fake: FakeVast) -> None:
    """dph_total does not drop when stopped (README point 5): the stopped rate is the disk's alone."""
    serve(vast_fake, "v0_get_instance_stopped")
    status = await adapter.get(box())
    assert status.state == "stopped" and status.price_per_hour == PRICE
    assert status.storage_per_hour is not None and status.storage_per_hour < PRICE / 100


async def test_without_vasts_hourly_figure_the_month_is_720_hours(adapter: CloudProvider,
                                                                 vast_fake: FakeVast) -> None:
    """A row with only storage_cost ($/GB/month) is spread over the profile's 720 h, vast's own month (730 h
    before issue 25: README point 4)."""
    row = serve(vast_fake, "v0_get_instance_stopped")
    del row["storage_total_cost"], row["instance"]
    status = await adapter.get(box())
    assert status.storage_per_hour == pytest.approx(PER_GB_MONTH * 10 / 720, rel=1e-12)
    assert status.storage_per_hour == pytest.approx(DISK_PER_HOUR, rel=1e-12)


async def test_the_recorded_null_answer_is_gone(client: VastAIClient, adapter: CloudProvider) -> None:
    """`{"instances": null}` (vast-cli's show__instance) is the documented answer for an instance that no
    longer exists: the client says not found, the adapter terminated under the profile's null rule."""
    with pytest.raises(CloudNotFound, match="instances: null") as info:
        await client.get(ID)
    assert info.value.status == 200
    status = await adapter.get(box())
    assert (status.state, status.detail["gone_by"], status.storage_per_hour) == ("terminated", "null:instances", 0.0)


async def test_cur_state_unloaded_is_gone(adapter: CloudProvider, vast_fake: FakeVast) -> None:
    """The contract's cur_state `unloaded` (released on destroy) is vast's other word for gone (README point 3)."""
    row = serve(vast_fake, "v0_get_instance_stopped")
    row["cur_state"] = "unloaded"
    status = await adapter.get(box())
    assert (status.state, status.detail["raw_state"]) == ("terminated", "unloaded")


@pytest.mark.parametrize("word", ["destroyed", "scheduling", "created"])
async def test_words_no_vast_source_names_are_not_mapped(adapter: CloudProvider, vast_fake: FakeVast,
                                                         word: str) -> None:
    """Before issue 25 `destroyed` read terminated and `scheduling`/`created` pending (README point 3)."""
    serve(vast_fake, "v0_get_instance_running")["actual_status"] = word
    status = await adapter.get(box())
    assert (status.state, status.detail["raw_state"], status.price_per_hour) == ("unknown", word, PRICE)


async def test_exited_is_never_gone_on_its_own(client: VastAIClient, vast_fake: FakeVast) -> None:
    serve(vast_fake, "v0_get_instance_exited")
    outcome = await client.wait_gone(ID, timeout_s=4, poll_s=2)
    assert not outcome.gone and (outcome.state, outcome.raw_state) == ("unknown", "exited")
    assert vast_fake.requests("GET", "/v1/instances/")  # settled by the list, which still has it


async def test_a_404_from_a_wrong_base_url_is_not_gone(vast_fake: FakeVast, vtime: VirtualTime) -> None:
    """vast documents no 404 for a GET, so none is trusted: a base URL that points elsewhere (here the old
    `/api/v0` base, under which every path 404s) never turns into `terminated`."""
    serve(vast_fake, "v0_get_instance_running")
    vc = make(vast_fake, vtime, api_base=vast_fake.url + "/v0")
    try:
        outcome = await vc.wait_gone(ID, timeout_s=2, poll_s=2)
    finally:
        await vc.close()
    assert not outcome.gone and outcome.state == "unknown" and outcome.errors


# -- the v1 list ----------------------------------------------------------------------------------------------

async def test_the_recorded_list_pages_are_followed(client: VastAIClient, vast_fake: FakeVast) -> None:
    """The recorded first page (next_token set) and last page (null) replayed as served: the second request
    carries the recorded token as after_token (README point 6: before issue 25, one v0 request)."""
    first, last = recorded("vastai", "v1_list_instances_page"), recorded("vastai", "v1_list_instances_last_page")
    last["instances"][0]["id"] = 313
    vast_fake.fail("GET", "/v1/instances/", 200, first)
    vast_fake.fail("GET", "/v1/instances/", 200, last)
    listed = await client.list_instances()
    assert [(i.provider_id, i.state, i.raw_state, i.gpu, i.price_source) for i in listed] == [
        ("312", "running", "running", first["instances"][0]["gpu_name"], "api"),
        ("313", "running", "running", last["instances"][0]["gpu_name"], "api")]
    assert listed[0].price_per_hour == first["instances"][0]["dph_total"]
    assert listed[0].name == "ML Training Job 2025"
    queries = [r.query for r in vast_fake.requests("GET", "/v1/instances/")]
    assert queries == [{"limit": ["25"]}, {"limit": ["25"], "after_token": [first["next_token"]]}]


async def test_a_long_account_is_read_across_pages_of_25(client: VastAIClient, vast_fake: FakeVast) -> None:
    for number in range(1, 61):
        vast_fake.add_instance(str(1000 + number), "stopped" if number % 2 else "running")
    listed = await client.list_instances()
    assert sorted(int(i.provider_id) for i in listed) == list(range(1001, 1061))
    assert {i.provider_id: i.state for i in listed}["1001"] == "stopped"
    pages = vast_fake.requests("GET", "/v1/instances/")
    assert len(pages) == 3 and all(r.query["limit"] == ["25"] for r in pages)
    assert "after_token" not in pages[0].query and all("after_token" in r.query for r in pages[1:])


async def test_a_list_that_never_ends_is_refused_not_cut_short(client: VastAIClient, vast_fake: FakeVast) -> None:
    vast_fake.fail("GET", "/v1/instances/", 200, recorded("vastai", "v1_list_instances_page"),
                   times=LIST_MAX_PAGES + 5)
    with pytest.raises(CloudAPIError, match=f"still a next_token after {LIST_MAX_PAGES} pages"):
        await client.list_instances()
    assert len(vast_fake.requests("GET", "/v1/instances/")) == LIST_MAX_PAGES


# -- the recorded error bodies --------------------------------------------------------------------------------

async def test_recorded_401(vast_fake: FakeVast, vtime: VirtualTime) -> None:
    vc = make(vast_fake, vtime, environ={"VAST_API_KEY": "not-the-key-123"})
    try:
        with pytest.raises(CloudAuthError, match="auth_error: Invalid user key") as info:
            await vc.get(ID)
    finally:
        await vc.close()
    assert info.value.status == 401


async def test_recorded_400(client: VastAIClient, vast_fake: FakeVast) -> None:
    serve(vast_fake, "v0_get_instance_running")
    vast_fake.fail("PUT", f"/v0/instances/{ID}/", 400, recorded("vastai", "error_400"))
    with pytest.raises(CloudAPIError, match=r"invalid_args: error 400/1782: Invalid args: invalid json") as info:
        await client.stop(ID)
    assert info.value.status == 400


async def test_recorded_show_429_is_retried_then_told(client: VastAIClient, vast_fake: FakeVast,
                                                      vtime: VirtualTime) -> None:
    serve(vast_fake, "v0_get_instance_running")
    vast_fake.rate_limit("GET", f"/v0/instances/{ID}/", "3")
    assert (await client.get(ID)).state == "running" and vtime.sleeps == [3.0]
    vast_fake.rate_limit("GET", f"/v0/instances/{ID}/", "1", times=20)
    with pytest.raises(CloudAPIError, match="API requests too frequent endpoint threshold=2.0") as info:
        await client.get(ID)
    assert info.value.status == 429


async def test_recorded_destroy_429(client: VastAIClient, vast_fake: FakeVast) -> None:
    serve(vast_fake, "v0_get_instance_running")
    vast_fake.rate_limit("DELETE", f"/v0/instances/{ID}/", "1", times=20)
    with pytest.raises(CloudAPIError, match="rate_limit_exceeded: API requests too frequent endpoint "
                                            "threshold=3.0") as info:
        await client.terminate(ID)
    assert info.value.status == 429 and ID not in vast_fake.deleted


async def test_recorded_destroy_200_and_404(client: VastAIClient, vast_fake: FakeVast) -> None:
    """destroy_200 (`success: true`) is accepted; destroy_error_404 (`not_found`) means nothing is left to
    destroy; neither is proof of gone: the GET's `instances: null` is."""
    serve(vast_fake, "v0_get_instance_running")
    await client.terminate(ID)
    vast_fake.deleted.discard(ID)
    vast_fake.fail("DELETE", f"/v0/instances/{ID}/", 404, recorded("vastai", "destroy_error_404"))
    await client.terminate(ID)  # the 404 is not an error
    assert len(vast_fake.requests("DELETE")) == 2
    assert not (await client.wait_gone(ID, timeout_s=2, poll_s=2)).gone  # the GET still shows it
    vast_fake.deleted.add(ID)
    outcome = await client.wait_gone(ID, timeout_s=2, poll_s=2)
    assert outcome.gone and outcome.meter_stopped


async def test_recorded_500(client: VastAIClient, vast_fake: FakeVast) -> None:
    serve(vast_fake, "v0_get_instance_running")
    vast_fake.fail("DELETE", f"/v0/instances/{ID}/", 500, recorded("vastai", "error_500"), times=20)
    with pytest.raises(CloudAPIError, match="delete_ssh_from_instance: Error deleting SSH key from instance") as info:
        await client.terminate(ID)
    assert info.value.status == 500
