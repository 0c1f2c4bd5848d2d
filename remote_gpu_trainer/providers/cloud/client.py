"""What every cloud API client shares: construction from spec defaults, a cache of what was last seen, the
terminate-then-re-query rule, and the poll-until-gone loop.

The teardown rules of docs/providers.md are the same everywhere, only the words differ: a destroy reply is never
proof (§0), so `wait_gone` polls the read endpoint until the provider itself says the instance is gone; a
terminate call that times out is followed by a read, never by an assumption (§5 LAM14); a poll that fails
leaves the state `unknown`. Subclasses supply the endpoints, the state tables and the follow-ups that find
what still bills (volumes, NFS, public IPs, snapshots).

The request paths and methods are the profile's (`[control.api.endpoints]`, read through `route`), and
whether an instance is gone is decided by gone.py from the profile's `gone_when`: the profile is the one
place those facts are written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable
from urllib.parse import parse_qsl

from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.profiles import ApiControl, Endpoint, load_profile
from remote_gpu_trainer.providers.base import Residual, TeardownOutcome
from remote_gpu_trainer.providers.cloud.credentials import ApiKey, find_key
from remote_gpu_trainer.providers.cloud.gone import decide_gone
from remote_gpu_trainer.providers.cloud.http import (
    CloudAPIError,
    CloudHTTP,
    CloudNotFound,
    CloudTimeout,
    HttpOptions,
    path_segment,
    resolve_base_url,
)
from remote_gpu_trainer.providers.cloud.types import CloudInstance, GpuRequest, Quote

log = logging.getLogger("remote_gpu_trainer.providers.cloud")
T = TypeVar("T")

TERMINATE_ATTEMPTS = 2  # one retry after a re-query showed the first call did not take


class UnsupportedAction(VerbFailed):
    """The provider has no API for this verb; the message says what to do instead (a console step)."""


class TeardownUnconfirmed(CloudAPIError):
    """A terminate call got no usable answer and a re-query did not show the instance going away."""


@dataclass(frozen=True)
class Route:
    """One request as the profile's endpoint declares it, with `{id}` filled in: the id is escaped as one
    path segment in the path, kept as-is in the query `params` and in the JSON `body` (None: none declared)."""

    method: str
    path: str
    params: dict[str, str]
    body: Any = None


@runtime_checkable
class Launches(Protocol):
    """A client whose API can rent an instance (RunPod, vast.ai, Lambda): the create call `rgt up` uses
    through services.rent, never retried once the provider may have processed it."""

    async def launch(self, request: GpuRequest) -> CloudInstance: ...


@runtime_checkable
class Quotes(Protocol):
    """A client whose API tells the price of a request before creating anything (vast.ai's offers, Lambda's
    instance types), through read-only calls: `rgt up` shows it for approval (services rent). A client without
    it is approved at the constraint's ceiling."""

    async def quote(self, request: GpuRequest) -> Quote: ...


class LaunchOverBudget(VerbFailed):
    """The provider created an instance whose price is over the ceiling (or unknown); it exists and bills.
    Raised by a client whose create call takes no ceiling (RunPod), so rent reports it and keeps the box."""

    def __init__(self, message: str, instance: CloudInstance) -> None:
        super().__init__(message)
        self.instance = instance


