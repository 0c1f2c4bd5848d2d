"""rgt's own TOML assets (assets/signatures.toml, assets/catalogue.toml, ...), parsed once per machine.

Why: tomllib is pure Python, and the shipped catalogues are large: signatures.toml (48 KB) took 3.8 ms and
catalogue.toml (13 KB) 3.2 ms to parse in each `rgt --report` that words a log finding (issue 29,
docs/architecture.md §5). The parsed tables are kept in the user's cache folder (user_cache.py) as marshal data,
keyed by the asset's path, size and modification time: an edited or upgraded asset is parsed again. A user's
files (rgt.toml, signatures.d/*.toml) never come through here: they are parsed each time, with the line numbers
their error messages name.
"""

from __future__ import annotations

import hashlib
import marshal
import tomllib
from pathlib import Path
from typing import Any

from remote_gpu_trainer.user_cache import read_tagged, user_cache_dir, write_private

# rgt's shipped assets (profiles, catalogues, tables), beside the package's modules. A plain path rather than
# importlib.resources: rgt is never imported from a zip, and importlib.resources pulls in tempfile and zipfile,
# ~3 ms of each `rgt --report` (issue 29).
ASSETS = Path(__file__).resolve().parent / "assets"
FORMAT = 1  # the first item of a cached key; a file of another format is parsed again


def read_asset(path: Path, folder: Path | None = None) -> dict[str, Any]:
    """The asset's tables, as tomllib.loads gives them (a fresh object each call: the caller may change it),
    from the cache in `folder` (default: user_cache_dir()) when it holds this version of the file."""
    info = path.stat()
    key = (FORMAT, str(path), info.st_size, info.st_mtime_ns)
    cached = (user_cache_dir() if folder is None else folder) / f"asset-{_name(path)}.marshal"
    data = _cached(cached, key)
    if data is None:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        try:
            write_private(cached, marshal.dumps((key, data)))
        except ValueError:  # a value marshal cannot hold (a TOML date): parsed each time
            pass
    return data


def _name(path: Path) -> str:
    """The cache file's name for an asset: its file name and a digest of its full path (two installs apart)."""
    return f"{path.stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"


def _cached(cached: Path, key: tuple[object, ...]) -> dict[str, Any] | None:
    data = read_tagged(cached, key)
    return data if isinstance(data, dict) else None
