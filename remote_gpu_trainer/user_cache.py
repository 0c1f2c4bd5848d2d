"""The user's cache folder, where rgt keeps what it can always rebuild (compiled dataclass code, parsed assets):
$XDG_CACHE_HOME/rgt, else ~/.cache/rgt.

A cache file is read only when it is the user's own and private to them: whoever could write it could choose
what rgt runs (dataclass_code.py) or what it believes its own assets say (shipped_toml.py). It is written whole
to a private temporary file and renamed into place, so a reader never sees half of it; a failure to write (a
read-only home, a full disk) costs the next process the work again, nothing else.
"""

from __future__ import annotations

import marshal
import os
import stat
from pathlib import Path


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rgt"


def read_private(path: Path) -> bytes | None:
    """The file's bytes, or None where it is missing, unreadable, or could have been written by someone else
    (not the user's own, or writable by group or others)."""
    opened = open_private(path)
    if opened is None:
        return None
    try:
        with os.fdopen(opened[0], "rb") as handle:
            return handle.read()
    except OSError:
        return None


def open_private(path: Path) -> tuple[int, int] | None:
    """An open descriptor of the file and its size, where read_private would read it: a regular file that is the
    user's own and not writable by group or others; None otherwise. The caller closes the descriptor; what it
    reads through it is the file that was checked, whatever is renamed over the path later."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(descriptor)
    except OSError:
        os.close(descriptor)
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o022 or not stat.S_ISREG(info.st_mode):
        os.close(descriptor)
        return None
    return descriptor, info.st_size


def write_private(path: Path, data: bytes) -> bool:
    """Write `data` to a private (0600) temporary file beside `path` in a private (0700) folder, then rename
    it over `path`; False, with nothing left behind, where that failed."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except OSError:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:  # the folder could not be made: there is no temporary file either
            pass
        return False
    return True


def unmarshal(raw: bytes | None) -> object | None:
    """marshal data back as values, or None where there is none or it is not marshal data at all."""
    if raw is None:
        return None
    try:
        return marshal.loads(raw)
    except (ValueError, EOFError, TypeError):
        return None


def read_tagged(path: Path, tag: object) -> object | None:
    """What a private cache file written as `marshal.dumps((tag, value))` holds, when its tag is `tag` (a format
    number, a key naming the version of what was cached); None otherwise: read_private's refusals, not marshal
    data, or another tag. The caller checks the value's shape."""
    found = unmarshal(read_private(path))
    if isinstance(found, tuple) and len(found) == 2 and found[0] == tag:
        return found[1]
    return None
