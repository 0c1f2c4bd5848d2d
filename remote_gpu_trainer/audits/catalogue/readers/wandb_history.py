"""The history inside a W&B run's binary log, `run-<id>.wandb` (docs/verify.md §5, docs/frameworks.md).

In offline mode wandb 0.31 writes neither `files/config.yaml` nor `files/wandb-summary.json`: the config, every
`wandb.log` row and the summary live only in this log until `wandb sync`. The file is LevelDB's log format
(32 KiB blocks of records, each `crc32 | length | type | data`, FULL or FIRST…MIDDLE…LAST fragments) after a
7-byte header `:W&B`, 0xBEE1, version 0; each assembled record is one protobuf `Record` of W&B's own schema,
parsed with the message classes the wandb package ships (`wandb.proto.wandb_internal_pb2`), an optional extra.
Without wandb the file is named, never guessed at.

The bytes come from a box we do not trust: the file's size is bounded, every checksum is checked, a record
that does not parse ends the read with a problem, and nothing in it is executed (protobuf parses data only).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
RECORD_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAX_RECORDS = 2_000_000


@dataclass
class History:
    """What the log holds that VERIFY reads: each history row by step, the run's config, its last summary."""

    rows: list[tuple[int | None, dict[str, float]]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


class WandbMissing(Exception):
    """The wandb package (its protobuf schema) is not installed here."""


def read_history(data: bytes) -> History:
    """The history, config and summary of one `.wandb` log; a damaged log keeps what came before the damage."""
    try:
        from wandb.proto import wandb_internal_pb2  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        raise WandbMissing("the wandb package is not installed (pip install wandb)") from None
    history = History()
    if not data.startswith(HEADER):
        history.problems.append("not a W&B log (no :W&B header)")
        return history
    for payload in _records(data, history.problems):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined, unused-ignore]
        try:
            record.ParseFromString(payload)
        except Exception:  # protobuf's DecodeError: the record is not W&B's; what follows cannot be trusted
            history.problems.append("a record does not parse as a W&B Record: read stopped there")
            break
        _fold(record, history)
    return history


def _records(data: bytes, problems: list[str]) -> Any:
    """Each assembled record's bytes, in order; a bad checksum, length or fragment order ends the read."""
    position = len(HEADER)
    pending: bytearray | None = None
    count = 0
    while position + RECORD_HEADER <= len(data) and count < MAX_RECORDS:
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < RECORD_HEADER:  # the block's trailer: zero padding
            position += left_in_block
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, position)
        if length == 0 and kind == 0:  # zeroed tail of a log still being written
            break
        start = position + RECORD_HEADER
        payload = data[start:start + length]
        if len(payload) != length or zlib.crc32(bytes([kind]) + payload) & 0xFFFFFFFF != checksum:
            problems.append(f"a record at byte {position} fails its checksum or is cut short: read stopped there")
            return
        position = start + length
        if kind == FULL and pending is None:
            count += 1
            yield payload
        elif kind == FIRST and pending is None:
            pending = bytearray(payload)
        elif kind in (MIDDLE, LAST) and pending is not None:
            pending += payload
            if kind == LAST:
                count += 1
                yield bytes(pending)
                pending = None
        else:
            problems.append(f"a record fragment out of order at byte {position - length - RECORD_HEADER}: "
                            "read stopped there")
            return


def _fold(record: Any, history: History) -> None:
    kind = record.WhichOneof("record_type")
    if kind == "history":
        step = record.history.step.num if record.history.HasField("step") else None
        values = _numbers(record.history.item)
        explicit = values.pop("_step", None)
        if step is None and explicit is not None and explicit.is_integer():
            step = int(explicit)
        history.rows.append((step, {k: v for k, v in values.items() if not k.startswith("_")}))
    elif kind == "run":
        for item in record.run.config.update:
            if item.key and not item.key.startswith("_"):
                history.config[item.key] = _json(item.value_json)
    elif kind == "summary":
        history.summary.update({k: v for k, v in _numbers(record.summary.update).items() if not k.startswith("_")})
    elif kind == "config":
        for item in record.config.update:
            if item.key and not item.key.startswith("_"):
                history.config[item.key] = _json(item.value_json)


def _numbers(items: Any) -> dict[str, float]:
    """key (or nested key joined by `/`) -> value, for the items whose JSON value is a number."""
    out: dict[str, float] = {}
    for item in items:
        key = item.key or "/".join(item.nested_key)
        value = _json(item.value_json)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
