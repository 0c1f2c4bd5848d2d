"""Following a real file through the local transport: growth, truncation, replacement, garbage, huge lines."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from remote_gpu_trainer.audits.log.lines import MAX_LINE_CHARS, LineSplitter
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.services.watch.log_follow import LogFollower


def follower(path: Path) -> LogFollower:
    transport = LocalTransport()
    return LogFollower(lambda offset, limit: transport.tail(str(path), offset, limit))


async def texts(f: LogFollower) -> list[str]:
    chunk = await f.poll()
    return [line.text for line in chunk.lines]


async def test_follows_growth_and_keeps_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    f = follower(log)
    assert await texts(f) == []  # absent: nothing, no error
    log.write_bytes(b"one\ntw")
    assert await texts(f) == ["one"]
    with log.open("ab") as h:
        h.write(b"o\nthree\n")
    chunk = await f.poll()
    assert [line.text for line in chunk.lines] == ["two", "three"]
    assert chunk.first_line_no == 2 and not chunk.restarted
    assert f.cursor.line_no == 3 and f.cursor.offset == log.stat().st_size


async def test_truncation_restarts_and_loses_no_line_after_it(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"".join(b"old line %d\n" % i for i in range(100)))
    f = follower(log)
    assert len(await texts(f)) == 100
    # copytruncate-style rotation, then the job writes on: every new line must arrive
    with log.open("r+b") as h:
        h.truncate(0)
    with log.open("ab") as h:
        h.write(b"new 1\nnew 2\n")
    chunk = await f.poll()
    assert chunk.restarted and chunk.first_line_no == 1
    assert [line.text for line in chunk.lines] == ["new 1", "new 2"]


async def test_replaced_by_a_longer_file_is_noticed(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"run A step 1\nrun A step 2\n")
    f = follower(log)
    await f.poll()
    replacement = tmp_path / "next.log"
    replacement.write_bytes(b"".join(b"run B step %d\n" % i for i in range(1, 50)))
    os.replace(replacement, log)  # a rerun rewrote the log: longer than our offset, different bytes
    chunk = await f.poll()
    assert chunk.restarted
    assert chunk.lines[0].text == "run B step 1" and len(chunk.lines) == 49


async def test_same_file_growing_is_never_taken_for_a_new_one(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    f = follower(log)
    seen: list[str] = []
    for i in range(300):
        with log.open("ab") as h:
            h.write(b"step=%d loss=1.0\n" % i)
        chunk = await f.poll()
        assert not chunk.restarted
        seen.extend(line.text for line in chunk.lines)
    assert seen == [f"step={i} loss=1.0" for i in range(300)]


async def test_binary_garbage_and_a_10mb_line_stay_bounded(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    rng = bytes((i * 7919 + 13) % 256 for i in range(200_000))
    log.write_bytes(b"before\n" + rng + b"\n" + b"x" * (10 << 20) + b"\nafter\n")
    f = follower(log)
    tracemalloc.start()
    lines = []
    for _ in range(40):
        chunk = await f.poll()
        lines.extend(chunk.lines)
        if not chunk.more:
            break
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert lines[0].text == "before" and lines[-1].text == "after"
    assert all(len(line.text) <= MAX_LINE_CHARS for line in lines)
    huge = [line for line in lines if line.dropped]
    assert any(line.dropped == (10 << 20) - MAX_LINE_CHARS for line in huge)
    assert peak < 16 << 20  # one read at a time, never the whole 10 MB line as text


def test_splitter_gives_the_same_lines_for_any_chunking() -> None:
    data = b"a\r\nb\rc\r\nd\xff e\x1b[31mred\x1b[0m\n" + "é\n".encode()
    reference = LineSplitter()
    expected = reference.feed(data) + reference.flush()
    for cut in range(1, len(data)):
        splitter = LineSplitter()
        assert splitter.feed(data[:cut]) + splitter.feed(data[cut:]) + splitter.flush() == expected
    assert [(line.text, line.redraw) for line in expected] == [
        ("a", False), ("b", True), ("c", False), ("d\ufffd ered", False), ("é", False)]
