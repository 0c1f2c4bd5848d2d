"""The one cloud adapter (providers/cloud_provider.py) against the local fake APIs and a real loopback sshd.

What it must get right: states only ever from the provider's word (a failed read is `unknown`, never
`terminated`), the SSH address the API reports reaching the transport, teardown and launch delegated to the
clients, and keys only from the environment or the provider CLI's file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import EXIT_USAGE, ConfigError, RgtError, TransportError
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.client import UnsupportedAction
from remote_gpu_trainer.providers.cloud.http import HttpOptions
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from remote_gpu_trainer.providers.cloud.types import GpuRequest
from remote_gpu_trainer.providers.registry import provider_for
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown, accept_host_key
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from support import fake_clouds
from support.fake_clouds import (
    FAKE_KEY,
    FakeAutoDL,
    FakeLambda,
    FakePaperspace,
    FakeRunPod,
    FakeVast,
    VirtualTime,
    assert_no_key,
)
from support.sshd_fixtures import Sshd, free_port, settings_for

runpod_fake = fake_clouds.runpod_fake
vast_fake = fake_clouds.vast_fake
lambda_fake = fake_clouds.lambda_fake
paperspace_fake = fake_clouds.paperspace_fake
autodl_fake = fake_clouds.autodl_fake
vtime = fake_clouds.vtime

Make = Callable[..., CloudProvider]


cloud_env = fake_clouds.cloud_env
pytestmark = pytest.mark.usefixtures("cloud_env")


@pytest.fixture
async def make(tmp_path: Path, vtime: VirtualTime) -> AsyncIterator[Make]:
    """Adapters on virtual time (retries and polls do not wait) with the SSH check off; closed afterwards."""
    made: list[CloudProvider] = []

    def build(provider: str, url: str, **kwargs: Any) -> CloudProvider:
        options: dict[str, Any] = {"api_base": url, "check_ssh": False,
                                   "http": HttpOptions(sleep=vtime.sleep, clock=vtime.clock, jitter=lambda: 1.0)}
        options.update(kwargs)
        adapter = CloudProvider(provider, tmp_path / ".rgt", **options)
        made.append(adapter)
        return adapter

    yield build
    for adapter in made:
        await adapter.close()


def box(provider: str, ident: str | None = "p1", **kwargs: Any) -> InstanceConfig:
    return InstanceConfig(name="gpu", provider=provider, id=ident, **kwargs)


# The provider table's clouds, and the rows that name an API client: the same providers (providers/table.py).
CLOUD_PROVIDERS = table.of_kind("cloud")
CLIENTS = tuple(row.name for row in table.rows() if row.client is not None)


# -- the registry -------------------------------------------------------------------------------------------

def test_the_registry_serves_every_cloud_through_the_one_adapter(tmp_path: Path) -> None:
    assert set(CLOUD_PROVIDERS) == set(CLIENTS)
    for name in CLOUD_PROVIDERS:
        adapter = provider_for(box(name), tmp_path)
        assert isinstance(adapter, CloudProvider)
        assert (adapter.name, adapter.profile.id) == (name, name)
    with pytest.raises(ConfigError, match="kubernetes"):
        provider_for(box("kubernetes"), tmp_path)


# -- get ----------------------------------------------------------------------------------------------------

async def test_provider_for_maps_a_running_pod_and_surfaces_its_unknown_host_key(
        runpod_fake: FakeRunPod, sshd: Sshd, tmp_path: Path) -> None:
    runpod_fake.add_pod("p1", host=sshd.host, port=sshd.port)
    adapter = provider_for(box("runpod", api_base=runpod_fake.url), tmp_path / ".rgt")
    try:
        status = await adapter.get(box("runpod", api_base=runpod_fake.url))
    finally:
        await adapter.close()
    assert (status.state, status.price_source, status.price_per_hour) == ("running", "api", 0.44)
    assert (status.provider, status.provider_id, status.gpu) == ("runpod", "p1", "NVIDIA A40")
    detail = status.detail
    assert (detail["ssh_target"], detail["ssh_source"]) == (f"root@{sshd.host}:{sshd.port}", "api")
    unknown = detail["host_key_unknown"]  # the session turns this into the trust prompt, as for `ssh`
    assert isinstance(unknown, HostKeyUnknown) and unknown.port == sshd.port
    assert detail["ssh_reachable"] is False and "error" not in detail
    assert unknown.known_hosts_file == tmp_path / ".rgt" / "known_hosts"


async def test_a_trusted_host_key_then_meets_the_login(runpod_fake: FakeRunPod, sshd: Sshd, tmp_path: Path) -> None:
    runpod_fake.add_pod("p1", host=sshd.host, port=sshd.port)
    instance = box("runpod", api_base=runpod_fake.url)
    adapter = provider_for(instance, tmp_path / ".rgt")
    try:
        unknown = (await adapter.get(instance)).detail["host_key_unknown"]
        accept_host_key(unknown.known_hosts_file, unknown.host, unknown.port, unknown.key)
        detail = (await adapter.get(instance)).detail
    finally:
        await adapter.close()
    assert "host_key_unknown" not in detail
    assert "authentication refused" in detail["ssh_error"]  # no client key in the empty HOME: past the host key


async def test_get_fills_what_the_meter_and_teardown_read(make: Make, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.add_pod("p2", network_volume="nv-9")  # v2: a network volume or a persistent one, never both
    adapter = make("runpod", runpod_fake.url)
    status = await adapter.get(box("runpod"))
    mounted = {item["name"]: item for item in (await adapter.get(box("runpod", "p2"))).detail["storage"]}
    assert mounted["network-volume"]["survives_terminate"] and mounted["network-volume"]["size_gb"] == 50.0
    detail = status.detail
    assert (detail["uptime_s"], detail["started_at"], detail["raw_state"]) == (3600.0, "2026-06-01T12:02:00Z",
                                                                             "RUNNING")
    assert (detail["public_ip"], detail["ssh_host"], detail["ssh_port"], detail["ssh_user"]) == (
        "203.0.113.7", "203.0.113.7", 40022, "root")
    assert (detail["currency"], detail["region"], detail["gpu_count"]) == ("USD", "US-KS-2", 1)
    storage = {item["name"]: item for item in detail["storage"]}
    assert storage["volume"]["size_gb"] == 50.0 and "network-volume" not in storage
    # stopped, the 50 GB volume disk bills at the profile's $0.20/GB/month; the network volume is a residual
    assert status.storage_per_hour == pytest.approx(50 * 0.20 / 730)


async def test_an_unknown_state_word_is_unknown(make: Make, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1", "MIGRATING")
    status = await make("runpod", runpod_fake.url).get(box("runpod"))
    assert (status.state, status.detail["raw_state"]) == ("unknown", "MIGRATING")


async def test_server_errors_read_unknown_with_the_redacted_error(make: Make, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    adapter = make("runpod", runpod_fake.url)
    await adapter.get(box("runpod"))
    runpod_fake.fail("GET", "/pods/p1", 500, {"error": f"database down for key {FAKE_KEY}"}, times=10)
    status = await adapter.get(box("runpod"))
    assert status.state == "unknown"
    assert "HTTP 500" in status.detail["error"] and "database down" in status.detail["error"]
    assert (status.price_per_hour, status.price_source) == (0.44, "api")  # the last price seen, for the meter
    assert_no_key(status, status.detail)


async def test_no_api_at_all_reads_unknown_never_terminated(make: Make) -> None:
    status = await make("runpod", f"http://127.0.0.1:{free_port()}/v1").get(box("runpod"))
    assert status.state == "unknown"
    assert "no answer" in status.detail["error"]
    assert_no_key(status.detail)


async def test_a_404_is_gone_where_the_profile_says_so(make: Make, runpod_fake: FakeRunPod) -> None:
    status = await make("runpod", runpod_fake.url).get(box("runpod", "never-was"))
    assert (status.state, status.detail["gone_by"]) == ("terminated", "http:404")


async def test_a_terminated_state_word_no_gone_rule_trusts_is_terminating_not_terminated(
        make: Make, runpod_fake: FakeRunPod) -> None:
    """A state word counts as gone only under a gone_when rule (gone.py decides): RunPod v2 documents TERMINATED
    as permanently deleted and its profile trusts it; a pod whose word the rules do not name is not gone."""
    runpod_fake.add_pod("p1", status="TERMINATED")
    status = await make("runpod", runpod_fake.url).get(box("runpod", "p1"))
    assert (status.state, status.detail["raw_state"], status.price_per_hour) == ("terminated", "TERMINATED", 0.0)
    runpod_fake.add_pod("p2", status="Terminated pending")  # no rule names it, no table maps it
    status = await make("runpod", runpod_fake.url).get(box("runpod", "p2"))
    assert status.state == "unknown" and "gone_by" not in status.detail


async def test_paperspace_needs_the_list_to_agree_before_gone(make: Make, paperspace_fake: FakePaperspace) -> None:
    paperspace_fake.add_machine("m1")
    adapter = make("paperspace", paperspace_fake.url)
    paperspace_fake.fail("GET", "/machines/m1", 404, paperspace_fake.error_body(404, "Machine not found"))
    still_listed = await adapter.get(box("paperspace", "m1"))
    assert still_listed.state == "running"  # 404 alone is not enough: its gone_when is absent:list
    gone = await adapter.get(box("paperspace", "m2"))
    assert (gone.state, gone.detail["gone_by"]) == ("terminated", "absent:list")


async def test_an_autodl_instance_the_api_does_not_know_stays_unknown(make: Make, autodl_fake: FakeAutoDL) -> None:
    status = await make("autodl", autodl_fake.url).get(box("autodl", "gone-uuid"))
    assert status.state == "unknown" and "InstanceNotFound" in status.detail["error"]


@pytest.mark.parametrize(("provider", "fixture", "state"), [
    ("runpod", "runpod_fake", "stopped"), ("vastai", "vast_fake", "pending"), ("lambda", "lambda_fake", "pending"),
    ("paperspace", "paperspace_fake", "stopped"), ("autodl", "autodl_fake", "stopped"),
])
async def test_every_cloud_answers_get_through_provider_for(request: pytest.FixtureRequest, tmp_path: Path,
                                                            provider: str, fixture: str, state: str) -> None:
    fake = request.getfixturevalue(fixture)
    add_instance(fake, "1001")
    instance = box(provider, "1001", api_base=fake.url)
    adapter = provider_for(instance, tmp_path / ".rgt")
    try:
        status = await adapter.get(instance)
    finally:
        await adapter.close()
    assert (status.provider, status.provider_id, status.state) == (provider, "1001", state)
    assert status.state in INSTANCE_STATES and "error" not in status.detail
    assert fake.requests()[0].headers["authorization"].endswith(FAKE_KEY)


def add_instance(fake: Any, ident: str) -> None:
    """A not-yet-running instance in each fake (so `get` makes no SSH check)."""
    if isinstance(fake, FakeRunPod):
        fake.add_pod(ident, "EXITED")
    elif isinstance(fake, FakeVast):
        fake.add_instance(ident, "loading")
    elif isinstance(fake, FakeLambda):
        fake.add_instance(ident, "booting")
    elif isinstance(fake, FakePaperspace):
        fake.add_machine(ident, "off")
    elif isinstance(fake, FakeAutoDL):
        fake.add_instance(ident, "shutdown")


async def test_list_names_each_instance_by_its_label(make: Make, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.add_pod("p2", "EXITED")
    listed = {s.name: s for s in await make("runpod", runpod_fake.url, check_ssh=True).list_instances()}
    assert {name: s.state for name, s in listed.items()} == {"pod-p1": "running", "pod-p2": "stopped"}
    assert "ssh_reachable" not in listed["pod-p1"].detail  # listing never dials every box


# -- SSH addresses and the transport --------------------------------------------------------------------------

@pytest.mark.parametrize(("provider", "fixture", "target"), [
    ("runpod", "runpod_fake", "root@203.0.113.7:40022"),
    ("vastai", "vast_fake", "root@ssh2281.vast.ai:10882"),  # the recorded body's proxy SSH endpoint
    ("lambda", "lambda_fake", "ubuntu@198.51.100.2:22"),  # the recorded instance's ip
    ("paperspace", "paperspace_fake", "paperspace@198.18.0.9"),
    ("autodl", "autodl_fake", "root@connect.westb.seetacloud.com:23456"),
])
async def test_the_api_address_reaches_the_transport(request: pytest.FixtureRequest, make: Make, provider: str,
                                                     fixture: str, target: str) -> None:
    fake = request.getfixturevalue(fixture)
    add_instance(fake, "1001")
    adapter = make(provider, fake.url)
    status = await adapter.get(box(provider, "1001"))
    assert status.detail["ssh_target"] == target
    transport = adapter.transport(box(provider, "1001"))
    assert isinstance(transport, SSHTransport) and str(transport.target) == target


async def test_no_address_before_a_read_or_without_a_public_ip(make: Make, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1", host=None)
    adapter = make("runpod", runpod_fake.url)
    with pytest.raises(TransportError, match="no SSH address yet .*not read yet"):
        adapter.transport(box("runpod"))
    await adapter.get(box("runpod"))
    with pytest.raises(TransportError, match="no SSH address yet .*RUNNING"):
        adapter.transport(box("runpod"))


async def test_the_users_host_overrides_the_api_address(make: Make, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    adapter = make("runpod", runpod_fake.url)
    instance = box("runpod", host="me@jump-alias:2222")
    status = await adapter.get(instance)
    assert (status.detail["ssh_target"], status.detail["ssh_source"]) == ("me@jump-alias:2222", "instance.host")
    assert str(adapter.transport(instance).target) == "me@jump-alias:2222"


async def test_commands_run_on_the_box_the_api_points_at(make: Make, runpod_fake: FakeRunPod, sshd: Sshd,
                                                         tmp_path: Path) -> None:
    runpod_fake.add_pod("p1", host=sshd.host, port=sshd.port)
    adapter = make("runpod", runpod_fake.url, check_ssh=True, settings=settings_for(sshd, tmp_path / "ssh"))
    status = await adapter.get(box("runpod"))
    assert status.detail["ssh_reachable"] is True and "ssh_error" not in status.detail
    result = await adapter.transport(box("runpod")).run("echo reached")
    assert (result.rc, result.text.strip()) == (0, "reached")


# -- teardown and launch --------------------------------------------------------------------------------------

async def test_terminate_then_wait_gone_through_a_lingering_pod(make: Make, runpod_fake: FakeRunPod,
                                                                vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.linger["p1"] = 2  # RP14: DELETE answers OK, the pod still reads back twice
    adapter = make("runpod", runpod_fake.url)
    await adapter.get(box("runpod"))
    await adapter.terminate(box("runpod"))
    outcome = await adapter.wait_gone(box("runpod"), timeout_s=120, poll_s=5)
    assert (outcome.gone, outcome.state, outcome.polls, outcome.meter_stopped) == (True, "terminated", 3, True)
    assert vtime.sleeps == [5, 5] and len(runpod_fake.requests("DELETE", "/pods/p1")) == 1
    assert (await adapter.get(box("runpod"))).state == "terminated"


async def test_stop_delegates_or_says_why_there_is_none(make: Make, vast_fake: FakeVast,
                                                        lambda_fake: FakeLambda) -> None:
    vast_fake.add_instance("7")
    vast = make("vastai", vast_fake.url)
    await vast.stop(box("vastai", "7"))
    assert (await vast.get(box("vastai", "7"))).state == "stopped"
    with pytest.raises(UnsupportedAction, match="there is no stop"):
        await make("lambda", lambda_fake.url).stop(box("lambda", "l1"))


async def test_launch_through_the_adapter(make: Make, runpod_fake: FakeRunPod) -> None:
    created = await make("runpod", runpod_fake.url).launch(
        GpuRequest(gpu_type="NVIDIA A40", image="runpod/pytorch", max_price_per_hour=1.0, name="rgt-run"))
    assert (created.provider, created.provider_id, created.state, created.price_per_hour) == (
        "runpod", "new1", "pending", 0.44)
    [posted] = runpod_fake.requests("POST", "/pods")
    assert posted.body["gpu"] == {"id": "NVIDIA A40", "count": 1} and posted.body["name"] == "rgt-run"


async def test_launch_without_an_api_names_the_console_step(make: Make, paperspace_fake: FakePaperspace) -> None:
    with pytest.raises(UnsupportedAction, match="pspace machine create"):
        await make("paperspace", paperspace_fake.url).launch(GpuRequest(gpu_type="A100-80G"))


# -- credentials and the console-only AutoDL ------------------------------------------------------------------

async def test_a_missing_key_is_one_config_line_naming_the_env_var(make: Make, runpod_fake: FakeRunPod,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY")
    adapter = make("runpod", runpod_fake.url)  # constructing needs no key: the dashboard still draws
    with pytest.raises(ConfigError) as caught:
        await adapter.get(box("runpod"))
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_USAGE and "\n" not in message
    assert "RUNPOD_API_KEY" in message and "~/.runpod/config.toml" in message
    with pytest.raises(ConfigError, match="RUNPOD_API_KEY"):
        adapter.transport(box("runpod"))
    assert runpod_fake.requests() == []


async def test_the_key_may_come_from_the_provider_clis_file(make: Make, runpod_fake: FakeRunPod, cloud_env: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY")
    (cloud_env / ".runpod").mkdir()
    (cloud_env / ".runpod" / "config.toml").write_text(f'apiKey = "{FAKE_KEY}"\n')
    runpod_fake.add_pod("p1")
    assert (await make("runpod", runpod_fake.url).get(box("runpod"))).state == "running"


async def test_autodl_without_a_key_is_an_ssh_box(make: Make, sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTODL_TOKEN")
    adapter = make("autodl", "http://127.0.0.1:9/unused")
    instance = box("autodl", None, host=f"root@{sshd.host}:{sshd.port}", price_per_hour=1.8)
    status = await adapter.get(instance)
    assert (status.provider, status.state, status.price_per_hour, status.price_source) == (
        "autodl", "unknown", 1.8, "user")
    assert isinstance(status.detail["host_key_unknown"], HostKeyUnknown)  # state from reachability
    await adapter.terminate(instance)  # recorded as the user's attestation, as for `ssh`
    attested = await adapter.get(instance)
    assert (attested.state, attested.detail["evidence"]) == ("terminated", "user-attested")
    with pytest.raises(ConfigError, match="'autodl' without an API key"):
        adapter.transport(box("autodl", None))
    with pytest.raises(RgtError, match="AutoDL console"):
        await adapter.launch(GpuRequest(gpu_type="RTX 4090"))
    with pytest.raises(UnsupportedAction, match="attest"):
        await adapter.wait_gone(instance)


async def test_an_api_price_above_the_quote_raises_a_drift_alert(tmp_path: Path, runpod_fake: FakeRunPod) -> None:
    """The user quoted $0.40/h in rgt.toml; the API bills $0.44/h: the API price is kept (source api) and the
    dashboard's alert line names the drift; at $0.41 (within 5 %) it stays quiet."""
    from support.helpers import write_project

    runpod_fake.add_pod("p1", host="127.0.0.1", port=free_port())  # SSH refused at once
    for quote, drifts in ((0.40, True), (0.43, False)):
        root = tmp_path / f"q{quote}"
        body = f'provider = "runpod"\nid = "p1"\napi_base = "{runpod_fake.url}"\nprice_per_hour = {quote}'
        write_project(root, "true", roster=("seed0",), instance="gpu", instance_body=body)
        session = open_session(str(root))
        try:
            status = await instance_status(session, "gpu")
            assert (status.price_per_hour, status.price_source) == (0.44, "api")
            overview = await observe_and_build(session)
            drift = [a for a in overview.alerts if "PRICE DRIFT" in a]
            assert bool(drift) is drifts
            if drifts:
                assert "0.44/h differs from the quoted 0.4/h (+10.0%)" in drift[0]
        finally:
            await session.close_transports()
            session.close()
