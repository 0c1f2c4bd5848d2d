"""Paperspace Core machines over the current REST API (docs/providers.md §6; base
`https://api.paperspace.com/v1`, the pspace CLI's default, whose generated client comes from `/v1/openapi.json`).

The legacy `api.paperspace.io` + `X-Api-Key` API was deprecated on 15 July 2024 and is not used. Every machine
carries `usageRate` and `storageRate`, but the schema states no unit for either (per hour? per month? dollars or
cents?), so rgt does not price from them: they ride in the instance detail (`usage_rate`, `storage_rate`) for
the user to see, price is `none` here and the user's rate in rgt.toml is the price (profile `pricing.source =
"user"`). `storageTotal` has no stated unit either; it is read as bytes (as `ram` is documented) only to show a
size, never to price. The GPU is `accelerators[].name` × `count` where the machine lists accelerators, else
its `machineType`. "Stop billing" is a CONFLICT
in the sources (§10): a shut-down machine still bills its block storage, a claimed public IP bills until
released, and snapshots bill until deleted. So teardown is separate steps: `wait_gone` waits until the
machine is gone (its read answers 404 and the list no longer has it), then audits public IPs
(`GET /public-ips`) and snapshots (`GET /snapshots?machineId=`); the meter is "stopped" only when those
audits answered and found nothing. A machine must be off before it can be deleted: `terminate` stops it
first and waits for `off`. Every path is the profile's endpoints (`public_ips`, `snapshots` included), and
"gone" is its `gone_when` (`absent:list`), decided in gone.py.
"""

from __future__ import annotations

from typing import Any

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.base import Residual
from remote_gpu_trainer.providers.cloud.client import CloudClient, as_dict, as_float, as_str, still_billing
from remote_gpu_trainer.providers.cloud.http import CloudAPIError
from remote_gpu_trainer.providers.cloud.types import CloudInstance, StorageBilling, lower_keys, map_state

# state → INSTANCE_STATES: the schema's whole `state` enum (it gives no meanings); a word not in it stays `unknown`.
PAPERSPACE_STATES = lower_keys({
    "provisioning": "pending",
    "starting": "pending",
    "restarting": "pending",
    "upgrading": "pending",
    "serviceready": "running",
    "ready": "running",
    "stopping": "stopping",
    "off": "stopped",
})
PAGE_LIMIT = 120
MAX_PAGES = 200
GIB = 1 << 30


