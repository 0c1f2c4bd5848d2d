"""A cancelled pull never writes into another file (docs/pull.md, "Cancelling a pull").

The bytes of a pull are appended to each `.part` by a worker thread. Cancelling the pull used to close the
descriptor while that thread was still writing: its number went to the next file the process opened, and the
rest of the chunk could land there (with a slow disk, two unrelated files got 4 MiB of pulled data). Here a real
pull of real files (the sim box, local transport) is cancelled at 40 seeded random points, and two things are
checked: when the cancelled pull has returned, nothing it started still writes (no local file changes size
afterwards: on the old code, appends went on after the return, which is the descriptor closed under a writing
thread), and a neighbour in the same process that kept opening files of its own (as the TUI's database and
logs do) finds each of them holding exactly what it wrote. A last pull then brings every file home intact.
Nothing of rgt is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from support.evidence_helpers import Env, keep_probe_verdicts, make_env, write_run

FILES = 6
FILE_BYTES = 12 << 20  # three 4 MiB chunks each: several appends per file
ROUNDS = 40
RECORD = b"neighbour record\n"


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """A finished two-cell run with FILES large artefacts of random bytes beside its checkpoints."""
    made = make_env(tmp_path)
    write_run(made.box)
    rng = random.Random(7)
    for index in range(FILES):
        (made.box / "seed0" / f"shard{index}.bin").write_bytes(rng.randbytes(FILE_BYTES))
    yield made
    keep_probe_verdicts(made)


class Neighbour(threading.Thread):
    """Another part of the process: opens new files one after another, writes RECORD, holds each open a moment."""

    def __init__(self, folder: Path) -> None:
        super().__init__(daemon=True)
        self.folder = folder
        self.done = threading.Event()
        self.count = 0

    def run(self) -> None:
        while not self.done.is_set():
            fd = os.open(self.folder / f"file{self.count}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, RECORD)
                time.sleep(0.0005)
            finally:
                os.close(fd)
            self.count += 1

    def damaged(self) -> list[str]:
        return [f"{path.name}: {path.stat().st_size} bytes" for path in sorted(self.folder.iterdir())
                if path.read_bytes() != RECORD]


def sizes(local: Path) -> dict[str, int]:
    """Every local file of the run and its size."""
    return {str(path.relative_to(local)): path.stat().st_size for path in local.rglob("*") if path.is_file()}


def drop_fetched(local: Path) -> None:
    """Remove what earlier rounds brought home (not the `.part` files), so the next round writes again."""
    for path in local.rglob("*"):
        if path.is_file() and path.name != MANIFEST_NAME and not path.name.endswith(".part"):
            path.unlink()


async def test_a_pull_cancelled_at_random_points_never_writes_into_another_file(env: Env, tmp_path: Path) -> None:
    first = await pull(env.project, env.run, env.transport, env.db)  # the manifest is built and recorded once
    assert first.ok, first.failed
    loop = asyncio.get_running_loop()
    workers = ThreadPoolExecutor(4)  # the pull's worker threads, shut down (all writes done) before the check
    loop.set_default_executor(workers)
    neighbour_folder = tmp_path / "neighbour"
    neighbour_folder.mkdir()
    neighbour = Neighbour(neighbour_folder)
    neighbour.start()
    rng = random.Random(24)
    cancelled = 0
    late: list[object] = []
    drop_fetched(env.local)
    started = time.monotonic()
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    # cancel points spread over one whole pull as long as it takes on this machine now (a loaded machine
    # is slower): the points choose where to cut, nothing is asserted on the time. A pull that ended before
    # its point sets the span to its own length: a first pull slowed by a passing load would otherwise put
    # most points after the pulls' end (too few cancelled, on unchanged code)
    span = time.monotonic() - started
    try:
        for _ in range(ROUNDS):
            drop_fetched(env.local)
            began = time.monotonic()
            task = asyncio.create_task(pull(env.project, env.run, env.transport, env.db))
            ended: list[float] = []
            task.add_done_callback(lambda _, ended=ended: ended.append(time.monotonic()))
            await asyncio.sleep(rng.uniform(0.0, 0.9 * span))
            cancelled += task.cancel()
            if ended:
                span = ended[0] - began
            with contextlib.suppress(asyncio.CancelledError):
                await task
            settled = sizes(env.local)  # the pull has ended: nothing it started may still be writing
            await asyncio.to_thread(time.sleep, 0.02)
            if sizes(env.local) != settled:
                late.append(sorted(set(sizes(env.local).items()) ^ set(settled.items())))
    finally:
        neighbour.done.set()
        neighbour.join()
        loop.set_default_executor(ThreadPoolExecutor(4))
        await asyncio.to_thread(workers.shutdown, True)  # every write the pulls started has ended
    assert not neighbour.damaged(), neighbour.damaged()
    assert not late, f"writes went on after the cancelled pull returned: {late[:3]}"
    assert cancelled >= ROUNDS // 2, "too few pulls were cancelled while they ran"
    assert neighbour.count > 0
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok, result.failed
    for path in result.files:
        assert (env.local / path).read_bytes() == (env.box / path).read_bytes(), path
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
