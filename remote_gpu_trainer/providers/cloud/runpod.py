"""RunPod Pods over the REST API v2 (docs/providers.md, RunPod; base `https://api.runpod.io/v2`, Bearer key).

v1 (`https://rest.runpod.io/v1`) was retired on 2026-11-15 (RunPod's migration guide): the shipped profile speaks
v2, whose lifecycle is `POST /pods/{id}/action` (stop, start) and `DELETE /pods/{id}` (204, no body). The pod
parser still reads v1 bodies (`desiredStatus`, `costPerHr` as a number or a string, `adjustedCostPerHr` after
Savings Plans, `networkVolume` with `includeNetworkVolume=true`), so a profile pinned to v1 and the recorded v1
bodies read the same way. Paths and methods are the profile's `[control.api.endpoints]`.

Billing facts (v2 OpenAPI 2.0.0): `cost` is USD per hour and 0.0 when EXITED or TERMINATED; the stopped pod's
volume disk (`mounts.persistent`) is not in `cost` and bills at the profile's stopped rate; a network volume
(`mounts.network[].volumeId`, its size from `GET /network-volumes/{id}`) survives terminate and bills on its own.
RP14: a DELETE that answers 204 does not mean the pod is gone, so teardown polls `GET /pods/{id}` until the
profile's gone_when says so. The create call takes no price ceiling and v2 has no interruptible pods, so
`launch` checks the created pod's `cost` and refuses a spot request before anything is created.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import Residual
from remote_gpu_trainer.providers.cloud.client import (
    CloudClient,
    Launches,
    LaunchOverBudget,
    UnsupportedAction,
    as_dict,
    as_float,
    as_int,
    as_str,
    first,
    still_billing,
    surviving_storage,
)
from remote_gpu_trainer.providers.cloud.http import CloudAPIError
from remote_gpu_trainer.providers.cloud.types import (
    CloudInstance,
    GpuRequest,
    StorageBilling,
    lower_keys,
    map_state,
)

# v2 `status` (and v1 `desiredStatus`) → INSTANCE_STATES. ERROR and any new word stay `unknown`: v2 does not say
# what an ERROR pod bills, so the meter bills the `cost` listed with it as an estimate.
RUNPOD_STATES = lower_keys({
    "PROVISIONING": "pending",
    "STARTING": "pending",
    "RUNNING": "running",
    "EXITED": "stopped",
    "TERMINATED": "terminated",
})


log = logging.getLogger("remote_gpu_trainer.providers.cloud")


class RunPodClient(CloudClient, Launches):
    """list/get/stop/terminate/wait_gone/launch for RunPod Pods."""

    provider = "runpod"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._volume_sizes: dict[str, float] = {}  # a network volume's size is fixed at creation: asked once

    async def _list(self) -> list[CloudInstance]:
        data = await self.call("list")
        pods = data.get("pods") if isinstance(data, dict) else data  # v2 `{"pods": [...]}`, v1 a bare array
        if not isinstance(pods, list):
            raise self._bad_answer("list", None, "expected a list of pods")
        return [await self._with_volume(parse_pod(pod)) for pod in pods if isinstance(pod, dict) and pod.get("id")]

    async def _fetch(self, provider_id: str) -> CloudInstance:
        data = await self.call("get", provider_id)
        if not isinstance(data, dict) or not data.get("id"):
            raise self._bad_answer("get", provider_id, "expected a pod object")
        return await self._with_volume(parse_pod(data))

    async def _with_volume(self, pod: CloudInstance) -> CloudInstance:
        """The pod with its network volume's size: v2 names only the volume's id on the pod, and the size (what
        it bills) comes from `GET /network-volumes/{id}`. A volume that cannot be read keeps no size: the
        meter then flags an unknown price rather than billing it at nothing."""
        storage = list(pod.storage)
        for index, item in enumerate(storage):
            if item.name != "network-volume" or item.size_gb is not None or not item.ident:
                continue
            size = self._volume_sizes.get(item.ident)
            if size is None:
                try:
                    size = as_float(as_dict(await self.call("network_volume", item.ident)).get("size"))
                except (CloudAPIError, UnsupportedAction) as exc:
                    log.warning("runpod: network volume %s of pod %s could not be read: %s", item.ident,
                                pod.provider_id, exc)
                    continue
                if size is not None:
                    self._volume_sizes[item.ident] = size
            storage[index] = replace(item, size_gb=size)
        return replace(pod, storage=tuple(storage))

    async def stop(self, provider_id: str) -> None:
        """`{"action": "stop"}`: compute stops (the pod goes EXITED); the volume disk keeps billing at 2x and
        the pod may come back with no GPU (RP1)."""
        await self.call("stop", provider_id, idempotent=True)

    async def terminate(self, provider_id: str) -> None:
        """DELETE the pod (204; container and volume disk); a Network Volume is untouched and keeps billing."""
        if await self._preflight(provider_id) is None:
            return
        await self._terminate_and_requery(provider_id, lambda: self.call(
            "terminate", provider_id, retry_timeouts=False, timeout_s=self.terminate_timeout_s))

    async def launch(self, request: GpuRequest, *, cloud_type: str = "SECURE", container_disk_gb: int = 20,
                     ports: tuple[str, ...] = ("22/tcp",), env: dict[str, str] | None = None) -> CloudInstance:
        """Create a pod of `gpu_count` × `gpu_type`. Never retried after it may have been processed."""
        if not request.image:
            raise VerbFailed("runpod: launch needs a container image")
        if request.interruptible:
            raise VerbFailed("runpod: the v2 API creates no interruptible (spot) pods; rent one in the console "
                             "and put its id in rgt.toml, or set interruptible = false")
        body: dict[str, Any] = {
            "name": request.name, "image": request.image,
            "gpu": {"id": request.gpu_type, "count": request.gpu_count}, "cloud": cloud_type,
            "disk": container_disk_gb, "mounts": {"persistent": {"size": request.disk_gb, "path": "/workspace"}},
            "ports": list(ports), "startSsh": True,
        }
        if env:
            body["env"] = env
        if request.region:
            body["dataCenterIds"] = [request.region]
        data = await self.call("create", json_body=body)
        if not isinstance(data, dict) or not data.get("id"):
            raise self._bad_answer("create", None, "expected the created pod")
        pod = parse_pod(data)
        self._seen[pod.provider_id] = pod
        ceiling = request.max_price_per_hour
        if ceiling is not None and (pod.price_per_hour is None or pod.price_per_hour > ceiling):
            shown = "unknown" if pod.price_per_hour is None else f"${pod.price_per_hour:.3f}/h"
            raise LaunchOverBudget(
                f"runpod: pod {pod.provider_id} was created at {shown}, over the ${ceiling:.3f}/h ceiling "
                "(the API takes no ceiling); it is billing now: tear it down with `rgt down`", pod)
        return pod

    async def _residuals(self, provider_id: str, gone: bool,
                         last: CloudInstance | None) -> tuple[list[Residual], list[str]]:
        residuals: list[Residual] = []
        if last is not None and not gone:
            residuals.append(still_billing(last))
            volume = next((s for s in last.storage if s.name == "volume" and s.size_gb), None)
            if volume is not None:
                residuals.append(Residual(
                    "volume-disk", provider_id, f"{volume.size_gb:g} GB volume disk bills (2x while stopped)",
                    "terminate the pod"))
        residuals.extend(surviving_storage(last, {"network-volume": (
            "Network Volume survives terminate and bills hourly until deleted",
            "delete the network volume separately, with its own confirmation")}))
        return residuals, []


def parse_pod(pod: dict[str, Any]) -> CloudInstance:
    """One pod object, v2 or v1, → CloudInstance (USD/h: v2 `cost`; v1 `adjustedCostPerHr`, what the account
    pays after Savings Plans, else `costPerHr`)."""
    raw = as_str(pod.get("status")) or as_str(pod.get("desiredStatus")) or ""
    gpu = as_dict(pod.get("gpu"))
    machine = as_dict(pod.get("machine"))
    runtime = as_dict(pod.get("runtime"))
    mounts = as_dict(pod.get("mounts"))
    price = first(as_float(pod.get("cost")), as_float(pod.get("adjustedCostPerHr")), as_float(pod.get("costPerHr")))
    host, port = _direct_ssh(pod)
    storage: list[StorageBilling] = [
        StorageBilling("container", first(as_float(pod.get("disk")), as_float(pod.get("containerDiskInGb"))),
                       bills_while_stopped=False),
    ]
    volume_gb = first(as_float(as_dict(mounts.get("persistent")).get("size")), as_float(pod.get("volumeInGb")))
    if volume_gb is not None:
        storage.append(StorageBilling("volume", volume_gb, bills_while_stopped=True))
    network = next((as_dict(m) for m in mounts.get("network") or () if as_dict(m).get("volumeId")), None)
    legacy = as_dict(pod.get("networkVolume"))
    volume_id = as_str(network.get("volumeId")) if network else as_str(legacy.get("id"))
    if volume_id:
        storage.append(StorageBilling("network-volume", None if network else as_float(legacy.get("size")),
                                      bills_while_stopped=True, survives_terminate=True, ident=volume_id))
    return CloudInstance(
        provider="runpod", provider_id=str(pod["id"]), state=map_state(RUNPOD_STATES, raw), raw_state=raw,
        name=as_str(pod.get("name")) or "",
        gpu=as_str(gpu.get("displayName")) or as_str(gpu.get("id")) or as_str(pod.get("gpuTypeId"))
        or as_str(machine.get("gpuDisplayName")) or "",
        gpu_count=first(as_int(gpu.get("count")), as_int(pod.get("gpuCount"))),
        price_per_hour=price, price_source="api" if price is not None else "none",
        uptime_s=first(as_float(runtime.get("uptime")), as_float(pod.get("uptimeSeconds")),
                       as_float(runtime.get("uptimeInSeconds"))),
        created_at=as_str(pod.get("createdAt")), started_at=as_str(pod.get("startedAt"))
        or as_str(pod.get("lastStartedAt")),
        public_ip=host, ssh_port=port,
        region=as_str(pod.get("dataCenterId")) or as_str(machine.get("dataCenterId")),
        storage=tuple(storage),
        detail={"interruptible": bool(pod.get("interruptible")),
                "image": as_str(pod.get("image")) or as_str(pod.get("imageName"))},
    )


def _direct_ssh(pod: dict[str, Any]) -> tuple[str | None, int | None]:
    """Where full SSH (scp, sftp, rsync) reaches the pod: v2 `ssh.direct`, else the runtime's public port for
    22, else v1 `publicIp` and `portMappings["22"]`. The proxy (`ssh.runpod.io`) has no file transfer."""
    direct = as_dict(as_dict(pod.get("ssh")).get("direct"))
    if as_str(direct.get("host")):
        return as_str(direct.get("host")), as_int(direct.get("port"))
    for mapping in as_dict(pod.get("runtime")).get("ports") or ():
        mapping = as_dict(mapping)
        if as_int(mapping.get("private")) == 22 and as_str(mapping.get("ip")):
            return as_str(mapping.get("ip")), as_int(mapping.get("public"))
    return as_str(pod.get("publicIp")), as_int(as_dict(pod.get("portMappings")).get("22"))
