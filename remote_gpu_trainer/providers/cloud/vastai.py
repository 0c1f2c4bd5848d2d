"""vast.ai over its REST API (docs/providers.md §4; base `https://console.vast.ai/api`, Bearer key).

Paths are the profile's endpoints: get/stop/destroy/offers/create under `/v0`, the instance list under
`/v1/instances/` (keyset pages of at most 25, `after_token` = the last page's `next_token`; vast-cli calls the
v0 list deprecated). The state table is vast's documented `actual_status` list: null (being provisioned) and
`loading` are pending, `running` running, `stopped` stopped. `frozen` (GPU still billed), `exited` (the
container died while vast still intends it to run), `rebooting`, `unknown` and `offline` are not mapped: they
read `unknown` with the raw word kept, and the instance keeps its `dph_total`, so the meter bills the API's
price as an estimate instead of $0. `dph_total` does not drop when an instance stops: a stopped instance's
storage-only rate is the API's `storage_total_cost` ($/h), carried on the instance-disk item.

The instance disk bills indefinitely while an instance exists, so a destroy is only done when the API says so
(the profile's `gone_when`, decided in gone.py): a GET answering `{"instances": null}`, or the contract's
`cur_state: unloaded` (read here as the raw word `unloaded`). `exited` is also what a live instance can say,
so after a destroy it counts as gone only when the list no longer has the id (RECHECK_WORDS). `launch` searches
offers (`POST /v0/bundles/`), re-checks every constraint on the answer instead of trusting the server filter,
and rents the cheapest (`PUT /v0/asks/{offer}/`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from remote_gpu_trainer import text
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import Residual
from remote_gpu_trainer.providers.cloud.client import (
    CloudClient,
    Launches,
    Quotes,
    as_dict,
    as_float,
    as_int,
    as_str,
    first,
    still_billing,
)
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudNotFound
from remote_gpu_trainer.providers.cloud.types import (
    CloudInstance,
    GpuRequest,
    Quote,
    StorageBilling,
    lower_keys,
    map_state,
)

# actual_status → INSTANCE_STATES, as vast's state table documents it (a null actual_status is "being
# provisioned": parse_instance reads it as pending). Everything else stays `unknown`, with its price.
VAST_STATES = lower_keys({
    "loading": "pending",
    "running": "running",
    "stopped": "stopped",
})
GONE_CUR_STATE = "unloaded"  # cur_state once vast released the instance on destroy
OFFER_LIMIT = 64
LIST_PAGE_LIMIT = 25  # the v1 list's largest page
LIST_MAX_PAGES = 200  # 5000 instances: past that the list is refused, never silently cut short


class VastAIClient(CloudClient, Launches, Quotes):
    """list/get/stop/terminate/wait_gone/launch for vast.ai instances."""

    provider = "vastai"
    RECHECK_WORDS = frozenset({"exited"})

    async def _list(self) -> list[CloudInstance]:
        """Every page of `GET /v1/instances/`, following `next_token` until it is null."""
        found: list[CloudInstance] = []
        params: dict[str, Any] = {"limit": LIST_PAGE_LIMIT}
        for _ in range(LIST_MAX_PAGES):
            data = await self.call("list", params=params)
            self._check_success("list", None, data)
            if not isinstance(data, dict) or "instances" not in data:
                raise self._bad_answer("list", None, "expected an `instances` list")
            rows = data["instances"]
            if rows is not None and not isinstance(rows, list):
                raise self._bad_answer("list", None, "expected `instances` to be a list")
            found += [parse_instance(row) for row in rows or () if isinstance(row, dict) and row.get("id") is not None]
            token = as_str(data.get("next_token"))
            if token is None:
                return found
            params = {"limit": LIST_PAGE_LIMIT, "after_token": token}
        raise self._bad_answer("list", None, f"still a next_token after {LIST_MAX_PAGES} pages of "
                                             f"{LIST_PAGE_LIMIT}: the list was not read to its end")

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

    async def start(self, provider_id: str) -> None:
        """Run a stopped instance again (the profile's body sets `state: running`); it needs the same GPU free."""
        self._check_success("start", provider_id, await self.call("start", provider_id))

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

    async def quote(self, request: GpuRequest) -> Quote:
        """The cheapest fitting offer's price: what the launch will rent now (read-only)."""
        offers = await self.search_offers(request)
        if not offers:
            ceiling = text.price(request.max_price_per_hour or 0.0)  # set from the constraint, which requires it
            raise VerbFailed(f"vastai: no rentable offer of {request.gpu_count}x {request.gpu_type} under "
                             f"{ceiling}/h now: raise max_price_per_hour or try later")
        best = offers[0]
        return Quote(as_float(best.get("dph_total")),
                     f"vast.ai offer {best.get('id')}, the cheapest of {len(offers)} matching")

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
            pending = parse_instance({"id": contract, "actual_status": None, **_offer_fields(offer)})
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
    """One instance row → CloudInstance: price `dph_total` (USD/h for the whole machine, whatever the state),
    the disk's own hourly rate `storage_total_cost` (what a stopped instance bills)."""
    actual = row.get("actual_status")
    raw = as_str(actual) or ""
    intended = (as_str(row.get("intended_status")) or "").lower()
    cur_state = as_str(row.get("cur_state"))
    if (cur_state or "").lower() == GONE_CUR_STATE:
        state, raw = "terminated", GONE_CUR_STATE  # gone only under the profile's `status:unloaded` rule
    elif "actual_status" in row and actual is None:
        state = "pending"  # vast's state table: null = being provisioned
    else:
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
                                price_per_gb_month=as_float(row.get("storage_cost")),
                                price_per_hour=disk_per_hour(row)),),
        detail={"intended_status": intended or None, "cur_state": cur_state, "actual_status": raw or None,
                "status_msg": as_str(row.get("status_msg"))},
    )


def disk_per_hour(row: dict[str, Any]) -> float | None:
    """vast's own hourly figure for the disk: `storage_total_cost`, else `instance.diskHour`."""
    return first(as_float(row.get("storage_total_cost")), as_float(as_dict(row.get("instance")).get("diskHour")))
