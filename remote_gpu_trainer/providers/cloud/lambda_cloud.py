"""Lambda Cloud over its REST API (spec 1.8.3, base `https://cloud.lambda.ai/api/v1`; docs/providers.md §5).

`cloud.lambdalabs.com` is the spec's deprecated secondary server and is not used. Auth: the spec recommends
`Authorization: Bearer <key>` and also accepts Basic, so Bearer is the profile's scheme and
`auth_scheme="basic-user"` (the key as the Basic user name, empty password) stays available. Lambda has no
stop: terminate is the only meter stop. Its billing page bills an instance from launch (health checks passed)
until terminate "regardless if they're actively being used", so every state but `terminated` bills; the spec
gives no meaning for `unhealthy` or `preempted`, so both stay `unknown` (the raw word is kept: `preempted` is
what the preemption audit reads) and carry the API's price, and `unhealthy` (like the console's "Alert" after an
in-OS shutdown) is called out by name as still billing.
LAM14: the terminate call can hang, so it runs under its own client timeout and a timeout is followed by a
re-query, never by a blind retry. NFS filesystems (`file_system_names`, `file_system_mounts`) survive terminate
and bill until deleted. The API allows about 1 request/s and one launch per 12 s (five per minute). Paths,
methods and the terminate body are the profile's endpoints; gone (404 or its own word `terminated`) is the
profile's `gone_when`, decided in gone.py.
"""

from __future__ import annotations

from typing import Any

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import Residual
from remote_gpu_trainer.providers.cloud.client import (
    CloudClient,
    Launches,
    Quotes,
    UnsupportedAction,
    as_dict,
    as_float,
    as_int,
    as_str,
    still_billing,
    surviving_storage,
)
from remote_gpu_trainer.providers.cloud.types import (
    CloudInstance,
    GpuRequest,
    Quote,
    StorageBilling,
    lower_keys,
    map_state,
)

# status → INSTANCE_STATES (spec `InstanceStatus`: booting, active, unhealthy, terminated, terminating,
# preempted). `unhealthy`, `preempted` (and the console's "Alert") deliberately stay `unknown`: they bill until
# terminate, and the meter prices an `unknown` state at the API's price as an estimate.
LAMBDA_STATES = lower_keys({
    "booting": "pending",
    "active": "running",
    "terminating": "terminating",
    "terminated": "terminated",
})
ALERT_WORDS = frozenset({"unhealthy", "alert"})
PREEMPTED_WORDS = frozenset({"preempted"})  # audits/preemption.py finds "preempt" in the raw state too
LAUNCH_INTERVAL_S = 12.0  # spec 1.8.3: /instance-operations/launch allows one request per 12 s (five per minute)
NFS_ROOT = "/lambda/nfs/"


