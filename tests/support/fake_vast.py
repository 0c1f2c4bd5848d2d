"""A local stand-in for vast.ai's REST API (tests/support/fake_clouds.py says how the fakes work)."""

from __future__ import annotations

from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply


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
