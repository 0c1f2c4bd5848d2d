"""The pull's small-file path: many small files down one command instead of four SFTP requests each.

remote/stream_files.py runs on the box with the run's interpreter and writes one record per file (see its
docstring for the format). This module builds its stdin, groups files into batches and parses what came
back, strictly and without trusting it: a record is used only when it is the next file asked for, its size
is the manifest's and its trailer is OK; the first record that is not stops the parse. The caller then
accepts a file only when its bytes hash to the manifest's sha256, and sends every other file of the batch
down the per-file path (services/evidence/pull.py), which decides and reports what went wrong. A hostile or
broken box can therefore slow a pull down, never make it accept other bytes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.remote import program_stdin

BATCH_FILE_MAX = 1 << 20  # files up to this size travel in batches
BATCH_BYTES = 16 << 20  # at most this many bytes per batch (the reply is held in memory)
BATCH_FILES = 400  # at most this many files per batch
BATCH_PARALLEL = 2  # batches in flight at once (more only add contention on a small machine)
BATCH_TIMEOUT_S = 600.0
_HEADER_MAX = 64 << 10  # a record header longer than this is not one of ours
# The streamer needs the standard library only: -S skips `site` (a virtualenv's .pth files and their imports),
# two thirds of the interpreter's start-up, paid once per batch (a venv's python: 21 -> 7 ms here).
STREAMER_ARGS = ("-S", "-")


@dataclass(frozen=True)
class Wanted:
    """One file the pull asks the box's streamer for: its path as the manifest lists it and the size its record must
    have."""

    path: str  # as the manifest lists it, relative to the result root
    size: int


def batches(files: Sequence[Wanted]) -> list[list[Wanted]]:
    """Consecutive groups of at most BATCH_FILES files and BATCH_BYTES bytes (a group has one file at least)."""
    groups: list[list[Wanted]] = []
    current: list[Wanted] = []
    held = 0
    for item in files:
        if current and (len(current) >= BATCH_FILES or held + item.size > BATCH_BYTES):
            groups.append(current)
            current, held = [], 0
        current.append(item)
        held += item.size
    if current:
        groups.append(current)
    return groups


async def fetch(transport: Transport, python: str, remote_root: str,
                batch: Sequence[Wanted]) -> dict[str, memoryview]:
    """The bytes of every file of `batch` whose record came back clean (views into one reply, not
    copies). Whatever goes wrong (no such interpreter, a garbled stream) only shortens the answer; a
    transport failure or a timeout is raised for the caller to fall back on."""
    if not batch:
        return {}
    params = {"root": transport.resolve(remote_root), "files": [[item.path, item.size] for item in batch]}
    result = await transport.run(shlex.join((python, *STREAMER_ARGS)), stdin=program_stdin("stream_files.py", params),
                                 timeout=BATCH_TIMEOUT_S)
    return parse(result.stdout, batch)


def parse(data: bytes, batch: Sequence[Wanted]) -> dict[str, memoryview]:
    """Records in the order asked; the first one that is not what was asked for ends the parse."""
    clean: dict[str, memoryview] = {}
    at = 0
    view = memoryview(data)
    for item in batch:
        end = data.find(b"\n", at, at + _HEADER_MAX)
        if end < 0:
            break
        header = _header(bytes(view[at:end]))
        if header is None or header.get("path") != item.path:
            break
        at = end + 1
        if "error" in header:
            continue  # the per-file path finds out (and reports) why
        size = header.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or at + size > len(data):
            break
        body = view[at:at + size]
        at += size
        trailer_end = data.find(b"\n", at, at + 64)
        if trailer_end < 0:
            break
        trailer = bytes(view[at:trailer_end])
        at = trailer_end + 1
        if not trailer.startswith((b"OK", b"ERR ")):
            break
        if trailer == b"OK" and size == item.size:
            clean[item.path] = body
    return clean


def _header(line: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None
