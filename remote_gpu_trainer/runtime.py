"""Process-wide interpreter settings, applied once at start-up by the CLI entry point and the TUI app
(docs/architecture.md §5: the log budget is measured with exactly these settings, never bench-only ones).

Why each one:
- The garbage collector's youngest generation is collected every GC_THRESHOLD[0] net allocations. Digesting a
  log allocates millions of short-lived objects (lines, sample tuples) and CPython's default of 700 ran ~8
  young and, as the heap of held lines and series grew, dozens of full collections per second of ingest: 12-14 %
  of the service, and the full ones were the UI's late frames. 50,000 lets almost every such object die by
  reference counting before a collection sees it; reference cycles are still found, just later.
- The switch interval is how long a thread may hold the GIL while another waits. The ingest thread digests a
  1 MiB chunk in pure Python, so with the default 5 ms the event loop waited up to 5 ms after each SQLite call
  or `select` it made during a frame; 1 ms keeps frames on time at a cost too small to measure in throughput.
- The methods `@dataclass` writes are compiled once per machine, not once per process (dataclass_code.py: 71 ms of
  an `rgt --report`'s 0.22 s was the compiler writing the same code again).
- `gc.freeze()` moves everything alive at start-up (modules, classes, the imported libraries) out of the
  collector's sight, so a full collection walks only what the run created. At exit it runs again (the last
  atexit handler): the interpreter's teardown collects every generation but the frozen one, and walking the
  dashboard's or a report's objects once more, just before the process frees them all, was 10 ms of every
  `rgt --report` (issue 29). Garbage in reference cycles left at exit is freed with the process, its `__del__`
  not run (Python promises no finalizer at exit; rgt closes its files and databases itself).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn

from remote_gpu_trainer import dataclass_code

GC_THRESHOLD = (50_000, 20, 100)  # young collections every 50,000 net allocations (CPython's default: 700, 10, 10)
SWITCH_INTERVAL_S = 0.001  # CPython's default: 0.005

_tuned = False


def tune_process() -> None:
    """Apply the settings above; only the first call in a process does anything (the CLI calls it, then the
    app it opens does), so objects frozen are those of start-up, never later garbage."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    atexit.register(gc.freeze)  # registered before rgt's other handlers, so it runs after them
    dataclass_code.install()
    gc.set_threshold(*GC_THRESHOLD)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.freeze()


def exit_now(code: int) -> NoReturn:
    """End the `rgt` process as the interpreter would, less the freeing of its memory.

    Python's exit waits for the threads that are not daemons (threading's own shutdown, which first tells
    idle executor workers to stop), runs the atexit handlers, flushes stdout and stderr, and then frees every
    object and module one by one: ~7 ms of each `rgt --report` (issue 29, docs/architecture.md §5), for memory
    the operating system takes back at once. This does the first three steps, in that order, then ends the
    process (os._exit), as Click's completion and Bazaar did for the same reason. A flush that fails (a reader
    that went away) exits 120 when nothing else failed, as Python does. What it skips is `__del__` of objects
    still alive, which Python does not promise at exit either; rgt closes its files and databases itself.
    Only the console entry calls it (cli/__init__.run): a test calling main() keeps its interpreter."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:  # CPython's; were it gone, the threads still end below, and the exit waits less
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120
    os._exit(code)
