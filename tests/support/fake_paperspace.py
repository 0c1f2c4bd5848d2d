"""A local stand-in for Paperspace's API (tests/support/fake_clouds.py says how the fakes work).

What it serves is Paperspace's own published shapes (tests/fixtures/providers/paperspace, from the pspace CLI's
generated OpenAPI client): every machine is the recorded machine object, every required field present, with its
id, name, state and whatever a test changes; lists are `{hasMore, items, nextPage?}` pages, whose last page either
leaves `nextPage` out (`last_page="absent"`, the schema makes it optional) or sends it null (`last_page="null"`,
its description); errors are the recorded `{code, message}` bodies (401, 404, 429, 500), and a 400 is pspace's
`BAD_REQUEST` code with the fake's own message (no 400 body is recorded).
"""

from __future__ import annotations

from typing import Any, Literal

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply
from support.recorded import recorded

RECORDED_ERRORS = {401: "error_401", 404: "error_404", 429: "error_429", 500: "error_500"}
RECORDED_STATES = frozenset(("off", "starting", "stopping", "restarting", "serviceready", "ready", "upgrading",
                             "provisioning"))
PUBLIC_IP = "198.18.0.9"  # the recorded machine has publicIp null; a test machine needs an address to reach


def machine_body(ident: str, state: str = "ready") -> dict[str, Any]:
    """The recorded machine (`get_machine_<state>` where one is recorded, else `ready`) with `id` and `state` set
    and a name of its own (the recorded one is a placeholder every machine would share)."""
    row: dict[str, Any] = recorded("paperspace", f"get_machine_{state if state in RECORDED_STATES else 'ready'}")
    row.update({"id": ident, "state": state, "name": f"m-{ident}"})
    return row


class FakePaperspace(FakeCloud):
    """`/v1/machines`, `/public-ips`, `/snapshots` with cursor pages; errors `{"code", "message"}` as recorded."""

    provider = "paperspace"
    prefix = "/v1"

    def __init__(self, key: str = FAKE_KEY, page_size: int = 2,
                 last_page: Literal["absent", "null"] = "absent") -> None:
        super().__init__(key)
        self.page_size = page_size
        self.last_page = last_page
        self.machines: dict[str, dict[str, Any]] = {}
        self.public_ips: list[dict[str, Any]] = []
        self.snapshots: list[dict[str, Any]] = []
        self.stop_polls = 1  # GETs that still show "stopping" after a stop

    def error_body(self, status: int, message: str = "") -> Any:
        """The recorded body for 401/404/429/500 (their message is the recording's); a 400 is `BAD_REQUEST` with
        `message`, and any other status `INTERNAL_SERVER_ERROR`'s recording."""
        if status == 400:
            return {"code": "BAD_REQUEST", "message": message}
        return recorded("paperspace", RECORDED_ERRORS.get(status, "error_500"))

    def add_machine(self, ident: str, state: str = "ready", static_ip: str | None = None,
                    **extra: Any) -> dict[str, Any]:
        """The recorded machine with this id and state, reachable at PUBLIC_IP (or its claimed `static_ip`);
        `extra` replaces top-level fields (`machineType=...`, `accelerators=[...]`, `usageRate=...`)."""
        row = machine_body(ident, state)
        row.update({"publicIp": static_ip or PUBLIC_IP, "publicIpType": "static" if static_ip else "dynamic"})
        row.update(extra)
        self.machines[ident] = row
        if static_ip:
            self.public_ips.append({"ip": static_ip, "assignedMachineId": ident, "region": row["region"],
                                    "dtCreated": "2026-12-01T00:00:00.000Z"})
        return row

    def _page(self, rows: list[dict[str, Any]], query: dict[str, list[str]]) -> Reply:
        start = int(query.get("after", ["cur-0"])[0].split("-")[1])
        limit = min(int(query.get("limit", ["120"])[0]), self.page_size)
        chunk = rows[start:start + limit]
        more = start + limit < len(rows)
        page: dict[str, Any] = {"hasMore": more, "items": chunk}
        if more:
            page["nextPage"] = f"cur-{start + limit}"
        elif self.last_page == "null":
            page["nextPage"] = None
        return Reply(200, page)

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
