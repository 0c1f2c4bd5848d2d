"""A local stand-in for RunPod's REST API (tests/support/fake_clouds.py says how the fakes work)."""

from __future__ import annotations

from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply


class FakeRunPod(FakeCloud):
    """`/v1/pods`, Bearer auth, errors `{"error": "...", "status": N}`; DELETE OK ≠ gone (RP14)."""

    provider = "runpod"
    prefix = "/v1"
    gpu_prices = {"NVIDIA A40": 0.44, "NVIDIA H100 80GB HBM3": 2.99}

    def __init__(self, key: str = FAKE_KEY) -> None:
        super().__init__(key)
        self.pods: dict[str, dict[str, Any]] = {}
        self._next = 1

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message, "status": status}

    def add_pod(self, pod_id: str, status: str = "RUNNING", **extra: Any) -> dict[str, Any]:
        pod: dict[str, Any] = {
            "id": pod_id, "name": f"pod-{pod_id}", "desiredStatus": status, "costPerHr": 0.44,
            "gpu": {"id": "NVIDIA A40", "count": 1, "displayName": "A40"}, "imageName": "runpod/pytorch",
            "containerDiskInGb": 20, "volumeInGb": 50, "publicIp": "203.0.113.7", "portMappings": {"22": 40022},
            "uptimeSeconds": 3600, "lastStartedAt": "2026-06-01T10:00:00Z", "interruptible": False,
            "machine": {"dataCenterId": "EU-RO-1"},
        }
        pod.update(extra)
        self.pods[pod_id] = pod
        return pod

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if parts == ["pods"] and method == "GET":
            return Reply(200, [p for i, p in self.pods.items() if i not in self.deleted or self.linger.get(i)])
        if parts == ["pods"] and method == "POST":
            return self._create(body)
        if len(parts) >= 2 and parts[0] == "pods":
            pod_id = parts[1]
            pod = self.pods.get(pod_id)
            if pod is None or (pod_id in self.deleted and not self.lingering(pod_id)):
                return self.not_found("pod")
            if len(parts) == 2 and method == "GET":
                return Reply(200, pod)
            if len(parts) == 2 and method == "DELETE":
                self.deleted.add(pod_id)
                return Reply(200)
            if len(parts) == 3 and method == "POST" and parts[2] == "stop":
                pod["desiredStatus"] = "EXITED"
                return Reply(200, pod)
        return self.not_found("route")

    def _create(self, body: Any) -> Reply:
        if not isinstance(body, dict) or not body.get("gpuTypeIds") or not body.get("imageName"):
            return Reply(400, self.error_body(400, "gpuTypeIds and imageName are required"))
        gpu = body["gpuTypeIds"][0]
        if gpu not in self.gpu_prices:
            return Reply(500, self.error_body(500, "There are no instances currently available"))
        pod_id = f"new{self._next}"
        self._next += 1
        pod = self.add_pod(pod_id, "CREATED", name=body.get("name"), imageName=body["imageName"],
                           costPerHr=round(self.gpu_prices[gpu] * body.get("gpuCount", 1), 3),
                           gpu={"id": gpu, "count": body.get("gpuCount", 1), "displayName": gpu},
                           volumeInGb=body.get("volumeInGb"), interruptible=body.get("interruptible", False))
        return Reply(201, pod)
