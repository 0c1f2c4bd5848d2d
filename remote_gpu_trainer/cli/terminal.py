"""Asking the person at the terminal: only when both stdin and stdout are one (a pipe or a script never
gets a question it cannot answer; it gets today's flags, e.g. `rgt down --confirm ID`)."""

from __future__ import annotations

import sys


def interactive() -> bool:
    """Whether a question can be asked and its answer read: stdin and stdout are both a terminal."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def ask(prompt: str) -> str:
    """One line typed at the terminal, without its line ending; end of input is an empty answer."""
    try:
        return input(prompt)
    except EOFError:
        print()
        return ""
