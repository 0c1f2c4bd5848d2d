"""Which interpreter row 8 (torch sees the GPUs) runs: the configured one, the command's own python, or the
default, with the reason said in the row (docs/remote-ops.md §4)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# python, python3, python3.11, python3.13t (free-threaded), with or without a directory in front
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)*t?)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_ENV_OPTIONS_WITH_VALUE = frozenset({"-u", "--unset", "-C", "--chdir"})


@dataclass(frozen=True)
class Interpreter:
    """The interpreter the torch row runs and why that one, said in the row so a reader knows whose torch it saw."""

    path: str
    why: str


def run_interpreter(command: str, python: str, *, explicit: bool, run_id: str = "<id>") -> Interpreter:
    """`runs.<id>.python` when rgt.toml sets it; else the command's own first word when that is a python
    (a torch check of python3 says nothing about the conda env the command runs); else `python`.

    Launchers (torchrun, accelerate, bash, deepspeed) hide the interpreter they start, so for those the
    configured default is checked and the row says so rather than guessing.
    """
    if explicit:
        return Interpreter(python, f"runs.{run_id}.python in rgt.toml")
    word, why_not = command_program(command)
    if word is not None and is_python(word):
        return Interpreter(word, "the command's interpreter")
    if word is not None:
        why_not = f"the command starts with {word}, not a python"
    return Interpreter(python, f"{why_not}: checked the default; set runs.{run_id}.python to choose")


def is_python(word: str) -> bool:
    return _PYTHON_NAME.fullmatch(word.rsplit("/", 1)[-1]) is not None


def command_program(command: str) -> tuple[str | None, str]:
    """The program the command's first simple command runs, past leading `cd DIR &&` (or `;`) steps, `VAR=value`
    prefixes and `env [options]`; or (None, why) when the command cannot be read that way. `cd {out} && python
    {workdir}/train.py` is how a tool that writes under its current folder (Lightning, Hydra) is pointed at its
    cell, so the python after the cd is the one that runs the training."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError as exc:
        return None, f"the command cannot be split into words ({exc})"
    rest = _past_prefixes(words)
    while len(rest) >= 3 and rest[0] == "cd" and rest[2] in ("&&", ";"):
        rest = _past_prefixes(rest[3:])
    if not rest or not rest[0] or set(rest[0]) <= set("();<>|&"):
        return None, "the command has no program word"
    return rest[0], ""


def _past_prefixes(words: list[str]) -> list[str]:
    """Drop leading assignments, then `env` with its options and assignments (GNU env's spellings)."""
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i]):
        i += 1
    if i < len(words) and words[i].rsplit("/", 1)[-1] == "env":
        i += 1
        while i < len(words) and (words[i].startswith("-") or _ASSIGNMENT.match(words[i])):
            i += 2 if words[i] in _ENV_OPTIONS_WITH_VALUE else 1
    return words[i:]
