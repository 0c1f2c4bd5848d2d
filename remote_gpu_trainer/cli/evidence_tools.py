"""The verbs that help a project write its own evidence: `rgt capsule` (the helper a training script imports
to write its run capsule) and `rgt splits build` (a split manifest from folders, a CSV or file lists).

One function per verb, taking the parsed arguments and returning the exit code (errors.py).
"""

from __future__ import annotations

import argparse
import importlib.resources
from pathlib import Path

from remote_gpu_trainer.errors import EXIT_OK, ConfigError

HELPER_NAME = "rgt_capsule.py"


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