class PaperspaceClient(CloudClient):
    """list/get/stop/terminate/wait_gone for Paperspace machines; launch is not offered."""

    provider = "paperspace"
    OFF_TIMEOUT_S = 600.0
    OFF_POLL_S = 5.0

    async def paginate(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every item of the profile's cursor-paged list endpoint `name`: `items`, `hasMore`, `nextPage` →
        `?after=`."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {**(params or {}), "limit": PAGE_LIMIT}
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            page = as_dict(await self.call(name, params=query))
            rows = page.get("items")
            if not isinstance(rows, list):
                raise self._bad_answer(name, None, "expected `items` to be a list")
            items += [row for row in rows if isinstance(row, dict)]
            cursor = as_str(page.get("nextPage"))
            if not page.get("hasMore") or not cursor:
                return items
            if cursor in seen:
                raise self._bad_answer(name, None, "the same page cursor came back twice")
            seen.add(cursor)
            query = {**query, "after": cursor}
        raise self._bad_answer(name, None, f"more than {MAX_PAGES} pages")

    async def _list(self) -> list[CloudInstance]:
        return [parse_machine(row) for row in await self.paginate("list") if row.get("id")]

    async def _fetch(self, provider_id: str) -> CloudInstance:
        data = as_dict(await self.call("get", provider_id))
        row = data["data"] if isinstance(data.get("data"), dict) else data
        if not row.get("id"):
            raise self._bad_answer("get", provider_id, "expected a machine object")
        return parse_machine(row)

    async def stop(self, provider_id: str) -> None:
        """Shut down: compute stops, block storage, IP and snapshots keep billing."""
        await self.call("stop", provider_id, idempotent=True)

    async def terminate(self, provider_id: str) -> None:
        """Delete the machine and its block storage; stops it first, because only an `off` machine deletes."""
        before = await self._preflight(provider_id)
        if before is None:
            return
        if before.raw_state.lower() != "off":
            await self.stop(provider_id)
            if not await self._wait_off(provider_id):
                return  # it vanished while stopping
        await self._terminate_and_requery(provider_id, lambda: self.call(
            "terminate", provider_id, retry_timeouts=False, timeout_s=self.terminate_timeout_s))

    async def _wait_off(self, provider_id: str) -> bool:
        """True once the machine is off, False if it is already gone; VerbFailed if it never gets there."""
        waited = 0.0
        while True:
            gone, machine = await self._probe_gone(provider_id)
            if gone:
                return False
            if machine is not None and machine.raw_state.lower() == "off":
                return True
            if waited >= self.OFF_TIMEOUT_S:
                shown = machine.raw_state if machine else "unknown"
                raise VerbFailed(f"paperspace: {provider_id} is still {shown} after {waited:g}s of stopping; "
                                 "only a machine that is off can be deleted")
            await self.sleep(self.OFF_POLL_S)
            waited += self.OFF_POLL_S

    async def _residuals(self, provider_id: str, gone: bool,
                         last: CloudInstance | None) -> tuple[list[Residual], list[str]]:
        residuals: list[Residual] = []
        errors: list[str] = []
        if last is not None and not gone:
            residuals.append(still_billing(last))
            disk = next((s for s in last.storage if s.name == "block-storage"), None)
            if disk is not None:
                size = f"{disk.size_gb:g} GB " if disk.size_gb else ""
                residuals.append(Residual("block-storage", provider_id, f"{size}block storage bills while the "
                                          "machine exists, even off", "delete the machine"))
        for audit in (self._ip_residuals, self._snapshot_residuals):
            try:
                residuals += await audit(provider_id, last)
            except CloudAPIError as exc:
                errors.append(str(exc))
                residuals.append(Residual("audit", provider_id, f"could not check: {exc}",
                                          "check the Paperspace console by hand", confirmed=False))
        return residuals, errors

    async def _ip_residuals(self, provider_id: str, last: CloudInstance | None) -> list[Residual]:
        """Claimed public IPs bound to this machine, or carrying its last address: each bills until released."""
        address = last.public_ip if last else None
        found = []
        for row in await self.paginate("public_ips"):
            ip = as_str(row.get("ip"))
            if ip and (as_str(row.get("assignedMachineId")) == provider_id or ip == address):
                found.append(Residual("public-ip", ip, "claimed public IP bills until released",
                                      f"pspace public-ip release {ip}"))
        return found

    async def _snapshot_residuals(self, provider_id: str, last: CloudInstance | None) -> list[Residual]:
        """Snapshots of this machine survive its deletion and bill until deleted."""
        found = []
        for row in await self.paginate("snapshots", {"machineId": provider_id}):
            if as_str(row.get("machineId")) not in (None, provider_id):
                continue
            ident = as_str(row.get("id")) or "?"
            found.append(Residual("snapshot", ident, f"snapshot {as_str(row.get('name')) or ident!r} bills until "
                                  "deleted", "delete the snapshot (console or pspace)"))
        return found


def parse_machine(row: dict[str, Any]) -> CloudInstance:
    """One machine object → CloudInstance. `usageRate`/`storageRate` have no stated unit, so price_source is
    `none` and the two numbers are only carried in `detail`."""
    raw = as_str(row.get("state")) or ""
    storage_bytes = as_float(row.get("storageTotal"))
    gpu, gpu_count = machine_gpu(row)
    return CloudInstance(
        provider="paperspace", provider_id=str(row["id"]), state=map_state(PAPERSPACE_STATES, raw), raw_state=raw,
        name=as_str(row.get("name")) or "", gpu=gpu, gpu_count=gpu_count,
        created_at=as_str(row.get("dtCreated")), started_at=as_str(row.get("dtLastRun")),
        public_ip=as_str(row.get("publicIp")), region=as_str(row.get("region")),
        storage=(StorageBilling("block-storage", storage_bytes / GIB if storage_bytes else None,
                                bills_while_stopped=True),),
        detail={"private_ip": as_str(row.get("privateIp")), "auto_shutdown": row.get("autoShutdownEnabled"),
                "machine_type": as_str(row.get("machineType")), "usage_rate": as_float(row.get("usageRate")),
                "storage_rate": as_float(row.get("storageRate")),
                "storage_total": as_float(row.get("storageTotal")),
                "storage_used": as_float(row.get("storageUsed"))},
    )


def machine_gpu(row: dict[str, Any]) -> tuple[str, int | None]:
    """(GPU name, count): the first of `accelerators[{name, count, memory}]` when the machine lists any, else
    its `machineType` (count unknown)."""
    accelerators = row.get("accelerators")
    if isinstance(accelerators, list):
        for item in accelerators:
            name = as_str(as_dict(item).get("name"))
            if name:
                count = as_float(as_dict(item).get("count"))
                return name, int(count) if count is not None else None
    return as_str(row.get("machineType")) or "", None
