"""The verbs that help a project write its own evidence: `rgt capsule` (the helper a training script imports
to write its run capsule) and `rgt splits build` (a split manifest from folders, a CSV or file lists).

One function per verb, taking the parsed arguments and returning the exit code (errors.py).
"""

from __future__ import annotations

import argparse
import importlib.resources
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.errors import EXIT_OK, ConfigError

if TYPE_CHECKING:
    from remote_gpu_trainer.services.audit.splits import Progress, Source, SplitRequest

HELPER_NAME = "rgt_capsule.py"
PLAIN_EVERY_FILES = 5000  # progress lines when stderr is not a terminal (a log gets one line per this many)


def capsule_source() -> Path:
    """The installed helper's path: the file to push beside a training script or import locally."""
    return Path(str(importlib.resources.files("remote_gpu_trainer.remote").joinpath(HELPER_NAME)))


def capsule(args: argparse.Namespace) -> int:
    """Print the helper's path; with --write DIR, copy it into DIR (a different file there needs --force)."""
    from remote_gpu_trainer.fsutil import atomic_write

    source = capsule_source()
    if args.write is None:
        print(source)
        return EXIT_OK
    folder = Path(args.write)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder (create it first)")
    target = folder / HELPER_NAME
    data = source.read_bytes()
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise ConfigError(f"{target}: is not a regular file; move it aside first")
    if target.is_file() and target.read_bytes() == data:
        print(f"{target}: already this version")
        return EXIT_OK
    if target.is_file() and not args.force:
        raise ConfigError(f"{target}: exists and differs from this rgt's helper: add --force to replace it")
    atomic_write(target, data)
    print(f"wrote {target}")
    return EXIT_OK


def splits(args: argparse.Namespace) -> int:
    """`rgt splits build ID`: the manifest splits/ID.json of the project, from the inputs the flags name."""
    from remote_gpu_trainer.cli.sessions import read_only_refusal
    from remote_gpu_trainer.config.project import resolve_project_file
    from remote_gpu_trainer.services.audit.splits import build_manifest

    root = resolve_project_file(args.project).parent.resolve()
    folder = root / "splits" if (root / "splits").is_dir() else root
    if not os.access(folder, os.W_OK):  # refused before hashing anything, like every verb that writes
        raise read_only_refusal("splits build", str(root))
    request = split_request(args)
    with files_progress() as progress:
        target, document = build_manifest(root, request, force=args.force, progress=progress)
    counts = ", ".join(f"{split} {len(rows)}" for split, rows in document["members"].items())
    print(f"wrote {target.relative_to(root)}: {counts} ({document['hash_unit']})")
    return EXIT_OK


def split_request(args: argparse.Namespace) -> SplitRequest:
    """The flags as a request: --split and --split-list pairs, then --csv and --jsonl. Paths on the command
    line are relative to the current folder; paths inside a list or CSV to the project root."""
    from remote_gpu_trainer.services.audit.splits import Source, SplitRequest

    sources = [_pair("--split", "folder", text) for text in args.split]
    sources += [_pair("--split-list", "list", text) for text in args.split_list]
    sources += [Source(kind, Path(path).absolute()) for kind, path in (("csv", args.csv), ("jsonl", args.jsonl))
                if path is not None]
    fields = tuple(name.strip() for name in (args.fields or "").split(",") if name.strip())
    return SplitRequest(split_set_id=args.split_set_id, sources=tuple(sources), hash_unit=args.hash_unit,
                        fields=fields, dataset=args.dataset, method=args.method, seed=args.seed)


def _pair(flag: str, kind: str, text: str) -> Source:
    from remote_gpu_trainer.services.audit.splits import Source

    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"rgt splits: {flag} {text!r}: write NAME=PATH (e.g. {flag} test=data/test)")
    return Source(kind, Path(path).absolute(), name)


@contextmanager
def files_progress() -> Iterator[Progress]:
    """Hashing progress on stderr: a rich bar (files, bytes, rate, time left) at a terminal, else one line
    every PLAIN_EVERY_FILES files."""
    if not sys.stderr.isatty():
        yield _plain_progress
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("hashing"), BarColumn(), MofNCompleteColumn(), TextColumn("files"),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("hash", total=None)
        yield lambda files, total, _done, _bytes: bar.update(task, completed=files, total=total)


def _plain_progress(files: int, total: int, done: int, total_bytes: int) -> None:
    from remote_gpu_trainer.text import size

    if files % PLAIN_EVERY_FILES == 0 or files == total and total >= PLAIN_EVERY_FILES:
        print(f"hashed {files}/{total} files ({size(done)} of {size(total_bytes)})", file=sys.stderr, flush=True)
