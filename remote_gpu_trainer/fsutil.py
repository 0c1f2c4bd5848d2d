"""File-system helpers that more than one service needs, one copy of each: the per-run lock, the atomic write
(temp file, fsync, rename, fsync of the folder), the safe lstat and read that never follow a link, and the
open that never blocks on a FIFO (open_regular).

One writer per run: pull, verify and teardown of a run each hold the run's lock, so a second rgt process
(or a second worker in the same one) never races on the same `.part` files, markers or provider calls. The
lock is `flock` on `.rgt/locks/<run>.lock`: the kernel releases it when the holder dies, even by kill -9, so
a crashed rgt never leaves a run locked. The file holds the holder's pid and verb, to name it in the refusal.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import cast

from remote_gpu_trainer.errors import VerbFailed

LOCK_DIR = "locks"


def _lock_path(state_dir: Path, run_id: str) -> Path:
    return state_dir / LOCK_DIR / f"{run_id}.lock"


def _holder(path: Path) -> tuple[str, str]:
    """The pid and verb written by the process that holds the lock (best effort: it may be writing)."""
    try:
        words = path.read_text(encoding="utf-8").split(maxsplit=1)
    except OSError:
        return "?", "using"
    if not words:
        return "?", "using"
    return words[0], words[1].strip() if len(words) > 1 else "using"


@contextlib.contextmanager
def run_lock(state_dir: Path, run_id: str, verb: str) -> Iterator[None]:
    """Hold the run's lock while the block runs; refuse at once (exit 1) when another holder has it.

    `verb` is what this process is doing in words ("pulling", "verifying", "tearing down").
    """
    path = _lock_path(state_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, doing = _holder(path)
            raise VerbFailed(f"another rgt (pid {pid}) is {doing} {run_id}: wait for it to finish, "
                             "then try again") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {verb}\n".encode())
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def run_locks(state_dir: Path, run_ids: Sequence[str], verb: str) -> Iterator[None]:
    """Several runs' locks (a teardown covers every run on the box), taken in a fixed order."""
    with contextlib.ExitStack() as stack:
        for run_id in sorted(set(run_ids)):
            stack.enter_context(run_lock(state_dir, run_id, verb))
        yield


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` so a reader sees the old file or the whole new one, never a half: a temp
    file beside it, fsync, rename, fsync of the folder. The temp file never survives a failure."""
    temp = path.with_name(f".rgt-tmp-{path.name}.{os.getpid()}")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.fchmod(fd, mode)  # exactly `mode`, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_dir(path.parent)


def lstat_or_none(path: Path) -> os.stat_result | None:
    """The entry's lstat, or None when nothing is there (or a parent is not a folder, or the path is longer than
    this file system allows: nothing can be there either)."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None
        raise


class NotRegularFile(OSError):
    """What open_regular refuses: `kind` says what is there instead (a folder, a FIFO, a socket, a device)."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(f"{path}: not a regular file ({kind})")
        self.kind = kind


def file_kind(mode: int) -> str:
    """What a non-regular entry is, in a word a message can use."""
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return word
    return "not a file"


def open_regular(path: str | Path, *, dir_fd: int | None = None, follow_symlinks: bool = True) -> int:
    """A read-only fd of `path` when it is a regular file, and never a wait: a plain open() of a FIFO blocks
    until some writer opens it (for ever, when none does), so the open is O_NONBLOCK, and what was opened is
    then judged by fstat (an lstat beforehand could be raced by a swap). NotRegularFile otherwise; the errors
    of os.open as they are (FileNotFoundError, ELOOP for a link when not following). The caller closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, file_kind(mode))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file; None for anything else (absent, a symlink, a folder)."""
    info = lstat_or_none(path)
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    return path.read_bytes()


def fsync_dir(path: Path) -> None:
    """Make the folder's entries (new names, renames, removals) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_if_present(path: Path) -> None:
    """Unlink the path; one already gone is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def sync_filesystem(folder: Path) -> bool:
    """syncfs(2) of the file system that holds `folder`: every dirty page on it written out and waited for, in one
    call instead of an fsync per file (Linux; since 5.8 it also returns a writeback error that happened since the
    folder was opened). False where the platform has no syncfs or the call failed: the caller then fsyncs each
    file itself, so a False never costs durability."""
    call = _syncfs()
    if call is None:
        return False
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        return bool(call(fd) == 0)
    finally:
        os.close(fd)


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """libc's syncfs, where this is Linux and libc has it (ctypes releases the GIL for the call)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return cast(Callable[[int], int], function)
