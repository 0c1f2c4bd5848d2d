"""The output folders `figures/<id>/` and `tables/<id>/` (docs/deliver.md §3): which a project has, which are
refused as links, and the staged build that installs a finished set into one, so a build that fails leaves the
folder as it was.

- `output_folder(root, kind, ident) -> Path`, `output_ids(root, kind) -> list[str]`: the folder as a plain
  folder, and the ids a project has; `linked_outputs(root, kind) -> list[str]` and `linked_refusal(kind, rel)
  -> str`: the linked folders a build refuses, and the line that says so.
- `staging(folder) -> Stage` (a context manager): two temp build folders; `Stage.deterministic(names)`,
  `Stage.differing(names)`, `Stage.outputs(names, px)`, `Stage.install(names, document_name, document)`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID
from remote_gpu_trainer.deliver.document import write_document
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.fsutil import fsync_dir, lstat_or_none


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Stage:
    """Two temp folders inside the figure/table folder (same file system, so the finished set moves in by
    rename). A build renders into `first`, renders again into `second` for the determinism check, and only
    then `install`s; a build that raised before that leaves the folder as it was."""

    folder: Path
    first: Path
    second: Path

    def deterministic(self, names: Sequence[str]) -> bool:
        return not self.differing(names)

    def differing(self, names: Sequence[str]) -> list[str]:
        """The outputs whose two builds hashed differently (none: the build is deterministic)."""
        return [n for n in names if sha256_of(self.first / n) != sha256_of(self.second / n)]

    def outputs(self, names: Sequence[str], px: Mapping[str, Sequence[int]] | None = None) -> list[dict[str, Any]]:
        """`[{path, sha256, px?}]` of the outputs (source.csv is described by `source`, not listed here)."""
        listed = []
        for name in names:
            entry: dict[str, Any] = {"path": name, "sha256": sha256_of(self.first / name)}
            if px and name in px:
                entry["px"] = list(px[name])
            listed.append(entry)
        return listed

    def install(self, names: Sequence[str], document_name: str, document: Mapping[str, Any]) -> None:
        """Move the finished files in (each by rename), drop `final.*` files no longer produced, and move the
        JSON document in last, so it never describes outputs that are not there yet. What can fail does so
        before the first rename (a folder where an output goes; a full disk while the document is written, into
        the staging folder), so a build that cannot finish leaves every previous output as it was."""
        for name in (*names, document_name):
            info = lstat_or_none(self.folder / name)
            if info is not None and stat.S_ISDIR(info.st_mode):
                raise ConfigError(f"{self.folder.parent.name}/{self.folder.name}/{name} is a folder where the "
                                  "build writes a file: move it out of the way and build again")
        write_document(self.first / document_name, document)
        for name in names:
            os.replace(self.first / name, self.folder / name)
        for stale in self.folder.glob("final.*"):
            if stale.name not in names and stale.is_file() and not stale.is_symlink():
                stale.unlink()
        os.replace(self.first / document_name, self.folder / document_name)
        fsync_dir(self.folder)


@contextlib.contextmanager
def staging(folder: Path) -> Iterator[Stage]:
    """The two temp folders of a build, removed whatever happens. A folder the build cannot write (read-only,
    a full disk) fails it in one line naming the folder (exit 1), not as an internal error of rgt."""
    try:
        with _temp_folder(folder) as first, _temp_folder(folder) as second:
            yield Stage(folder, first, second)
    except OSError as exc:
        raise VerbFailed(f"{folder.parent.name}/{folder.name}/: cannot write the build "
                         f"({exc.strerror or type(exc).__name__})") from None


@contextlib.contextmanager
def _temp_folder(folder: Path) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=".rgt-build-", dir=folder))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def output_folder(root: Path, kind: str, ident: str) -> Path:
    """`figures/<id>/` or `tables/<id>/` as a plain folder inside the project (no link on the way), else
    ConfigError naming what was expected."""
    if not SAFE_ID.match(ident):
        raise ConfigError(f"rgt build {kind}: {ident!r} is not a {kind} id (letters, digits, . _ -)")
    folder = root / f"{kind}s" / ident
    for path in (folder.parent, folder):
        try:
            plain_folder = stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            plain_folder = False
        if not plain_folder:
            raise ConfigError(f"rgt build {kind}: no {kind} {ident!r} (expected the folder {kind}s/{ident}/ with "
                              f"a {kind}.json, as a plain folder inside the project)")
    return folder


def output_ids(root: Path, kind: str) -> list[str]:
    """The figures (or tables) of a project: every plain folder under figures/ (tables/) holding a
    figure.json (table.json), sorted."""
    top = root / f"{kind}s"
    try:
        entries = list(os.scandir(top)) if stat.S_ISDIR(os.lstat(top).st_mode) else []
    except OSError:
        entries = []
    return sorted(e.name for e in entries if SAFE_ID.match(e.name) and e.is_dir(follow_symlinks=False)
                  and (top / e.name / f"{kind}.json").is_file())


def linked_outputs(root: Path, kind: str) -> list[str]:
    """Where a figure (table) folder would be but a symlink to a folder is: `figures/` itself, else each
    `figures/<id>`, project-relative and sorted. output_ids never lists them, so nothing reads through them;
    `rgt build` and the Deliver panel name each one (linked_refusal) instead of passing it over in silence."""
    top = root / f"{kind}s"
    info = lstat_or_none(top)
    if info is not None and stat.S_ISLNK(info.st_mode):
        return [f"{kind}s/"] if top.is_dir() else []
    try:
        entries = list(os.scandir(top)) if info is not None and stat.S_ISDIR(info.st_mode) else []
    except OSError:
        entries = []
    return sorted(f"{kind}s/{e.name}" for e in entries if e.is_symlink() and e.is_dir())


def linked_refusal(kind: str, rel: str) -> str:
    """The one line that refuses a linked_outputs entry."""
    return (f"{rel} is a symlink: refused, never read through (a {kind} is built only from a plain folder "
            "inside the project)")

