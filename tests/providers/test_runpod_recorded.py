"""Every recorded RunPod body (tests/fixtures/providers/runpod, from RunPod's own OpenAPI files and migration guide;
its README names each source) replayed through the real RunPodClient, then through the whole CLI.

The fake serves each body as recorded; only the network volume's size comes from the recorded NetworkVolume. What
the old v1 client did with these bodies is in each test's comment: every such test fails on the v1 client
(`desiredStatus`, `costPerHr`, `networkVolumeId`, `/pods/{id}/stop`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.runpod import RunPodClient, parse_pod
from support import fake_clouds
from support.cloud_teardown_fixtures import RUN, cloud_project
from support.fake_clouds import FAKE_KEY, FakeRunPod, VirtualTime, assert_no_key
from support.recorded import names, recorded
from support.sshd_fixtures import free_port

runpod_fake = fake_clouds.runpod_fake
vtime = fake_clouds.vtime
cloud_env = fake_clouds.cloud_env

VOLUME_GB_MONTH, NETWORK_GB_MONTH, MONTH_H = 0.20, 0.07, 730.0  # RunPod's pricing pages (docs/providers.md)
STOPPED_20_GB = 20 * VOLUME_GB_MONTH / MONTH_H
NETWORK_50_GB = 50 * NETWORK_GB_MONTH / MONTH_H

# recorded body → (state, raw state, price, GPU, storage sizes by name, SSH host and port)
GPU = "NVIDIA GeForce RTX 4090"
PODS: dict[str, tuple[str, str, float, str, dict[str, float | None], tuple[str | None, int | None]]] = {
    "v2_get_pod_running": ("running", "RUNNING", 0.44, GPU, {"container": 50, "volume": 20}, ("195.26.233.3", 34446)),
    "v2_create_pod_provisioning": ("pending", "PROVISIONING", 0.44, GPU, {"container": 50, "volume": 20},
                                   (None, None)),  # ssh.direct null, runtime {}: no address yet
    "v2_get_pod_starting": ("pending", "STARTING", 0.44, GPU, {"container": 50, "volume": 20}, (None, None)),
    "v2_get_pod_exited": ("stopped", "EXITED", 0.0, GPU, {"container": 50, "volume": 20}, (None, None)),
    "v2_get_pod_error": ("unknown", "ERROR", 0.44, GPU, {"container": 50, "volume": 20}, (None, None)),
    "v2_get_pod_terminated": ("terminated", "TERMINATED", 0.0, GPU, {"container": 50, "volume": 20}, (None, None)),
    "v2_get_pod_network_volume": ("running", "RUNNING", 0.44, GPU, {"container": 50, "network-volume": 50},
                                  ("195.26.233.3", 34446)),
    # v1 bodies (a profile pinned to v1): adjustedCostPerHr, what the account pays after Savings Plans, wins
    "v1_get_pod_running": ("running", "RUNNING", 0.69, "", {"container": 50, "volume": 20, "network-volume": 50},
                           ("100.65.0.119", 10341)),
    "v1_get_pod_exited": ("stopped", "EXITED", 0.69, "", {"container": 50, "volume": 20, "network-volume": 50},
                          ("100.65.0.119", 10341)),
    "v1_get_pod_terminated": ("terminated", "TERMINATED", 0.69, "",
                              {"container": 50, "volume": 20, "network-volume": 50}, ("100.65.0.119", 10341)),
}


def serve(fake: FakeRunPod, name: str) -> dict[str, Any]:
    """The recorded body as the pod the fake serves, and the recorded network volume its mount names."""
    pod = recorded("runpod", name)
    fake.pods[pod["id"]] = pod
    for mount in (pod.get("mounts") or {}).get("network") or ():
        fake.add_volume(mount["volumeId"], 50)
    return pod


@pytest.fixture
async def client(runpod_fake: FakeRunPod, vtime: VirtualTime) -> AsyncIterator[RunPodClient]:
    rp = RunPodClient(api_base=runpod_fake.url, environ={"RUNPOD_API_KEY": FAKE_KEY},
                      http=HttpOptions(sleep=vtime.sleep, clock=vtime.clock, jitter=lambda: 1.0))
    yield rp
    await rp.close()


def test_every_recorded_pod_body_has_an_expectation() -> None:
    assert sorted(PODS) == [n for n in names("runpod") if "get_pod" in n or "create_pod" in n]


@pytest.mark.parametrize("name", sorted(PODS))
async def test_each_recorded_pod_reads_as_the_provider_says(client: RunPodClient, runpod_fake: FakeRunPod,
                                                            name: str) -> None:
    # the v1 client read every v2 body as `unknown` with no price (it read desiredStatus and costPerHr)
    state, raw, price, gpu, storage, (host, port) = PODS[name]
    pod = await client.get(serve(runpod_fake, name)["id"])
    assert (pod.state, pod.raw_state, pod.price_per_hour, pod.price_source, pod.gpu) == (
        state, raw, price, "api", gpu)
    assert {s.name: s.size_gb for s in pod.storage} == storage
    assert (pod.public_ip, pod.ssh_port) == (host, port)


async def test_the_recorded_lists_read_in_both_shapes(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    runpod_fake.fail("GET", "/pods", 200, recorded("runpod", "v2_list_pods"))  # `{"pods": [...]}`
    [pod] = await client.list_instances()
    assert (pod.provider_id, pod.state, pod.price_per_hour) == ("7h9k2m4n6p", "running", 0.44)
    runpod_fake.fail("GET", "/pods", 200, recorded("runpod", "v1_list_pods"))  # v1: a bare array
    [pod] = await client.list_instances()
    assert (pod.provider_id, pod.state, pod.price_per_hour) == ("xedezhzb9la3ye", "running", 0.69)


async def test_a_network_volume_is_seen_and_outlives_the_pod(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    # the v1 client read `networkVolumeId`, which no pod carries: the residual never fired on the real API
    pod_id = serve(runpod_fake, "v2_get_pod_network_volume")["id"]
    await client.get(pod_id)
    await client.terminate(pod_id)
    assert [(r.method, r.path) for r in runpod_fake.log if r.method != "GET"] == [("DELETE", f"/pods/{pod_id}")]
    outcome = await client.wait_gone(pod_id, timeout_s=60, poll_s=5)
    assert outcome.gone and [(r.kind, r.ident) for r in outcome.residuals] == [("network-volume", "vol_xyz")]


async def test_an_unreadable_network_volume_keeps_no_size_never_zero(client: RunPodClient,
                                                                    runpod_fake: FakeRunPod) -> None:
    pod_id = serve(runpod_fake, "v2_get_pod_network_volume")["id"]
    runpod_fake.fail("GET", "/network-volumes/vol_xyz", 404, recorded("runpod", "v2_error_404"))
    [network] = [s for s in (await client.get(pod_id)).storage if s.name == "network-volume"]
    assert (network.ident, network.size_gb) == ("vol_xyz", None)


async def test_a_terminated_pod_is_gone_by_its_own_word(client: RunPodClient, runpod_fake: FakeRunPod) -> None:
    # v2: TERMINATED is "permanently deleted", cost 0.0; the v1 profile kept it `terminating` at its compute price
    pod_id = serve(runpod_fake, "v2_get_pod_terminated")["id"]
    outcome = await client.wait_gone(pod_id, timeout_s=60, poll_s=5)
    assert (outcome.gone, outcome.state, outcome.raw_state, outcome.polls) == (True, "terminated", "TERMINATED", 1)


@pytest.mark.parametrize(("status", "name", "error", "text"), [
    (401, "v2_error_401", CloudAuthError, "HTTP 401: Unauthorized: missing bearer token"),
    (403, "v2_error_403", CloudAuthError, "HTTP 403: Forbidden: access denied"),
    (404, "v2_error_404", CloudNotFound, "HTTP 404: Not Found: resource not found"),
    (404, "v2_error_404_pod_migration_guide", CloudNotFound, "HTTP 404: Not Found: The requested Pod does not exist."),
    (401, "v1_error_401", CloudAuthError, "HTTP 401: placeholder: not documented"),
    (404, "v1_error_404_pod_migration_guide", CloudNotFound, "HTTP 404: Pod not found"),
    (500, "v2_error_500", CloudAPIError, "HTTP 500: Internal Server Error"),
])
async def test_each_recorded_error_body_is_said_in_the_providers_words(
        client: RunPodClient, runpod_fake: FakeRunPod, status: int, name: str, error: type[Exception],
        text: str) -> None:
    serve(runpod_fake, "v2_get_pod_running")
    runpod_fake.fail("GET", "/pods/7h9k2m4n6p", status, recorded("runpod", name), times=10)
    with pytest.raises(error) as info:
        await client.get("7h9k2m4n6p")
    assert text in str(info.value)
    assert_no_key(str(info.value))


async def test_the_recorded_429_waits_its_retry_after(client: RunPodClient, runpod_fake: FakeRunPod,
                                                      vtime: VirtualTime) -> None:
    serve(runpod_fake, "v2_get_pod_running")
    runpod_fake.fail("GET", "/pods/7h9k2m4n6p", 429, recorded("runpod", "v2_error_429"),
                     headers={"Retry-After": "12"})  # the documented example: Retry-After: 12
    assert (await client.get("7h9k2m4n6p")).state == "running"
    assert vtime.sleeps == [12.0]


async def test_stop_is_the_v2_action_and_a_refused_action_is_an_error(client: RunPodClient,
                                                                      runpod_fake: FakeRunPod) -> None:
    pod_id = serve(runpod_fake, "v2_get_pod_terminated")["id"]  # TERMINATED allows no action: 409
    with pytest.raises(CloudAPIError, match="HTTP 409"):
        await client.stop(pod_id)
    [sent] = runpod_fake.requests("POST", f"/pods/{pod_id}/action")
    assert sent.body == {"action": "stop"}


# -- through the whole CLI ------------------------------------------------------------------------------------

def project(tmp_path: Path, fake: FakeRunPod, pod_id: str) -> Path:
    """Run r1 declared on the pod, never launched; the pod's SSH is a loopback port nobody listens on."""
    return cloud_project(tmp_path, f'provider = "runpod"\nid = "{pod_id}"\napi_base = "{fake.url}"\n'
                                   f'host = "root@127.0.0.1:{free_port()}"')


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# recorded body → (burn per hour, estimate): the meter's rule on what the body says
BURN = {
    "v2_get_pod_running": (0.44, False),
    "v2_create_pod_provisioning": (0.44, False),
    "v2_get_pod_starting": (0.44, False),
    "v2_get_pod_exited": (STOPPED_20_GB, False),  # cost 0.0, the 20 GB volume disk at $0.20/GB/month
    "v2_get_pod_error": (0.44, True),  # a state v2 does not price: its listed cost, as an estimate
    "v2_get_pod_terminated": (0.0, False),
    "v2_get_pod_network_volume": (0.44 + NETWORK_50_GB, False),
    "v1_get_pod_exited": (STOPPED_20_GB + NETWORK_50_GB, False),  # not the 0.74 (0.69) compute price
}


