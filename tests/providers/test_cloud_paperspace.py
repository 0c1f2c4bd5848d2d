"""PaperspaceClient against the local Paperspace fake (docs/providers.md §6): pages, off-before-delete,
audits, pspace's credential files. The fake serves the recorded machine object (tests/fixtures/providers/paperspace);
test_paperspace_recorded.py replays every recorded body on its own."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.credentials import CredentialsMissing
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.paperspace import PAPERSPACE_STATES, PaperspaceClient
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakePaperspace, VirtualTime, assert_no_key, fake_client

paperspace_fake = fake_clouds.paperspace_fake
vtime = fake_clouds.vtime


def make(fake: FakePaperspace, vtime: VirtualTime, **kwargs: object) -> PaperspaceClient:
    client: PaperspaceClient = fake_client(PaperspaceClient, fake, vtime, "PAPERSPACE_API_KEY", **kwargs)
    return client


@pytest.fixture
async def client(paperspace_fake: FakePaperspace, vtime: VirtualTime) -> AsyncIterator[PaperspaceClient]:
    pc = make(paperspace_fake, vtime)
    yield pc
    await pc.close()


async def test_list_follows_every_page(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    for i in range(5):
        paperspace_fake.add_machine(f"ps{i}")
    machines = await client.list_instances()
    assert [m.provider_id for m in machines] == ["ps0", "ps1", "ps2", "ps3", "ps4"]
    pages = paperspace_fake.requests("GET", "/machines")
    assert [p.query.get("after") for p in pages] == [None, ["cur-2"], ["cur-4"]]
    assert all(p.headers["authorization"] == f"Bearer {FAKE_KEY}" for p in pages)


async def test_a_repeated_cursor_is_an_error_not_a_loop(client: PaperspaceClient,
                                                        paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.fail("GET", "/machines", 200, {"items": [], "hasMore": True, "nextPage": "same"}, times=5)
    with pytest.raises(CloudAPIError, match="same page cursor came back twice"):
        await client.list_instances()


async def test_machine_fields_and_no_price(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1", machineType="A100-80G", region="ny2", storageTotal=100 * (1 << 30),
                                usageRate=3.09, storageRate=0.29)
    machine = await client.get("ps1")
    assert (machine.state, machine.raw_state, machine.gpu, machine.region) == ("running", "ready", "A100-80G", "ny2")
    assert (machine.price_per_hour, machine.price_source) == (None, "none")  # usageRate has no stated unit
    assert (machine.detail["usage_rate"], machine.detail["storage_rate"]) == (3.09, 0.29)
    assert machine.storage[0].size_gb == 100.0 and machine.storage[0].bills_while_stopped


@pytest.mark.parametrize(("word", "state"), [
    ("ready", "running"), ("serviceready", "running"), ("off", "stopped"), ("stopping", "stopping"),
    ("provisioning", "pending"), ("starting", "pending"), ("restarting", "pending"), ("upgrading", "pending"),
    ("hibernating", "unknown"),
])
async def test_state_words(client: PaperspaceClient, paperspace_fake: FakePaperspace, word: str, state: str) -> None:
    paperspace_fake.add_machine("ps1", word)
    machine = await client.get("ps1")
    assert (machine.state, machine.raw_state) == (state, word)


def test_state_table_values() -> None:
    assert set(PAPERSPACE_STATES.values()) <= set(INSTANCE_STATES)


async def test_stop_patches(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1")
    await client.stop("ps1")
    assert len(paperspace_fake.requests("PATCH", "/machines/ps1/stop")) == 1
    assert (await client.get("ps1")).state == "stopping"


async def test_terminate_stops_first_waits_for_off_then_deletes(client: PaperspaceClient,
                                                               paperspace_fake: FakePaperspace,
                                                               vtime: VirtualTime) -> None:
    paperspace_fake.add_machine("ps1")
    paperspace_fake.stop_polls = 2
    await client.terminate("ps1")
    calls = [(r.method, r.path) for r in paperspace_fake.log]
    assert calls == [("GET", "/machines/ps1"), ("PATCH", "/machines/ps1/stop"), ("GET", "/machines/ps1"),
                     ("GET", "/machines/ps1"), ("GET", "/machines/ps1"), ("DELETE", "/machines/ps1")]
    assert vtime.sleeps == [5.0, 5.0]


async def test_delete_of_a_running_machine_is_refused_by_the_provider(client: PaperspaceClient,
                                                                      paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1")
    with pytest.raises(CloudAPIError, match="HTTP 400: Machine must be off before it can be deleted"):
        await client.http.request("DELETE", "/machines/ps1")


async def test_machine_that_never_turns_off_is_not_deleted(client: PaperspaceClient,
                                                           paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1")
    paperspace_fake.stop_polls = 10_000
    with pytest.raises(VerbFailed, match="still stopping after 600s"):
        await client.terminate("ps1")
    assert paperspace_fake.requests("DELETE") == []


async def test_lingering_then_gone_with_ip_and_snapshot_residuals(client: PaperspaceClient,
                                                                  paperspace_fake: FakePaperspace,
                                                                  vtime: VirtualTime) -> None:
    paperspace_fake.add_machine("ps1", "off", static_ip="203.0.113.50")
    paperspace_fake.add_machine("ps2", "off", static_ip="203.0.113.51")
    paperspace_fake.public_ips.append({"ip": "203.0.113.99", "assignedMachineId": None, "region": "ny2"})
    paperspace_fake.snapshots = [{"id": f"snap{i}", "name": f"s{i}", "machineId": "ps1", "isAutoSnapshot": False}
                                 for i in range(3)] + [{"id": "other", "name": "o", "machineId": "ps2"}]
    paperspace_fake.linger["ps1"] = 2
    await client.terminate("ps1")
    outcome = await client.wait_gone("ps1", timeout_s=100, poll_s=4)
    assert outcome.gone and outcome.polls == 3 and vtime.sleeps == [4, 4]
    kinds = sorted((r.kind, r.ident) for r in outcome.residuals)
    assert kinds == [("public-ip", "203.0.113.50"), ("snapshot", "snap0"), ("snapshot", "snap1"),
                     ("snapshot", "snap2")]
    ip = next(r for r in outcome.residuals if r.kind == "public-ip")
    assert ip.ended_by == "pspace public-ip release 203.0.113.50"
    assert not outcome.meter_stopped
    snapshot_pages = paperspace_fake.requests("GET", "/snapshots")
    assert len(snapshot_pages) == 2 and snapshot_pages[0].query["machineId"] == ["ps1"]


async def test_a_404_read_while_still_listed_is_not_gone(client: PaperspaceClient,
                                                       paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1", "off")
    paperspace_fake.fail("GET", "/machines/ps1", 404, paperspace_fake.error_body(404, "Machine not found"))
    outcome = await client.wait_gone("ps1", timeout_s=2, poll_s=1)
    assert not outcome.gone and outcome.state == "stopped" and outcome.polls == 3
    assert len(paperspace_fake.requests("GET", "/machines")) == 1  # the list was asked after the 404


async def test_clean_teardown_stops_the_meter(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1", "off")
    await client.terminate("ps1")
    outcome = await client.wait_gone("ps1", timeout_s=10, poll_s=1)
    assert outcome.gone and outcome.residuals == () and outcome.meter_stopped


async def test_failed_audit_is_reported_not_dropped(client: PaperspaceClient,
                                                    paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1", "off")
    paperspace_fake.fail("GET", "/public-ips", 500, {"code": "INTERNAL_SERVER_ERROR", "message": "ip service down"},
                         times=99)
    await client.terminate("ps1")
    outcome = await client.wait_gone("ps1", timeout_s=10, poll_s=1)
    assert outcome.gone and not outcome.meter_stopped
    assert any("ip service down" in e for e in outcome.errors)
    [audit] = [r for r in outcome.residuals if r.kind == "audit"]
    assert not audit.confirmed


async def test_not_gone_lists_block_storage(client: PaperspaceClient, paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("ps1", "off", storageTotal=100 * (1 << 30))
    outcome = await client.wait_gone("ps1", timeout_s=2, poll_s=1)
    assert not outcome.gone and outcome.state == "stopped"
    storage = next(r for r in outcome.residuals if r.kind == "block-storage")
    assert "100 GB block storage" in storage.detail


async def test_vanished_machine(client: PaperspaceClient) -> None:
    with pytest.raises(CloudNotFound, match="HTTP 404: placeholder: not documented"):
        await client.get("ghost")


async def test_timeout_mid_delete_requeries(paperspace_fake: FakePaperspace, vtime: VirtualTime) -> None:
    paperspace_fake.add_machine("ps1", "off")
    paperspace_fake.hang("DELETE", "/machines/ps1", 1.5, apply=True)
    pc = make(paperspace_fake, vtime, terminate_timeout_s=0.5)
    try:
        await pc.terminate("ps1")
    finally:
        await pc.close()
    assert [(r.method, r.path) for r in paperspace_fake.log] == [
        ("GET", "/machines/ps1"), ("DELETE", "/machines/ps1"), ("GET", "/machines/ps1")]


async def test_429_on_a_page(client: PaperspaceClient, paperspace_fake: FakePaperspace, vtime: VirtualTime) -> None:
    for i in range(3):
        paperspace_fake.add_machine(f"ps{i}")
    paperspace_fake.rate_limit("GET", "/machines", "4", times=1)
    assert len(await client.list_instances()) == 3
    assert vtime.sleeps == [4.0]


async def test_wrong_key(paperspace_fake: FakePaperspace, vtime: VirtualTime) -> None:
    pc = make(paperspace_fake, vtime, environ={"PAPERSPACE_API_KEY": "wrong-key-1234"})
    try:
        with pytest.raises(CloudAuthError, match="HTTP 401: placeholder: not documented"):
            await pc.list_instances()
    finally:
        await pc.close()


async def test_key_from_legacy_cli_config(paperspace_fake: FakePaperspace, vtime: VirtualTime,
                                          tmp_path: Path) -> None:
    (tmp_path / ".paperspace").mkdir()
    (tmp_path / ".paperspace" / "config.json").write_text(json.dumps({"apiKey": FAKE_KEY, "name": "me"}))
    pc = PaperspaceClient(api_base=paperspace_fake.url, environ={}, home=tmp_path,
                          http=HttpOptions(sleep=vtime.sleep))
    try:
        assert await pc.list_instances() == []
    finally:
        await pc.close()


async def test_the_key_appears_nowhere(paperspace_fake: FakePaperspace, vtime: VirtualTime,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    paperspace_fake.add_machine("ps1", "off")
    paperspace_fake.fail("GET", "/snapshots", 400, {"code": "BAD", "message": f"key {FAKE_KEY} no"}, times=9)
    pc = make(paperspace_fake, vtime)
    try:
        await pc.terminate("ps1")
        outcome = await pc.wait_gone("ps1", timeout_s=5, poll_s=1)
    finally:
        await pc.close()
    assert outcome.errors and "<redacted>" in outcome.errors[0]
    assert_no_key(repr(pc), outcome, *outcome.errors, *(r.getMessage() for r in caplog.records))


# -- pspace's own credential files (PS-cli credentials.ts, config.ts) ------------------------------------------

def pspace_home(home: Path, keys: dict[str, str], team: str | None) -> Path:
    """~/.paperspace as pspace writes it: credentials.toml with one key per team in [keys], config.toml with the
    current team."""
    folder = home / ".paperspace"
    folder.mkdir(parents=True)
    (folder / "credentials.toml").write_text(
        "[keys]\n" + "".join(f'{name} = "{value}"\n' for name, value in keys.items()), encoding="utf-8")
    (folder / "config.toml").write_text(f'team = "{team}"\n' if team else "", encoding="utf-8")
    return home


async def list_with_home(fake: FakePaperspace, home: Path, environ: dict[str, str] | None = None) -> list[str]:
    pc = PaperspaceClient(api_base=fake.url, environ=environ or {}, home=home)
    try:
        return [m.provider_id for m in await pc.list_instances()]
    finally:
        await pc.close()


async def test_key_of_the_current_team_from_pspace_credentials(paperspace_fake: FakePaperspace,
                                                               tmp_path: Path) -> None:
    """The old profile read only the legacy config.json: pspace's credentials.toml found no key at all."""
    paperspace_fake.add_machine("ps1")
    home = pspace_home(tmp_path, {"other-team": "wrong-key-1234", "ml-team": FAKE_KEY}, team="ml-team")
    assert await list_with_home(paperspace_fake, home) == ["ps1"]
    assert paperspace_fake.requests()[-1].headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_another_teams_key_is_never_taken(paperspace_fake: FakePaperspace, tmp_path: Path) -> None:
    home = pspace_home(tmp_path, {"other-team": "wrong-key-1234"}, team="ml-team")
    with pytest.raises(CredentialsMissing, match=r"PAPERSPACE_API_KEY .*credentials\.toml"):
        await list_with_home(paperspace_fake, home)
    assert paperspace_fake.requests() == []


async def test_one_team_without_a_current_team_is_that_key(paperspace_fake: FakePaperspace, tmp_path: Path) -> None:
    home = pspace_home(tmp_path, {"only-team": FAKE_KEY}, team=None)
    assert await list_with_home(paperspace_fake, home) == []


async def test_the_env_var_overrides_pspace_credentials(paperspace_fake: FakePaperspace, tmp_path: Path) -> None:
    home = pspace_home(tmp_path, {"ml-team": "wrong-key-1234"}, team="ml-team")
    assert await list_with_home(paperspace_fake, home, {"PAPERSPACE_API_KEY": FAKE_KEY}) == []
    assert paperspace_fake.requests()[-1].headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_legacy_config_json_is_the_fallback(paperspace_fake: FakePaperspace, tmp_path: Path) -> None:
    home = pspace_home(tmp_path, {"other-team": "wrong-key-1234"}, team="ml-team")
    (home / ".paperspace" / "config.json").write_text(json.dumps({"apiKey": FAKE_KEY}))
    assert await list_with_home(paperspace_fake, home) == []
