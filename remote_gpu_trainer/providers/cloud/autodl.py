"""AutoDL: console-only control, with an optional read-only adapter for "Pro" instances (docs/providers.md §2).

The spec's client action is "console-only; optional read-only Pro adapter behind a flag; teardown is
user-attested". The developer API (a secondary source) covers only Pro container instances: base
`https://api.autodl.com/api/v1`, header `Authorization: <token>` with no `Bearer`, a status read, an SSH
snapshot read and the wallet balance (0.001 CNY units). It answers HTTP 200 with `code != "Success"` on
failure. Power-off and release calls were never seen, so stop, terminate, listing and gone-polling raise
UnsupportedAction naming the console step instead of guessing an endpoint that might do something else.
The three calls it makes are the profile's endpoints `get`, `ssh` and `balance`.
"""

from __future__ import annotations

from typing import Any

from remote_gpu_trainer.providers.base import TeardownOutcome
from remote_gpu_trainer.providers.cloud.client import CloudClient, UnsupportedAction, as_dict, as_float, as_int, as_str
from remote_gpu_trainer.providers.cloud.http import CloudAPIError
from remote_gpu_trainer.providers.cloud.types import CloudInstance, Money, lower_keys, map_state

CONSOLE_URL = "https://www.autodl.com/console/instance/list"

# Pro status words (secondary source, unverified); anything else stays `unknown`.
AUTODL_STATES = lower_keys({
    "creating": "pending",
    "starting": "pending",
    "running": "running",
    "shutting_down": "stopping",
    "shutdown": "stopped",
})


class AutoDLClient(CloudClient):
    """`get` and `balance` for Pro instances when `pro_api=True`; every other verb names its console step."""

    provider = "autodl"

    def __init__(self, *, pro_api: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pro_api = pro_api

    async def list_instances(self) -> list[CloudInstance]:
        raise UnsupportedAction(f"autodl: the API has no instance list; see the console: {CONSOLE_URL}")

    async def _fetch(self, provider_id: str) -> CloudInstance:
        self._require_pro("reading instance status")
        status = await self._call("get", provider_id)
        raw = as_str(as_dict(status).get("status")) if isinstance(status, dict) else as_str(status)
        snapshot = as_dict(await self._call("ssh", provider_id))
        return CloudInstance(
            provider="autodl", provider_id=provider_id, state=map_state(AUTODL_STATES, raw), raw_state=raw or "",
            ssh_host=as_str(snapshot.get("proxy_host")), ssh_port=as_int(snapshot.get("ssh_port")),
            currency="CNY",
        )

    async def balance(self) -> Money:
        """The wallet balance (`data.assets`, in 0.001 CNY)."""
        self._require_pro("reading the balance")
        assets = as_float(as_dict(await self._call("balance", None)).get("assets"))
        if assets is None:
            raise self._bad_answer("balance", None, "no `data.assets`")
        return Money(assets / 1000.0, "CNY")

    async def stop(self, provider_id: str) -> None:
        raise UnsupportedAction(
            f"autodl: shut down (关机) instance {provider_id} in the console ({CONSOLE_URL}); the data disk keeps a "
            "small fee and a stopped instance is released after 15 days")

    async def terminate(self, provider_id: str) -> None:
        raise UnsupportedAction(
            f"autodl: release (释放) instance {provider_id} in the console ({CONSOLE_URL}) after the gate opens; "
            "it destroys / and the data disk (not autodl-fs) and is irreversible; then attest it in rgt")

    async def wait_gone(self, provider_id: str, *, timeout_s: float = 600.0, poll_s: float = 5.0) -> TeardownOutcome:
        raise UnsupportedAction(
            f"autodl: the API cannot show a released instance; confirm in the console ({CONSOLE_URL}) that "
            f"{provider_id} is gone and attest it (teardown is user-attested)")

    def _require_pro(self, what: str) -> None:
        if not self.pro_api:
            raise UnsupportedAction(
                f"autodl: {what} needs the read-only Pro API, which is off (console-only control); "
                f"use the console: {CONSOLE_URL}")

    async def _call(self, name: str, provider_id: str | None) -> Any:
        """`data` of the profile's endpoint `name` in a `{"code": "Success", "data": ...}` envelope; any other
        code is an error, shown without the query's values."""
        body = as_dict(await self.call(name, provider_id, idempotent=True))
        code = as_str(body.get("code"))
        if code != "Success":
            route = self.route(name, provider_id)
            params = route.params
            shown = route.path + ("?" + "&".join(f"{k}=…" for k in params) if params else "")
            message = ": ".join(filter(None, (code, as_str(body.get("msg"))))) or "no code in the answer"
            raise CloudAPIError(self.provider, route.method, shown, 200, self.http.redact(message))
        return body.get("data")

