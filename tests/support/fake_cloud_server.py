"""The HTTP server under every fake cloud API (fake_clouds.py): a real stdlib ThreadingHTTPServer on
127.0.0.1, port 0, in a daemon thread, with a request log, scripted replies and faults, and virtual time for
instances that linger; plus the checks every cloud test shares (no key in any text, the exception chain).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

from remote_gpu_trainer.providers.cloud.http import HttpOptions

FAKE_KEY = "rgt-fake-KEY-7f3a9c"


@dataclass
class Logged:
    """One request as the server saw it (the path is relative to the provider's base path)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None


@dataclass
class Fault:
    """An injected answer for the next `times` matching requests (after auth passed)."""

    method: str
    path: str
    reply: Reply | None = None
    times: int = 1
    hang_s: float = 0.0
    apply: bool = True  # for a hang: whether the request still takes effect on the server
    after: int = 0  # matching requests to let through untouched first


class VirtualTime:
    """An injectable `sleep` and `clock`: sleeping records the delay and advances the clock, instantly."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(seconds, 0.0)

    def clock(self) -> float:
        return self.now


class FakeCloud:
    """Shared server machinery; subclasses define `prefix`, auth and `route`."""

    provider = ""
    prefix = ""

    def __init__(self, key: str = FAKE_KEY) -> None:
        self.key = key
        self.log: list[Logged] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self.linger: dict[str, int] = {}
        self.deleted: set[str] = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

            def _any(self) -> None:
                fake._handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL a client is given (`api_base`), including the provider's base path."""
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- knobs --------------------------------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int, body: Any = None, *, times: int = 1,
             headers: dict[str, str] | None = None, after: int = 0) -> None:
        self.faults.append(Fault(method, path, Reply(status, body, headers or {}), times, after=after))

    def rate_limit(self, method: str, path: str, retry_after: str, *, times: int = 1) -> None:
        """429 with a Retry-After header, in this provider's error envelope."""
        self.fail(method, path, 429, self.error_body(429, "rate limit exceeded"), times=times,
                  headers={"Retry-After": retry_after})

    def hang(self, method: str, path: str, seconds: float, *, apply: bool, times: int = 1) -> None:
        """Answer only after `seconds`; with `apply` the request still takes effect (LAM14)."""
        self.faults.append(Fault(method, path, None, times, hang_s=seconds, apply=apply))

    def requests(self, method: str | None = None, path: str | None = None) -> list[Logged]:
        with self.lock:
            return [r for r in self.log if (method is None or r.method == method) and (path is None or r.path == path)]

    # -- provider hooks -----------------------------------------------------------------------------------

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"Bearer {self.key}"

    def auth_error(self) -> Reply:
        return Reply(401, self.error_body(401, "unauthorized"))

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message}

    def not_found(self, what: str) -> Reply:
        return Reply(404, self.error_body(404, f"{what} not found"))

    def route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        raise NotImplementedError

    def lingering(self, ident: str) -> bool:
        """After a delete: True (and one poll used up) while the instance should still show."""
        if ident not in self.deleted:
            return False
        left = self.linger.get(ident, 0)
        if left > 0:
            self.linger[ident] = left - 1
            return True
        return False

    # -- the exchange -------------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        split = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in handler.headers.items()}
        path = split.path
        if not path.startswith(self.prefix + "/"):
            self._send(handler, Reply(404, {"error": "no such base path"}))
            return
        rel = path[len(self.prefix):]
        query = parse_qs(split.query)
        with self.lock:
            self.log.append(Logged(handler.command, rel, query, headers, body))
            fault = self._take_fault(handler.command, rel) if self.authorized(headers) else None
        if not self.authorized(headers):
            self._send(handler, self.auth_error())
            return
        if fault is not None and fault.reply is not None:
            self._send(handler, fault.reply)
            return
        reply: Reply | None = None
        if fault is None or fault.apply:
            with self.lock:
                reply = self.route(handler.command, [p for p in rel.split("/") if p], query, body)
        if fault is not None:
            time.sleep(fault.hang_s)
        self._send(handler, reply or Reply(504, self.error_body(504, "gateway timeout")))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.path == path:
                if fault.after > 0:
                    fault.after -= 1
                    continue
                fault.times -= 1
                return fault
        return None

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        data = reply.raw if reply.raw is not None else (b"" if reply.body is None else json.dumps(reply.body).encode())
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): exactly what a hang test wants


def assert_no_key(*texts: object, key: str = FAKE_KEY) -> None:
    """The fake key, and the Basic token built from it, appear in none of `texts`."""
    token = base64.b64encode(f"{key}:".encode()).decode()
    for text in texts:
        shown = str(text)
        assert key not in shown, f"key leaked into: {shown[:200]}"
        assert token not in shown, f"basic token leaked into: {shown[:200]}"


def exception_chain(exc: BaseException) -> list[BaseException]:
    """The exception and every cause and context behind it."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def fake_client(client_type: Any, fake: FakeCloud, vtime: VirtualTime, key_env: str, **overrides: object) -> Any:
    """A real cloud client aimed at `fake`, its key in `key_env`, on virtual time with jitter pinned to its top:
    the one way every client test builds one. `overrides` replace any option, the client's own (`environ`,
    `terminate_timeout_s`, `pro_api`) or one of its HttpOptions (`auth_scheme`, `timeout_s`, `sleep`, ...)."""
    http_names = {option.name for option in dataclasses.fields(HttpOptions)}
    http = dataclasses.replace(HttpOptions(sleep=vtime.sleep, clock=vtime.clock, jitter=lambda: 1.0),
                               **{name: value for name, value in overrides.items() if name in http_names})
    options: dict[str, object] = {"api_base": fake.url, "environ": {key_env: FAKE_KEY}, "http": http}
    options.update({name: value for name, value in overrides.items() if name not in http_names})
    return client_type(**options)
