"""W&B's offline binary history, `run-<id>.wandb` (readers/wandb_history.py): a real log written by wandb 0.31
in offline mode (tests/fixtures/trackers/offline-seed3.wandb, made by running
tests/fixtures/frameworks/wandb_offline/train.py 3 with WANDB_MODE=offline; its console summary said
`train/loss 0.18439`, `val/loss 0.11811`), then the same bytes damaged as a hostile or interrupted box leaves them."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from remote_gpu_trainer.audits.catalogue.readers.wandb_history import BLOCK, HEADER, read_history

LOG = Path(__file__).parents[2] / "fixtures" / "trackers" / "offline-seed3.wandb"


def records(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, payload) of each FULL record, read independently of the reader under test."""
    found, position = [], len(HEADER)
    while position + 7 <= len(data):
        _, length, kind = struct.unpack_from("<IHB", data, position)
        if length == 0 and kind == 0:
            break
        found.append((position, data[position + 7:position + 7 + length]))
        position += 7 + length
    return found


def test_the_real_log_gives_every_row_the_config_and_the_summary() -> None:
    history = read_history(LOG.read_bytes())
    assert history.problems == []
    steps = [step for step, _ in history.rows]
    assert steps == list(range(20))
    assert all("train/loss" in values for _, values in history.rows)
    assert [step for step, values in history.rows if "val/loss" in values] == [4, 9, 14, 19]
    assert history.config == {"lr": 0.05, "epochs": 20, "seed": 3}
    assert round(history.summary["train/loss"], 5) == 0.18439 and round(history.summary["val/loss"], 5) == 0.11811


def test_a_flipped_byte_stops_the_read_there_and_keeps_what_came_before() -> None:
    data = bytearray(LOG.read_bytes())
    offset, payload = records(bytes(data))[15]
    data[offset + 7 + len(payload) // 2] ^= 0xFF
    history = read_history(bytes(data))
    assert history.problems == [f"a record at byte {offset} fails its checksum or is cut short: read stopped there"]
    whole = read_history(LOG.read_bytes())
    assert 0 < len(history.rows) < len(whole.rows) and history.rows == whole.rows[:len(history.rows)]


def test_a_log_cut_mid_record_and_a_foreign_file_are_named() -> None:
    data = LOG.read_bytes()
    cut = read_history(data[:len(data) - 5])
    assert len(cut.problems) == 1 and "cut short" in cut.problems[0]
    assert read_history(b"PK\x03\x04 not a log").problems == ["not a W&B log (no :W&B header)"]
    assert read_history(HEADER).rows == []  # a log opened and never written: empty, no problem


def test_fragments_across_blocks_are_assembled_and_out_of_order_ones_refused() -> None:
    """A record split FIRST … LAST (as a writer does at a block edge) reads as the same record."""
    data = LOG.read_bytes()
    whole = read_history(data)
    offset, payload = records(data)[10]
    half = len(payload) // 2

    def frame(kind: int, part: bytes) -> bytes:
        return struct.pack("<IHB", zlib.crc32(bytes([kind]) + part) & 0xFFFFFFFF, len(part), kind) + part

    split = data[:offset] + frame(2, payload[:half]) + frame(4, payload[half:])
    assert len(split) < BLOCK  # still one block: only the framing differs
    rebuilt = read_history(split)
    assert rebuilt.problems == [] and rebuilt.rows == whole.rows[:len(rebuilt.rows)]
    lonely = data[:offset] + frame(4, payload)
    assert "out of order" in read_history(lonely).problems[0]
