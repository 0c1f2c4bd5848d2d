"""One async HTTP layer for every cloud API client: auth, timeouts, retries, a rate limit, and redaction.

Why one layer: the reliability rules of docs/architecture.md §6 (429/5xx retried with backoff, secrets redacted from
every output) must hold for five providers alike, and they are easy to get subtly wrong per client.

Retries. A 429 was not processed, so it is always retried, after the provider's `Retry-After` (seconds or an
HTTP date, capped) or an exponential backoff with jitter. A connection that never opened is always retried.
A 5xx or a read timeout may have been processed: such a request is retried only when it is idempotent. A
create call is not (a retry could rent a second GPU), and a terminate call does not retry timeouts here:
its client re-queries the instance instead (docs/providers.md §5 LAM14: re-query before retry, never assume).

Redaction. The key only ever goes into a header. Error texts carry the provider, the method, the path with
query values removed, the status and the provider's own message, all passed through `redact`; errors are
raised outside any `except` block so neither `__cause__` nor `__context__` holds an httpx exception (whose
request carries the headers). httpx's own request log is filtered the same way.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import logging
import math
import os
import random
import re
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.cloud.credentials import ApiKey

AUTH_SCHEMES = ("bearer", "basic-user", "raw-header")
DEFAULT_TIMEOUT_S = 30.0
MAX_MESSAGE_CHARS = 300
MAX_ERROR_DEPTH = 8  # levels of an error body read for its message
REDACTED = "<redacted>"

log = logging.getLogger("remote_gpu_trainer.providers.cloud")

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]

_QUERY = re.compile(r"\?[^\s\"'<>]*")
_AUTH_HEADER = re.compile(r"(?i)(authorization\s*[:=]\s*)(bearer\s+|basic\s+)?[^\s,;\"']+")
_KEY_PARAM = re.compile(r"(?i)(\b(?:api[_-]?key|access_token|token|key)=)[^&\s\"']+")
_MIN_SECRET_LEN = 6  # shorter strings would redact ordinary words; real keys are far longer


# -- redaction --------------------------------------------------------------------------------------------

def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every known secret, `Authorization:` header value and `api_key=`-style value removed."""
    for secret in sorted({s for s in secrets if s and len(s) >= _MIN_SECRET_LEN}, key=len, reverse=True):
        text = _redact_fragments(text.replace(secret, REDACTED), secret)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    return _KEY_PARAM.sub(lambda m: f"{m.group(1)}{REDACTED}", text)


FRAGMENT = 8  # a run of this many characters of a key, anywhere in a text, is treated as the key


def _redact_fragments(text: str, secret: str) -> str:
    """Pieces of a key: a provider that echoes the key in an error body and cuts its message mid-key leaves
    a prefix (or a suffix) that `replace` cannot see. Every maximal run of the text that is a substring of
    the key and at least FRAGMENT long is removed."""
    if len(text) < FRAGMENT:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        if i + FRAGMENT > len(text) or secret.find(text[i:i + FRAGMENT]) < 0:
            out.append(text[i])
            i += 1
            continue
        end = i + FRAGMENT
        while end < len(text) and text[i:end + 1] in secret:
            end += 1
        out.append(REDACTED)
        i = end
    return "".join(out)


def redact_url(url: str) -> str:
    """A URL or path with every query value dropped (docs/providers.md §0: redact query strings in logs)."""
    path, sep, query = url.partition("?")
    if not sep:
        return url
    names = [part.split("=", 1)[0] for part in query.split("&") if part]
    return path + "?" + "&".join(f"{name}=…" for name in names)


_KNOWN_SECRETS: weakref.WeakSet[CloudHTTP] = weakref.WeakSet()