@pytest.mark.parametrize("name", sorted(BURN))
def test_the_report_shows_each_recorded_pod_and_the_gate_refuses_down(
        cloud_env: Path, tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str],
        name: str) -> None:
    pod = serve(runpod_fake, name)
    root = project(tmp_path, runpod_fake, pod["id"])
    code, out, err = rgt(capsys, "--report", "--format", "json", str(root))
    assert code == 0, err
    [box] = json.loads(out)["instances"]
    state, _, price, gpu = PODS[name][:4]
    burn, estimate = BURN[name]
    assert (box["state"], box["price_per_hour"], box["price_source"], box["gpu"] or "") == (
        state, price, "api", gpu or ("-" if state == "terminated" else "?"))
    assert box["burn_per_hour"] == pytest.approx(burn, abs=1e-6) and box["estimate"] is estimate
    code, _, err = rgt(capsys, "down", RUN, str(root), "--confirm", pod["id"])
    if state == "terminated":
        assert code != 0 and "nothing" in err.lower() or code == 0, err  # gone already: nothing to destroy
    else:
        assert code == 3, err  # r1 on a box nobody could ask: unknown is not empty
    assert [(r.method, r.path) for r in runpod_fake.log if r.method != "GET"] == []


def test_rgt_status_bills_a_stopped_orphan_its_storage_not_its_compute_price(
        cloud_env: Path, tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    # before: a v1 EXITED orphan showed $0.74/h (its costPerHr) while the same pod in a project burned storage only
    mine = serve(runpod_fake, "v2_get_pod_running")
    orphan = recorded("runpod", "v1_get_pod_exited")
    runpod_fake.pods[orphan["id"]] = orphan
    root = project(tmp_path, runpod_fake, mine["id"])
    code, out, err = rgt(capsys, "status", str(root), "--format", "json", "--timeout", "10")
    document = json.loads(out)
    [row] = document["orphans"]
    assert (row["id"], row["state"], row["price_per_hour"]) == (orphan["id"], "stopped", 0.69)
    assert row["burn_per_hour"] == pytest.approx(STOPPED_20_GB + NETWORK_50_GB, abs=1e-9)
    assert (row["estimate"], row["bills"]) == (False, True) and code == 1, err
    code, out, _ = rgt(capsys, "status", str(root), "--timeout", "10")
    [line] = [line for line in out.splitlines() if line.startswith("runpod") and orphan["id"] in line]
    assert "$0.0103/h" in line and "$0.69" not in line, line  # 20 GB stopped + 50 GB network volume


def test_a_pod_in_a_word_rgt_does_not_map_can_still_be_ended_but_a_silent_one_cannot(
        cloud_env: Path, tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    # ERROR is RunPod's own answer: the pod exists and bills `cost`, so the user can end it (here giving up r1,
    # which nobody could ask about); before, "instance state is unknown" refused the terminate for good
    pod = serve(runpod_fake, "v2_get_pod_error")
    root = project(tmp_path / "error", runpod_fake, pod["id"])
    code, _, err = rgt(capsys, "down", RUN, str(root), "--confirm", pod["id"], "--accept-loss", RUN)
    assert code == 0, err
    assert ("DELETE", f"/pods/{pod['id']}") in [(r.method, r.path) for r in runpod_fake.log]
    # an API that does not answer is no answer: nothing is sent, whatever the user accepts to lose
    silent = serve(runpod_fake, "v2_get_pod_running")
    silent["id"] = "silentpod1"
    runpod_fake.pods["silentpod1"] = silent
    runpod_fake.fail("GET", "/pods/silentpod1", 503, recorded("runpod", "v2_error_500"), times=1000)
    root = project(tmp_path / "silent", runpod_fake, "silentpod1")
    code, _, err = rgt(capsys, "down", RUN, str(root), "--confirm", "silentpod1", "--accept-loss", RUN)
    assert code != 0 and "instance state is unknown" in err, err
    assert ("DELETE", "/pods/silentpod1") not in [(r.method, r.path) for r in runpod_fake.log]


def test_v1_cost_per_hour_is_read_as_the_string_the_spec_shows_when_no_savings_plan_applies() -> None:
    pod = recorded("runpod", "v1_get_pod_running")
    del pod["adjustedCostPerHr"]  # no Savings Plan: costPerHr, which the v1 spec's example gives as "0.74"
    assert (parse_pod(pod).price_per_hour, parse_pod(pod).price_source) == (0.74, "api")


def test_a_box_not_rented_yet_bills_nothing_whatever_price_rgt_toml_quotes(
        cloud_env: Path, tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    # no id in rgt.toml: no box to ask and none to bill; the unknown-state rule prices boxes that exist
    root = cloud_project(tmp_path, f'provider = "runpod"\napi_base = "{runpod_fake.url}"\nprice_per_hour = 2.5')
    code, out, err = rgt(capsys, "--report", "--format", "json", str(root))
    [box] = json.loads(out)["instances"]
    assert (box["state"], box["burn_per_hour"], box["estimate"], box["cost_so_far"]) == ("unknown", 0.0, False, 0.0)
    assert runpod_fake.requests() == []
