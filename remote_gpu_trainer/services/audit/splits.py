"""Build a split manifest `splits/<split-set-id>.json` (docs/verify.md §5.3): which files (or records) are in
which split, each with the sha256 VERIFY's leakage checks compare across splits and against the disk.

Inputs, any mix of them, each split coming from one of them:
- a folder per split: every regular file under it, recursively, dotfiles and dot-folders skipped; the id is
  the file's path relative to that folder without its last extension (`data/train/cat/001.png` -> `cat/001`);
- a file list per split: one path a line (blank lines and `#` comments skipped);
- a CSV with columns `split,path` and optional `id,group,time` (other columns are ignored).
Paths inside a list or a CSV are relative to the project root; the id of a listed file without one is its
project-relative path without the last extension. With `hash_unit = "record"` the members are records of a CSV
or JSONL file (columns or keys `split,id`, optional `group,time`, and the declared fields): each record's sha256
is that of the canonical JSON of its declared fields, never the id or the label; a record has no path.

Everything is checked before a byte is hashed (a missing file, a path outside the project root, an empty split,
a duplicate id, an id with a tab or a line break), so a bad input is one error naming it, and the manifest is
written whole or not at all (fsutil.atomic_write).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from remote_gpu_trainer.clock import iso_z, utc_now
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.strict_json import loads_strict

SCHEMA = "remote-gpu-trainer/SPLITS/v1"
METHODS = ("official", "random", "stratified", "group", "temporal")
HASH_UNITS = ("file_bytes", "record")
SOURCE_KINDS = ("folder", "list", "csv", "jsonl")
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
NOT_FIELDS = ("id", "label", "split")  # never hashed as a record's input
_CHUNK = 1 << 20

# files hashed, files in all, bytes hashed, bytes in all
Progress = Callable[[int, int, int, int], None]


class SplitsError(ConfigError):
    """A bad input to a split manifest (exit 2): one line naming the file, split or id."""


@dataclass(frozen=True)
class Source:
    """One declared input: a folder or file list for `split`, or a CSV/JSONL holding a `split` column."""

    kind: str  # folder | list | csv | jsonl
    path: Path  # absolute, or relative to the current folder
    split: str | None = None


@dataclass(frozen=True)
class SplitRequest:
    """What a split manifest is built from: its set id, the source of each split, how members are hashed (with the
    record fields a record hash covers), and its provenance (dataset, method, seed)."""

    split_set_id: str
    sources: tuple[Source, ...]
    hash_unit: str = "file_bytes"
    fields: tuple[str, ...] = ()
    dataset: str | None = None
    method: str = "official"
    seed: int | None = None


@dataclass(frozen=True)
class Member:
    """A member as listed; `file` is what gets hashed (file_bytes), `sha256` is known already for a record."""

    split: str
    id: str
    path: str | None  # project-relative, posix
    file: Path | None = None
    size: int = 0
    sha256: str | None = None
    group: str | None = None
    time: str | None = None
    origin: str = ""  # where it was declared, for errors: `data/list.txt:4`


# -- the whole build --------------------------------------------------------------------------------------------

def manifest_path(root: Path, split_set_id: str) -> Path:
    return root / "splits" / f"{split_set_id}.json"


def build_manifest(root: Path, request: SplitRequest, *, force: bool = False, progress: Progress | None = None,
                   created_at: str | None = None) -> tuple[Path, dict[str, Any]]:
    """Check every input, hash the members, write `splits/<id>.json` atomically; returns the path and the
    document. Raises SplitsError, having written nothing, on any bad input."""
    check_request(request)
    target = manifest_path(root, request.split_set_id)
    if (target.exists() or target.is_symlink()) and not force:
        raise SplitsError(f"{target.relative_to(root)} exists (runs cite its sha256): pick a new id, or --force "
                          "to replace it")
    members = collect(root.resolve(), request)
    check_members(members)
    hashed = hash_members(members, progress)
    document = manifest_document(request, hashed, created_at or iso_z(utc_now()))
    target.parent.mkdir(exist_ok=True)
    atomic_write(target, manifest_bytes(document))
    return target, document


def check_request(request: SplitRequest) -> None:
    """The rules between the inputs, before any file is opened."""
    if not SAFE_ID.match(request.split_set_id):
        raise SplitsError(f"split set id {request.split_set_id!r} is not an id (letters, digits, '.', '_', '-')")
    if request.method not in METHODS:
        raise SplitsError(f"method {request.method!r} is not one of {', '.join(METHODS)}")
    if request.hash_unit not in HASH_UNITS:
        raise SplitsError(f"hash unit {request.hash_unit!r} is not one of {', '.join(HASH_UNITS)}")
    if not request.sources:
        raise SplitsError("nothing to build from: give --split NAME=FOLDER, --split-list NAME=FILE or --csv FILE")
    kinds = {source.kind for source in request.sources}
    if request.hash_unit == "record":
        if kinds - {"csv", "jsonl"}:
            raise SplitsError("--hash-unit record reads records from --csv or --jsonl, not folders or file lists")
        if not request.fields:
            raise SplitsError("--hash-unit record needs --fields: the input fields each record's hash covers")
        excluded = sorted(set(request.fields) & set(NOT_FIELDS))
        if excluded:
            raise SplitsError(f"--fields may not name {', '.join(excluded)}: a record's hash covers its inputs only")
    else:
        if "jsonl" in kinds:
            raise SplitsError("--jsonl holds records: use it with --hash-unit record")
        if request.fields:
            raise SplitsError("--fields applies to --hash-unit record only")
    for source in request.sources:
        if source.split is not None and not SAFE_ID.match(source.split):
            raise SplitsError(f"split name {source.split!r} is not an id (letters, digits, '.', '_', '-')")


def manifest_document(request: SplitRequest, members: Sequence[Member], created_at: str) -> dict[str, Any]:
    """The manifest in its contract's shape: members per split (in the order the splits came), sorted by id."""
    listed: dict[str, list[dict[str, Any]]] = {}
    for member in members:
        listed.setdefault(member.split, []).append(
            {"id": member.id, "path": member.path, "sha256": member.sha256, "group": member.group,
             "time": member.time})
    for rows in listed.values():
        rows.sort(key=lambda row: row["id"])
    return {"schema": SCHEMA, "split_set_id": request.split_set_id,
            "dataset": request.dataset or request.split_set_id, "method": request.method, "seed": request.seed,
            "hash_unit": request.hash_unit, "created_at": created_at, "members": listed, "fit_records": [],
            "standard_reference": None}


