"""What every cloud API client shares: construction from spec defaults, a cache of what was last seen, the
terminate-then-re-query rule, and the poll-until-gone loop.

The teardown rules of providers.md are the same everywhere, only the words differ: a destroy reply is never
proof (§0), so `wait_gone` polls the read endpoint until the provider itself says the instance is gone; a
terminate call that times out is followed by a read, never by an assumption (§5 LAM14); a poll that fails
leaves the state `unknown`. Subclasses supply the endpoints, the state tables and the follow-ups that find
what still bills (volumes, NFS, public IPs, snapshots).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

import httpx

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.cloud.credentials import ApiKey, find_key
from remote_gpu_trainer.providers.cloud.http import (
    DEFAULT_TIMEOUT_S,
    Clock,
    CloudAPIError,
    CloudHTTP,
    CloudNotFound,
    CloudTimeout,
    RetryPolicy,
    Sleep,
    resolve_base_url,
)
from remote_gpu_trainer.providers.cloud.types import CloudInstance, GpuRequest, Residual, TeardownOutcome

log = logging.getLogger("remote_gpu_trainer.providers.cloud")
T = TypeVar("T")

TERMINATE_ATTEMPTS = 2  # one retry after a re-query showed the first call did not take


class UnsupportedAction(VerbFailed):
    """The provider has no API for this verb; the message says what to do instead (a console step)."""


class TeardownUnconfirmed(CloudAPIError):
    """A terminate call got no usable answer and a re-query did not show the instance going away."""


@runtime_checkable
class Launches(Protocol):
    """A client whose API can rent an instance (RunPod, vast.ai, Lambda): the create call `rgt up` uses
    through services.rent, never retried once the provider may have processed it."""

    async def launch(self, request: GpuRequest) -> CloudInstance: ...


class CloudClient:
    """Base for one provider's REST client. Constructor arguments override the spec defaults below."""

    provider: ClassVar[str] = ""
    DEFAULT_BASE_URL: ClassVar[str] = ""
    BASE_URL_ENV: ClassVar[str | None] = None
    AUTH_ENV: ClassVar[tuple[str, ...]] = ()
    AUTH_FILES: ClassVar[tuple[str, ...]] = ()
    AUTH_SCHEME: ClassVar[str] = "bearer"
    RATE_LIMIT_PER_S: ClassVar[float | None] = None
    TERMINATE_TIMEOUT_S: ClassVar[float | None] = None

    def __init__(
        self,
        *,
        api_base: str | None = None,
        api_key: ApiKey | str | None = None,
        auth_env: Sequence[str] | None = None,
        auth_files: Sequence[str] | None = None,
        base_url_env: str | None = None,
        auth_scheme: str | None = None,
        rate_limit_per_s: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        terminate_timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        jitter: Callable[[], float] = random.random,
        environ: Mapping[str, str] | None = None,
        home: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(api_key, str):
            api_key = ApiKey(api_key, "caller")
        key = api_key or find_key(
            self.provider, tuple(auth_env if auth_env is not None else self.AUTH_ENV),
            tuple(auth_files if auth_files is not None else self.AUTH_FILES), environ=environ, home=home,
        )
        base_url = resolve_base_url(self.DEFAULT_BASE_URL, base_url_env or self.BASE_URL_ENV, api_base, environ)
        self.http = CloudHTTP(
            self.provider, base_url, key, auth_scheme=auth_scheme or self.AUTH_SCHEME,
            timeout_s=timeout_s, rate_limit_per_s=rate_limit_per_s if rate_limit_per_s is not None
            else self.RATE_LIMIT_PER_S, retry=retry, sleep=sleep, clock=clock, wall_clock=wall_clock,
            jitter=jitter, transport=transport,
        )
        self.sleep = sleep
        self.clock = clock
        self.wall_clock = wall_clock
        self.terminate_timeout_s = terminate_timeout_s or self.TERMINATE_TIMEOUT_S
        self._seen: dict[str, CloudInstance] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.http.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    # -- reads --------------------------------------------------------------------------------------------

    async def list_instances(self) -> list[CloudInstance]:
        instances = await self._list()
        for instance in instances:
            self._seen[instance.provider_id] = instance
        return instances

    async def get(self, provider_id: str) -> CloudInstance:
        """The instance now; CloudNotFound once the provider no longer knows it."""
        instance = await self._fetch(str(provider_id))
        self._seen[instance.provider_id] = instance
        return instance

    def last_seen(self, provider_id: str) -> CloudInstance | None:
        """The last state read for this id, kept so follow-ups still know its volumes after it is gone."""
        return self._seen.get(str(provider_id))

    async def _list(self) -> list[CloudInstance]:
        raise NotImplementedError

    async def _fetch(self, provider_id: str) -> CloudInstance:
        raise NotImplementedError

    # -- teardown -----------------------------------------------------------------------------------------

    async def stop(self, provider_id: str) -> None:
        raise UnsupportedAction(f"{self.provider}: stop is not available through the API")

    async def terminate(self, provider_id: str) -> None:
        raise UnsupportedAction(f"{self.provider}: terminate is not available through the API")

    async def _preflight(self, provider_id: str) -> CloudInstance | None:
        """A read with the same base and auth before any destructive call (providers.md §0); None if gone."""
        try:
            return await self.get(provider_id)
        except CloudNotFound:
            return None

    async def _terminate_and_requery(self, provider_id: str, send: Callable[[], Awaitable[Any]]) -> None:
        """Send a terminate; when it times out, read the instance before deciding anything.

        Gone, terminating or terminated on re-query: the call took. Still up: one more call. Anything else,
        or a failed re-query: TeardownUnconfirmed, because the one thing never to do is report it gone.
        """
        last_state = "unknown"
        timeout: CloudTimeout | None = None
        for _ in range(TERMINATE_ATTEMPTS):
            try:
                await send()
                return
            except CloudNotFound:
                return  # the provider no longer knows the id: nothing left to terminate
            except CloudTimeout as exc:
                timeout = exc
            log.warning("%s: terminate %s timed out; re-querying before anything else", self.provider, provider_id)
            try:
                instance = await self.get(provider_id)
            except CloudNotFound:
                return
            except CloudAPIError as exc:
                last_state = f"unknown (re-query failed: {exc.provider_message or exc.status})"
                break
            last_state = f"{instance.raw_state} ({instance.state})"
            if instance.state in ("terminating", "terminated"):
                return
        method, path = (timeout.method, timeout.path) if timeout else ("terminate", provider_id)
        raise TeardownUnconfirmed(
            self.provider, method, path, None,
            f"terminate of {provider_id} timed out and a re-query shows it {last_state}; it may still bill: "
            "check the console, do not assume it is gone",
        )

    async def wait_gone(self, provider_id: str, *, timeout_s: float = 600.0, poll_s: float = 5.0) -> TeardownOutcome:
        """Poll until the provider says the instance is gone (or `timeout_s`), then list what still bills.

        Time is counted both by the clock and by the polls slept, so an injected no-wait sleep still ends.
        """
        provider_id = str(provider_id)
        started = self.clock()
        waited = 0.0
        polls = 0
        last = self._seen.get(provider_id)
        state, raw = "unknown", ""
        error = ""
        while True:
            polls += 1
            error = ""
            try:
                gone, instance = await self._probe_gone(provider_id)
            except CloudAPIError as exc:
                gone, instance, error = False, None, str(exc)
            if instance is not None:
                last = instance
                self._seen[provider_id] = instance
            state, raw = ("terminated", instance.raw_state if instance else "") if gone else (
                (instance.state, instance.raw_state) if instance else ("unknown", ""))
            if gone or waited >= timeout_s or self.clock() - started >= timeout_s:
                break
            await self.sleep(poll_s)
            waited += poll_s
        residuals, audit_errors = await self._residuals(provider_id, gone, last)
        errors = tuple(e for e in (error, *audit_errors) if e)
        return TeardownOutcome(self.provider, provider_id, gone, state, raw, polls, waited,
                               tuple(residuals), errors)

    async def _probe_gone(self, provider_id: str) -> tuple[bool, CloudInstance | None]:
        """(gone, instance): gone on 404; subclasses add their provider's own final words."""
        try:
            return False, await self._fetch(provider_id)
        except CloudNotFound:
            return True, None

    async def _residuals(self, provider_id: str, gone: bool,
                         last: CloudInstance | None) -> tuple[list[Residual], list[str]]:
        """What still bills after this teardown, and the follow-up calls that failed."""
        if gone or last is None:
            return [], []
        return [still_billing(last)], []

    def _bad_shape(self, method: str, path: str, what: str) -> CloudAPIError:
        return CloudAPIError(self.provider, method, path, None, f"unexpected answer: {what}")


def still_billing(instance: CloudInstance) -> Residual:
    """The instance itself, when it was never seen gone: the user must assume it bills."""
    return Residual(
        kind="instance", ident=instance.provider_id,
        detail=f"not gone after teardown: last seen {instance.raw_state or 'with no state'} ({instance.state})",
        ended_by="re-check, then terminate again or use the console",
    )


def surviving_storage(instance: CloudInstance | None, kinds: Mapping[str, tuple[str, str]]) -> list[Residual]:
    """Storage the API listed on the instance that outlives it: one residual per item of a kind in `kinds`
    (storage name → (what bills, what ends it)), whatever the instance's own fate."""
    if instance is None:
        return []
    return [Residual(item.name, item.ident, *kinds[item.name])
            for item in instance.storage if item.ident and item.name in kinds]


# -- loose parsing of provider JSON --------------------------------------------------------------------------

def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and number not in (float("inf"), float("-inf")) else None


def as_int(value: Any) -> int | None:
    number = as_float(value)
    return int(number) if number is not None else None


def as_str(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text or None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def first(*values: T | None) -> T | None:
    """The first value that is not None: unlike `or`, a real 0 (zero GPUs, zero uptime) is kept."""
    return next((value for value in values if value is not None), None)
