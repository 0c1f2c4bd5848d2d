"""Contract tests: every recorded Lambda Cloud body (tests/fixtures/providers/lambda, spec 1.8.3) through the real
client served by the local fake, and through the whole CLI (issue 25; docs/providers.md §5).

Each point of the fixtures README's "Where rgt reads it differently" for Lambda has a test here that fails on
the code before issue 25: (1) the base URL, (2) unhealthy/preempted priced and preemption seen, (3) launch pacing
(test_cloud_lambda.py), (4) the auth note, (5) the fake's ids and invented codes, (6) a real-shaped id loads through
the CLI, (7) NFS from file_system_mounts.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits import preemption
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.profiles import load_profile
from remote_gpu_trainer.providers.cloud.client import shipped_api
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudAuthError, CloudNotFound
from remote_gpu_trainer.providers.cloud.lambda_cloud import LambdaClient
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from support import cloud_teardown_fixtures, fake_clouds
from support.cloud_teardown_fixtures import INSTANCE, RUN, StampedLambda, close, cloud_project, finished_run
from support.fake_clouds import FAKE_KEY, FakeLambda, VirtualTime, fake_client
from support.fake_lambda import lambda_id
from support.gate_helpers import rgt
from support.recorded import names, recorded
from support.sshd_fixtures import Sshd

lambda_fake = fake_clouds.lambda_fake
vtime = fake_clouds.vtime
cloud_env = fake_clouds.cloud_env
cloud_home = cloud_teardown_fixtures.cloud_home

LAMBDA_ID = "0920582c7ff041399e34823a0be62549"  # the recorded instance's id: 32 lowercase hex digits
PRICE = 10.32  # price_cents_per_hour 1032
GPU = "A100 (40 GB SXM4)"
NFS_ID = "a098b0c7ff041399e34823a0be62549"
# status word → what rgt shows (state); every one carries the API's price (Lambda bills until terminate)
STATES = {"booting": "pending", "active": "running", "unhealthy": "unknown", "terminating": "terminating",
          "terminated": "terminated", "preempted": "unknown"}


def make(fake: FakeLambda, vtime: VirtualTime, **kwargs: object) -> LambdaClient:
    client: LambdaClient = fake_client(LambdaClient, fake, vtime, "LAMBDA_API_KEY",
                                       **{"rate_limit_per_s": 0, **kwargs})
    return client


@pytest.fixture
async def client(lambda_fake: FakeLambda, vtime: VirtualTime) -> AsyncIterator[LambdaClient]:
    lc = make(lambda_fake, vtime)
    yield lc
    await lc.close()


def serve(fake: FakeLambda, name: str) -> dict[str, Any]:
    """The recorded `data` of `name`, served as-is under its own id."""
    row: dict[str, Any] = recorded("lambda", name)["data"]
    fake.instances[row["id"]] = row
    return row


def raw_get(fake: FakeLambda, path: str, key: str = FAKE_KEY) -> tuple[int, bytes]:
    request = urllib.request.Request(fake.url + path, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the local fake
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# -- every recorded instance state ----------------------------------------------------------------------------

def test_every_recorded_state_is_covered() -> None:
    assert {n.removeprefix("get_instance_") for n in names("lambda", "get_instance_")} == set(STATES)


@pytest.mark.parametrize("word", sorted(STATES))
async def test_recorded_instance_in_each_state(client: LambdaClient, lambda_fake: FakeLambda, word: str) -> None:
    """unhealthy and preempted read `unknown` (raw word kept) and still carry the API's price: before issue 25
    the price was carried too, but nothing said why; the meter bills it as an estimate (test through the CLI
    below)."""
    serve(lambda_fake, f"get_instance_{word}")
    got = await client.get(LAMBDA_ID)
    assert (got.state, got.raw_state) == (STATES[word], word)
    assert (got.price_per_hour, got.price_source) == (PRICE, "api")
    assert (got.gpu, got.gpu_count, got.region, got.public_ip) == (GPU, 8, "us-west-1", "198.51.100.2")
    local, nfs = got.storage
    assert (local.name, local.size_gb, local.bills_while_stopped) == ("local", 6144.0, False)
    assert (nfs.name, nfs.ident, nfs.survives_terminate) == ("nfs", "my-filesystem", True)
    assert got.detail["file_systems"] == [{"name": "my-filesystem", "id": NFS_ID,
                                           "mount_point": "/lambda/nfs/my-filesystem"}]
    assert "03b7d30d9d3e4d8fa41657bc0d478c1b" not in repr(got.detail)  # the jupyter token is not carried


async def test_recorded_list(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    serve(lambda_fake, "get_instance_active")
    status, body = raw_get(lambda_fake, "/instances")
    assert status == 200 and json.loads(body) == recorded("lambda", "list_instances")
    [listed] = await client.list_instances()
    assert (listed.provider_id, listed.state, listed.price_per_hour) == (LAMBDA_ID, "running", PRICE)


async def test_the_list_has_no_terminated_instance(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    """The spec's list is "List running instances": a terminated one is never listed (the fake used to list it)."""
    serve(lambda_fake, "get_instance_terminated")
    assert await client.list_instances() == []


