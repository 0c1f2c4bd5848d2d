"""Running `python -m remote_gpu_trainer` at a pseudo-terminal, as a person at a terminal would: stdin,
stdout and stderr are the terminal, and an answer is typed once a prompt shows."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ROWS, COLUMNS = 24, 120


@dataclass(frozen=True)
class TerminalRun:
    returncode: int
    output: str  # everything the terminal showed: the program's output and the echo of what was typed
    prompted: bool  # whether the prompt showed (and the answer was typed after it)


def run_at_terminal(*args: str, cwd: Path, prompt: str | None = None, answer: str | None = None,
                    stdout_to_pipe: bool = False, timeout: float = 180) -> TerminalRun:
    """Run rgt with a pseudo-terminal; type `answer` and Enter once `prompt` shows (with no prompt given,
    right away: typed ahead). `stdout_to_pipe` leaves stdout a pipe (stdin and stderr stay the terminal)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
    stdout = subprocess.PIPE if stdout_to_pipe else slave
    proc = subprocess.Popen([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=cwd, env=env,
                            stdin=slave, stdout=stdout, stderr=slave, start_new_session=True)
    os.close(slave)
    if answer is not None and prompt is None:
        os.write(master, answer.encode() + b"\n")
    shown = bytearray()
    prompted = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the program exited and the terminal has no writer left
                break
            if not chunk:
                break
            shown += chunk
            if prompt is not None and not prompted and prompt.encode() in shown:
                prompted = True
                if answer is not None:
                    os.write(master, answer.encode() + b"\n")
        else:
            proc.kill()
            raise AssertionError(f"rgt {' '.join(args)} still running after {timeout}s: {shown.decode()!r}")
        returncode = proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    piped = proc.stdout.read().decode() if proc.stdout is not None else ""
    return TerminalRun(returncode, shown.decode("utf-8", "replace") + piped, prompted)
