"""The local transport: subprocesses and files on this machine.

With `root` set it is a simulated box whose disk is that folder: remote absolute paths map into it,
which is how the `sim` provider behaves like a rented machine without leaving this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import stat as stat_module
from collections.abc import AsyncIterator
from pathlib import Path

from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.providers.base import (
    STDERR_CAP,
    STDOUT_CAP,
    CommandResult,
    OutputCapped,
    RemoteStat,
    Transport,
)
from remote_gpu_trainer.providers.transports.capped import PIECE, Flooded, all_or_first_error, drain_capped
from remote_gpu_trainer.providers.transports.detach import launch_with_setsid

HASH_CHUNK = 4 << 20
STOP_WAIT_S = 10.0  # how long a killed command's pipes are drained before it is left to the kernel
SIM_HOME = "/root"  # a simulated box logs in as root, like most rented boxes


class LocalTransport(Transport):
    batches_small_files = False  # a local disk: per-file reads cost no round trip

    def __init__(self, root: Path | None = None) -> None:
        self.root = root
        self.fixed_home = SIM_HOME if root is not None else None

    def resolve(self, remote: str) -> str:
        if self.root is None:
            return remote
        if not remote.startswith("/"):
            raise TransportError(f"remote path {remote!r} must be absolute")
        parts = [p for p in remote.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise TransportError(f"remote path {remote!r} leaves the instance disk")
        return str(self.root.joinpath(*parts)) if parts else str(self.root)

    def _path(self, remote: str) -> Path:
        return Path(self.resolve(remote))

    def ensure_alive(self) -> None:
        """TransportError when a simulated box's disk is gone: as every command on it would fail."""
        if self.root is not None and not self.root.is_dir():
            raise TransportError(f"instance disk {self.root} is gone: the instance is not reachable")

    async def run(self, command: str, *, stdin: bytes | None = None, cwd: str | None = None,
                  timeout: float = 30.0, stdout_cap: int = STDOUT_CAP,
                  stderr_cap: int = STDERR_CAP) -> CommandResult:
        """`bash -c command` in its own process group. Output is kept up to the caps (docs/pull.md,
        "Bounded output"): past one, the whole group is killed and OutputCapped raised, as on a timeout
        or a cancel, so neither a flood nor a hang outlives the call."""
        self.ensure_alive()
        workdir = self.resolve(cwd) if cwd else None
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=workdir, start_new_session=True,
        )
        out, err = bytearray(), bytearray()
        try:
            await asyncio.wait_for(_exchange(process, stdin, (out, stdout_cap), (err, stderr_cap)), timeout)
        except Flooded as flood:
            await _stop(process)
            raise OutputCapped(str(self.root or "localhost"), command, flood.stream, flood.cap) from None
        except (TimeoutError, asyncio.CancelledError):
            await _stop(process)
            raise
        assert process.returncode is not None
        return CommandResult(process.returncode, bytes(out), bytes(err))

    async def launch_detached(self, script: str, ctl_dir: str) -> int:
        return await launch_with_setsid(self, script, ctl_dir)

    async def stat(self, remote: str) -> RemoteStat | None:
        self.ensure_alive()
        try:
            info = os.lstat(self._path(remote))
        except FileNotFoundError:
            return None
        if stat_module.S_ISLNK(info.st_mode):
            kind = "symlink"
        elif stat_module.S_ISREG(info.st_mode):
            kind = "file"
        elif stat_module.S_ISDIR(info.st_mode):
            kind = "dir"
        else:
            kind = "other"
        return RemoteStat(size=info.st_size, mtime=info.st_mtime, kind=kind)

    async def listdir(self, remote: str) -> list[str]:
        self.ensure_alive()
        try:
            return sorted(os.listdir(self._path(remote)))
        except FileNotFoundError:
            return []

    async def tail(self, remote: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        self.ensure_alive()
        path = self._path(remote)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < offset:
                    offset = 0  # truncated or replaced: start again from the top
                handle.seek(offset)
                data = handle.read(limit)
        except FileNotFoundError:
            return b"", offset
        return data, offset + len(data)

    async def sha256(self, remote: str) -> str:
        self.ensure_alive()
        return await asyncio.to_thread(sha256_file, self._path(remote))

    async def read_chunks(self, remote: str, offset: int, chunk_size: int = HASH_CHUNK, *,
                          expect: int | None = None) -> AsyncIterator[bytes]:
        self.ensure_alive()
        handle = await asyncio.to_thread(open, self._path(remote), "rb")
        try:
            handle.seek(offset)
            while True:
                chunk = await asyncio.to_thread(handle.read, chunk_size)
                if not chunk:
                    return
                yield chunk
        finally:
            handle.close()

    async def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        self.ensure_alive()
        path = self._path(remote)
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(atomic_write, path, data, mode)

    async def close(self) -> None:
        return None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


async def _exchange(process: asyncio.subprocess.Process, stdin: bytes | None,
                    out: tuple[bytearray, int], err: tuple[bytearray, int]) -> None:
    """Feed stdin and drain both outputs (each up to its cap) at once, then wait for the exit status."""
    assert process.stdout is not None and process.stderr is not None

    async def feed() -> None:
        if process.stdin is None:
            return
        try:  # the command may exit without reading its stdin
            if stdin:
                process.stdin.write(stdin)
                await process.stdin.drain()
            process.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    await all_or_first_error(feed(), drain_capped(process.stdout.read, *out, "stdout"),
                             drain_capped(process.stderr.read, *err, "stderr"))
    await process.wait()


async def _stop(process: asyncio.subprocess.Process) -> None:
    """Kill the command's whole process group (it runs in its own session) and reap it. asyncio reaps a
    process only once its pipes reach their end, so what is left in them is read and dropped; a pipe some
    escaped descendant still holds open is given up on after STOP_WAIT_S, never waited on for ever."""
    _kill_group(process.pid)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_discard_rest(process), STOP_WAIT_S)


async def _discard_rest(process: asyncio.subprocess.Process) -> None:
    async def discard(reader: asyncio.StreamReader | None) -> None:
        while reader is not None and await reader.read(PIECE):
            pass

    await asyncio.gather(discard(process.stdout), discard(process.stderr))
    await process.wait()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
