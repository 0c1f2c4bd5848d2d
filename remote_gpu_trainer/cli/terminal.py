"""Asking the person at the terminal: only when both stdin and stdout are one (a pipe or a script never
gets a question it cannot answer; it gets today's flags, e.g. `rgt down --confirm ID`).

A scheduler may start rgt with a standard stream closed (`rgt watch --all --once <&-`): Python then leaves
`sys.stdin` (or stdout, stderr) None, and the first file rgt opens would take that descriptor. The CLI reopens
each closed one on /dev/null before anything else (standard_streams), so every verb runs as with `</dev/null`.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


def standard_streams() -> None:
    """Descriptors 0, 1 and 2, where closed, opened on /dev/null, and sys.stdin/stdout/stderr set on them."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
            continue  # open after all (taken by a file meanwhile): leave it, the stream stays None
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        stream: TextIO = open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False)
        setattr(sys, name, stream)


def interactive() -> bool:
    """Whether a question can be asked and its answer read: stdin and stdout are both a terminal (a closed
    stream is none)."""
    return _is_terminal(sys.stdin) and _is_terminal(sys.stdout)


def _is_terminal(stream: TextIO | None) -> bool:
    return stream is not None and stream.isatty()


def ask(prompt: str) -> str:
    """One line typed at the terminal, without its line ending; end of input is an empty answer."""
    try:
        return input(prompt)
    except EOFError:
        print()
        return ""
