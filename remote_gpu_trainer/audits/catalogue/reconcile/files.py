"""Reading the documents reconcile judges (docs/deliver.md §6): the configured paths and globs of rgt.toml
`[deliver] docs` under the project root, each read once as UTF-8. The one part of reconcile that touches the
disk (the rest of reconcile/ is pure): nothing outside the project root is read, nothing but a regular
file is opened (a FIFO would make the read wait for ever), and rgt's own files are never documents.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue.model import sha256_hex
from remote_gpu_trainer.fsutil import NotRegularFile, open_regular

if TYPE_CHECKING:  # loaded by the readers below: rgt.toml's reader (config/deliver.py) takes only the name rules
    from remote_gpu_trainer.audits.catalogue.reconcile.model import Document, DocumentProblem

GLOB_CHARS = "*?["
#: rgt's own files, never documents (docs/deliver.md §6): a glob passes over them, a literal path naming one is
#: refused. EVIDENCE.json in a glob made V31's "is quoted consistently in no configured document" find its own
#: disclosure.
OWN_FOLDERS = ("runs", ".rgt")
OWN_FILES = ("EVIDENCE.json", "reconcile.json", "completeness.json", "figures/*/figure.json", "tables/*/table.json",
             "figures/*/source.csv", "tables/*/source.csv")


def read_documents(root: Path, paths: Iterable[Any]) -> tuple[list[Document], list[DocumentProblem]]:
    """The configured documents under `root` (literal paths or globs), each read once as UTF-8.

    A path outside the project (absolute, `..`, or a link that leaves it) is refused, not read: reconcile
    judges the project's own documents. Missing, undecodable or non-file paths, and globs that match
    nothing, are problems, so an incomplete reconcile says so (exit 2) instead of passing quietly."""
    from remote_gpu_trainer.audits.catalogue.reconcile.model import DocumentProblem

    base = root.resolve()
    documents: list[Document] = []
    problems: list[DocumentProblem] = []
    seen: set[Path] = set()
    for entry in paths:
        if not isinstance(entry, str) or not entry.strip():
            problems.append(DocumentProblem(str(entry), "not a path"))
            continue
        for rel, problem in _candidates(root, base, entry.strip()):
            if problem:
                problems.append(DocumentProblem(rel, problem))
                continue
            resolved = (root / rel).resolve()
            if resolved not in seen:
                seen.add(resolved)
                _read_one(root, rel, documents, problems)
    return documents, problems


def _candidates(root: Path, base: Path, entry: str) -> list[tuple[str, str]]:
    """(project-relative path, problem or "") for a configured entry; a glob expands in sorted order, passing
    over rgt's own files."""
    if Path(entry).is_absolute() or Path(os.path.normpath(entry)).parts[:1] == ("..",):
        return [(entry, "outside the project root; refused")]
    if any(char in entry for char in GLOB_CHARS):
        matches = sorted(p for p in root.glob(entry) if p.is_file())
        if not matches:
            return [(entry, "matches no file")]
        rels = [rel for rel in (p.relative_to(root).as_posix() for p in matches) if not rgt_own_file(rel)]
        if not rels:
            return [(entry, "matches no document, only rgt's own files")]
    else:
        rels = [Path(os.path.normpath(entry)).as_posix()]
        if rgt_own_file(rels[0]):
            return [(rels[0], "rgt's own file, never a document; refused")]
    return [(rel, "" if _inside(base, root / rel) else "outside the project root; refused") for rel in rels]


def rgt_own_file(rel: str) -> bool:
    """Whether a project-relative path is one of rgt's own files (OWN_FOLDERS, OWN_FILES, or a `.rgt-` temp
    file or build folder), which no document list may name: what rgt writes is not what a paper says."""
    parts = PurePosixPath(rel).parts
    if not parts:
        return False
    if parts[0] in OWN_FOLDERS or any(part.startswith(".rgt-") for part in parts):
        return True
    return any(len(parts) == len(shape) and all(map(fnmatchcase, parts, shape))
               for shape in (pattern.split("/") for pattern in OWN_FILES))


def _inside(base: Path, path: Path) -> bool:
    try:
        path.resolve().relative_to(base)
    except (ValueError, OSError):
        return False
    return True


def _read_one(root: Path, rel: str, documents: list[Document], problems: list[DocumentProblem]) -> None:
    """A document read only when it is a regular file: a FIFO named in [deliver] docs made the read wait
    for a writer for ever (fsutil.open_regular never waits)."""
    from remote_gpu_trainer.audits.catalogue.reconcile.model import Document, DocumentProblem

    try:
        with os.fdopen(open_regular(root / rel), "rb") as handle:
            data = handle.read()
        text = data.decode("utf-8-sig")
    except FileNotFoundError:
        problems.append(DocumentProblem(rel, "no such file"))
    except NotRegularFile as exc:
        problems.append(DocumentProblem(rel, "is a folder, not a document" if exc.kind == "a folder" else
                                        f"not a regular file ({exc.kind}): refused unread"))
    except UnicodeDecodeError as exc:
        problems.append(DocumentProblem(rel, f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
    except OSError as exc:
        problems.append(DocumentProblem(rel, f"unreadable: {exc.strerror or exc}"))
    else:
        documents.append(Document(rel, text, sha256_hex(data)))
