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

The file is a table of contents (module -> where its code lies) and then each module's marshalled code, so a
process reads the table and the parts of the modules it imports: rgt's, the dashboard's and the build's libraries
all share the one file (2 MB here), and reading it whole cost `rgt --report` 2.5 ms more (issue 29).
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
import struct
import sys
from pathlib import Path
from types import CodeType
from typing import Any

from remote_gpu_trainer.user_cache import open_private, unmarshal, user_cache_dir, write_private

FORMAT = 3  # the first item of the table of contents; a file of another format is ignored and replaced
TABLE_LENGTH = struct.Struct("<Q")  # the file's first 8 bytes: the length of the table of contents after them
FILE_PREFIX = "dataclass-code"
STALE_ALLOWANCE = 16  # texts a module may keep beyond twice what one process used (see _Store.save)

_installed: Path | None = None
COUNTS = {"compiled": 0, "cached": 0}  # this process's compiles and cache hits (tests read them)


def cache_file(folder: Path) -> Path:
    """The file for this interpreter: its bytecode magic number in the name (code objects are version-specific)."""
    return folder / f"{FILE_PREFIX}-{sys.implementation.cache_tag}-{importlib.util.MAGIC_NUMBER.hex()}.marshal"


class _Store:
    """The cache as one process uses it. The file holds, per module, the marshalled code of the texts its classes
    wrote; a module's code is read and unmarshalled when the module first creates a class, so a process pays for the
    modules it imports, not for every module some other rgt command once imported (the file holds them all).
    A module that compiled something new is written back whole, or, once it holds more than twice the texts this
    process used (plus STALE_ALLOWANCE), with only those: that drops the texts of classes since changed, while a
    class made later, in a function, by another command stays."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: CacheFile | None = None  # opened at the first class
        self.codes: dict[str, dict[str, CodeType]] = {}  # module -> text -> code, for modules used so far
        self.used: dict[str, dict[str, CodeType]] = {}  # what this process used, per module
        self.changed: set[str] = set()  # modules that compiled something

    def code(self, module: str, text: str) -> CodeType:
        if self.file is None:
            self.file = CacheFile(self.path)
        known = self.codes.get(module)
        if known is None:
            known = self.codes[module] = module_codes(self.file.blob(module))
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
        if not self.changed or self.file is None:
            return False
        blobs = self.file.blobs()
        for module in self.changed:
            used, known = self.used[module], self.codes[module]
            # what other commands created lazily stays; past twice this process's texts, only these are kept
            blobs[module] = marshal.dumps(known if len(known) <= 2 * len(used) + STALE_ALLOWANCE else used)
        return save(self.path, blobs)


class CacheFile:
    """The cache file as a process reads it: its table of contents at once, then each module's part when that
    module first creates a class, through the descriptor that was checked (user_cache.open_private). A file that is
    missing, not private to the user or not this format has no modules; a part the table places beyond the file's
    end is missing (its texts are compiled again)."""

    def __init__(self, path: Path) -> None:
        self.descriptor: int | None = None
        self.table: dict[str, tuple[int, int]] = {}  # module -> (offset, length) of its part
        opened = open_private(path)
        if opened is None:
            return
        descriptor, size = opened
        table = _read_table(descriptor, size)
        if table is None:
            os.close(descriptor)
            return
        self.descriptor, self.table = descriptor, table

    def blob(self, module: str) -> bytes | None:
        where = self.table.get(module)
        if where is None or self.descriptor is None:
            return None
        offset, length = where
        try:
            part = os.pread(self.descriptor, length, offset)
        except OSError:
            return None
        return part if len(part) == length else None

    def blobs(self) -> dict[str, bytes]:
        """Every module's part that can be read."""
        parts = {module: self.blob(module) for module in self.table}
        return {module: part for module, part in parts.items() if part is not None}

    def close(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)
            self.descriptor = None


def _read_table(descriptor: int, size: int) -> dict[str, tuple[int, int]] | None:
    """The table of contents, with each part's offset from the file's start, or None where the file is not this
    format: a table that does not fit, is not marshal data, or names a part outside the file."""
    try:
        head = os.pread(descriptor, TABLE_LENGTH.size, 0)
        if len(head) != TABLE_LENGTH.size:
            return None
        (length,) = TABLE_LENGTH.unpack(head)
        start = TABLE_LENGTH.size + length
        if start > size:
            return None
        found = unmarshal(os.pread(descriptor, length, TABLE_LENGTH.size))
    except OSError:
        return None
    if not (isinstance(found, tuple) and len(found) == 2 and found[0] == FORMAT and isinstance(found[1], dict)):
        return None
    table: dict[str, tuple[int, int]] = {}
    for module, where in found[1].items():
        if not (isinstance(module, str) and isinstance(where, tuple) and len(where) == 2
                and all(isinstance(n, int) and n >= 0 for n in where) and start + where[0] + where[1] <= size):
            return None
        table[module] = (start + where[0], where[1])
    return table


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
    file is missing, unreadable, not private to the user (user_cache.open_private) or not rgt's format."""
    file = CacheFile(path)
    try:
        return file.blobs()
    finally:
        file.close()


def module_codes(blob: bytes | None) -> dict[str, CodeType]:
    """One module's texts and their code, or none where its part of the file is missing or not what it should be
    (those texts are compiled again, and the part replaced at exit)."""
    codes = unmarshal(blob)
    if not (isinstance(codes, dict) and all(isinstance(k, str) and isinstance(v, CodeType) for k, v in codes.items())):
        return {}
    return codes


def save(path: Path, blobs: dict[str, bytes]) -> bool:
    """Write the cache whole (user_cache.write_private): the table of contents, then each module's part."""
    table: dict[str, tuple[int, int]] = {}
    offset = 0
    for module, part in blobs.items():
        table[module] = (offset, len(part))
        offset += len(part)
    head = marshal.dumps((FORMAT, table))
    return write_private(path, b"".join([TABLE_LENGTH.pack(len(head)), head, *blobs.values()]))
