"""A local stand-in for Lambda Cloud's API (tests/support/fake_clouds.py says how the fakes work).

What it serves is Lambda's own published shapes (tests/fixtures/providers/lambda, spec 1.8.3): every instance is
the recorded instance object with its id, status and whatever a test changes; errors are the recorded envelopes
(`global/invalid-api-key` 401, `global/account-inactive` 403, `global/object-does-not-exist` 404,
`global/internal-error` for a 400, `provider/internal-unavailable` for a 5xx). The spec documents no 429 body
(its rate limits are prose only), so a 429 here has an empty body: no made-up code. Launched instances get
32-hex-digit ids, as Lambda's are. The list answers only instances that are not terminated ("List running
instances"): a terminated instance is never listed, whatever a test left in `instances`.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply
from support.recorded import recorded

# HTTP status → the recorded error body the fake answers with (None: no body, as the spec documents none).
ERROR_BODIES: dict[int, str | None] = {
    400: "error_internal", 401: "error_401", 403: "error_403", 404: "error_404", 429: None,
}
SERVER_ERROR_BODY = "error_5xx_provider_unavailable"  # every 5xx: the spec's "Provider errors" example


def instance_body(ident: str, status: str = "active") -> dict[str, Any]:
    """The recorded instance object (`get_instance_<status>` where one is recorded, else `active`) with `id`
    and `status` set."""
    name = f"get_instance_{status}"
    row: dict[str, Any] = recorded("lambda", name if name in _RECORDED_STATES else "get_instance_active")["data"]
    row["id"] = ident
    row["status"] = status
    return row


_RECORDED_STATES = frozenset(f"get_instance_{s}" for s in
                             ("booting", "active", "unhealthy", "terminating", "terminated", "preempted"))


def lambda_id(n: int) -> str:
    """A Lambda-shaped instance id (32 lowercase hex digits), the same for the same n."""
    return hashlib.sha256(f"rgt-fake-lambda-{n}".encode()).hexdigest()[:32]


class FakeLambda(FakeCloud):
    """`/api/v1/instances`, `/instance-types`, `/instance-operations/*`; errors `{"error": {code, message,
    suggestion?}}` as recorded.

    `auth` is "bearer" or "basic" (the spec accepts both; Bearer is recommended): the other form is refused like a
    wrong key.
    """

    provider = "lambda"
    prefix = "/api/v1"

    def __init__(self, key: str = FAKE_KEY, auth: str = "bearer") -> None:
        super().__init__(key)
        self.auth = auth
        self.instances: dict[str, dict[str, Any]] = {}
        self.types: dict[str, dict[str, Any]] = {}
        self.launched: list[str] = []
        self._next = 1

    def authorized(self, headers: dict[str, str]) -> bool:
        if self.auth == "basic":
            token = base64.b64encode(f"{self.key}:".encode()).decode()
            return headers.get("authorization") == f"Basic {token}"
        return super().authorized(headers)

    def error_body(self, status: int, message: str = "") -> Any:
        """The recorded body for `status`; `message` is not used: Lambda's messages are its own."""
        name = ERROR_BODIES.get(status, SERVER_ERROR_BODY if status >= 500 else "error_internal")
        return None if name is None else recorded("lambda", name)

    def auth_error(self) -> Reply:
        return Reply(401, self.error_body(401))

    def not_found(self, what: str = "") -> Reply:
        return Reply(404, self.error_body(404))

    def rate_limit(self, method: str, path: str, retry_after: str, *, times: int = 1) -> None:
        """429 with a Retry-After header and an empty body (the spec documents no 429 body)."""
        self.fail(method, path, 429, None, times=times, headers={"Retry-After": retry_after})

    def add_type(self, name: str, gpu: str, gpus: int, cents: int, regions: list[str]) -> None:
        itype = recorded("lambda", "get_instance_active")["data"]["instance_type"]
        itype.update({"name": name, "description": f"{gpus}x {gpu}", "gpu_description": gpu,
                      "price_cents_per_hour": cents})
        itype["specs"]["gpus"] = gpus
        self.types[name] = {
            "instance_type": itype,
            "regions_with_capacity_available": [{"name": r, "description": r} for r in regions],
        }

    def add_instance(self, ident: str, status: str = "active", type_name: str | None = None,
                     **extra: Any) -> dict[str, Any]:
        """The recorded instance with this id and status (and a registered instance type, when named); `extra`
        replaces top-level fields (`file_system_names=[]`, `ip=...`)."""
        row = instance_body(ident, status)
        if type_name is not None and type_name in self.types:
            row["instance_type"] = dict(self.types[type_name]["instance_type"])
        row.update(extra)
        self.instances[ident] = row
        return row

    def _listed(self, ident: str, row: dict[str, Any]) -> bool:
        if str(row.get("status", "")).lower() == "terminated":
            return False
        return ident not in self.deleted or bool(self.linger.get(ident))

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if parts == ["instances"] and method == "GET":
            return Reply(200, {"data": [r for i, r in self.instances.items() if self._listed(i, r)]})
        if len(parts) == 2 and parts[0] == "instances" and method == "GET":
            ident = parts[1]
            row = self.instances.get(ident)
            if row is None or (ident in self.deleted and not self.lingering(ident)):
                return self.not_found()
            return Reply(200, {"data": row})
        if parts == ["instance-types"] and method == "GET":
            return Reply(200, {"data": self.types})
        if parts == ["instance-operations", "terminate"] and method == "POST":
            return self._terminate(body)
        if parts == ["instance-operations", "launch"] and method == "POST":
            return self._launch(body)
        return self.not_found()

    def _terminate(self, body: Any) -> Reply:
        ids = body.get("instance_ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids:
            return Reply(400, self.error_body(400))
        missing = [i for i in ids if i not in self.instances or i in self.deleted]
        if missing:
            return self.not_found()
        done = []
        for ident in ids:
            self.instances[ident]["status"] = "terminating"
            self.deleted.add(ident)
            done.append(self.instances[ident])
        return Reply(200, {"data": {"terminated_instances": done}})

    def _launch(self, body: Any) -> Reply:
        if not isinstance(body, dict) or body.get("instance_type_name") not in self.types:
            return Reply(400, self.error_body(400))
        ident = lambda_id(self._next)
        self._next += 1
        self.launched.append(ident)
        names = body.get("file_system_names", [])
        self.add_instance(ident, "booting", body["instance_type_name"], name=body.get("name"),
                          file_system_names=names,
                          file_system_mounts=[{"mount_point": f"/lambda/nfs/{n}", "file_system_id": lambda_id(-i - 1)}
                                              for i, n in enumerate(names)],
                          region={"name": body.get("region_name"), "description": body.get("region_name")})
        return Reply(200, {"data": {"instance_ids": [ident]}})
