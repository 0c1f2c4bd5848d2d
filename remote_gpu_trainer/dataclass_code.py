"""The compiled code of the methods `@dataclass` writes, kept between processes like a module's bytecode.

Why: rgt declares some 300 dataclasses, and on Python 3.11 `dataclasses` writes each class's `__init__`,
`__repr__`, `__eq__` (and for a frozen one `__setattr__`, `__delattr__`, `__hash__`) as source text and compiles
each text with `exec`. Measured on the 2-core machine of docs/architecture.md §5: the 201 classes an
`rgt --report` creates took 92 ms, 71 ms of it in the compiler, a third of the whole command; the dashboard's
first frame creates more. The text is the same in every process, so its compiled code can be kept the way Python
keeps a module's in `__pycache__`.

What it changes: nothing a class does. `dataclasses` looks `exec` up among its module's globals before the
builtins, so `install` puts one there: it compiles a text exactly as `exec` would (file name "<string>", no
`__future__` flags: dataclasses.py has none) or takes the code compiled from the same text by an earlier process,
then runs it with the same globals and locals. The key is the text itself, the file is named for the interpreter's
bytecode magic number, so code from another Python is never used. A file that cannot be read, is not rgt's format,
or is not the user's own and private to them is ignored, and replaced at exit (written whole, then renamed).
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

FORMAT = 1  # the first item of the file; a file of another format is ignored and replaced
MAX_ENTRIES = 20_000  # about 7 times what all of rgt's classes write; see save()
FILE_PREFIX = "dataclass-code"

_installed: Path | None = None
COUNTS = {"compiled": 0, "cached": 0}  # this process's compiles and cache hits (tests read them)


def user_cache_dir() -> Path:
    """Where rgt keeps what it can rebuild: $XDG_CACHE_HOME/rgt, else ~/.cache/rgt."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rgt"


def cache_file(folder: Path) -> Path:
    """The file for this interpreter: its bytecode magic number in the name (code objects are version-specific)."""
    return folder / f"{FILE_PREFIX}-{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


def install(folder: Path | None = None) -> Path:
    """Serve `dataclasses`' compiles from the cache in `folder` (default: user_cache_dir()) for the rest of the
    process and save what was new at exit; only the first call in a process does anything. The file is read at
    the first class created after this call, so a command that creates none (`rgt --version`) never reads it.
    Returns the file."""
    global _installed
    if _installed is not None:
        return _installed
    path = cache_file(user_cache_dir() if folder is None else folder)
    codes: dict[str, CodeType] = {}
    used: set[str] = set()
    loaded: list[int] = []  # [the number of entries read], once read

    def cached_exec(source: Any, globals_: Any = None, locals_: Any = None, /) -> None:
        if isinstance(source, str):
            if not loaded:
                codes.update(load(path))
                loaded.append(len(codes))
            used.add(source)
            code = codes.get(source)
            if code is None:
                code = codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
                COUNTS["compiled"] += 1
            else:
                COUNTS["cached"] += 1
            source = code
        builtins.exec(source, globals_, locals_)

    dataclasses.exec = cached_exec  # type: ignore[attr-defined]  # shadows the builtin for dataclasses alone
    atexit.register(lambda: bool(loaded) and len(codes) > loaded[0] and save(path, codes, used))
    _installed = path
    return path


def load(path: Path) -> dict[str, CodeType]:
    """The cached code in `path`, or an empty cache where the file is missing, unreadable, of another format,
    or could have been written by someone else (not the user's own, or writable by group or others)."""
    try:
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.getuid() or info.st_mode & 0o022:
                return {}
            loaded = marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not (isinstance(loaded, tuple) and len(loaded) == 2 and loaded[0] == FORMAT and isinstance(loaded[1], dict)):
        return {}
    codes = loaded[1]
    if not all(isinstance(key, str) and isinstance(value, CodeType) for key, value in codes.items()):
        return {}
    return codes


def save(path: Path, codes: dict[str, CodeType], used: set[str]) -> bool:
    """Write the cache whole to a private temporary file beside `path`, then rename it over `path`; a failure
    (a read-only home, a full disk) leaves the old file and costs only the next start-up's compiles. Past
    MAX_ENTRIES only the texts this process used are kept (the rest are of classes since changed, or other verbs')."""
    kept = codes if len(codes) <= MAX_ENTRIES else {text: codes[text] for text in used if text in codes}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(marshal.dumps((FORMAT, kept)))
        os.replace(temporary, path)
    except OSError:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:  # the folder could not be made: there is no temporary file either
            pass
        return False
    return True
