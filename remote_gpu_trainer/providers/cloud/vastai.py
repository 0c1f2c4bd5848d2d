"""vast.ai over its REST API (docs/providers.md §4; base `https://console.vast.ai/api/v0`, Bearer key).

The instance disk bills indefinitely while an instance exists, stopped or not, even at a negative balance,
so a destroy is only done when the API says so. VAST15: destroy is eventually consistent, and the final
answer is a 404, `instances: null`, `destroyed`, or `exited`; `exited` is also what a merely stopped
instance says, so it counts as gone only when the instance is also absent from the list (the profile's
`gone_when`, decided in gone.py; RECHECK_WORDS names `exited`). Paths are the profile's endpoints. `launch` searches
offers (`POST /bundles/`), re-checks every constraint on the answer instead of trusting the server filter,
and rents the cheapest (`PUT /asks/{offer}/`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.cloud.client import (
    CloudClient,
    Launches,
    as_dict,
    as_float,
    as_int,
    as_str,
    still_billing,
)
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudNotFound
from remote_gpu_trainer.providers.cloud.types import (
    CloudInstance,
    GpuRequest,
    Residual,
    StorageBilling,
    lower_keys,
    map_state,
)

# actual_status → INSTANCE_STATES; `offline` (host unreachable) and new words stay `unknown`.
VAST_STATES = lower_keys({
    "created": "pending",
    "scheduling": "pending",
    "loading": "pending",
    "running": "running",
    "stopped": "stopped",
    "exited": "stopped",
    "destroyed": "terminated",
})
OFFER_LIMIT = 64


class VastAIClient(CloudClient, Launches):
    """list/get/stop/terminate/wait_gone/launch for vast.ai instances."""

    provider = "vastai"
    RECHECK_WORDS = frozenset({"exited"})

    async def _list(self) -> list[CloudInstance]:
        data = await self.call("list", params={"owner": "me"})
        rows = as_dict(data).get("instances")
        if rows is None:
            return []
        if not isinstance(rows, list):
            raise self._bad_answer("list", None, "expected `instances` to be a list")
        return [parse_instance(row) for row in rows if isinstance(row, dict) and row.get("id") is not None]

    async def _fetch(self, provider_id: str) -> CloudInstance:
        data = await self.call("get", provider_id, params={"owner": "me"})
        if not isinstance(data, dict) or "instances" not in data:
            raise self._bad_answer("get", provider_id, "expected an `instances` object")
        row = data["instances"]
        if row is None:
            route = self.route("get", provider_id)
            raise CloudNotFound(self.provider, route.method, route.path, 200, "instances: null")
        if not isinstance(row, dict) or row.get("id") is None:
            raise self._bad_answer("get", provider_id, "expected `instances` to be an object")
        return parse_instance(row)

    async def stop(self, provider_id: str) -> None:
        """Stop compute (the profile's body sets `state: stopped`); the disk keeps billing, and a restart
        needs the same GPU to be free."""
        self._check_success("stop", provider_id, await self.call("stop", provider_id))

    async def terminate(self, provider_id: str) -> None:
        """Destroy the instance and its disk; Local Volumes are separate and keep billing."""
        if await self._preflight(provider_id) is None:
            return

        async def send() -> None:
            self._check_success("terminate", provider_id, await self.call(
                "terminate", provider_id, retry_timeouts=False, timeout_s=self.terminate_timeout_s))

        await self._terminate_and_requery(provider_id, send)

    async def _residuals(self, provider_id: str, gone: bool,
                         last: CloudInstance | None) -> tuple[list[Residual], list[str]]:
        if gone or last is None:
            return [], []
        residuals = [still_billing(last)]
        disk = next((s for s in last.storage if s.name == "instance-disk"), None)
        if disk is not None:
            size = f"{disk.size_gb:g} GB " if disk.size_gb else ""
            residuals.append(Residual("disk", provider_id, f"{size}instance disk bills indefinitely, even stopped",
                                      "destroy the instance"))
        return residuals, []

    # -- launch -------------------------------------------------------------------------------------------

    async def search_offers(self, request: GpuRequest) -> list[dict[str, Any]]:
        """Offers matching the request, cheapest first, each re-checked against the request here."""
        query: dict[str, Any] = {
            "verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True}, "rented": {"eq": False},
            "gpu_name": {"eq": request.gpu_type.replace("_", " ")}, "num_gpus": {"eq": request.gpu_count},
            "order": [["dph_total", "asc"]], "type": "bid" if request.interruptible else "on-demand",
            "limit": OFFER_LIMIT, "allocated_storage": request.disk_gb,
        }
        if request.max_price_per_hour is not None:
            query["dph_total"] = {"lte": request.max_price_per_hour}
        data = await self.call("offers", json_body=query, idempotent=True)
        offers = as_dict(data).get("offers")
        if not isinstance(offers, list):
            raise self._bad_answer("offers", None, "expected an `offers` list")
        fitting = [o for o in offers if isinstance(o, dict) and offer_fits(o, request)]
        return sorted(fitting, key=lambda o: as_float(o.get("dph_total")) or 0.0)

    async def launch(self, request: GpuRequest, *, onstart: str | None = None,
                     runtype: str = "ssh_direct ssh_proxy") -> CloudInstance:
        """Rent the cheapest fitting offer. The create call is never retried after it may have been processed."""
        if not request.image:
            raise VerbFailed("vastai: launch needs an image")
        offers = await self.search_offers(request)
        if not offers:
            ceiling = f" under ${request.max_price_per_hour:.3f}/h" if request.max_price_per_hour else ""
            raise VerbFailed(f"vastai: no rentable offer of {request.gpu_count}x {request.gpu_type}{ceiling}")
        offer = offers[0]
        body: dict[str, Any] = {"client_id": "me", "image": request.image, "disk": request.disk_gb,
                                "label": request.name, "runtype": runtype}
        if onstart:
            body["onstart"] = onstart
        if request.interruptible and request.max_price_per_hour is not None:
            body["price"] = request.max_price_per_hour  # the bid, per machine $/h, fixed at create
        offer_id = str(offer["id"])
        data = await self.call("create", offer_id, json_body=body, idempotent=False)
        self._check_success("create", offer_id, data)
        contract = as_dict(data).get("new_contract")
        if contract is None:
            raise self._bad_answer("create", offer_id, "no `new_contract` in the answer")
        try:
            return await self.get(str(contract))
        except CloudNotFound:
            # Eventually consistent: the new instance may not be readable yet. It exists; say so.
            pending = parse_instance({"id": contract, "actual_status": "created", **_offer_fields(offer)})
            self._seen[pending.provider_id] = pending
            return pending

    def _check_success(self, name: str, ident: str | None, data: Any) -> None:
        """vast can answer 200 with `success: false`; that is a failure, with the provider's message."""
        body = as_dict(data)
        if body.get("success") is False:
            message = as_str(body.get("msg")) or as_str(body.get("error")) or "success: false"
            route = self.route(name, ident)
            raise CloudAPIError(self.provider, route.method, route.path, 200, self.http.redact(message))


def offer_fits(offer: dict[str, Any], request: GpuRequest) -> bool:
    """Re-check the search filter client-side: GPU name, count and the price ceiling."""
    name = (as_str(offer.get("gpu_name")) or "").replace("_", " ").lower()
    if name != request.gpu_type.replace("_", " ").lower() or as_int(offer.get("num_gpus")) != request.gpu_count:
        return False
    price = as_float(offer.get("dph_total"))
    if price is None:
        return False
    return request.max_price_per_hour is None or price <= request.max_price_per_hour


def _offer_fields(offer: dict[str, Any]) -> dict[str, Any]:
    return {key: offer.get(key) for key in ("gpu_name", "num_gpus", "dph_total") if key in offer}


def parse_instance(row: dict[str, Any]) -> CloudInstance:
    """One instance row → CloudInstance (price `dph_total`, USD/h for the whole machine)."""
    raw = as_str(row.get("actual_status")) or ""
    intended = (as_str(row.get("intended_status")) or "").lower()
    state = map_state(VAST_STATES, raw)
    if intended == "stopped" and state in ("running", "pending"):
        state = "stopping"
    price = as_float(row.get("dph_total"))
    start = as_float(row.get("start_date"))
    disk_gb = as_float(row.get("disk_space"))
    return CloudInstance(
        provider="vastai", provider_id=str(row["id"]), state=state, raw_state=raw,
        name=as_str(row.get("label")) or "", gpu=as_str(row.get("gpu_name")) or "",
        gpu_count=as_int(row.get("num_gpus")), price_per_hour=price,
        price_source="api" if price is not None else "none",
        started_at=datetime.fromtimestamp(start, UTC).isoformat() if start else None,
        public_ip=as_str(row.get("public_ipaddr")), ssh_host=as_str(row.get("ssh_host")),
        ssh_port=as_int(row.get("ssh_port")), region=as_str(row.get("geolocation")),
        storage=(StorageBilling("instance-disk", disk_gb, bills_while_stopped=True,
                                price_per_gb_month=as_float(row.get("storage_cost"))),),
        detail={"intended_status": intended or None, "cur_state": as_str(row.get("cur_state")),
                "status_msg": as_str(row.get("status_msg"))},
    )
