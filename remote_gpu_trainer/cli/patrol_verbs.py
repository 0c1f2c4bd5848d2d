"""`rgt watch --all [PROJECT ...] [--once] [--interval S] [--notify]`: the patrol for cron or a jump host
(docs/remote-ops.md §9.2). The looking is services/fleet/patrol.py; this prints, loops and chooses the exit status.

Each tick prints exactly one line per run of every project (one line for a project that is gone, unreadable or
has no runs), flushed, plain text: it runs with no terminal, no standard input and no TERM. Messages about what
the tick did after its lines (a follow-up, a notification, a project not notified) go to stderr.

Exit status of a tick, the patrol's status: 0 nothing needs a person; 1 some box is idle and billing (a run on it
finished or died, none running, burn > 0), or what the tick did after its lines did not fully succeed (a
follow-up failed, --notify could not read its channels or no channel took a notification); 4 neither, but a
project could not be looked at (gone, unreadable rgt.toml or state database). Without --once it ticks every
--interval seconds until SIGINT or SIGTERM, then exits with the status of its last tick.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

from remote_gpu_trainer.config.project import CONFIG_NAME
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError, RgtError
from remote_gpu_trainer.services.fleet import notify as local_notify
from remote_gpu_trainer.services.fleet import patrol as patrolling
from remote_gpu_trainer.services.fleet import status as fleet
from remote_gpu_trainer.text import escape_control

EXIT_UNREADABLE = 4  # no box idles, but a project could not be looked at


def patrol(args: argparse.Namespace) -> int:
    roots = _roots(args.projects)
    if not roots():
        raise ConfigError("rgt watch --all: no project to watch: none opened yet (open one with `rgt PROJECT`), "
                          "and none named")
    status = asyncio.run(_patrol(roots, args.once, args.interval, args.notify))
    if local_notify.still_hanging():
        # a channel that never answered still holds a sending thread, which apprise's pool would join at exit:
        # the patrol has said everything (the notification was not confirmed), so it ends without waiting
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _roots(named: list[str]) -> Callable[[], list[Path]]:
    """The projects of each tick: those named (a folder or its rgt.toml), else every registered one, read again
    each tick so a project opened meanwhile joins."""
    if named:
        paths = [Path(p).expanduser().resolve() for p in named]
        fixed = list(dict.fromkeys(p.parent if p.name == CONFIG_NAME else p for p in paths))
        return lambda: fixed
    return fleet.registered_roots


async def _patrol(roots: Callable[[], list[Path]], once: bool, interval: float, notify: bool) -> int:
    stop = asyncio.Event()
    if not once:
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, stop.set)
    while True:
        status = await tick(roots(), notify)
        if once:
            return status
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            continue
        return status


async def tick(roots: list[Path], notify: bool) -> int:
    """One tick: the lines first (every project looked at once), then the follow-ups and notifications."""
    looks = await patrolling.tick(roots)
    try:
        for found in looks:
            lines = [line.text() for line in found.lines] or [found.problem_line()]
            sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        said = await asyncio.gather(*(_after(found, notify) for found in looks))
    finally:
        await asyncio.gather(*(patrolling.close(found) for found in looks), return_exceptions=True)
    for message in (m for messages in said for m in messages):
        print(f"rgt watch: {escape_control(message)}", file=sys.stderr, flush=True)
    if any(found.idle_billing or found.unfinished for found in looks):
        return EXIT_FAILED
    if any(found.problem and not found.lines and not found.problem.startswith("no-runs") for found in looks):
        return EXIT_UNREADABLE
    return EXIT_OK


_SAID: set[tuple[str, str]] = set()  # (project, line): recovery's lines this patrol already printed
MAX_SAID = 1000


async def _after(found: patrolling.Look, notify: bool) -> list[str]:
    """A project's follow-ups and notifications; its failure is a message, never the end of the patrol."""
    try:
        return [*await patrolling.after_lines(found, notify), *await _recover(found)]
    except (RgtError, OSError, sqlite3.Error) as exc:
        found.unfinished = True
        return [f"{found.root}: {exc}"]


async def _recover(found: patrolling.Look) -> list[str]:
    """Each run with `runs.<id>.recover`: its checkpoint kept home while it runs, and handed to recovery
    (services/recover/run.py) once preempted, one line for each thing done; the fleet wing never imports the launch
    wing, so the patrol's face does this (docs/remote-ops.md §10.1)."""
    session = found.session
    if session is None or not any(session.project.runs[run_id].recover for run_id in found.states
                                  if run_id in session.project.runs):
        return []
    from remote_gpu_trainer.services.recover.checkpoint_home import watcher_lines
    from remote_gpu_trainer.services.recover.run import recover_run

    lines = []
    for run_id, state in sorted(found.states.items()):
        if run_id not in session.project.runs:
            continue
        lines += await watcher_lines(session, run_id, state.liveness.state)
        outcome = await recover_run(session, run_id, state)
        if outcome is not None and (key := (str(found.root), outcome.line())) not in _SAID:
            if len(_SAID) >= MAX_SAID:
                _SAID.clear()
            _SAID.add(key)  # a wait or a refusal is said once per patrol, not at every look
            lines.append(key[1])
    return lines
