"""A local stand-in for RunPod's REST API v2 (tests/support/fake_clouds.py says how the fakes work).

Every pod it serves is the recorded v2 pod (tests/fixtures/providers/runpod/v2_get_pod_running.json, from
RunPod's own OpenAPI file) with only what a test names changed: id, name, status and what the v2 schema ties to
the status (`cost` 0.0 when EXITED or TERMINATED, `actions`, `runtime` null unless RUNNING), the GPU, the SSH
address and the mounts. Errors are the recorded RFC 9457 problem bodies; terminate is `DELETE /pods/{id}`
answering 204 with no body, and the pod lingers when asked (RP14: a 204 is not gone).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply
from support.recorded import recorded

ACTIONS = {"PROVISIONING": ["stop", "terminate"], "STARTING": ["stop", "terminate"],
           "RUNNING": ["stop", "restart", "terminate"], "EXITED": ["start", "terminate"],
           "ERROR": ["start", "terminate"], "TERMINATED": []}
UNSET: Any = object()


class FakeRunPod(FakeCloud):
    """`/v2/pods`, `/v2/pods/{id}/action`, `/v2/network-volumes/{id}`; Bearer auth; problem+json errors."""

    provider = "runpod"
    prefix = "/v2"
    gpu_prices = {"NVIDIA A40": 0.44, "NVIDIA H100 80GB HBM3": 2.99}

    def __init__(self, key: str = FAKE_KEY) -> None:
        super().__init__(key)
        self.pods: dict[str, dict[str, Any]] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        self._next = 1
        self.actions_take_effect = True  # False: an action is accepted and the pod moves later (set_status)

    def error_body(self, status: int, message: str) -> Any:
        return {"title": HTTPStatus(status).phrase, "status": status, "detail": message}

    def auth_error(self) -> Reply:
        return Reply(401, recorded("runpod", "v2_error_401"))

    def not_found(self, what: str) -> Reply:
        return Reply(404, recorded("runpod", "v2_error_404"))

    def add_volume(self, volume_id: str, size: int = 50) -> dict[str, Any]:
        """A network volume as `GET /network-volumes/{id}` answers it (the recorded NetworkVolume)."""
        volume = recorded("runpod", "v2_list_network_volumes")["networkVolumes"][0]
        volume.update(id=volume_id, size=size)
        self.volumes[volume_id] = volume
        return volume

    def add_pod(self, pod_id: str, status: str = "RUNNING", *, host: str | None = "203.0.113.7",
                port: int | None = 40022, cost: float | None = UNSET, gpu: str = "NVIDIA A40", gpu_count: int = 1,
                volume_gb: int | None = 50, network_volume: str | None = None, **fields: Any) -> dict[str, Any]:
        """The recorded running pod as `pod_id` in `status`; `network_volume` mounts that volume (added with
        50 GB when the fake does not have it yet) in place of the persistent volume, as v2 allows only one."""
        pod = recorded("runpod", "v2_get_pod_running")
        pod.update(id=pod_id, name=f"pod-{pod_id}", gpu={"id": gpu, "count": gpu_count})
        pod["ssh"]["direct"] = {"host": host, "port": port, "username": "root",
                                "command": f"ssh root@{host} -p {port}"} if host else None
        pod["runtime"]["ports"] = [{"private": 22, "public": port, "type": "tcp", "ip": host}] if host else []
        pod["mounts"] = {"persistent": {"size": volume_gb, "path": "/workspace"}} if volume_gb else {}
        if network_volume is not None:
            self.volumes.get(network_volume) or self.add_volume(network_volume)
            pod["mounts"] = {"network": [{"volumeId": network_volume, "path": "/workspace"}]}
        pod["_cost"] = 0.44 if cost is UNSET else cost
        pod.update(fields)
        self.pods[pod_id] = pod
        self.set_status(pod_id, status)
        return pod

    def set_status(self, pod_id: str, status: str) -> None:
        """A pod moved to `status`, with the fields the v2 schema ties to it."""
        pod = self.pods[pod_id]
        pod["status"] = status
        pod["actions"] = list(ACTIONS.get(status, []))
        pod["cost"] = 0.0 if status in ("EXITED", "TERMINATED") else pod["_cost"]
        if status != "RUNNING":
            pod["runtime"] = None  # "Null when the pod is not RUNNING"; ssh.direct is left as it was (undocumented)

    def served(self, pod: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in pod.items() if not key.startswith("_")}

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if parts == ["pods"] and method == "GET":
            return Reply(200, {"pods": [self.served(p) for i, p in self.pods.items()
                                        if i not in self.deleted or self.linger.get(i)]})
        if parts == ["pods"] and method == "POST":
            return self._create(body)
        if len(parts) == 2 and parts[0] == "network-volumes" and method == "GET":
            volume = self.volumes.get(parts[1])
            return Reply(200, volume) if volume else self.not_found("network volume")
        if len(parts) >= 2 and parts[0] == "pods":
            pod_id = parts[1]
            pod = self.pods.get(pod_id)
            if pod is None or (pod_id in self.deleted and not self.lingering(pod_id)):
                return self.not_found("pod")
            if len(parts) == 2 and method == "GET":
                return Reply(200, self.served(pod))
            if len(parts) == 2 and method == "DELETE":
                self.deleted.add(pod_id)
                return Reply(204)
            if parts[2:] == ["action"] and method == "POST":
                return self._action(pod, body)
        return self.not_found("route")

    def _action(self, pod: dict[str, Any], body: Any) -> Reply:
        action = str(body.get("action")) if isinstance(body, dict) else ""
        if action not in pod["actions"]:
            return Reply(409, self.error_body(409, f"action {action!r} is not allowed while {pod['status']}"))
        if action == "terminate":
            self.deleted.add(pod["id"])
            return Reply(204)
        if self.actions_take_effect:
            self.set_status(pod["id"], {"stop": "EXITED", "start": "RUNNING", "restart": "RUNNING"}[action])
        return Reply(200, self.served(pod))

    def _create(self, body: Any) -> Reply:
        gpu = body.get("gpu") if isinstance(body, dict) else None
        if not isinstance(gpu, dict) or not gpu.get("id") or not body.get("image") or not body.get("name"):
            return Reply(400, self.error_body(400, "name, image and gpu.id are required"))
        if gpu["id"] not in self.gpu_prices:
            return Reply(500, self.error_body(500, "There are no instances currently available"))
        pod_id = f"new{self._next}"
        self._next += 1
        count = int(gpu.get("count", 1))
        persistent = (body.get("mounts") or {}).get("persistent") or {}
        pod = self.add_pod(pod_id, "PROVISIONING", cost=round(self.gpu_prices[gpu["id"]] * count, 3), gpu=gpu["id"],
                           gpu_count=count, volume_gb=persistent.get("size"), name=body["name"], image=body["image"])
        return Reply(201, self.served(pod))
