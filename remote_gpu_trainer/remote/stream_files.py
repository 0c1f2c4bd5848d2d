"""Stream a batch of small files from a run's result root in one command (the pull's small-file path).

Over SSH each file fetched on its own costs four SFTP requests and their replies (lstat, open, read,
close); for thousands of small files that per-file work, not the bytes, bounds the pull. This program
sends a whole batch down one channel instead. It is an accelerator only: the client accepts a file only
when its bytes hash to the manifest's sha256, and anything else (an error frame, a short stream, a
program that is not this one) sends that file down the per-file path, which decides what went wrong.

Shipped as-is on stdin to the box's own interpreter (`<python> -S -`: no `site`, it needs the standard
library only), like build_manifest.py: stdlib only, Python 3.8 syntax. The client prepends one line
defining PARAMS (base64 JSON, nothing spliced into a shell string): `root` (the result root) and `files` (a
list of [relative path, manifest size]).

Output on stdout, one record per requested file, in the order asked:

    {"path": P, "size": N}\n  then exactly N bytes, then  OK\n  or  ERR <code>\n
    {"path": P, "error": CODE}\n   (nothing follows)

The size is the file's own (fstat) size; the client compares it with the manifest. The trailer is ERR
`changed` when the file shrank or grew while it was read (the N bytes are then padded or cut and must
be discarded). Error codes: missing, not_regular, permission, unsafe_path, io. Exit 0 when every record
was written, 2 for malformed PARAMS.
"""

import errno
import json
import os
import stat
import sys
from typing import BinaryIO

BLOCK = 1 << 20


def unsafe(path: object) -> bool:
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        return True
    return any(part in ("", ".", "..") for part in path.split("/"))


def open_regular(full: str) -> "tuple[int, int]":
    """(fd, size) of a regular file; never follows a final symlink, never blocks on a FIFO."""
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise IsADirectoryError(errno.EINVAL, "not a regular file")
    return fd, info.st_size


def error_code(exc: OSError) -> str:
    if exc.errno == errno.ENOENT or exc.errno == errno.ENOTDIR:
        return "missing"
    if exc.errno == errno.ELOOP or isinstance(exc, IsADirectoryError):
        return "not_regular"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission"
    return "io"


def send_file(out: "BinaryIO", fd: int, size: int) -> bytes:
    """Exactly `size` bytes, then the trailer: OK, or ERR when the file did not hold exactly `size`
    bytes while it was read (shrank, grew, or a read failed; short bytes are padded so that the
    stream stays in step, and the client drops them).

    The bytes go from the page cache to stdout by sendfile(2), without passing through this process; where
    the kernel refuses that (an older kernel, stdout opened for appending), they are read and written."""
    out.flush()  # the header first: sendfile writes to the descriptor, under the buffer
    sent = _sendfile(out.fileno(), fd, size)
    trailer = b"OK\n"
    while sent < size:
        try:
            data = os.pread(fd, min(BLOCK, size - sent), sent)
        except OSError:
            data, trailer = b"", b"ERR io\n"
        if not data:
            out.write(b"\0" * (size - sent))
            return trailer if trailer != b"OK\n" else b"ERR changed\n"
        out.write(data)
        sent += len(data)
    try:
        grew = bool(os.pread(fd, 1, size))
    except OSError:
        return b"ERR io\n"
    return b"ERR changed\n" if grew else trailer


def _sendfile(out_fd: int, fd: int, size: int) -> int:
    """How many of the file's first `size` bytes sendfile(2) wrote to `out_fd`: fewer when the file ended
    sooner, or when the kernel refused (the caller reads and writes the rest, and finds out which)."""
    sent = 0
    while sent < size:
        try:
            count = os.sendfile(out_fd, fd, sent, min(BLOCK << 3, size - sent))
        except (OSError, AttributeError):
            break
        if not count:
            break
        sent += count
    return sent


def stream(root: str, files: "list[list[object]]") -> int:
    out = sys.stdout.buffer
    for item in files:
        path = item[0] if isinstance(item, list) and item else None
        if unsafe(path):
            out.write(json.dumps({"path": str(path), "error": "unsafe_path"}).encode("utf-8") + b"\n")
            continue
        try:
            fd, size = open_regular(os.path.join(root, str(path)))
        except OSError as exc:
            out.write(json.dumps({"path": path, "error": error_code(exc)}).encode("utf-8") + b"\n")
            continue
        try:
            out.write(json.dumps({"path": path, "size": size}).encode("utf-8") + b"\n")
            out.write(send_file(out, fd, size))
        finally:
            os.close(fd)
    out.flush()
    return 0


def main() -> int:
    params = globals().get("PARAMS")
    if not isinstance(params, dict) or not isinstance(params.get("root"), str) \
            or not isinstance(params.get("files"), list):
        sys.stderr.write("PARAMS must be an object with root (string) and files (list)\n")
        return 2
    return stream(params["root"], params["files"])


if __name__ == "__main__":
    sys.exit(main())
