"""Reading a command's output up to a cap, for both transports (docs/pull.md, "Bounded output").

A box decides how much a command prints; rgt decides how much it holds. Each stream is read in small
pieces into one buffer that never grows past its cap: the piece that would cross it raises `Flooded`, and
the transport then stops the command (local: its process group; SSH: the channel and the remote group)
and raises `OutputCapped` naming where, what and the cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

PIECE = 1 << 16  # bytes asked for per read: the most a stream holds beyond what is already kept


class Flooded(Exception):
    """One stream went past its cap (internal: the transport turns it into OutputCapped)."""

    def __init__(self, stream: str, cap: int) -> None:
        super().__init__(f"{stream} past {cap} bytes")
        self.stream = stream
        self.cap = cap


async def drain_capped(read: Callable[[int], Awaitable[bytes]], sink: bytearray, cap: int, stream: str) -> None:
    """Append what `read` yields to `sink` until end of stream; Flooded before `sink` would pass `cap`."""
    while chunk := await read(PIECE):
        if len(sink) + len(chunk) > cap:
            raise Flooded(stream, cap)
        sink += chunk


async def all_or_first_error(*steps: Coroutine[Any, Any, None]) -> None:
    """Run the steps together; the first that fails stops the others (a flood on stdout must not leave the
    stderr reader or the stdin feeder running on a command that is being killed)."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
