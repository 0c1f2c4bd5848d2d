"""Local fake provider APIs for the cloud client tests (docs/architecture.md §3.3: no mocking of our own code).

Each fake is a real HTTP server (stdlib ThreadingHTTPServer on 127.0.0.1, port 0, daemon thread) that serves
its provider's documented paths under the documented base path, checks the documented auth header form
(wrong or missing auth gets the provider's status and error body), answers with the documented shapes, and
keeps a request log the tests assert on. Knobs reproduce what the spec warns about: 429 with Retry-After,
5xx, a call that hangs past the client's timeout (and may or may not have taken effect), a deleted instance
that lingers for N polls before it is gone, an instance that vanishes, and state words no table knows.

The server, the request log and the shared checks live in fake_cloud_server.py (re-exported here).

Test modules bind the fixtures they use by name (`runpod_fake = fake_clouds.runpod_fake`), which keeps ruff's
F811 quiet and needs no change to conftest.py.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.fake_cloud_server import (
    FAKE_KEY,
    FakeCloud,
    Fault,
    Logged,
    Reply,
    VirtualTime,
    assert_no_key,
    exception_chain,
)

__all__ = [
    "FAKE_KEY", "KEY_ENV", "FakeAutoDL", "FakeCloud", "FakeLambda", "FakePaperspace", "FakeRunPod", "FakeVast",
    "Fault", "Logged", "Reply", "VirtualTime", "assert_no_key", "autodl_fake", "cloud_env", "exception_chain",
    "lambda_fake", "paperspace_fake", "runpod_fake", "vast_fake", "vtime",
]


# -- RunPod (REST v1) ---------------------------------------------------------------------------------------

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


# -- vast.ai (/api/v0) --------------------------------------------------------------------------------------

class FakeVast(FakeCloud):
    """`/api/v0/instances/`, `/bundles/`, `/asks/{id}/`; errors `{"success": false, "error", "msg"}`."""

    provider = "vastai"
    prefix = "/api/v0"

    def __init__(self, key: str = FAKE_KEY) -> None:
        super().__init__(key)
        self.instances: dict[str, dict[str, Any]] = {}
        self.offers: list[dict[str, Any]] = []
        self.gone_as = "null"  # how a destroyed instance reads: "null" (instances: null) or "404"
        self.filter_offers = True  # False: ignore the query, as a sloppy server might
        self._next = 5000

    def error_body(self, status: int, message: str) -> Any:
        return {"success": False, "error": "error", "msg": message}

    def auth_error(self) -> Reply:
        return Reply(401, {"success": False, "error": "invalid_user_key", "msg": "Invalid user key"})

    def add_instance(self, ident: str, actual: str = "running", **extra: Any) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": int(ident), "actual_status": actual, "intended_status": "running", "cur_state": actual,
            "status_msg": "success, running", "ssh_host": "ssh5.vast.ai", "ssh_port": 31337,
            "public_ipaddr": "198.51.100.4", "dph_total": 0.35, "gpu_name": "RTX 4090", "num_gpus": 1,
            "disk_space": 64, "storage_cost": 0.15, "start_date": 1780000000.0, "label": "rgt",
        }
        row.update(extra)
        self.instances[ident] = row
        return row

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if parts == ["instances"] and method == "GET":
            rows = [r for i, r in self.instances.items() if i not in self.deleted]
            return Reply(200, {"instances": rows})
        if len(parts) == 2 and parts[0] == "instances":
            return self._instance(method, parts[1], body)
        if parts == ["bundles"] and method == "POST":
            return Reply(200, {"offers": self._search(body if isinstance(body, dict) else {})})
        if len(parts) == 2 and parts[0] == "asks" and method == "PUT":
            return self._rent(parts[1], body if isinstance(body, dict) else {})
        return self.not_found("route")

    def _instance(self, method: str, ident: str, body: Any) -> Reply:
        row = self.instances.get(ident)
        if row is None or (ident in self.deleted and not self.lingering(ident)):
            if method == "GET" and self.gone_as == "null" and row is not None:
                return Reply(200, {"instances": None})
            return Reply(404, {"success": False, "error": "no_such_instance", "msg": f"Instance {ident} not found."})
        if method == "GET":
            return Reply(200, {"instances": row})
        if method == "PUT" and isinstance(body, dict) and body.get("state") == "stopped":
            row.update(intended_status="stopped", actual_status="exited", cur_state="stopped")
            return Reply(200, {"success": True})
        if method == "DELETE":
            self.deleted.add(ident)
            return Reply(200, {"success": True})
        return Reply(400, {"success": False, "error": "invalid_args", "msg": "bad request"})

    def _search(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.filter_offers:
            return list(self.offers)
        out = []
        for offer in self.offers:
            if "gpu_name" in query and offer["gpu_name"] != query["gpu_name"].get("eq"):
                continue
            if "num_gpus" in query and offer["num_gpus"] != query["num_gpus"].get("eq"):
                continue
            if "dph_total" in query and offer["dph_total"] > query["dph_total"].get("lte", float("inf")):
                continue
            if not offer.get("rentable", True):
                continue
            out.append(offer)
        return sorted(out, key=lambda o: o["dph_total"])

    def _rent(self, offer_id: str, body: dict[str, Any]) -> Reply:
        offer = next((o for o in self.offers if str(o["id"]) == offer_id), None)
        if offer is None or not body.get("image"):
            return Reply(400, {"success": False, "error": "invalid_args", "msg": "offer unavailable"})
        self._next += 1
        self.add_instance(str(self._next), "loading", dph_total=offer["dph_total"], gpu_name=offer["gpu_name"],
                          num_gpus=offer["num_gpus"], disk_space=body.get("disk"), label=body.get("label"))
        return Reply(200, {"success": True, "new_contract": self._next})


# -- Lambda Cloud (/api/v1) ---------------------------------------------------------------------------------

class FakeLambda(FakeCloud):
    """`/api/v1/instances`, `/instance-types`, `/instance-operations/*`; errors `{"error": {code, message}}`.

    `auth` is "bearer" or "basic" (the conflict of docs/providers.md §10): the other form is refused like a wrong key.
    """

    provider = "lambda"
    prefix = "/api/v1"

    def __init__(self, key: str = FAKE_KEY, auth: str = "bearer") -> None:
        super().__init__(key)
        self.auth = auth
        self.instances: dict[str, dict[str, Any]] = {}
        self.types: dict[str, dict[str, Any]] = {}
        self._next = 1

    def authorized(self, headers: dict[str, str]) -> bool:
        if self.auth == "basic":
            token = base64.b64encode(f"{self.key}:".encode()).decode()
            return headers.get("authorization") == f"Basic {token}"
        return super().authorized(headers)

    def error_body(self, status: int, message: str) -> Any:
        code = {401: "global/invalid-api-key", 404: "global/object-does-not-exist",
                429: "global/too-many-requests"}.get(status, "global/unknown")
        return {"error": {"code": code, "message": message, "suggestion": "see the Lambda docs"}}

    def auth_error(self) -> Reply:
        return Reply(401, self.error_body(401, "API key was invalid, expired, or deleted."))

    def add_type(self, name: str, gpu: str, gpus: int, cents: int, regions: list[str]) -> None:
        self.types[name] = {
            "instance_type": {"name": name, "description": f"{gpus}x {gpu}", "gpu_description": gpu,
                              "price_cents_per_hour": cents,
                              "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 512, "gpus": gpus}},
            "regions_with_capacity_available": [{"name": r, "description": r} for r in regions],
        }

    def add_instance(self, ident: str, status: str = "active", type_name: str = "gpu_1x_a100",
                     **extra: Any) -> dict[str, Any]:
        itype = self.types.get(type_name, {}).get("instance_type") or {
            "name": type_name, "description": "1x A100 (40 GB SXM4)", "gpu_description": "A100 (40 GB SXM4)",
            "price_cents_per_hour": 129, "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 512, "gpus": 1}}
        row: dict[str, Any] = {"id": ident, "name": f"rgt-{ident}", "ip": "192.0.2.10", "status": status,
                               "ssh_key_names": ["me"], "file_system_names": [], "region": {"name": "us-east-1"},
                               "instance_type": itype, "hostname": f"{ident}.cloud.lambdalabs.com"}
        row.update(extra)
        self.instances[ident] = row
        return row

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if parts == ["instances"] and method == "GET":
            live = [r for i, r in self.instances.items() if i not in self.deleted or self.linger.get(i)]
            return Reply(200, {"data": live})
        if len(parts) == 2 and parts[0] == "instances" and method == "GET":
            ident = parts[1]
            row = self.instances.get(ident)
            if row is None or (ident in self.deleted and not self.lingering(ident)):
                return Reply(404, self.error_body(404, "Specified instance does not exist."))
            return Reply(200, {"data": row})
        if parts == ["instance-types"] and method == "GET":
            return Reply(200, {"data": self.types})
        if parts == ["instance-operations", "terminate"] and method == "POST":
            return self._terminate(body)
        if parts == ["instance-operations", "launch"] and method == "POST":
            return self._launch(body)
        return Reply(404, self.error_body(404, "not found"))

    def _terminate(self, body: Any) -> Reply:
        ids = body.get("instance_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids:
            return Reply(400, self.error_body(400, "instance_ids is required"))
        missing = [i for i in ids if i not in self.instances or i in self.deleted]
        if missing:
            return Reply(404, self.error_body(404, f"Instance {missing[0]} does not exist."))
        done = []
        for ident in ids:
            self.instances[ident]["status"] = "terminating"
            self.deleted.add(ident)
            done.append(self.instances[ident])
        return Reply(200, {"data": {"terminated_instances": done}})

    def _launch(self, body: Any) -> Reply:
        if not isinstance(body, dict) or body.get("instance_type_name") not in self.types:
            return Reply(400, self.error_body(400, "unknown instance type"))
        ident = f"lam{self._next}"
        self._next += 1
        self.add_instance(ident, "booting", body["instance_type_name"], name=body.get("name"),
                          file_system_names=body.get("file_system_names", []),
                          region={"name": body.get("region_name")})
        return Reply(200, {"data": {"instance_ids": [ident]}})


# -- Paperspace (/v1) ---------------------------------------------------------------------------------------

class FakePaperspace(FakeCloud):
    """`/v1/machines`, `/public-ips`, `/snapshots` with cursor pages; errors `{"code", "message"}`."""

    provider = "paperspace"
    prefix = "/v1"

    def __init__(self, key: str = FAKE_KEY, page_size: int = 2) -> None:
        super().__init__(key)
        self.page_size = page_size
        self.machines: dict[str, dict[str, Any]] = {}
        self.public_ips: list[dict[str, Any]] = []
        self.snapshots: list[dict[str, Any]] = []
        self.stop_polls = 1  # GETs that still show "stopping" after a stop

    def error_body(self, status: int, message: str) -> Any:
        code = {400: "BAD_REQUEST", 401: "UNAUTHORIZED", 404: "NOT_FOUND", 429: "TOO_MANY_REQUESTS"}
        return {"code": code.get(status, "INTERNAL_SERVER_ERROR"), "message": message}

    def add_machine(self, ident: str, state: str = "ready", static_ip: str | None = None,
                    **extra: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"id": ident, "name": f"m-{ident}", "state": state, "machineType": "A100-80G",
                               "region": "ny2", "publicIp": static_ip or "198.18.0.9", "privateIp": "10.0.0.5",
                               "storageTotal": 100 * (1 << 30), "dtCreated": "2026-06-01T09:00:00Z"}
        row.update(extra)
        self.machines[ident] = row
        if static_ip:
            self.public_ips.append({"ip": static_ip, "assignedMachineId": ident, "region": "ny2",
                                    "dtCreated": "2026-06-01T09:00:00Z"})
        return row

    def _page(self, rows: list[dict[str, Any]], query: dict[str, list[str]]) -> Reply:
        start = int(query.get("after", ["cur-0"])[0].split("-")[1])
        limit = min(int(query.get("limit", ["120"])[0]), self.page_size)
        chunk = rows[start:start + limit]
        more = start + limit < len(rows)
        return Reply(200, {"items": chunk, "hasMore": more, "nextPage": f"cur-{start + limit}" if more else None})

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if parts == ["machines"] and method == "GET":
            rows = [m for i, m in self.machines.items() if i not in self.deleted]
            return self._page(rows, query)
        if parts == ["public-ips"] and method == "GET":
            return self._page(self.public_ips, query)
        if parts == ["snapshots"] and method == "GET":
            machine = query.get("machineId", [None])[0]
            return self._page([s for s in self.snapshots if machine in (None, s["machineId"])], query)
        if len(parts) >= 2 and parts[0] == "machines":
            return self._machine(method, parts[1], parts[2:])
        return self.not_found("route")

    def _machine(self, method: str, ident: str, rest: list[str]) -> Reply:
        row = self.machines.get(ident)
        if row is None or (ident in self.deleted and not self.lingering(ident)):
            return self.not_found("Machine")
        if method == "GET" and not rest:
            if row["state"] == "stopping":
                row["_polls"] = row.get("_polls", 0) + 1
                if row["_polls"] > self.stop_polls:
                    row["state"] = "off"
            return Reply(200, {k: v for k, v in row.items() if not k.startswith("_")})
        if method == "PATCH" and rest == ["stop"]:
            if row["state"] != "off":
                row["state"] = "stopping"
                row["_polls"] = 0
            return Reply(200, {k: v for k, v in row.items() if not k.startswith("_")})
        if method == "DELETE" and not rest:
            if row["state"] != "off":
                return Reply(400, self.error_body(400, "Machine must be off before it can be deleted"))
            self.deleted.add(ident)
            for ip in self.public_ips:
                if ip["assignedMachineId"] == ident:
                    ip["assignedMachineId"] = None  # a claimed IP outlives the machine and keeps billing
            return Reply(200, {k: v for k, v in row.items() if not k.startswith("_")})
        return self.not_found("route")


# -- AutoDL (/api/v1, Pro developer API) --------------------------------------------------------------------

class FakeAutoDL(FakeCloud):
    """`/api/v1/dev/...`; `Authorization: <token>` with no scheme word; `{"code": "Success", "data"}`."""

    provider = "autodl"
    prefix = "/api/v1"

    def __init__(self, key: str = FAKE_KEY) -> None:
        super().__init__(key)
        self.instances: dict[str, dict[str, Any]] = {}
        self.assets = 123456

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == self.key

    def auth_error(self) -> Reply:
        return Reply(401, {"code": "AuthorizeFailed", "msg": "token is invalid", "data": None})

    def error_body(self, status: int, message: str) -> Any:
        return {"code": "Error", "msg": message, "data": None}

    def add_instance(self, uuid: str, status: str = "running") -> None:
        self.instances[uuid] = {"status": status, "proxy_host": "connect.westb.seetacloud.com", "ssh_port": 23456}

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        uuid = query.get("instance_uuid", [""])[0]
        if parts == ["dev", "wallet", "balance"] and method == "POST":
            return Reply(200, {"code": "Success", "msg": "", "data": {"assets": self.assets}})
        if parts[:3] == ["dev", "instance", "pro"] and method == "GET" and len(parts) == 4:
            row = self.instances.get(uuid)
            if row is None:
                return Reply(200, {"code": "InstanceNotFound", "msg": "instance does not exist", "data": None})
            if parts[3] == "status":
                return Reply(200, {"code": "Success", "msg": "", "data": row["status"]})
            if parts[3] == "snapshot":
                return Reply(200, {"code": "Success", "msg": "",
                                   "data": {"proxy_host": row["proxy_host"], "ssh_port": row["ssh_port"]}})
        return Reply(404, {"code": "NotFound", "msg": "no such path", "data": None})


# -- fixtures -----------------------------------------------------------------------------------------------

@pytest.fixture
def vtime() -> VirtualTime:
    return VirtualTime()


@pytest.fixture
def runpod_fake() -> Iterator[FakeRunPod]:
    with FakeRunPod() as fake:
        yield fake


@pytest.fixture
def vast_fake() -> Iterator[FakeVast]:
    with FakeVast() as fake:
        yield fake


@pytest.fixture
def lambda_fake() -> Iterator[FakeLambda]:
    with FakeLambda() as fake:
        yield fake


@pytest.fixture
def paperspace_fake() -> Iterator[FakePaperspace]:
    with FakePaperspace() as fake:
        yield fake


@pytest.fixture
def autodl_fake() -> Iterator[FakeAutoDL]:
    with FakeAutoDL() as fake:
        yield fake


KEY_ENV = ("RUNPOD_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "PAPERSPACE_API_KEY", "AUTODL_TOKEN")


@pytest.fixture
def cloud_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every provider key set to the fake one, an empty HOME (no CLI credential files), no agent and no
    base-URL overrides from the developer's shell; returns the HOME folder."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    for name in ("RUNPOD_API_URL", "VAST_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in KEY_ENV:
        monkeypatch.setenv(name, FAKE_KEY)
    return home