class _HttpxLogFilter(logging.Filter):
    """Scrubs httpx's INFO request line ("HTTP Request: GET <url> ...") of query strings and live keys."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        secrets = [s for client in list(_KNOWN_SECRETS) for s in client.secrets]
        record.msg = redact(_QUERY.sub("?" + REDACTED, message), secrets)
        record.args = None
        return True


def _install_httpx_filter() -> None:
    for name in ("httpx", "httpcore"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HttpxLogFilter) for f in logger.filters):
            logger.addFilter(_HttpxLogFilter())


_install_httpx_filter()


# -- errors -----------------------------------------------------------------------------------------------

class CloudAPIError(TransportError):
    """A provider API call failed. The text names provider, method, redacted path, status and the provider's
    own message, never the key. A TransportError, so callers show the instance as `unknown`, never gone."""

    def __init__(self, provider: str, method: str, path: str, status: int | None, message: str,
                 *, attempts: int = 1) -> None:
        self.provider = provider
        self.method = method
        self.path = path
        self.status = status
        self.provider_message = message
        self.attempts = attempts
        what = f"HTTP {status}" if status is not None else "no answer"
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        tail = f": {message}" if message else ""
        super().__init__(f"{provider}: {method} {path} failed{tries}: {what}{tail}")


class CloudNotFound(CloudAPIError):
    """404 (or the provider's own 'no such instance'): for a teardown poll this is the wanted answer."""


class CloudAuthError(CloudAPIError):
    """401/403: the key is wrong, expired or lacks scope. Never retried."""


class CloudTimeout(CloudAPIError):
    """No answer in time. The request may still have been carried out: callers re-query, never assume."""


# -- the client -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. Delays are capped so a misbehaving `Retry-After` cannot park the app for hours."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def backoff(self, attempt: int, jitter: float) -> float:
        """Exponential backoff with full jitter: spreads retries of many clients hitting one rate limit."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1)))
        return ceiling * (0.5 + 0.5 * jitter)


@dataclass(frozen=True)
class HttpOptions:
    """How one client's requests are sent, as one value: CloudClient (client.py) takes it and hands it to its
    CloudHTTP, so the two never re-declare each other's parameters. `auth_scheme` and `rate_limit_per_s` None:
    the profile's `[control.api]` (CloudClient fills them in; a bare CloudHTTP then sends a bearer key with no
    rate limit). `sleep`, `clock`, `wall_clock` and `jitter` are injectable so tests check the delays asked for
    without waiting them; `transport` swaps httpx's network layer, which the tests never need (they talk to
    real local servers)."""

    auth_scheme: str | None = None
    auth_header: str = "Authorization"
    timeout_s: float = DEFAULT_TIMEOUT_S
    rate_limit_per_s: float | None = None
    retry: RetryPolicy | None = None
    sleep: Sleep = asyncio.sleep
    clock: Clock = time.monotonic
    wall_clock: Clock = time.time
    jitter: Callable[[], float] = random.random
    transport: httpx.AsyncBaseTransport | None = None


def resolve_base_url(default: str, env_name: str | None, api_base: str | None,
                     environ: Mapping[str, str] | None = None) -> str:
    """docs/providers.md §0: profile default < the env var named in `base_url_env` < `api_base` in rgt.toml."""
    env = os.environ if environ is None else environ
    chosen = api_base or (env.get(env_name, "").strip() if env_name else "") or default
    return chosen.rstrip("/")


def auth_headers(scheme: str, key: str, header_name: str = "Authorization") -> dict[str, str]:
    """The header for one auth scheme; keys never go into query strings (docs/providers.md §0)."""
    if scheme == "bearer":
        return {"Authorization": f"Bearer {key}"}
    if scheme == "basic-user":  # the key as user name, empty password (Lambda, upstream form)
        token = base64.b64encode(f"{key}:".encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}
    if scheme == "raw-header":  # AutoDL: `Authorization: <token>` with no scheme word
        return {header_name: key}
    raise ValueError(f"unknown auth scheme {scheme!r} (known: {', '.join(AUTH_SCHEMES)})")


def path_segment(value: str) -> str:
    """An id made safe for one path segment, so `../` or `?` in an id cannot reach another endpoint."""
    return quote(str(value), safe="")


@dataclass
class _Failure:
    """Why one HTTP attempt failed, reduced to plain values (httpx's exceptions never leave _send), for the retry
    rules and the final error to decide from."""

    kind: str  # "status" | "connect" | "timeout" | "transport"
    status: int | None = None
    message: str = ""
    retry_after: float | None = None


class _RateLimiter:
    """At most `per_s` request starts per second (Lambda asks ≈1/s); serialised so bursts queue up."""

    def __init__(self, per_s: float | None, sleep: Sleep, clock: Clock) -> None:
        self._interval = 1.0 / per_s if per_s and per_s > 0 else 0.0
        self._sleep = sleep
        self._clock = clock
        self._next = -math.inf
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        if not self._interval:
            return
        async with self._lock:
            now = self._clock()
            if self._next > now:
                await self._sleep(self._next - now)
                now = max(self._clock(), self._next)
            self._next = now + self._interval


class CloudHTTP:
    """A provider's base URL and key, and `request()`: JSON in, JSON out, errors as CloudAPIError.
    How requests are sent (auth, timeout, rate limit, retries, injectable time) is its HttpOptions."""

    def __init__(self, provider: str, base_url: str, key: ApiKey, options: HttpOptions | None = None) -> None:
        options = options or HttpOptions()
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.auth_scheme = options.auth_scheme or "bearer"
        self.retry = options.retry or RetryPolicy()
        self.sleep = options.sleep
        self.clock = options.clock
        self._wall_clock = options.wall_clock
        self._jitter = options.jitter
        self._timeout_s = options.timeout_s
        headers = auth_headers(self.auth_scheme, key.reveal(), options.auth_header)
        self._secrets = (key.reveal(), *headers.values())
        self._limiter = _RateLimiter(options.rate_limit_per_s, options.sleep, options.clock)
        self._client = httpx.AsyncClient(
            base_url=self.base_url + "/", headers={**headers, "Accept": "application/json"},
            timeout=httpx.Timeout(options.timeout_s), transport=options.transport, follow_redirects=False,
        )
        _KNOWN_SECRETS.add(self)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Strings that must never appear in output: the key and every header value built from it."""
        return self._secrets

    def __repr__(self) -> str:
        return f"CloudHTTP(provider={self.provider!r}, base_url={self.base_url!r}, auth={self.auth_scheme!r})"

    async def aclose(self) -> None:
        await self._client.aclose()

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        idempotent: bool | None = None,
        retry_timeouts: bool | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """The decoded JSON body of a 2xx answer (None when empty), after the retries the rules allow."""
        method = method.upper()
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")
        if retry_timeouts is None:
            retry_timeouts = idempotent
        shown = self._shown_path(path, params)
        failure = _Failure("transport")
        for attempt in range(1, self.retry.max_attempts + 1):
            await self._limiter.wait()
            response, failure = await self._send(method, path, params, json_body, timeout_s)
            if response is not None:
                return self._decode(method, shown, response)
            delay = self._retry_delay(failure, attempt, idempotent, retry_timeouts)
            if delay is None or attempt == self.retry.max_attempts:
                break
            log.warning("%s", self.redact(
                f"{self.provider}: {method} {shown}: {self._describe(failure)}; retry {attempt} in {delay:.2f}s"))
            await self.sleep(delay)
        raise self._error(method, shown, failure, attempt)

    # -- one attempt --------------------------------------------------------------------------------------

    async def _send(self, method: str, path: str, params: Mapping[str, Any] | None, json_body: Any,
                    timeout_s: float | None) -> tuple[httpx.Response | None, _Failure]:
        """One HTTP exchange. httpx exceptions are reduced to strings here and never leave this method."""
        timeout = httpx.Timeout(timeout_s) if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
        url = path.lstrip("/")
        try:
            response = await self._client.request(method, url, params=params, json=json_body, timeout=timeout)
        except httpx.ConnectTimeout:
            return None, _Failure("connect", message="connect timed out")
        except httpx.ConnectError as exc:
            return None, _Failure("connect", message=self._short(exc))
        except httpx.TimeoutException as exc:
            return None, _Failure("timeout", message=f"{type(exc).__name__} after {timeout_s or self._timeout_s}s")
        except httpx.HTTPError as exc:
            return None, _Failure("transport", message=self._short(exc))
        if 200 <= response.status_code < 300:
            return response, _Failure("none")
        return None, _Failure(
            "status", response.status_code, provider_message(response.content),
            self._retry_after(response) if response.status_code in (429, 503) else None,
        )

    def _short(self, exc: BaseException) -> str:
        return self.redact(f"{type(exc).__name__}: {exc}")[:MAX_MESSAGE_CHARS]

    def _retry_delay(self, failure: _Failure, attempt: int, idempotent: bool, retry_timeouts: bool) -> float | None:
        """Seconds to wait before the next attempt, or None when this failure must not be retried."""
        backoff = self.retry.backoff(attempt, self._jitter())
        if failure.kind == "status":
            status = failure.status or 0
            if status == 429:
                return failure.retry_after if failure.retry_after is not None else backoff
            if status >= 500 and idempotent:
                return failure.retry_after if failure.retry_after is not None else backoff
            return None
        if failure.kind == "connect":
            return backoff
        if failure.kind == "timeout":
            return backoff if retry_timeouts else None
        return backoff if idempotent else None

    def _retry_after(self, response: httpx.Response) -> float | None:
        """`Retry-After` as seconds (delta or HTTP date), clamped to [0, max_retry_after_s]."""
        value = response.headers.get("Retry-After", "").strip()
        if not value:
            return None
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError, IndexError):
                return None
            seconds = when.timestamp() - self._wall_clock()
        if math.isnan(seconds):
            return None
        return min(max(seconds, 0.0), self.retry.max_retry_after_s)

    # -- answers ------------------------------------------------------------------------------------------

    def _decode(self, method: str, shown: str, response: httpx.Response) -> Any:
        if not response.content.strip():
            return None
        text = response.content.decode("utf-8", errors="replace")
        try:
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError):  # hostile nesting reads as "not JSON", not a crash
            pass
        raise CloudAPIError(self.provider, method, shown, response.status_code,
                            "answered with a body that is not JSON")

    def _describe(self, failure: _Failure) -> str:
        if failure.kind == "status":
            return f"HTTP {failure.status}" + (f" ({failure.message})" if failure.message else "")
        return failure.message or failure.kind

    def _error(self, method: str, shown: str, failure: _Failure, attempts: int) -> CloudAPIError:
        message = self.redact(failure.message)
        if failure.kind == "status":
            status = failure.status
            cls: type[CloudAPIError] = CloudAPIError
            if status == 404:
                cls = CloudNotFound
            elif status in (401, 403):
                cls = CloudAuthError
                message = (message + "; " if message else "") + "check the API key and its scope"
            return cls(self.provider, method, shown, status, message, attempts=attempts)
        cls = CloudTimeout if failure.kind == "timeout" else CloudAPIError
        return cls(self.provider, method, shown, None, message, attempts=attempts)

    def _shown_path(self, path: str, params: Mapping[str, Any] | None) -> str:
        shown = "/" + path.lstrip("/")
        if params:
            shown += "?" + "&".join(f"{name}=…" for name in params)
        return self.redact(redact_url(shown))


