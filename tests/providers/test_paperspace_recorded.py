"""Contract tests: every recorded Paperspace body (tests/fixtures/providers/paperspace, from the pspace CLI's
generated OpenAPI client) through the real client served by the local fake, and through the whole CLI (issue 25;
docs/providers.md §6).

Each point of the fixtures README's "Where rgt reads it differently" for Paperspace has a test that fails on the
code before issue 25: (1) usageRate/storageRate carried, not priced; (2) pspace's credential files
(test_cloud_paperspace.py); (3) storageTotal's unit is said in the docs, not guessed into a price; (4) the GPU from
`accelerators`; (5) the fake's machines carry every required field and its last page may omit `nextPage`;
(6) the state table is the schema's enum, no `failed`.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.profiles import load_profile
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound
from remote_gpu_trainer.providers.cloud.paperspace import PAPERSPACE_STATES, PaperspaceClient
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from support import cloud_teardown_fixtures, fake_clouds
from support.cloud_teardown_fixtures import INSTANCE, RUN, StampedPaperspace, close, cloud_project, finished_run
from support.fake_clouds import FAKE_KEY, FakePaperspace, VirtualTime, fake_client
from support.gate_helpers import rgt
from support.recorded import names, recorded
from support.sshd_fixtures import Sshd

paperspace_fake = fake_clouds.paperspace_fake
vtime = fake_clouds.vtime
cloud_env = fake_clouds.cloud_env
cloud_home = cloud_teardown_fixtures.cloud_home

MACHINE = "placeholder-id"  # the recorded machine's id
STATES = {"off": "stopped", "starting": "pending", "stopping": "stopping", "restarting": "pending",
          "serviceready": "running", "ready": "running", "upgrading": "pending", "provisioning": "pending"}


def make(fake: FakePaperspace, vtime: VirtualTime, **kwargs: object) -> PaperspaceClient:
    client: PaperspaceClient = fake_client(PaperspaceClient, fake, vtime, "PAPERSPACE_API_KEY", **kwargs)
    return client


@pytest.fixture
async def client(paperspace_fake: FakePaperspace, vtime: VirtualTime) -> AsyncIterator[PaperspaceClient]:
    pc = make(paperspace_fake, vtime)
    yield pc
    await pc.close()


def serve(fake: FakePaperspace, name: str) -> dict[str, Any]:
    row: dict[str, Any] = recorded("paperspace", name)
    fake.machines[row["id"]] = row
    return row


def raw_get(fake: FakePaperspace, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(fake.url + path, headers={"Authorization": f"Bearer {FAKE_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the local fake
        return answer.status, json.loads(answer.read())


# -- every recorded machine state -----------------------------------------------------------------------------

def test_the_state_table_is_the_schemas_enum() -> None:
    """README point 6: exactly the recorded enum (no `failed`, which is not a Paperspace state)."""
    recorded_words = {n.removeprefix("get_machine_") for n in names("paperspace", "get_machine_")}
    assert recorded_words == set(STATES) == set(PAPERSPACE_STATES)
    assert {word: PAPERSPACE_STATES[word] for word in STATES} == STATES


@pytest.mark.parametrize("word", sorted(STATES))
async def test_recorded_machine_in_each_state(client: PaperspaceClient, paperspace_fake: FakePaperspace,
                                              word: str) -> None:
    serve(paperspace_fake, f"get_machine_{word}")
    got = await client.get(MACHINE)
    assert (got.state, got.raw_state) == (STATES[word], word)
    assert (got.price_per_hour, got.price_source) == (None, "none")  # usageRate has no stated unit
    assert (got.gpu, got.gpu_count, got.region, got.public_ip) == ("placeholder-type", None, "placeholder-region",
                                                                   None)
    [disk] = got.storage
    assert (disk.name, disk.size_gb, disk.bills_while_stopped) == ("block-storage", None, True)  # storageTotal 0
    # README point 1: the rates ride along for the user to see
    assert (got.detail["usage_rate"], got.detail["storage_rate"]) == (0.0, 0.0)


async def test_the_rates_are_carried_never_priced(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    row = serve(paperspace_fake, "get_machine_ready")
    row.update(usageRate=0.76, storageRate=5.0)
    got = await client.get(MACHINE)
    assert (got.detail["usage_rate"], got.detail["storage_rate"]) == (0.76, 5.0)
    assert (got.price_per_hour, got.price_source) == (None, "none")
    assert load_profile("paperspace").pricing.source == "user"


async def test_gpu_from_accelerators(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    """README point 4: `accelerators[{name, count, memory}]` when the machine lists them (schema-optional)."""
    row = serve(paperspace_fake, "get_machine_ready")
    row["accelerators"] = [{"name": "A100-80GB", "count": 8, "memory": 85899345920}]
    got = await client.get(MACHINE)
    assert (got.gpu, got.gpu_count) == ("A100-80GB", 8)
    assert got.detail["machine_type"] == "placeholder-type"


def test_fake_machines_carry_every_recorded_field(paperspace_fake: FakePaperspace) -> None:
    """README point 5: the fake's machines lacked usageRate, storageRate, dtDeleted, publicIpType, ..."""
    made = paperspace_fake.add_machine("ps1", "off")
    assert set(made) >= set(recorded("paperspace", "get_machine_off"))


