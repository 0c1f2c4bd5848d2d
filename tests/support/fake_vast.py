"""A local stand-in for vast.ai's REST API (tests/support/fake_clouds.py says how the fakes work).

It serves the bodies recorded from vast's own docs and vast-cli (tests/fixtures/providers/vastai/, sources in
that folder's README): a GET answers the recorded instance of the instance's state with only the id and the
fields a test sets changed; a GET of an instance that does not exist (or no longer does) answers the documented
`{"instances": null}`, never a 404; the list is `GET /api/v1/instances/` in keyset pages of at most 25 with
`next_token`; errors are the recorded envelopes (401 `auth_error`, destroy 404 `not_found`, 400
`invalid_args`, 429 `{"detail"}` for show/list and `rate_limit_exceeded` for destroy).

Not recorded anywhere, so kept as vast-cli reads them: the stop/start answer `{"success": true}`, the offer
search (`POST /v0/bundles/` → `{"offers": [...]}`, offers given by each test) and the rent answer
(`{"success": true, "new_contract": id}`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from support.fake_cloud_server import FAKE_KEY, FakeCloud, Reply
from support.recorded import recorded

# actual_status → the recorded GET body of that state (None: the null status of a box being provisioned)
STATE_BODIES: dict[str | None, str] = {
    None: "v0_get_instance_provisioning_null_status", "loading": "v0_get_instance_loading",
    "running": "v0_get_instance_running", "stopped": "v0_get_instance_stopped", "frozen": "v0_get_instance_frozen",
    "exited": "v0_get_instance_exited", "rebooting": "v0_get_instance_rebooting",
    "unknown": "v0_get_instance_unknown", "offline": "v0_get_instance_offline",
}
PAGE_LIMIT = 25  # the v1 list's largest page (show_instances.yaml)
ERROR_BODIES = {400: "error_400", 401: "error_401", 500: "error_500"}


def token_for(last_id: int) -> str:
    """A keyset token shaped like the recorded one (base64 of {"values": {"id": N}})."""
    return base64.b64encode(json.dumps({"values": {"id": last_id}}).encode()).decode()


def id_of(token: str) -> int | None:
    try:
        return int(json.loads(base64.b64decode(token))["values"]["id"])
    except (ValueError, KeyError, TypeError):
        return None


class FakeVast(FakeCloud):
    """`/api/v0/instances/{id}/`, `/api/v1/instances/`, `/api/v0/bundles/`, `/api/v0/asks/{id}/`."""

    provider = "vastai"
    prefix = "/api"

    def __init__(self, key: str = FAKE_KEY) -> None:
        super().__init__(key)
        self.instances: dict[str, dict[str, Any]] = {}
        self.offers: list[dict[str, Any]] = []
        self.filter_offers = True  # False: ignore the query, as a sloppy server might
        self._next = 5000

    # -- error envelopes, as recorded -------------------------------------------------------------------

    def error_body(self, status: int, message: str) -> Any:
        """The recorded envelope of `status` (`{"success": false, "error", "msg"}`) carrying `message`."""
        body = recorded("vastai", ERROR_BODIES[status]) if status in ERROR_BODIES else {
            "success": False, "error": "not_found" if status == 404 else "error", "msg": ""}
        body["msg"] = message
        return body

    def auth_error(self) -> Reply:
        return Reply(401, recorded("vastai", "error_401"))

    def rate_limit(self, method: str, path: str, retry_after: str, *, times: int = 1) -> None:
        """429 as vast documents it: destroy answers `rate_limit_exceeded`, show and list a `detail` body."""
        body = recorded("vastai", "destroy_error_429" if method == "DELETE" else "error_429")
        self.fail(method, path, 429, body, times=times, headers={"Retry-After": retry_after})

    # -- state --------------------------------------------------------------------------------------------

    def add_instance(self, ident: str, actual: str | None = "running", **extra: Any) -> dict[str, Any]:
        """An instance as vast's recorded GET body of state `actual` shows it (a word with no recording: the
        running body with only `actual_status` changed), with `extra` fields set over it."""
        body = STATE_BODIES.get(actual, "v0_get_instance_running")
        row: dict[str, Any] = recorded("vastai", body)["instances"]
        row.update(id=int(ident), actual_status=actual)
        row.update(extra)
        self.instances[ident] = row
        return row

    def _live(self, ident: str) -> dict[str, Any] | None:
        row = self.instances.get(ident)
        if row is None or (ident in self.deleted and not self.lingering(ident)):
            return None
        return row

    # -- routes -------------------------------------------------------------------------------------------

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        version, rest = (parts[0], parts[1:]) if parts else ("", [])
        if version == "v1" and rest == ["instances"] and method == "GET":
            return self._page(query)
        if version != "v0":
            return self.not_found("route")
        if len(rest) == 2 and rest[0] == "instances":
            return self._instance(method, rest[1], body)
        if rest == ["bundles"] and method == "POST":
            return Reply(200, {"offers": self._search(body if isinstance(body, dict) else {})})
        if len(rest) == 2 and rest[0] == "asks" and method == "PUT":
            return self._rent(rest[1], body if isinstance(body, dict) else {})
        return self.not_found("route")

    def _page(self, query: dict[str, list[str]]) -> Reply:
        """One keyset page of the v1 list, by id ascending, after the id `after_token` names."""
        try:
            limit = int(query.get("limit", [str(PAGE_LIMIT)])[0])
        except ValueError:
            limit = 0
        if not 1 <= limit <= PAGE_LIMIT:
            return Reply(400, self.error_body(400, f"error 400/1782: Invalid args: limit must be 1..{PAGE_LIMIT}"))
        after = id_of(query["after_token"][0]) if "after_token" in query else 0
        if after is None:
            return Reply(400, self.error_body(400, "error 400/1782: Invalid args: bad after_token"))
        live = sorted((row for ident in list(self.instances) if (row := self._listed(ident)) is not None),
                      key=lambda row: int(row["id"]))
        rest = [row for row in live if int(row["id"]) > after]
        page, more = rest[:limit], len(rest) > limit
        answer = recorded("vastai", "v1_list_instances_page" if more else "v1_list_instances_last_page")
        template = answer["instances"][0]
        labels: dict[str, int] = {}
        for row in live:
            labels[row.get("label") or ""] = labels.get(row.get("label") or "", 0) + 1
        answer.update(instances=[{**template, **row} for row in page], instances_found=len(live),
                      total_instances=len(live), label_counts=labels,
                      next_token=token_for(int(page[-1]["id"])) if more else None)
        return Reply(200, answer)

    def _listed(self, ident: str) -> dict[str, Any] | None:
        """Listing neither uses up a lingering poll nor shows a deleted instance."""
        return None if ident in self.deleted else self.instances[ident]

    def _instance(self, method: str, ident: str, body: Any) -> Reply:
        row = self._live(ident)
        if row is None:
            if method == "GET":
                return Reply(200, recorded("vastai", "v0_get_instance_destroyed_null"))
            if method == "DELETE":
                return Reply(404, recorded("vastai", "destroy_error_404"))
            return Reply(400, self.error_body(400, f"error 400/1782: Invalid args: no instance {ident}"))
        if method == "GET":
            return Reply(200, {"instances": row})
        if method == "PUT" and isinstance(body, dict) and body.get("state") in ("stopped", "running"):
            word = body["state"]
            row.update(intended_status=word, actual_status=word, cur_state=word)
            return Reply(200, {"success": True})
        if method == "DELETE":
            self.deleted.add(ident)
            return Reply(200, recorded("vastai", "destroy_200"))
        return Reply(400, recorded("vastai", "error_400"))

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
            return Reply(400, self.error_body(400, "error 400/1782: Invalid args: offer unavailable"))
        self._next += 1
        self.add_instance(str(self._next), None, dph_total=offer["dph_total"], gpu_name=offer["gpu_name"],
                          num_gpus=offer["num_gpus"], disk_space=body.get("disk"), label=body.get("label"))
        return Reply(200, {"success": True, "new_contract": self._next})
