"""RunPodClient against the local RunPod REST v2 fake (docs/providers.md §3): shapes, states, teardown, launch.

The fake serves the recorded v2 pod (tests/support/fake_runpod.py); tests/providers/test_runpod_recorded.py replays
every recorded body as it is."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.providers.cloud.client import LaunchOverBudget, TeardownUnconfirmed
from remote_gpu_trainer.providers.cloud.credentials import CredentialsMissing
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.runpod import RUNPOD_STATES, RunPodClient
from remote_gpu_trainer.providers.cloud.types import GpuRequest
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeRunPod, VirtualTime, assert_no_key, exception_chain, fake_client
from support.recorded import recorded

runpod_fake = fake_clouds.runpod_fake
vtime = fake_clouds.vtime


def make(fake: FakeRunPod, vtime: VirtualTime, **kwargs: object) -> RunPodClient:
    client: RunPodClient = fake_client(RunPodClient, fake, vtime, "RUNPOD_API_KEY", **kwargs)
    return client


@pytest.fixture
async def client(runpod_fake: FakeRunPod, vtime: VirtualTime) -> AsyncIterator[RunPodClient]:
    rp = make(runpod_fake, vtime)
    yield rp
    await rp.close()


async def test_list_maps_the_pod_objects(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.add_pod("p2", "EXITED", cost=None, network_volume="nv-9")
    pods = {p.provider_id: p for p in await client.list_instances()}
    one, two = pods["p1"], pods["p2"]
    assert (one.state, one.raw_state, one.gpu, one.gpu_count) == ("running", "RUNNING", "NVIDIA A40", 1)
    assert (one.price_per_hour, one.price_source, one.currency) == (0.44, "api", "USD")
    assert (one.public_ip, one.ssh_port, one.uptime_s, one.region) == ("203.0.113.7", 40022, 3600.0, "US-KS-2")
    assert {s.name: s.size_gb for s in one.storage} == {"container": 50.0, "volume": 50.0}
    assert (two.state, two.price_per_hour, two.price_source) == ("stopped", 0.0, "api")  # v2: cost 0.0 when EXITED
    [network] = [s for s in two.storage if s.name == "network-volume"]
    assert (network.ident, network.size_gb, network.survives_terminate) == ("nv-9", 50.0, True)
    assert len(runpod_fake.requests("GET", "/network-volumes/nv-9")) == 1  # its size: asked, not guessed
    [logged] = runpod_fake.requests("GET", "/pods")
    assert logged.headers["authorization"] == f"Bearer {FAKE_KEY}"


async def test_to_status_bridges_to_the_provider_protocol(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    status = (await client.get("p1")).to_status("gpu-box")
    assert (status.name, status.provider, status.provider_id, status.state) == ("gpu-box", "runpod", "p1", "running")
    assert status.detail["raw_state"] == "RUNNING"


@pytest.mark.parametrize(("word", "state"), [
    ("RUNNING", "running"), ("EXITED", "stopped"), ("PROVISIONING", "pending"), ("STARTING", "pending"),
    ("TERMINATED", "terminated"), ("ERROR", "unknown"), ("CREATED", "unknown"), ("DEAD", "unknown"),
    ("MIGRATING", "unknown"), ("", "unknown"),
])
async def test_state_words(client: RunPodClient, runpod_fake: FakeRunPod, word: str, state: str) -> None:
    runpod_fake.add_pod("p1", word)
    pod = await client.get("p1")
    assert (pod.state, pod.raw_state) == (state, word)


async def test_a_pod_back_from_stop_with_zero_gpus_says_zero(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1", gpu_count=0, runtime={"uptime": 0, "ports": []})
    pod = await client.get("p1")
    assert (pod.gpu_count, pod.uptime_s) == (0, 0.0)  # RP1: a real zero, not a fallback to the requested count


def test_state_table_is_plain_data_onto_instance_states() -> None:
    assert set(RUNPOD_STATES.values()) <= set(INSTANCE_STATES)
    assert "dead" not in RUNPOD_STATES


async def test_get_of_a_vanished_pod_is_not_found(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    await client.get("p1")
    del runpod_fake.pods["p1"]
    with pytest.raises(CloudNotFound, match="Not Found: resource not found"):
        await client.get("p1")
    outcome = await client.wait_gone("p1", timeout_s=60, poll_s=5)
    assert (outcome.gone, outcome.state, outcome.polls) == (True, "terminated", 1)


async def test_stop_posts_the_stop_action(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1")
    await client.stop("p1")
    [stop] = runpod_fake.requests("POST", "/pods/p1/action")
    assert stop.body == {"action": "stop"}
    assert (await client.get("p1")).state == "stopped"


async def test_terminate_then_poll_a_lingering_pod_until_404(client: RunPodClient, runpod_fake: FakeRunPod,
                                                             vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.linger["p1"] = 3  # RP14: the DELETE answers OK, the pod still reads back for 3 polls
    await client.terminate("p1")
    outcome = await client.wait_gone("p1", timeout_s=600, poll_s=5)
    assert outcome.gone and outcome.state == "terminated"
    assert outcome.polls == 4 and vtime.sleeps == [5, 5, 5]
    assert outcome.residuals == () and outcome.meter_stopped
    methods = [(r.method, r.path) for r in runpod_fake.log]
    assert methods[:2] == [("GET", "/pods/p1"), ("DELETE", "/pods/p1")]  # read before the destructive call
    assert methods.count(("DELETE", "/pods/p1")) == 1


async def test_wait_gone_timeout_reports_what_still_bills(client: RunPodClient, runpod_fake: FakeRunPod,
                                                          vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1", network_volume="nv-1")
    runpod_fake.linger["p1"] = 100
    await client.terminate("p1")
    outcome = await client.wait_gone("p1", timeout_s=10, poll_s=5)
    assert not outcome.gone and outcome.state == "running" and outcome.raw_state == "RUNNING"
    assert outcome.polls == 3 and outcome.waited_s == 10
    assert [r.kind for r in outcome.residuals] == ["instance", "network-volume"]
    assert not outcome.meter_stopped


async def test_network_volume_is_a_residual_even_when_the_pod_is_gone(client: RunPodClient,
                                                                      runpod_fake: FakeRunPod) -> None:
    runpod_fake.add_pod("p1", network_volume="nv-7")
    await client.terminate("p1")
    outcome = await client.wait_gone("p1", timeout_s=60, poll_s=1)
    assert outcome.gone
    [residual] = outcome.residuals
    assert (residual.kind, residual.ident) == ("network-volume", "nv-7")
    assert "separately" in residual.ended_by


async def test_terminate_of_an_already_gone_pod_sends_no_delete(client: RunPodClient,
                                                               runpod_fake: FakeRunPod) -> None:
    await client.terminate("ghost")
    assert runpod_fake.requests("DELETE") == []


async def test_timeout_mid_terminate_requeries_instead_of_assuming(runpod_fake: FakeRunPod,
                                                                    vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.hang("DELETE", "/pods/p1", 1.5, apply=True)  # the delete took, the answer never came
    rp = make(runpod_fake, vtime, terminate_timeout_s=0.5)
    try:
        await rp.terminate("p1")
    finally:
        await rp.close()
    methods = [(r.method, r.path) for r in runpod_fake.log]
    assert methods == [("GET", "/pods/p1"), ("DELETE", "/pods/p1"), ("GET", "/pods/p1")]


async def test_timeout_mid_terminate_that_did_not_take_is_retried_once(runpod_fake: FakeRunPod,
                                                                      vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.hang("DELETE", "/pods/p1", 1.5, apply=False)
    rp = make(runpod_fake, vtime, terminate_timeout_s=0.5)
    try:
        await rp.terminate("p1")
        outcome = await rp.wait_gone("p1", timeout_s=5, poll_s=1)
    finally:
        await rp.close()
    methods = [(r.method, r.path) for r in runpod_fake.log]
    assert methods[:4] == [("GET", "/pods/p1"), ("DELETE", "/pods/p1"), ("GET", "/pods/p1"), ("DELETE", "/pods/p1")]
    assert outcome.gone


async def test_terminate_that_never_answers_is_unconfirmed_not_gone(runpod_fake: FakeRunPod,
                                                                    vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.hang("DELETE", "/pods/p1", 1.5, apply=False, times=2)
    rp = make(runpod_fake, vtime, terminate_timeout_s=0.5)
    try:
        with pytest.raises(TeardownUnconfirmed) as info:
            await rp.terminate("p1")
    finally:
        await rp.close()
    assert "RUNNING (running)" in str(info.value) and "do not assume" in str(info.value)
    assert_no_key(*exception_chain(info.value))
    assert len(runpod_fake.requests("DELETE")) == 2


async def test_failing_polls_leave_the_state_unknown(client: RunPodClient, runpod_fake: FakeRunPod,
                                                     vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    await client.get("p1")
    runpod_fake.fail("GET", "/pods/p1", 503, runpod_fake.error_body(503, "upstream down"), times=1000)
    outcome = await client.wait_gone("p1", timeout_s=5, poll_s=5)
    assert not outcome.gone and outcome.state == "unknown"
    assert outcome.errors and "HTTP 503: Service Unavailable: upstream down" in outcome.errors[0]
    assert outcome.residuals[0].kind == "instance"  # the last sight of it: assume it bills


async def test_429_on_list_is_retried_after_retry_after(client: RunPodClient, runpod_fake: FakeRunPod,
                                                        vtime: VirtualTime) -> None:
    runpod_fake.add_pod("p1")
    runpod_fake.rate_limit("GET", "/pods", "3")
    assert [p.provider_id for p in await client.list_instances()] == ["p1"]
    assert vtime.sleeps == [3.0]


async def test_5xx_then_a_clear_error(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.fail("GET", "/pods", 500, recorded("runpod", "v2_error_500"), times=10)
    with pytest.raises(CloudAPIError) as info:
        await client.list_instances()
    assert str(info.value) == ("runpod: GET /pods failed after 5 attempts: HTTP 500: Internal Server Error: "
                               "placeholder: not documented")


async def test_wrong_key_gets_the_documented_401(runpod_fake: FakeRunPod, vtime: VirtualTime) -> None:
    rp = make(runpod_fake, vtime, environ={"RUNPOD_API_KEY": "rgt-fake-OTHER-123456"})
    try:
        with pytest.raises(CloudAuthError) as info:
            await rp.list_instances()
    finally:
        await rp.close()
    assert info.value.status == 401 and "Unauthorized: missing bearer token" in str(info.value)
    assert "rgt-fake-OTHER-123456" not in str(info.value)


async def test_key_from_runpodctl_config_and_base_url_from_env(runpod_fake: FakeRunPod, vtime: VirtualTime,
                                                               tmp_path: Path) -> None:
    (tmp_path / ".runpod").mkdir()
    (tmp_path / ".runpod" / "config.toml").write_text(f'apikey = "{FAKE_KEY}"\n')
    runpod_fake.add_pod("p1")
    rp = RunPodClient(environ={"RUNPOD_API_URL": runpod_fake.url}, home=tmp_path, http=HttpOptions(sleep=vtime.sleep))
    try:
        assert (await rp.get("p1")).provider_id == "p1"
    finally:
        await rp.close()


def test_missing_key_names_env_var_and_file(tmp_path: Path) -> None:
    with pytest.raises(CredentialsMissing, match=r"RUNPOD_API_KEY .*~/\.runpod/config\.toml"):
        RunPodClient(environ={}, home=tmp_path)


async def test_launch_posts_the_gpu_constraint(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    request = GpuRequest("NVIDIA A40", image="runpod/pytorch:2.4", gpu_count=2, max_price_per_hour=1.0,
                         disk_gb=80, name="exp1")
    pod = await client.launch(request)
    assert (pod.state, pod.raw_state, pod.price_per_hour, pod.gpu_count) == ("pending", "PROVISIONING", 0.88, 2)
    [post] = runpod_fake.requests("POST", "/pods")
    assert post.body == {"name": "exp1", "image": "runpod/pytorch:2.4", "gpu": {"id": "NVIDIA A40", "count": 2},
                         "cloud": "SECURE", "disk": 20, "mounts": {"persistent": {"size": 80, "path": "/workspace"}},
                         "ports": ["22/tcp"], "startSsh": True}
    assert client.last_seen(pod.provider_id) == pod


async def test_a_spot_launch_is_refused_before_anything_is_created(client: RunPodClient,
                                                                  runpod_fake: FakeRunPod) -> None:
    with pytest.raises(VerbFailed, match="no interruptible"):
        await client.launch(GpuRequest("NVIDIA A40", image="img", interruptible=True))
    assert runpod_fake.requests("POST") == []


async def test_launch_over_the_ceiling_names_the_billing_pod(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    with pytest.raises(LaunchOverBudget) as info:
        await client.launch(GpuRequest("NVIDIA H100 80GB HBM3", image="img", max_price_per_hour=2.0))
    assert info.value.instance.provider_id == "new1"
    assert "new1" in str(info.value) and "$2.990/h" in str(info.value) and "billing now" in str(info.value)


async def test_failed_launch_is_not_retried(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    with pytest.raises(CloudAPIError, match="no instances currently available"):
        await client.launch(GpuRequest("NVIDIA B200", image="img"))
    assert len(runpod_fake.requests("POST", "/pods")) == 1


async def test_the_key_appears_nowhere(runpod_fake: FakeRunPod, vtime: VirtualTime,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    runpod_fake.add_pod("p1")
    runpod_fake.fail("GET", "/pods/p1", 400, runpod_fake.error_body(400, f"bad key {FAKE_KEY}"), times=1)
    runpod_fake.rate_limit("GET", "/pods", "1")
    rp = make(runpod_fake, vtime)
    try:
        await rp.list_instances()
        with pytest.raises(CloudAPIError) as info:
            await rp.get("p1")
        outcome = await rp.wait_gone("p1", timeout_s=1, poll_s=1)
    finally:
        await rp.close()
    assert_no_key(repr(rp), repr(info.value), *exception_chain(info.value), outcome, repr(outcome),
                  *(r.getMessage() for r in caplog.records))
