"""Receivers on 127.0.0.1 that misbehave, for the notification tests of issue 26 (real TCP servers: the only kind
of fake the house allows). Each counts the connections it accepted, one per delivery attempt:

- `not-http`: reads the request and answers bytes that are not HTTP (an SSH banner), then closes;
- `302`, `307`: a redirect to another URL (the test's own receiver, which must get nothing);
- `trickle`: reads the request and sends an answer that never ends, one byte every 2 s;
- `hang`: accepts and never answers (nor reads), until the test ends;
- `flood`: answers a status line and header lines without end, as fast as they are read.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

KINDS = ("not-http", "302", "307", "trickle", "hang", "flood")
TRICKLE_EVERY_S = 2.0


@dataclass
class Hostile:
    kind: str
    listener: socket.socket
    redirect_to: str = ""
    stop: threading.Event = field(default_factory=threading.Event)
    connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook/hostile"

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            thread = threading.Thread(target=self.answer, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                if self.kind == "hang":
                    self.stop.wait()
                    return
                conn.settimeout(5)
                conn.recv(65536)  # the request (small: one read holds its headers and body)
                if self.kind == "not-http":
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\nProtocol mismatch.\r\n")
                elif self.kind in ("302", "307"):
                    reason = "Found" if self.kind == "302" else "Temporary Redirect"
                    conn.sendall(f"HTTP/1.1 {self.kind} {reason}\r\nLocation: {self.redirect_to}\r\n"
                                 "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
                    self.stop.wait(5)  # the client may follow before it reads the close
                elif self.kind == "trickle":
                    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100000:
                        conn.sendall(bytes([byte]))
                        if self.stop.wait(TRICKLE_EVERY_S):
                            return
                elif self.kind == "flood":
                    conn.sendall(b"HTTP/1.1 200 OK\r\n")
                    while not self.stop.is_set():
                        conn.sendall(b"X-Flood: " + b"a" * 2000 + b"\r\n")
            except OSError:
                return


def start(kind: str, redirect_to: str = "") -> Hostile:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    hostile = Hostile(kind, listener, redirect_to)
    thread = threading.Thread(target=hostile.serve, daemon=True)
    thread.start()
    hostile.threads.append(thread)
    return hostile


def stop(hostile: Hostile) -> None:
    hostile.stop.set()
    try:
        hostile.listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    hostile.listener.close()
    for thread in hostile.threads:
        thread.join(timeout=10)


@pytest.fixture
def hostile_receiver(request: pytest.FixtureRequest) -> Iterator[Hostile]:
    """The receiver named by the test's `kind` parameter (indirect parametrization)."""
    hostile = start(str(request.param))
    yield hostile
    stop(hostile)