def provider_message(body: bytes) -> str:
    """The provider's own error message from a body, whatever its envelope.

    RunPod v2 `{"title", "detail"}` (RFC 9457), v1 `{"message"}`,
    vast `{"error": code, "msg": "..."}`, Lambda `{"error": {"code", "message"}}`,
    Paperspace `{"code", "message"}`, AutoDL `{"code", "msg"}`, GraphQL `{"errors": [{"message"}]}`.
    """
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return ""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return " ".join(text.split())[:MAX_MESSAGE_CHARS]
    return message_from_json(data)[:MAX_MESSAGE_CHARS]


def message_from_json(data: Any, depth: int = 0) -> str:
    if depth > MAX_ERROR_DEPTH:  # an error body nested hundreds deep: no provider writes one, so stop reading
        return ""
    if isinstance(data, str):
        return data
    if isinstance(data, list):
        return "; ".join(filter(None, (message_from_json(item, depth + 1) for item in data[:3])))
    if not isinstance(data, dict):
        return ""
    parts: list[str] = []
    error = data.get("error")
    if isinstance(error, dict):
        parts.append(message_from_json(error, depth + 1))
    elif isinstance(error, str) and error:
        parts.append(error)
    for key in ("title", "message", "msg", "detail", "suggestion"):
        value = data.get(key)
        if isinstance(value, str) and value and value not in parts:
            parts.append(value)
    if isinstance(data.get("errors"), list):
        parts.append(message_from_json(data["errors"], depth + 1))
    code = data.get("code")
    if isinstance(code, str) and code and not parts:
        parts.append(code)
    return ": ".join(p for p in parts if p)