class LambdaClient(CloudClient, Launches, Quotes):
    """list/get/terminate/wait_gone/launch for Lambda Cloud; `stop` explains why there is none."""

    provider = "lambda"
    TERMINATE_TIMEOUT_S = 30.0

    _last_launch: float | None = None

    async def _list(self) -> list[CloudInstance]:
        rows = as_dict(await self.call("list")).get("data")
        if not isinstance(rows, list):
            raise self._bad_answer("list", None, "expected `data` to be a list")
        return [parse_instance(row) for row in rows if isinstance(row, dict) and row.get("id")]

    async def _fetch(self, provider_id: str) -> CloudInstance:
        row = as_dict(await self.call("get", provider_id)).get("data")
        if not isinstance(row, dict) or not row.get("id"):
            raise self._bad_answer("get", provider_id, "expected `data` to be an instance")
        return parse_instance(row)

    async def stop(self, provider_id: str) -> None:
        raise UnsupportedAction(
            "lambda: there is no stop: an in-OS shutdown leaves the instance in Alert and still billing; "
            "terminate is the only way to stop the meter")

    async def terminate(self, provider_id: str) -> None:
        """POST the terminate operation (the profile's body names the id); its answer must list the id, else
        the instance is re-queried."""
        if await self._preflight(provider_id) is None:
            return

        async def send() -> None:
            data = await self.call("terminate", provider_id, idempotent=True, retry_timeouts=False,
                                   timeout_s=self.terminate_timeout_s)
            done = as_dict(as_dict(data).get("data")).get("terminated_instances")
            ids = {str(as_dict(i).get("id")) for i in done} if isinstance(done, list) else set()
            if provider_id not in ids:
                instance = await self.get(provider_id)
                if instance.state not in ("terminating", "terminated"):
                    raise self._bad_answer("terminate", provider_id, f"{provider_id} not in terminated_instances "
                                           f"and it is still {instance.raw_state}")

        await self._terminate_and_requery(provider_id, send)

    async def _residuals(self, provider_id: str, gone: bool,
                         last: CloudInstance | None) -> tuple[list[Residual], list[str]]:
        residuals: list[Residual] = []
        if last is not None and not gone:
            residuals.append(still_billing(last))
            if last.raw_state.lower() in ALERT_WORDS:
                residuals.append(Residual(
                    "alert", provider_id, f"instance is {last.raw_state!r} (Alert): still billing",
                    "terminate it; an in-OS shutdown does not stop the meter"))
            elif last.raw_state.lower() in PREEMPTED_WORDS:
                residuals.append(Residual(
                    "preempted", provider_id, f"instance is {last.raw_state!r}: Lambda bills until terminate",
                    "terminate it (the billing page names no state that stops the meter but terminated)"))
        residuals.extend(surviving_storage(last, {"nfs": (
            "NFS filesystem survives terminate and bills until deleted",
            "delete it in the Lambda console after its instances are terminated")}))
        return residuals, []

    # -- launch -------------------------------------------------------------------------------------------

    async def instance_types(self) -> dict[str, dict[str, Any]]:
        data = as_dict(await self.call("offers")).get("data")
        if not isinstance(data, dict):
            raise self._bad_answer("offers", None, "expected `data` to be an object")
        return {name: entry for name, entry in data.items() if isinstance(entry, dict)}

    async def quote(self, request: GpuRequest) -> Quote:
        """The cheapest instance type with capacity that fits: what the launch will pick now (read-only)."""
        type_name, region, price = pick_instance_type(await self.instance_types(), request)
        return Quote(price, f"Lambda instance type {type_name} in {region}")

    async def launch(self, request: GpuRequest, *, file_system_names: tuple[str, ...] = ()) -> CloudInstance:
        """Launch the cheapest instance type with capacity that fits; one launch per 12 s at most."""
        if not request.ssh_key_names:
            raise VerbFailed("lambda: launch needs at least one SSH key name registered on the account")
        name, region, _ = pick_instance_type(await self.instance_types(), request)
        await self._launch_pacing()
        body: dict[str, Any] = {"region_name": region, "instance_type_name": name,
                                "ssh_key_names": list(request.ssh_key_names), "quantity": 1, "name": request.name}
        if file_system_names:
            body["file_system_names"] = list(file_system_names)
        data = await self.call("create", json_body=body)
        ids = as_dict(as_dict(data).get("data")).get("instance_ids")
        if not isinstance(ids, list) or not ids:
            raise self._bad_answer("create", None, "no instance_ids in the answer")
        return await self.get(str(ids[0]))

    async def _launch_pacing(self) -> None:
        """Lambda answers 429 to a second launch within 12 s; waiting here is cheaper than a refused launch."""
        now = self.clock()
        if self._last_launch is not None:
            wait = self._last_launch + LAUNCH_INTERVAL_S - now
            if wait > 0:
                await self.sleep(wait)
                now = max(self.clock(), self._last_launch + LAUNCH_INTERVAL_S)
        self._last_launch = now


