"""TensorBoard event files (`events.out.tfevents.*`) as a capsule: scalars only (docs/verify.md §5).

Read with tensorboard's EventAccumulator, one per folder (it reads a folder's event files in order, as
TensorBoard shows them), imported lazily: without the tensorboard package the cell is an input problem, not
a crash. Tags map onto train.csv columns by the log key table (`train/loss`, `train/learning_rate`, `lr`,
`val/acc`, `eval/accuracy`, ...). A tag that two folders both log (Keras' `train/` and `validation/`
writers, both logging `epoch_loss`) is named `<folder>/<tag>` so neither overwrites the other.

EventAccumulator skips a truncated last record silently, so the TFRecord framing is walked first (length
header, payload, CRC trailers; CRCs not verified) to say which file was cut short.
"""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.model import Capsule
from remote_gpu_trainer.audits.catalogue.readers.common import Curves, Reading, tracker_tests

SOURCE = "tensorboard"
HEADER = 12  # uint64 length + uint32 masked CRC of the length
TRAILER = 4  # uint32 masked CRC of the payload
MAX_RECORD = 1 << 30  # a length beyond this is not an event record: the bytes are not an event file
INSTALL = "install tensorboard to read event files"


def read(root: Path, run_id: str, cell: str, paths: list[Path]) -> Capsule:
    reading = Reading(root, f"runs/{run_id}/{cell}")
    curves = Curves()
    folders = sorted({path.parent for path in paths})
    for path in paths:
        _check_framing(reading, path)
    accumulators = _accumulators(reading, folders)
    if accumulators:
        counts = Counter(tag for _, tags, _ in accumulators for tag in tags)
        for folder, tags, acc in accumulators:
            for tag in tags:
                key = f"{folder.name}/{tag}" if counts[tag] > 1 else tag
                for event in acc.Scalars(tag):
                    curves.add_point(key, int(event.step), float(event.value))
    if not paths:
        return reading.capsule(run_id, cell, SOURCE, curves, None)
    tests = tracker_tests(curves, reading.rel(paths[0]), reading.sha(paths[0]), SOURCE)
    return reading.capsule(run_id, cell, SOURCE, curves, paths[0], tests=tests)


def _check_framing(reading: Reading, path: Path) -> None:
    """Walk the record headers; a file that ends inside a record was cut short (or is not an event file)."""
    data = reading.read_bytes(path)
    if data is None:
        return
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER:
            reading.problem(path, f"truncated event file: ends inside a record header at byte {offset}")
            return
        (length,) = struct.unpack_from("<Q", data, offset)
        if length > MAX_RECORD:
            reading.problem(path, f"not a TensorBoard event file: record length {length} at byte {offset}")
            return
        end = offset + HEADER + length + TRAILER
        if end > len(data):
            reading.problem(path, f"truncated event file: the record at byte {offset} needs {end - len(data)} "
                                  "more bytes (the last scalars may be missing)")
            return
        offset = end


def _accumulators(reading: Reading, folders: list[Path]) -> list[tuple[Path, list[str], Any]]:
    """(folder, scalar tags, loaded accumulator) per folder; [] with a problem when tensorboard is missing."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        if folders:
            reading.problem(folders[0], INSTALL)
        return []
    loaded = []
    for folder in folders:
        acc = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
        try:
            acc.Reload()
        except Exception as exc:  # tensorboard raises its own and protobuf's errors for one cause: bad bytes
            reading.problem(folder, f"unreadable event files: {type(exc).__name__}: {exc}")
            continue
        loaded.append((folder, sorted(acc.Tags().get("scalars", [])), acc))
    return loaded
