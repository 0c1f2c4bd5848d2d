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
or is not the user's own and private to them is ignored, and replaced at exit (user_cache.py).
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import sys
from pathlib import Path
from types import CodeType
from typing import Any

from remote_gpu_trainer.user_cache import read_tagged, unmarshal, user_cache_dir, write_private

FORMAT = 2  # the first item of the file; a file of another format is ignored and replaced
FILE_PREFIX = "dataclass-code"
STALE_ALLOWANCE = 16  # texts a module may keep beyond twice what one process used (see _Store.save)

_installed: Path | None = None
COUNTS = {"compiled": 0, "cached": 0}  # this process's compiles and cache hits (tests read them)


def cache_file(folder: Path) -> Path:
    """The file for this interpreter: its bytecode magic number in the name (code objects are version-specific)."""
    return folder / f"{FILE_PREFIX}-{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


class _Store:
    """The cache as one process uses it. The file holds, per module, the marshalled code of the texts its classes
    wrote; a module's code is unmarshalled when the module first creates a class, so a process pays for the
    modules it imports, not for every module some other rgt command once imported (the file holds them all).
    A module that compiled something new is written back whole, or, once it holds more than twice the texts this
    process used (plus STALE_ALLOWANCE), with only those: that drops the texts of classes since changed, while a
    class made later, in a function, by another command stays."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.blobs: dict[str, bytes] | None = None  # read at the first class
        self.codes: dict[str, dict[str, CodeType]] = {}  # module -> text -> code, for modules used so far
        self.used: dict[str, dict[str, CodeType]] = {}  # what this process used, per module
        self.changed: set[str] = set()  # modules that compiled something

    def code(self, module: str, text: str) -> CodeType:
        if self.blobs is None:
            self.blobs = load(self.path)
        known = self.codes.get(module)
        if known is None:
            known = self.codes[module] = module_codes(self.blobs.get(module))
        code = known.get(text)
        if code is None:
            code = known[text] = compile(text, "<string>", "exec", dont_inherit=True)
            self.changed.add(module)
            COUNTS["compiled"] += 1
        else:
            COUNTS["cached"] += 1
        self.used.setdefault(module, {})[text] = code
        return code

    def save(self) -> bool:
        if not self.changed or self.blobs is None:
            return False
        blobs = dict(self.blobs)
        for module in self.changed:
            used, known = self.used[module], self.codes[module]
            # what other commands created lazily stays; past twice this process's texts, only these are kept
            blobs[module] = marshal.dumps(known if len(known) <= 2 * len(used) + STALE_ALLOWANCE else used)
        return save(self.path, blobs)


def install(folder: Path | None = None) -> Path:
    """Serve `dataclasses`' compiles from the cache in `folder` (default: user_cache_dir()) for the rest of the
    process and save what was new at exit; only the first call in a process does anything. The file is read at
    the first class created after this call, so a command that creates none (`rgt --version`) never reads it.
    Returns the file."""
    global _installed
    if _installed is not None:
        return _installed
    store = _Store(cache_file(user_cache_dir() if folder is None else folder))

    def cached_exec(source: Any, globals_: Any = None, locals_: Any = None, /) -> None:
        if isinstance(source, str):
            module = globals_.get("__name__", "") if isinstance(globals_, dict) else ""
            source = store.code(str(module), source)
        builtins.exec(source, globals_, locals_)

    dataclasses.exec = cached_exec  # type: ignore[attr-defined]  # shadows the builtin for dataclasses alone
    atexit.register(store.save)
    _installed = store.path
    return store.path


def load(path: Path) -> dict[str, bytes]:
    """The cache in `path`, module by module (each module's code still marshalled), or an empty cache where the
    file is missing, unreadable, not private to the user (user_cache.read_private) or not rgt's format."""
    blobs = read_tagged(path, FORMAT)
    if not (isinstance(blobs, dict) and all(isinstance(k, str) and isinstance(v, bytes) for k, v in blobs.items())):
        return {}
    return blobs


def module_codes(blob: bytes | None) -> dict[str, CodeType]:
    """One module's texts and their code, or none where its part of the file is missing or not what it should be
    (those texts are compiled again, and the part replaced at exit)."""
    codes = unmarshal(blob)
    if not (isinstance(codes, dict) and all(isinstance(k, str) and isinstance(v, CodeType) for k, v in codes.items())):
        return {}
    return codes


def save(path: Path, blobs: dict[str, bytes]) -> bool:
    """Write the cache whole (user_cache.write_private)."""
    return write_private(path, marshal.dumps((FORMAT, blobs)))
