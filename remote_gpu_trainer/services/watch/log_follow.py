"""Follow a log file through any transport, and notice when it was truncated, rotated or replaced.

`tail(path, offset)` alone cannot tell a file that grew from a *different* file that happens to be longer
than our offset (a rerun that rewrote the log, `logrotate` with create). So each read starts a few bytes
*before* the offset and compares them with the bytes we saw there last time: equal means the same file
grew; different (or a shrink) means a new file, and following starts again from its first byte so that
no line written after the truncation is lost.

The bytes before the offset are kept only as a digest (with their length): the cursor is stored in the
state database, and the last bytes of a log may be a secret the job printed. A cursor written by an older
rgt (the raw bytes) is still understood.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from remote_gpu_trainer.audits.log.lines import Line, LineSplitter
from remote_gpu_trainer.state.run_logs import LogCursor

OVERLAP = 64  # bytes re-read before the offset to recognise the same file
READ_LIMIT = 1 << 20  # bytes per transport call
MAX_READS_PER_POLL = 8  # a backlog is caught up over several polls, so the UI stays responsive
SPLIT_INLINE_BYTES = 64 << 10  # bigger reads are cut into lines in a worker thread (~25 ms a MiB: a frame)
T = TypeVar("T")

_DIGEST = b"rgt-sha256:"  # a cursor tail starting so is (length, digest) of the overlap, not the bytes
_DIGEST_LEN = len(_DIGEST) + 2 + 32

Reader = Callable[[int, int], Awaitable[tuple[bytes, int]]]  # (offset, limit) -> (data, new offset)


@dataclass(frozen=True)
class LogChunk:
    """What one poll read: complete lines (numbered from `first_line_no`), whether the file started over
    before them, whether more is waiting, and the unfinished last line (a live progress bar)."""

    lines: tuple[Line, ...]
    first_line_no: int
    restarted: bool
    more: bool
    partial: str


class LogFollower:
    def __init__(self, read: Reader, cursor: LogCursor | None = None) -> None:
        self.read = read
        self.cursor = cursor or LogCursor()
        self.splitter = LineSplitter()

    async def poll(self, max_reads: int = MAX_READS_PER_POLL) -> LogChunk:
        lines: list[Line] = []
        restarted = False
        first_line_no = self.cursor.line_no + 1
        more = False
        for _ in range(max_reads):
            data, was_restart = await self._read_new()
            if was_restart:
                restarted = True
                lines.clear()  # what we held belonged to the old file; the new one is read from its top
                self.splitter.reset()
                first_line_no = 1
            if not data:
                break
            if len(data) > SPLIT_INLINE_BYTES:
                new_lines = await finish_even_if_cancelled(asyncio.to_thread(self.splitter.feed, data))
            else:
                new_lines = self.splitter.feed(data)
            lines.extend(new_lines)
            self.cursor = LogCursor(self.cursor.offset, self.cursor.tail, self.cursor.line_no + len(new_lines))
            more = len(data) >= READ_LIMIT
            if not more:
                break
        return LogChunk(tuple(lines), first_line_no, restarted, more, self.splitter.partial)

    async def _read_new(self) -> tuple[bytes, bool]:
        """The bytes after the cursor, and whether the file was found to be a new one."""
        offset, tail = self.cursor.offset, self.cursor.tail
        overlap = _overlap_length(tail)
        start = offset - overlap
        data, end = await self.read(start, READ_LIMIT + overlap)
        got_from = end - len(data)
        if got_from == start and _same_overlap(tail, data[:overlap]):
            fresh = data[overlap:]
            self._advance(offset, data[:overlap], fresh)
            return fresh, False
        data, end = await self.read(0, READ_LIMIT)  # a new file: follow it from its first byte
        self.cursor = LogCursor(0, b"", 0)
        self._advance(0, b"", data)
        return data, True

    def _advance(self, offset: int, before: bytes, fresh: bytes) -> None:
        seen = (before + fresh)[-OVERLAP:]
        self.cursor = LogCursor(offset + len(fresh), _fingerprint(seen), self.cursor.line_no)


def _fingerprint(seen: bytes) -> bytes:
    """What the cursor keeps of the overlap: its length and sha256, never the bytes themselves."""
    return _DIGEST + len(seen).to_bytes(2, "big") + hashlib.sha256(seen).digest() if seen else b""


def _overlap_length(tail: bytes) -> int:
    if len(tail) == _DIGEST_LEN and tail.startswith(_DIGEST):
        return int.from_bytes(tail[len(_DIGEST):len(_DIGEST) + 2], "big")
    return len(tail)  # raw bytes, as older rgt stored them


def _same_overlap(tail: bytes, read: bytes) -> bool:
    """Whether the bytes read before the offset are the ones seen there last time."""
    if len(tail) == _DIGEST_LEN and tail.startswith(_DIGEST):
        return len(read) == _overlap_length(tail) and _fingerprint(read) == tail
    return read == tail


async def finish_even_if_cancelled(work: Coroutine[Any, Any, T]) -> T:
    """Await a worker thread's result; if the caller is cancelled meanwhile, still wait for the thread to end
    before letting the cancellation through: a thread cannot be stopped, and the state it writes (the
    splitter's half line, the parser, the database) must not be used by anyone else until it is done."""
    job = asyncio.ensure_future(work)
    cancelled = False
    while not job.done():
        try:
            await asyncio.wait({job})
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return job.result()
