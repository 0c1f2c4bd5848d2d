"""Providers declare what they can do (issue 11, item 4): callers ask with isinstance against the capability
protocols of providers.base and cloud.client, never by probing for an attribute."""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.providers.base import BatchJobs, Creatable, Provider, WaitsGone
from remote_gpu_trainer.providers.cloud.client import Launches
from remote_gpu_trainer.providers.cloud.lambda_cloud import LambdaClient
from remote_gpu_trainer.providers.cloud.paperspace import PaperspaceClient
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from remote_gpu_trainer.providers.cloud.runpod import RunPodClient
from remote_gpu_trainer.providers.cloud.vastai import VastAIClient
from remote_gpu_trainer.providers.local import LocalProvider
from remote_gpu_trainer.providers.sim import SimProvider
from remote_gpu_trainer.providers.slurm.provider import SlurmProvider
from remote_gpu_trainer.providers.ssh import SSHProvider


def capabilities(provider: Provider) -> set[str]:
    return {name for name, protocol in (("create", Creatable), ("wait_gone", WaitsGone), ("batch", BatchJobs))
            if isinstance(provider, protocol)}


def test_each_provider_declares_exactly_what_it_can_do(tmp_path: Path) -> None:
    assert capabilities(SimProvider(tmp_path / "sim")) == {"create"}
    assert capabilities(LocalProvider()) == set()
    assert capabilities(SSHProvider(tmp_path)) == set()
    assert capabilities(SlurmProvider(tmp_path)) == {"batch"}
    assert capabilities(CloudProvider("runpod", tmp_path, check_ssh=False)) == {"wait_gone"}


def test_only_clients_with_a_create_call_launch() -> None:
    launching = [client for client in (RunPodClient, VastAIClient, LambdaClient, PaperspaceClient)
                 if isinstance(client(api_key="k"), Launches)]
    assert launching == [RunPodClient, VastAIClient, LambdaClient]


def test_every_client_path_is_one_the_profile_declares() -> None:
    client = VastAIClient(api_key="k")
    stop = client.route("stop", "12")
    assert (stop.method, stop.path, stop.body) == ("PUT", "/v0/instances/12/", {"state": "stopped"})
    assert client.route("get", "../x").path == "/v0/instances/..%2Fx/"  # an id never reaches another endpoint
    assert client.gone_when == ("null:instances", "status:unloaded", "absent:list")
