"""A webhook receiver on 127.0.0.1 for the notification tests: a real HTTP server that records every request
(the only kind of fake the house allows: it stands in for Slack, ntfy or a user's endpoint)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """`url` holds a unique token, so a test can search every output for it; the first `fail_first`
    requests are answered 500, as a receiver that is down for a while."""

    server: ThreadingHTTPServer
    token: str
    fail_first: int = 0
    requests: list[Received] = field(default_factory=list)
    answered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook/{self.token}"

    def wait_for(self, count: int, timeout: float = 60.0) -> list[Received]:
        """The first `count` successful requests, waiting for them up to `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.05)
        raise AssertionError(f"the receiver got {len(self.requests)} request(s), expected {count}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server name)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            box = state["receiver"]
            with box.lock:
                box.answered += 1
                failing = box.answered <= box.fail_first
                if not failing:
                    box.requests.append(Received("POST", self.path, dict(self.headers.items()), body))
            self.send_response(500 if failing else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802 - what a followed redirect sends: recorded, answered 200
            box = state["receiver"]
            with box.lock:
                box.requests.append(Received("GET", self.path, dict(self.headers.items()), b""))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["receiver"] = Receiver(server, secrets.token_hex(16))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state["receiver"]
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