class CloudClient:
    """Base for one provider's REST client. Its defaults (base URL and its env var, the key's env vars and
    files, the auth scheme, the rate limit, the endpoints and the gone rules) are the profile's
    `[control.api]`, the one place they are written; constructor arguments override them."""

    provider: ClassVar[str] = ""  # the profile id (assets/profiles/<provider>.toml)
    TERMINATE_TIMEOUT_S: ClassVar[float | None] = None
    # State words this provider also uses for a live instance: gone only when the list lacks it (gone.py).
    RECHECK_WORDS: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        *,
        api_base: str | None = None,
        api_key: ApiKey | str | None = None,
        auth_env: Sequence[str] | None = None,
        auth_files: Sequence[str] | None = None,
        base_url_env: str | None = None,
        terminate_timeout_s: float | None = None,
        environ: Mapping[str, str] | None = None,
        home: Path | None = None,
        api: ApiControl | None = None,
        http: HttpOptions | None = None,
    ) -> None:
        """`api` is the profile's `[control.api]` (CloudProvider passes the one it loaded); None reads the
        shipped profile of `provider`. `http` says how requests are sent; its auth scheme and rate limit
        default to the profile's."""
        api = api or shipped_api(self.provider)
        if isinstance(api_key, str):
            api_key = ApiKey(api_key, "caller")
        key = api_key or find_key(
            self.provider, tuple(auth_env if auth_env is not None else api.auth_env),
            tuple(auth_files if auth_files is not None else auth_file_texts(api)), environ=environ, home=home,
        )
        base_url = resolve_base_url(api.base_url, base_url_env or api.base_url_env, api_base, environ)
        options = http or HttpOptions()
        options = replace(
            options, auth_scheme=options.auth_scheme or api.auth_scheme,
            rate_limit_per_s=options.rate_limit_per_s if options.rate_limit_per_s is not None
            else api.rate_limit_per_s)
        self.http = CloudHTTP(self.provider, base_url, key, options)
        self.sleep = options.sleep
        self.clock = options.clock
        self.wall_clock = options.wall_clock
        self.terminate_timeout_s = terminate_timeout_s or self.TERMINATE_TIMEOUT_S
        self._seen: dict[str, CloudInstance] = {}
        self.endpoints: Mapping[str, Endpoint] = api.endpoints
        self.gone_when: tuple[str, ...] = api.gone_when

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.http.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    # -- requests, as the profile declares them -----------------------------------------------------------

    def route(self, name: str, provider_id: str | None = None) -> Route:
        """The profile's endpoint `name` with `{id}` filled; UnsupportedAction when the profile has none."""
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise UnsupportedAction(f"{self.provider}: its profile declares no `{name}` endpoint")
        ident = "" if provider_id is None else str(provider_id)
        path, _, query = endpoint.path.partition("?")
        params = {key: value.replace("{id}", ident) for key, value in parse_qsl(query, keep_blank_values=True)}
        body = _fill(json.loads(endpoint.body), ident) if endpoint.body else None
        return Route(endpoint.method, path.replace("{id}", path_segment(ident)), params, body)

    async def call(self, name: str, provider_id: str | None = None, *, params: Mapping[str, Any] | None = None,
                   **options: Any) -> Any:
        """Send the profile's endpoint `name` (its declared body unless `json_body` is given); the decoded JSON."""
        route = self.route(name, provider_id)
        query = {**route.params, **(params or {})}
        options.setdefault("json_body", route.body)
        return await self.http.request(route.method, route.path, params=query or None, **options)

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

    async def start(self, provider_id: str) -> None:
        """Start a stopped instance again through the profile's `start` endpoint (recovery of a spot box its
        provider stopped, services/recover/start_box.py): it bills again from then."""
        await self.call("start", provider_id)

    async def _preflight(self, provider_id: str) -> CloudInstance | None:
        """A read with the same base and auth before any destructive call (docs/providers.md §0); None if gone."""
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
        """(gone, instance) after one read, as the profile's gone_when rules decide (gone.py)."""
        answer: CloudInstance | CloudNotFound
        try:
            answer = await self._fetch(provider_id)
        except CloudNotFound as exc:
            answer = exc
        decision = await decide_gone(self, self.gone_when, provider_id, answer, self.RECHECK_WORDS)
        return decision.gone, decision.instance

    async def _residuals(self, provider_id: str, gone: bool,
                         last: CloudInstance | None) -> tuple[list[Residual], list[str]]:
        """What still bills after this teardown, and the follow-up calls that failed."""
        if gone or last is None:
            return [], []
        return [still_billing(last)], []

    def _bad_shape(self, method: str, path: str, what: str) -> CloudAPIError:
        return CloudAPIError(self.provider, method, path, None, f"unexpected answer: {what}")

    def _bad_answer(self, name: str, provider_id: str | None, what: str) -> CloudAPIError:
        """An answer of the profile's endpoint `name` that does not have the documented shape."""
        route = self.route(name, provider_id)
        return self._bad_shape(route.method, route.path, what)


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


def shipped_api(provider: str) -> ApiControl:
    """The `[control.api]` of the provider's shipped profile."""
    api = load_profile(provider).control.api
    if api is None:
        raise ConfigError(f"assets/profiles/{provider}.toml has no [control.api]: no API client to build")
    return api


def auth_file_texts(api: ApiControl) -> tuple[str, ...]:
    """The profile's credential files as find_key reads them: `path`, or `path#key` for one entry inside."""
    return tuple(f"{f.path}#{f.key}" if f.key else f.path for f in api.auth_files)


def _fill(value: Any, ident: str) -> Any:
    """A profile's JSON body with every `{id}` in its strings replaced by the instance id."""
    if isinstance(value, str):
        return value.replace("{id}", ident)
    if isinstance(value, list):
        return [_fill(item, ident) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, ident) for key, item in value.items()}
    return value


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