def pick_instance_type(types: dict[str, dict[str, Any]], request: GpuRequest) -> tuple[str, str, float]:
    """(type name, region, $/h) of the cheapest type matching GPU and count, with capacity, under the ceiling."""
    wanted = request.gpu_type.lower()
    best: tuple[str, str, float] | None = None
    for name, entry in types.items():
        itype = as_dict(entry.get("instance_type"))
        text = f"{name} {as_str(itype.get('gpu_description')) or ''} {as_str(itype.get('description')) or ''}"
        gpus = as_int(as_dict(itype.get("specs")).get("gpus"))
        cents = as_float(itype.get("price_cents_per_hour"))
        if wanted not in text.lower() or gpus != request.gpu_count or cents is None:
            continue
        price = cents / 100.0
        if request.max_price_per_hour is not None and price > request.max_price_per_hour:
            continue
        names = [as_str(as_dict(r).get("name")) for r in entry.get("regions_with_capacity_available") or []]
        regions = [r for r in names if r and (request.region is None or r == request.region)]
        if regions and (best is None or price < best[2]):
            best = (name, regions[0], price)
    if best is None:
        ceiling = f" under ${request.max_price_per_hour:.2f}/h" if request.max_price_per_hour else ""
        raise VerbFailed(f"lambda: no instance type with {request.gpu_count}x {request.gpu_type}{ceiling} "
                         "has capacity now")
    return best


def parse_instance(row: dict[str, Any]) -> CloudInstance:
    """One instance object → CloudInstance. The price (`instance_type.price_cents_per_hour`, integer US cents)
    is carried in every state, `unknown` ones included: Lambda bills until terminate."""
    raw = as_str(row.get("status")) or ""
    itype = as_dict(row.get("instance_type"))
    cents = as_float(itype.get("price_cents_per_hour"))
    filesystems = file_systems(row)
    storage = [StorageBilling("local", as_float(as_dict(itype.get("specs")).get("storage_gib")),
                              bills_while_stopped=False)]
    storage += [StorageBilling("nfs", None, bills_while_stopped=True, survives_terminate=True,
                               ident=fs["name"] or fs["id"] or fs["mount_point"]) for fs in filesystems]
    return CloudInstance(
        provider="lambda", provider_id=str(row["id"]), state=map_state(LAMBDA_STATES, raw), raw_state=raw,
        name=as_str(row.get("name")) or "",
        gpu=as_str(itype.get("gpu_description")) or as_str(itype.get("name")) or "",
        gpu_count=as_int(as_dict(itype.get("specs")).get("gpus")),
        price_per_hour=cents / 100.0 if cents is not None else None,
        price_source="api" if cents is not None else "none",
        public_ip=as_str(row.get("ip")), region=as_str(as_dict(row.get("region")).get("name")),
        storage=tuple(storage),
        detail={"hostname": as_str(row.get("hostname")), "instance_type": as_str(itype.get("name")),
                "file_systems": filesystems or None},
    )


def file_systems(row: dict[str, Any]) -> list[dict[str, str]]:
    """The NFS filesystems on an instance, `{name, id, mount_point}` each: `file_system_names` and the
    spec's newer `file_system_mounts` (`file_system_id`, `mount_point`) joined by the mount point
    `/lambda/nfs/<name>`; a mount whose name is not listed is kept under its id, so it is never missed."""
    names = [name for name in (as_str(n) for n in _list(row.get("file_system_names"))) if name]
    found: dict[str, dict[str, str]] = {name: {"name": name, "id": "", "mount_point": ""} for name in names}
    for mount in _list(row.get("file_system_mounts")):
        ident = as_str(as_dict(mount).get("file_system_id")) or ""
        point = as_str(as_dict(mount).get("mount_point")) or ""
        name = point[len(NFS_ROOT):].strip("/") if point.startswith(NFS_ROOT) else ""
        if not ident and not point:
            continue
        key = name if name in found else (ident or point)
        entry = found.setdefault(key, {"name": name if name in found else "", "id": "", "mount_point": ""})
        entry["id"], entry["mount_point"] = ident or entry["id"], point or entry["mount_point"]
    return list(found.values())


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
