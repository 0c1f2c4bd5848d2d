"""A local stand-in for Paperspace's API (tests/support/fake_clouds.py says how the fakes work)."""

from __future__ import annotations

from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply


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