def manifest_bytes(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


# -- listing ----------------------------------------------------------------------------------------------------

def collect(root: Path, request: SplitRequest) -> list[Member]:
    """Every member every source declares, unhashed; a split named by two sources is refused."""
    members: list[Member] = []
    owner: dict[str, tuple[int, Path]] = {}
    for index, source in enumerate(request.sources):
        found = list(_source_members(root, source, request.fields))
        if not found:
            raise SplitsError(f"{source.path}: {_empty_reason(source)}")
        for split in dict.fromkeys(m.split for m in found):
            if split in owner and owner[split][0] != index:
                raise SplitsError(f"split {split} comes from both {owner[split][1]} and {source.path}: give each "
                                  "split one source")
            owner[split] = (index, source.path)
        members += found
    return members


def _source_members(root: Path, source: Source, fields: Sequence[str]) -> Iterable[Member]:
    if source.kind == "folder":
        return folder_members(root, source.split or "", source.path)
    if source.kind == "list":
        return list_members(root, source.split or "", source.path)
    if fields:
        return record_members(source.path, fields, jsonl=source.kind == "jsonl")
    return csv_members(root, source.path)


def _empty_reason(source: Source) -> str:
    if source.kind == "folder":
        return f"split {source.split} is empty: the folder holds no regular files"
    if source.kind == "list":
        return f"split {source.split} is empty: the list names no files"
    return "holds no rows"


def folder_members(root: Path, split: str, folder: Path) -> Iterable[Member]:
    """Every regular file under `folder` (dotfiles and dot-folders skipped), in sorted order."""
    if not folder.is_dir():
        raise SplitsError(f"split {split}: {folder}: no such folder")
    for current, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            full = Path(current) / name
            if not full.is_file():
                continue  # a socket, a fifo, a dangling link: not a member
            rel_id = PurePosixPath(full.relative_to(folder).as_posix())
            path, size = project_file(root, full, f"split {split}")
            yield Member(split, rel_id.with_suffix("").as_posix(), path, full, size, origin=str(full))


def list_members(root: Path, split: str, listing: Path) -> Iterable[Member]:
    """One project-relative path a line; blank lines and `#` comments skipped."""
    for number, line in enumerate(_read_text(listing).splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        origin = f"{listing}:{number}"
        path, size = project_file(root, root / text, f"split {split}: {origin}")
        yield Member(split, _path_id(path), path, root / path, size, origin=origin)


def csv_members(root: Path, table: Path) -> Iterable[Member]:
    """Rows `split,path[,id,group,time]`: the file of each row, with its id or one made from its path."""
    for number, row in _csv_rows(table, ("split", "path")):
        origin = f"{table}:{number}"
        path, size = project_file(root, root / row["path"], origin)
        yield Member(row["split"], row.get("id") or _path_id(path), path, root / path, size,
                     group=row.get("group") or None, time=row.get("time") or None, origin=origin)


def record_members(table: Path, fields: Sequence[str], *, jsonl: bool) -> Iterable[Member]:
    """Records with `split`, `id` and every declared field; the hash covers the declared fields only."""
    rows = _jsonl_rows(table) if jsonl else _csv_rows(table, ("split", "id"))
    for number, record in rows:
        origin = f"{table}:{number}"
        missing = [name for name in ("split", "id", *fields) if name not in record]
        if missing:
            raise SplitsError(f"{origin}: the record has no {', '.join(missing)}")
        inputs = {name: record[name] for name in fields}
        yield Member(str(record["split"]), str(record["id"]), None, sha256=record_sha256(inputs),
                     group=_text(record.get("group")), time=_text(record.get("time")), origin=origin)


def record_sha256(inputs: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a record's declared input fields (docs/verify.md §5)."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(canonical).hexdigest()


def project_file(root: Path, path: Path, where: str) -> tuple[str, int]:
    """A member file's project-relative path (links resolved) and size; refused when it is absent, not a
    regular file, or outside the project root."""
    try:
        resolved = path.resolve(strict=True)
    except (FileNotFoundError, RuntimeError):
        raise SplitsError(f"{where}: {path}: no such file") from None
    try:
        rel = resolved.relative_to(root)
    except ValueError:
        raise SplitsError(f"{where}: {path} is outside the project root {root}") from None
    if not resolved.is_file():
        raise SplitsError(f"{where}: {path} is not a regular file")
    return rel.as_posix(), resolved.stat().st_size


def _path_id(path: str) -> str:
    return PurePosixPath(path).with_suffix("").as_posix()


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SplitsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SplitsError(f"{path}: cannot be read as UTF-8 text ({exc})") from None


def _csv_rows(table: Path, required: Sequence[str]) -> Iterable[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(_read_text(table).splitlines())
    missing = [name for name in required if name not in (reader.fieldnames or [])]
    if missing:
        raise SplitsError(f"{table}: no column {', '.join(missing)} (the header needs {', '.join(required)})")
    for row in reader:
        if None in row or any(value is None for value in row.values()):
            raise SplitsError(f"{table}:{reader.line_num}: the row has a different number of cells than the header")
        yield reader.line_num, row


def _jsonl_rows(table: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(_read_text(table).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = loads_strict(line)
        except ValueError as exc:
            raise SplitsError(f"{table}:{number}: not a JSON object ({exc})") from None
        if not isinstance(record, dict):
            raise SplitsError(f"{table}:{number}: not a JSON object")
        yield number, record


# -- checks and hashing -----------------------------------------------------------------------------------------

def check_members(members: Sequence[Member]) -> None:
    """Ids unique within their split, and free of the tab and line break the data hash's lines use."""
    seen: dict[tuple[str, str], Member] = {}
    for member in members:
        if not SAFE_ID.match(member.split):
            raise SplitsError(f"{member.origin}: split name {member.split!r} is not an id")
        if not member.id or any(char in member.id for char in "\t\n\r"):
            raise SplitsError(f"{member.origin}: id {member.id!r} is empty or holds a tab or line break")
        key = (member.split, member.id)
        if key in seen:
            raise SplitsError(f"split {member.split}: id {member.id!r} appears twice ({seen[key].origin} and "
                              f"{member.origin})")
        seen[key] = member


def hash_members(members: Sequence[Member], progress: Progress | None = None) -> list[Member]:
    """Each member with the sha256 of its file's bytes (records keep theirs); `progress` after each file."""
    total_files = sum(1 for m in members if m.file is not None)
    total_bytes = sum(m.size for m in members if m.file is not None)
    done_files = done_bytes = 0
    hashed = []
    for member in members:
        if member.file is not None:
            member = replace(member, sha256=file_sha256(member.file, member.origin))
            done_files, done_bytes = done_files + 1, done_bytes + member.size
            if progress is not None:
                progress(done_files, total_files, done_bytes, total_bytes)
        hashed.append(member)
    return hashed


def file_sha256(path: Path, origin: str) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise SplitsError(f"{origin}: cannot be read ({exc.strerror or exc})") from None
    return digest.hexdigest()
