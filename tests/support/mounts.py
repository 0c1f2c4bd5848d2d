"""Real mounts for the tests that need a file system that fills up or is another folder seen twice (tmpfs, bind
mounts). Tests and CI run as root (.ci/run); a mount that cannot be made fails the test, never skips it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted(point: Path, *args: str) -> Iterator[Path]:
    """`mount ARGS POINT` for the block, then a lazy unmount; `point` must exist."""
    done = subprocess.run(["mount", *args, str(point)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount {' '.join(args)} on {point} (needs root, as in .ci/run): {done.stderr}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def tmpfs(point: Path, size: str) -> AbstractContextManager[Path]:
    """A tmpfs of `size` (e.g. "256k") at `point`: a real file system that really runs out of space."""
    return mounted(point, "-t", "tmpfs", "-o", f"size={size}", "tmpfs")