# -- lists: the recorded pages, and both ends of the cursor ----------------------------------------------------

async def test_recorded_list(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    serve(paperspace_fake, "get_machine_ready")
    assert raw_get(paperspace_fake, "/machines") == (200, recorded("paperspace", "list_machines"))
    [listed] = await client.list_instances()
    assert (listed.provider_id, listed.state) == (MACHINE, "running")


@pytest.mark.parametrize("last_page", ["absent", "null"])
async def test_pages_end_with_next_page_absent_or_null(vtime: VirtualTime, last_page: str) -> None:
    with FakePaperspace(page_size=2, last_page=last_page) as fake:  # type: ignore[arg-type]
        for i in range(3):
            fake.add_machine(f"ps{i}")
        pc = make(fake, vtime)
        try:
            assert [m.provider_id for m in await pc.list_instances()] == ["ps0", "ps1", "ps2"]
        finally:
            await pc.close()
        _, last = raw_get(fake, "/machines?after=cur-2&limit=2")
        assert last["hasMore"] is False and ("nextPage" in last) == (last_page == "null")


async def test_recorded_ip_and_snapshot_lists_are_residuals(client: PaperspaceClient,
                                                            paperspace_fake: FakePaperspace) -> None:
    """The recorded public IP (no assignedMachineId: matched by the machine's last address) and snapshot (its
    machineId) both keep billing after the machine is deleted."""
    row = serve(paperspace_fake, "get_machine_off")
    row["publicIp"] = recorded("paperspace", "list_public_ips")["items"][0]["ip"]
    paperspace_fake.public_ips = recorded("paperspace", "list_public_ips")["items"]
    paperspace_fake.snapshots = recorded("paperspace", "list_snapshots")["items"]
    await client.terminate(MACHINE)
    outcome = await client.wait_gone(MACHINE, timeout_s=5, poll_s=1)
    assert outcome.gone and not outcome.meter_stopped
    assert sorted((r.kind, r.ident) for r in outcome.residuals) == [("public-ip", "203.0.113.1"),
                                                                    ("snapshot", "placeholder-id")]


# -- every recorded error body --------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "status", "error"), [
    ("error_401", 401, CloudAuthError), ("error_404", 404, CloudNotFound), ("error_500", 500, CloudAPIError),
])
async def test_recorded_error_bodies(client: PaperspaceClient, paperspace_fake: FakePaperspace, name: str,
                                     status: int, error: type[CloudAPIError]) -> None:
    serve(paperspace_fake, "get_machine_ready")
    paperspace_fake.fail("GET", f"/machines/{MACHINE}", status, recorded("paperspace", name), times=99)
    with pytest.raises(error) as info:
        await client.get(MACHINE)
    assert type(info.value) is error and info.value.status == status
    assert "placeholder: not documented" in str(info.value)
    assert paperspace_fake.error_body(status) == recorded("paperspace", name)