async def test_recorded_terminate_answer(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    serve(lambda_fake, "get_instance_active")
    await client.terminate(LAMBDA_ID)
    [post] = lambda_fake.requests("POST", "/instance-operations/terminate")
    assert post.body == {"instance_ids": [LAMBDA_ID]}
    # what the fake answered is the recorded terminate example, value for value
    lambda_fake.instances[LAMBDA_ID]["status"] = "terminating"
    assert {"data": {"terminated_instances": [lambda_fake.instances[LAMBDA_ID]]}} == recorded("lambda",
                                                                                              "terminate_200")


async def test_nfs_from_file_system_mounts_alone(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    """README point 7: an instance whose filesystem shows only in `file_system_mounts` still has its NFS residual
    (the old client read only `file_system_names` and saw nothing to keep billing)."""
    row = serve(lambda_fake, "get_instance_active")
    row["file_system_names"] = []
    await client.terminate(LAMBDA_ID)
    outcome = await client.wait_gone(LAMBDA_ID, timeout_s=5, poll_s=1)
    assert outcome.gone and not outcome.meter_stopped
    [nfs] = outcome.residuals
    assert (nfs.kind, nfs.ident) == ("nfs", NFS_ID) and "bills until deleted" in nfs.detail


async def test_preempted_is_named_as_still_billing(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    row = serve(lambda_fake, "get_instance_preempted")
    row["file_system_names"], row["file_system_mounts"] = [], []
    outcome = await client.wait_gone(LAMBDA_ID, timeout_s=1, poll_s=1)
    assert not outcome.gone and (outcome.state, outcome.raw_state) == ("unknown", "preempted")
    assert [r.kind for r in outcome.residuals] == ["instance", "preempted"]
    assert "bills until terminate" in outcome.residuals[1].detail


async def test_preempted_reads_as_a_preemption_through_the_provider(lambda_fake: FakeLambda, cloud_env: Path,
                                                                    tmp_path: Path) -> None:
    """The preemption audit (audits/preemption.py) reads the raw state the provider keeps: a Lambda `preempted`
    is a preemption wherever rgt has that notion (resume, the watch), priced, never `terminated`."""
    serve(lambda_fake, "get_instance_preempted")
    adapter = CloudProvider("lambda", tmp_path / ".rgt", api_base=lambda_fake.url, check_ssh=False)
    try:
        status = await adapter.get(InstanceConfig(name="gpu", provider="lambda", id=LAMBDA_ID))
    finally:
        await adapter.close()
    assert (status.state, status.price_per_hour, status.price_source) == ("unknown", PRICE, "api")
    assert preemption.preempted_word(preemption.provider_words(status.detail)) == "preempted"


# -- every recorded error body --------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "status", "error", "message"), [
    ("error_401", 401, CloudAuthError, "API key was invalid, expired, or deleted."),
    ("error_403", 403, CloudAuthError, "Your account is inactive."),
    ("error_404", 404, CloudNotFound, "Specified instance does not exist."),
    ("error_5xx_provider_unavailable", 503, CloudAPIError, "Provider unavailable"),
    ("error_internal", 400, CloudAPIError, "An internal server error occurred."),
])
async def test_recorded_error_bodies(client: LambdaClient, lambda_fake: FakeLambda, name: str, status: int,
                                     error: type[CloudAPIError], message: str) -> None:
    serve(lambda_fake, "get_instance_active")
    lambda_fake.fail("GET", f"/instances/{LAMBDA_ID}", status, recorded("lambda", name), times=99)
    with pytest.raises(error) as info:
        await client.get(LAMBDA_ID)
    assert type(info.value) is error and info.value.status == status
    assert message in str(info.value), str(info.value)


async def test_the_fakes_own_errors_are_the_recorded_envelopes(lambda_fake: FakeLambda) -> None:
    """README point 5: the fake made up `global/too-many-requests` and `global/unknown`; it now answers with the
    recorded envelopes, and a 429 with no body at all (the spec documents none)."""
    assert raw_get(lambda_fake, "/instances", key="wrong-key-1234") == (
        401, json.dumps(recorded("lambda", "error_401")).encode())
    assert raw_get(lambda_fake, "/instances/nope") == (404, json.dumps(recorded("lambda", "error_404")).encode())
    lambda_fake.rate_limit("GET", "/instances", "0")
    assert raw_get(lambda_fake, "/instances") == (429, b"")
    for status in (400, 401, 403, 404, 429, 500, 502, 503, 504):
        body = lambda_fake.error_body(status)
        code = body["error"]["code"] if body else None
        assert code not in ("global/too-many-requests", "global/unknown"), (status, body)
        assert body is None or body in [recorded("lambda", n) for n in names("lambda", "error_")]


async def test_a_429_without_a_body_is_retried(client: LambdaClient, lambda_fake: FakeLambda,
                                               vtime: VirtualTime) -> None:
    serve(lambda_fake, "get_instance_active")
    lambda_fake.rate_limit("GET", f"/instances/{LAMBDA_ID}", "3")
    assert (await client.get(LAMBDA_ID)).state == "running"
    assert vtime.sleeps == [3.0]


# -- the profile and the fake's ids -----------------------------------------------------------------------------

def test_profile_targets_the_current_host_with_bearer() -> None:
    """README points 1 and 4: cloud.lambdalabs.com is the spec's deprecated server; Bearer is recommended."""
    api = shipped_api("lambda")
    assert api.base_url == "https://cloud.lambda.ai/api/v1"
    assert api.auth_scheme == "bearer" and api.verified == "2026-12"
    assert api.conflict and api.conflict.startswith("settled by spec 1.8.3")
    assert load_profile("lambda").pricing.verified == "2026-12"


async def test_launched_ids_are_lambda_shaped(client: LambdaClient, lambda_fake: FakeLambda) -> None:
    """README point 5: the fake handed out `lam1`; Lambda's ids are 32 lowercase hex digits."""
    from remote_gpu_trainer.providers.cloud.types import GpuRequest

    lambda_fake.add_type("gpu_1x_a100", GPU, 1, 129, ["us-east-1"])
    made = await client.launch(GpuRequest("A100", ssh_key_names=("me",)))
    assert made.provider_id == lambda_id(1) and re.fullmatch(r"[0-9a-f]{32}", made.provider_id)


# -- through the whole CLI ---------------------------------------------------------------------------------------

@pytest.fixture
def cli_fake() -> Iterator[FakeLambda]:
    with FakeLambda() as fake:
        yield fake


def report_instance(root: Path) -> dict[str, Any]:
    result = rgt("--report", str(root), "--format", "json", cwd=root)
    assert result.returncode in (0, 1), (result.returncode, result.stdout, result.stderr)
    assert FAKE_KEY not in result.stdout + result.stderr
    [instance] = json.loads(result.stdout)["instances"]
    return dict(instance)


@pytest.mark.parametrize("word", ["unhealthy", "preempted"])
def test_report_of_a_real_shaped_lambda_id_in_a_billing_unknown_state(cli_fake: FakeLambda, cloud_env: Path,
                                                                      tmp_path: Path, word: str) -> None:
    """A project whose Lambda instance `id` is a real 32-hex id loads (issue 25 item 2), and the report shows
    the instance unknown, at the API's price, burning it as an estimate (Lambda bills until terminate)."""
    serve(cli_fake, f"get_instance_{word}")
    root = cloud_project(tmp_path, f'provider = "lambda"\nid = "{LAMBDA_ID}"\napi_base = "{cli_fake.url}"')
    instance = report_instance(root)
    assert (instance["id"], instance["state"], instance["gpu"]) == (LAMBDA_ID, "unknown", f"8x {GPU}")
    assert (instance["price_per_hour"], instance["price_source"]) == (PRICE, "api")
    assert instance["burn_per_hour"] == pytest.approx(PRICE) and instance["estimate"] is True, instance
    assert cli_fake.requests("POST") == []


@pytest.mark.sshd
async def test_down_of_a_preempted_box_holding_unpulled_results_is_refused(cloud_home: Path, sshd: Sshd,
                                                                           tmp_path: Path) -> None:
    """r1 finished on the box and was never pulled; the box reads `preempted` (billing). `rgt down` refuses with
    exit 3 and Lambda never sees a terminate."""
    with StampedLambda() as fake:
        serve(fake, "get_instance_active")
        root = cloud_project(tmp_path, f'provider = "lambda"\nid = "{LAMBDA_ID}"\napi_base = "{fake.url}"\n'
                                       f'host = "{sshd.target}"')
        session = await finished_run(root, sshd, fake)
        await close(session)
        fake.instances[LAMBDA_ID]["status"] = "preempted"
        result = rgt("down", RUN, str(root), "--confirm", LAMBDA_ID, cwd=root)
        assert result.returncode == 3, (result.stdout, result.stderr)
        assert fake.requests("POST") == [], "a terminate reached Lambda"
        assert RUN in result.stderr and FAKE_KEY not in result.stdout + result.stderr
        assert INSTANCE in result.stderr and f"results not known to be home: {RUN}" in result.stderr, result.stderr
