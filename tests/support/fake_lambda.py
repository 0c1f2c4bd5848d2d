"""A local stand-in for Lambda Cloud's API (tests/support/fake_clouds.py says how the fakes work)."""

from __future__ import annotations

import base64
from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply


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
