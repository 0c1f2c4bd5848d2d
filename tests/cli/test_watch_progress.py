"""`rgt watch RUN`'s progress line: at most one per --progress-every seconds of the session clock, never two at
the same instant, naming step/total, loss, ETA and the cost to finish. A real sim run whose log gains a step
every 50 ms until the test lets it finish; the verb's own function runs with a clock the test moves by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import launch_verbs
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import EXIT_OK
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from support.helpers import FIXED_NOW, INSTANCE, RUN, FixedClock, copy_command, write_project

PROGRESS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ run r1: progress step (\d+)/100000 · loss 0\.\d+ · "
                      r"ETA (\S+) · to finish (\S+) at \$0\.89/h$")
STEPPING = ('i=0; while [ ! -f RELEASE ]; do i=$((i+1)); echo "epoch=1 step=$i/100000 loss=0.$((1000+i)) '
            'lr=0.001"; sleep 0.05; done; ')
DEADLINE_S = 60.0


class Printed:
    """Everything the verb printed so far (pytest's capture, read as it grows)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.lines: list[str] = []

    def progress(self) -> list[str]:
        self.lines += self.capsys.readouterr().out.splitlines()
        return [line for line in self.lines if " progress " in line]


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"waited {DEADLINE_S:g} s for {what}")
        await asyncio.sleep(0.02)


async def passes_ran(session: Session, count: int = 2) -> None:
    """Wait until the watch read new steps `count` more times: at least one whole pass ran at the clock's
    present instant."""
    for _ in range(count):
        before = opened_monitor(session, RUN).snapshot.step
        await until(lambda seen=before: opened_monitor(session, RUN).snapshot.step != seen,
                    "the watch to read a new step")


async def watch_with_clock(root: Path, every: float, advances: list[float],
                           printed: Printed) -> tuple[list[int], int]:
    """Launch the stepping run, watch it with --progress-every `every`; after each clock advance, the count of
    progress lines once more passes ran. Then let the run finish."""
    clock = FixedClock(FIXED_NOW)
    session = Session(load_project(root / "rgt.toml"), clock=clock)
    counts: list[int] = []
    try:
        await create_instance(session, INSTANCE)
        await launch_run(session, RUN)
        args = argparse.Namespace(run=RUN, format="text", once=False, interval=0.05, progress_every=every)
        watching = asyncio.create_task(launch_verbs.watch(session, args))
        await until(lambda: len(printed.progress()) == 1, "the first progress line")
        await passes_ran(session)
        counts.append(len(printed.progress()))
        for seconds in advances:
            clock.advance(seconds=seconds)
            await passes_ran(session)
            counts.append(len(printed.progress()))
        release = session.transport(INSTANCE).resolve("/workspace/job/RELEASE")
        Path(release).write_text("go\n")
        code = await asyncio.wait_for(watching, DEADLINE_S)
    finally:
        await session.close_transports()
        session.close()
    return counts, code


@pytest.fixture
def stepping(tmp_path: Path) -> Path:
    write_project(tmp_path, command=STEPPING + copy_command(), roster=("seed0",))
    return tmp_path


def test_a_large_interval_prints_one_line_per_interval_of_the_session_clock(
        stepping: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed = Printed(capsys)
    counts, code = asyncio.run(watch_with_clock(stepping, 60.0, [30.0, 29.0, 1.0, 59.0], printed))
    assert code == EXIT_OK
    assert counts == [1, 1, 1, 2, 2]  # t=0 prints; 30 s and 59 s do not; 60 s does; 119 s does not
    lines = printed.progress()
    assert len(lines) == 2 and "finished" in printed.lines[-1]
    first = PROGRESS.match(lines[0])
    second = PROGRESS.match(lines[1])
    assert first and second, lines
    assert lines[0].startswith("2026-11-29T12:00:00Z") and lines[1].startswith("2026-11-29T12:01:00Z")
    assert int(second.group(1)) > int(first.group(1))  # the step moved on between the two
    assert second.group(2) != "—" and second.group(3).startswith("$")  # an ETA, and its cost at $0.89/h


def test_a_zero_interval_prints_once_per_instant_of_the_session_clock(
        stepping: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed = Printed(capsys)
    counts, code = asyncio.run(watch_with_clock(stepping, 0.0, [1.0, 1.0, 0.5], printed))
    assert code == EXIT_OK
    assert counts == [1, 2, 3, 4]  # many passes, one line per instant the clock showed
    assert len(printed.progress()) == 4
    assert all(PROGRESS.match(line) for line in printed.progress())