async def test_recorded_429_is_retried(client: PaperspaceClient, paperspace_fake: FakePaperspace,
                                       vtime: VirtualTime) -> None:
    serve(paperspace_fake, "get_machine_ready")
    paperspace_fake.fail("GET", f"/machines/{MACHINE}", 429, recorded("paperspace", "error_429"),
                         headers={"Retry-After": "2"})
    assert (await client.get(MACHINE)).state == "running"
    assert vtime.sleeps == [2.0] and paperspace_fake.error_body(429) == recorded("paperspace", "error_429")


# -- through the provider and the whole CLI ---------------------------------------------------------------------

async def test_the_users_rate_is_the_price(paperspace_fake: FakePaperspace, cloud_env: Path, tmp_path: Path) -> None:
    serve(paperspace_fake, "get_machine_ready")
    adapter = CloudProvider("paperspace", tmp_path / ".rgt", api_base=paperspace_fake.url, check_ssh=False)
    try:
        status = await adapter.get(InstanceConfig(name="gpu", provider="paperspace", id=MACHINE, price_per_hour=2.3))
    finally:
        await adapter.close()
    assert (status.state, status.price_per_hour, status.price_source) == ("running", 2.3, "user")
    assert status.detail["api"]["usage_rate"] == 0.0


@pytest.fixture
def cli_fake() -> Iterator[FakePaperspace]:
    with FakePaperspace() as fake:
        yield fake


@pytest.mark.parametrize("word", ["off", "starting"])  # a running one has its GPU from the box
def test_report_of_a_recorded_machine(cli_fake: FakePaperspace, cloud_env: Path, tmp_path: Path, word: str) -> None:
    serve(cli_fake, f"get_machine_{word}")
    root = cloud_project(tmp_path, f'provider = "paperspace"\nid = "{MACHINE}"\napi_base = "{cli_fake.url}"\n'
                                   'price_per_hour = 2.3')
    result = rgt("--report", str(root), "--format", "json", cwd=root)
    assert result.returncode in (0, 1), (result.returncode, result.stdout, result.stderr)
    assert FAKE_KEY not in result.stdout + result.stderr
    [instance] = json.loads(result.stdout)["instances"]
    assert (instance["id"], instance["state"], instance["gpu"]) == (MACHINE, STATES[word], "placeholder-type")
    assert (instance["price_per_hour"], instance["price_source"]) == (2.3, "user")
    assert [r.method for r in cli_fake.requests()] == ["GET"] * len(cli_fake.requests())


@pytest.mark.sshd
async def test_down_of_a_machine_holding_unpulled_results_is_refused(cloud_home: Path, sshd: Sshd,
                                                                     tmp_path: Path) -> None:
    """r1 finished on the recorded machine and was never pulled: `rgt down` refuses with exit 3, and Paperspace
    sees neither the shut-down nor the delete."""
    with StampedPaperspace() as fake:
        serve(fake, "get_machine_ready")
        root = cloud_project(tmp_path, f'provider = "paperspace"\nid = "{MACHINE}"\napi_base = "{fake.url}"\n'
                                       f'host = "{sshd.target}"\nprice_per_hour = 2.3')
        fake.machines[MACHINE]["publicIp"] = sshd.host
        session = await finished_run(root, sshd, fake)
        await close(session)
        result = rgt("down", RUN, str(root), "--confirm", MACHINE, cwd=root)
        assert result.returncode == 3, (result.stdout, result.stderr)
        assert [r for r in fake.requests() if r.method != "GET"] == [], "a destroying request reached Paperspace"
        assert INSTANCE in result.stderr and f"results not known to be home: {RUN}" in result.stderr, result.stderr
        assert FAKE_KEY not in result.stdout + result.stderr
