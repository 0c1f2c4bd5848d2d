"""RunPod Pods over the REST API (docs/providers.md §3; base `https://rest.runpod.io/v1`, Bearer key).

Paths and methods are the profile's `[control.api.endpoints]`. RP14: a DELETE that answers OK does not
mean the pod is gone, so teardown polls `GET /pods/{id}` until 404.
A stopped pod still bills its volume disk at 2x, and a Network Volume survives terminate and bills hourly:
both come back from `wait_gone` as residuals. The REST create call takes no price ceiling (bids exist only
in GraphQL), so `launch` checks the created pod's `costPerHr` and, when it is over the ceiling, says so with
the pod's id: the pod exists and bills until the teardown service removes it.
"""

from __future__ import annotations

from typing import Any

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.cloud.client import (
    CloudClient,
    Launches,
    as_dict,
    as_float,
    as_int,
    as_str,
    first,
    still_billing,
    surviving_storage,
)
from remote_gpu_trainer.providers.cloud.types import (
    CloudInstance,
    GpuRequest,
    Residual,
    StorageBilling,
    lower_keys,
    map_state,
)

# desiredStatus → INSTANCE_STATES. DEAD and anything new stay `unknown`.
RUNPOD_STATES = lower_keys({
    "CREATED": "pending",
    "RESTARTING": "pending",
    "RUNNING": "running",
    "EXITED": "stopped",
    "PAUSED": "stopped",
    "TERMINATED": "terminated",
})


class LaunchOverBudget(VerbFailed):
    """The provider created an instance whose price is over the ceiling (or unknown); it exists and bills."""

    def __init__(self, message: str, instance: CloudInstance) -> None:
        super().__init__(message)
        self.instance = instance


class RunPodClient(CloudClient, Launches):
    """list/get/stop/terminate/wait_gone/launch for RunPod Pods."""

    provider = "runpod"

    async def _list(self) -> list[CloudInstance]:
        data = await self.call("list")
        pods = data.get("pods") if isinstance(data, dict) else data
        if not isinstance(pods, list):
            raise self._bad_answer("list", None, "expected a list of pods")
        return [parse_pod(pod) for pod in pods if isinstance(pod, dict) and pod.get("id")]

    async def _fetch(self, provider_id: str) -> CloudInstance:
        data = await self.call("get", provider_id)
        if not isinstance(data, dict) or not data.get("id"):
            raise self._bad_answer("get", provider_id, "expected a pod object")
        return parse_pod(data)

    async def stop(self, provider_id: str) -> None:
        """Stops compute; the volume disk keeps billing at 2x and the pod may come back with no GPU (RP1)."""
        await self.call("stop", provider_id, idempotent=True)

    async def terminate(self, provider_id: str) -> None:
        """DELETE the pod (container and volume disk); a Network Volume is untouched and keeps billing."""
        if await self._preflight(provider_id) is None:
            return
        await self._terminate_and_requery(provider_id, lambda: self.call(
            "terminate", provider_id, retry_timeouts=False, timeout_s=self.terminate_timeout_s))

    async def launch(self, request: GpuRequest, *, cloud_type: str = "SECURE", container_disk_gb: int = 20,
                     ports: tuple[str, ...] = ("22/tcp",), env: dict[str, str] | None = None) -> CloudInstance:
        """Create a pod of `gpu_count` × `gpu_type`. Never retried after it may have been processed."""
        if not request.image:
            raise VerbFailed("runpod: launch needs a container image")
        body: dict[str, Any] = {
            "name": request.name, "imageName": request.image, "gpuTypeIds": [request.gpu_type],
            "gpuCount": request.gpu_count, "cloudType": cloud_type, "interruptible": request.interruptible,
            "containerDiskInGb": container_disk_gb, "volumeInGb": request.disk_gb, "ports": list(ports),
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
                "(the REST API takes no ceiling); it is billing now: tear it down with `rgt down`", pod)
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
    """One REST pod object → CloudInstance (price `costPerHr`, USD/h)."""
    raw = as_str(pod.get("desiredStatus")) or ""
    gpu = as_dict(pod.get("gpu"))
    machine = as_dict(pod.get("machine"))
    runtime = as_dict(pod.get("runtime"))
    price = as_float(pod.get("costPerHr"))
    ports = as_dict(pod.get("portMappings"))
    storage: list[StorageBilling] = [
        StorageBilling("container", as_float(pod.get("containerDiskInGb")), bills_while_stopped=False),
        StorageBilling("volume", as_float(pod.get("volumeInGb")), bills_while_stopped=True),
    ]
    network_volume = as_str(pod.get("networkVolumeId")) or as_str(as_dict(pod.get("networkVolume")).get("id"))
    if network_volume:
        storage.append(StorageBilling("network-volume", as_float(as_dict(pod.get("networkVolume")).get("size")),
                                      bills_while_stopped=True, survives_terminate=True, ident=network_volume))
    return CloudInstance(
        provider="runpod", provider_id=str(pod["id"]), state=map_state(RUNPOD_STATES, raw), raw_state=raw,
        name=as_str(pod.get("name")) or "",
        gpu=as_str(gpu.get("displayName")) or as_str(gpu.get("id")) or as_str(pod.get("gpuTypeId"))
        or as_str(machine.get("gpuDisplayName")) or "",
        gpu_count=first(as_int(gpu.get("count")), as_int(pod.get("gpuCount"))),
        price_per_hour=price, price_source="api" if price is not None else "none",
        uptime_s=first(as_float(pod.get("uptimeSeconds")), as_float(runtime.get("uptimeInSeconds"))),
        created_at=as_str(pod.get("createdAt")), started_at=as_str(pod.get("lastStartedAt")),
        public_ip=as_str(pod.get("publicIp")), ssh_port=as_int(ports.get("22")),
        region=as_str(machine.get("dataCenterId")) or as_str(pod.get("dataCenterId")),
        storage=tuple(storage),
        detail={"interruptible": bool(pod.get("interruptible")), "image": as_str(pod.get("imageName"))},
    )
