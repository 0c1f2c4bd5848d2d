"""The SSH transport: the Transport protocol over one multiplexed asyncssh connection per host.

It implements exactly what LocalTransport implements, so every service (runner, watcher, evidence) works
unchanged over SSH and both pass the same contract tests. The connection pool and its reconnects live in
ssh_pool.py, host-key checking in ssh_hostkeys.py. Why it is built the way it is (docs/remote-ops.md):

- §1 A command is never re-sent once it may have started; only a channel that never opened, or an
  idempotent read, is tried again.
- §6 Detached launch reuses providers.detach, so the wrapper starts in its own session and survives the
  connection; a run() that times out kills its whole remote process group, not just the channel.
- §8 Pulls read over SFTP from any offset (resumable), with the next chunk already in flight while the
  caller hashes and writes the previous one; uploads go to a temp name and are renamed atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import posixpath
import re
import secrets
import shlex
import stat as stat_module
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.base import (
    STDERR_CAP,
    STDOUT_CAP,
    CommandResult,
    OutputCapped,
    RemoteStat,
    Transport,
)
from remote_gpu_trainer.providers.transports.capped import Flooded, all_or_first_error, drain_capped
from remote_gpu_trainer.providers.transports.detach import launch_with_setsid
from remote_gpu_trainer.providers.transports.quiet_asyncssh import asyncssh
from remote_gpu_trainer.providers.transports.ssh_pool import (
    CLOSE_TIMEOUT_S,
    DEFAULT_POOL,
    Link,
    SSHPool,
    SSHSettings,
    Target,
    reconnect,
)

__all__ = ["NoSFTP", "SSHTransport"]

CHUNK = 4 << 20
READ_AHEAD = 8 << 20  # bytes of SFTP reads kept in flight by read_chunks
SFTP_READ_FALLBACK = 32 << 10  # the read size every SFTP server must serve, when it states no limit
# Seconds an SFTP request may wait for its answer (docs/pull.md, "Stalled SFTP"): past it the connection is
# dropped and the caller's retries go on over a fresh one. Read at call time, so tests may lower it.
SFTP_STALL_S = 60.0
SHA256_TIMEOUT_S = 3600.0
KILL_TIMEOUT_S = 10.0

_PID_MARK = b"__rgt_pid__="
_NOCWD_MARK = b"__rgt_nocwd__"
_SHA256_LINE = re.compile(rb"^\\?([0-9a-f]{64})\s", re.MULTILINE)

T = TypeVar("T")


class NoSFTP(TransportError):
    """The box refused the sftp subsystem (file transfers cannot work; commands still may)."""


# -- the transport -----------------------------------------------------------------------------------------

REFUSED_RETRIES = 10  # a channel refused on a live connection: asked again up to this many times
REFUSED_DELAY_S = 0.02  # times the attempt: 1.1 s in all before the refusal is reported


class SSHTransport(Transport):
    """The Transport protocol on a box reached over SSH (docs/architecture.md §3.3). Remote paths are the box's own
    paths: `resolve` is the identity."""

    batches_small_files = True  # four SFTP requests per file: small files go in batches through one command
    fixed_home = None  # a real box: its home is what its login says

    def __init__(self, target: str, settings: SSHSettings, pool: SSHPool | None = None) -> None:
        self.target = Target.parse(target)
        self.settings = settings
        self._pool = pool if pool is not None else DEFAULT_POOL
        self._key = (self.target, settings)

    def resolve(self, remote: str) -> str:
        return remote

    # -- connection ---------------------------------------------------------------------------------------

    def _link(self) -> Link:
        return self._pool.link(self._key)

    async def _connection(self) -> asyncssh.SSHClientConnection:
        link = self._link()
        async with link.lock:
            if link.conn is not None and link.alive():
                return link.conn
            link.conn = None
            link.forget_sftp()
            link.conn = await reconnect(link, self.target, self.settings)
            return link.conn

    def _lost(self, conn: asyncssh.SSHClientConnection | None) -> None:
        """After a transport failure on `conn`: drop it from the link so the next call reconnects."""
        link = self._link()
        link.forget_sftp()
        if conn is not None and link.conn is conn:
            conn.abort()
            link.conn = None

    async def _sftp(self) -> tuple[asyncssh.SSHClientConnection, asyncssh.SFTPClient]:
        conn = await self._connection()
        link = self._link()
        async with link.sftp_lock:
            if link.sftp is None or link.sftp_conn is not conn:
                stall = SFTP_STALL_S
                try:
                    link.sftp = await asyncio.wait_for(conn.start_sftp_client(), stall)
                except TimeoutError:
                    raise self._stalled(conn, "the SFTP session's start", stall) from None
                except (OSError, asyncssh.Error) as exc:
                    self._lost(conn)
                    raise NoSFTP(f"{self.target}: no SFTP on this connection ({_reason(exc)}): the box "
                                         "needs the sftp subsystem for file transfers") from None
                link.sftp_conn = conn
            return conn, link.sftp

    async def _sftp_call(self, what: str, remote: str,
                         op: Callable[[asyncssh.SFTPClient], Awaitable[T]]) -> T:
        """Run an idempotent SFTP operation; one more try on a fresh connection if the old one died, or
        stalled: no answer within SFTP_STALL_S (a stopped sftp-server or a hung mount behind a live
        connection would otherwise hold the caller for as long as it lasts)."""
        for attempt in (0, 1):
            conn, sftp = await self._sftp()
            stall = SFTP_STALL_S
            try:
                return await asyncio.wait_for(op(sftp), stall)
            except TimeoutError:
                error = self._stalled(conn, f"SFTP {what} of {remote}", stall)
                if attempt:
                    raise error from None
            except (OSError, asyncssh.Error) as exc:
                if not _is_connection_error(exc):
                    raise _os_error(exc, remote) from None
                self._lost(conn)
                if attempt:
                    raise TransportError(f"{self.target}: connection lost during {what} {remote}") from None
        raise AssertionError("unreachable")

    # -- commands -----------------------------------------------------------------------------------------

    async def run(self, command: str, *, stdin: bytes | None = None, cwd: str | None = None,
                  timeout: float = 30.0, stdout_cap: int = STDOUT_CAP,
                  stderr_cap: int = STDERR_CAP) -> CommandResult:
        """`bash -c command` on the box, like LocalTransport.run: exit status (negative signal number when
        killed by one), stdout and stderr. On timeout or cancel the remote process group is killed and
        TimeoutError (or the cancel) propagates; a connection lost mid-command is a TransportError, since
        the outcome is unknown, and the command is never re-sent. Output past a cap (docs/pull.md,
        "Bounded output") closes the channel, kills the group and raises OutputCapped: what asyncssh holds
        meanwhile is bounded by the channel window (ssh_pool.WINDOW)."""
        async with self._link().sessions:
            conn, process = await self._start(_wrap(command, cwd), timeout)
            out, err = bytearray(), bytearray()
            try:
                await asyncio.wait_for(_exchange(process, stdin, (out, stdout_cap), (err, stderr_cap)), timeout)
            except Flooded as flood:
                await self._kill_group(conn, process, err)
                raise OutputCapped(str(self.target), command, flood.stream, flood.cap) from None
            except TimeoutError:
                await self._kill_group(conn, process, err)
                raise TimeoutError(f"{self.target}: command still running after {timeout:g} s: its process "
                                   "group was killed") from None
            except asyncio.CancelledError:
                await self._kill_group(conn, process, err)
                raise
            except (OSError, asyncssh.Error):
                self._lost(conn)
                raise TransportError(f"{self.target}: connection lost while a command ran: outcome "
                                     "unknown") from None
        if process.returncode is None:
            self._lost(conn)
            raise TransportError(f"{self.target}: connection lost while a command ran: outcome unknown")
        stderr = _without_marks(bytes(err))
        if _NOCWD_MARK in err:
            raise FileNotFoundError(errno.ENOENT, "no such directory on the instance", cwd)
        return CommandResult(process.returncode, bytes(out), stderr)

    async def _start(self, command: str, timeout: float) -> tuple[asyncssh.SSHClientConnection,
                                                                   asyncssh.SSHClientProcess[bytes]]:
        """Open a session channel. If the connection turns out to be dead, nothing ran, so one more try on
        a fresh connection is safe. A live server refusing the channel is asked again a few times: sshd
        frees a closed session's slot a moment after the client saw it close, so a fast box at its
        MaxSessions refuses briefly (REFUSED_RETRIES); a refusal that lasts is reported as is."""
        attempt, refused = 0, 0
        while True:
            conn = await self._connection()
            try:
                return conn, await asyncio.wait_for(conn.create_process(command, encoding=None), timeout)
            except asyncssh.ChannelOpenError as exc:
                if not conn.is_closed():
                    refused += 1
                    if refused > REFUSED_RETRIES:
                        raise TransportError(f"{self.target}: the server refused a channel: {exc.reason}") from None
                    await asyncio.sleep(REFUSED_DELAY_S * refused)
                    continue
                self._lost(conn)
                attempt += 1
                if attempt > 1:
                    raise TransportError(f"{self.target}: cannot open a channel: {exc.reason}") from None
            except TimeoutError:
                self._lost(conn)
                raise TransportError(f"{self.target}: no channel within {timeout:g} s: connection dropped, "
                                     "outcome unknown") from None
            except (OSError, asyncssh.Error) as exc:
                self._lost(conn)
                raise TransportError(f"{self.target}: cannot start a command: {_reason(exc)}") from None

    async def _kill_group(self, conn: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess[bytes],
                          err: bytearray) -> None:
        """Kill the command's whole process group on the box (sshd made its session leader a group
        leader); closing the channel alone would leave it running."""
        process.close()
        pid = _marked_pid(bytes(err))
        if pid is None or conn.is_closed():
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.run(f"kill -KILL -- -{pid} 2>/dev/null || kill -KILL {pid} 2>/dev/null",
                                            check=False), KILL_TIMEOUT_S)

    async def ping(self, timeout: float) -> None:
        """Prove the box answers, over the pooled connection, starting nothing on it: one SFTP request
        (sftp-server is started once per connection, not per check) where `run("true")` would start a
        login shell every time. A connection found dead is replaced once, as for any SFTP call; a box
        without SFTP is asked with `true` after all. Raises TimeoutError when the request gets no answer
        within `timeout` (that connection is dropped: it is stuck), TransportError when the box cannot
        be reached."""
        for attempt in (0, 1):
            try:
                conn, sftp = await self._sftp()
            except NoSFTP:
                result = await self.run("true", timeout=timeout)
                if result.rc != 0:
                    raise TransportError(f"{self.target}: `true` exited {result.rc}") from None
                return
            try:
                await asyncio.wait_for(sftp.lstat("."), timeout)
                return
            except TimeoutError:
                self._lost(conn)
                raise TimeoutError(f"{self.target}: no answer within {timeout:g} s") from None
            except (OSError, asyncssh.Error) as exc:
                if not _is_connection_error(exc):
                    return  # the server answered, with an SFTP status about ".": the box is there
                self._lost(conn)
                if attempt:
                    raise TransportError(f"{self.target}: connection lost: {_reason(exc)}") from None

    async def launch_detached(self, script: str, ctl_dir: str) -> int:
        return await launch_with_setsid(self, script, ctl_dir)

    async def sha256(self, remote: str) -> str:
        """Hashed on the far side (`sha256sum`): only 64 hex characters cross the network."""
        result = await self.run(f"sha256sum -- {shlex.quote(remote)}", timeout=SHA256_TIMEOUT_S)
        match = _SHA256_LINE.search(result.stdout) if result.rc == 0 else None
        if match:
            return match.group(1).decode("ascii")
        raise _command_os_error(result, remote, "sha256sum")

    # -- files --------------------------------------------------------------------------------------------

    async def stat(self, remote: str) -> RemoteStat | None:
        """lstat over SFTP: a symlink is reported as such, never followed."""
        async def op(sftp: asyncssh.SFTPClient) -> RemoteStat | None:
            try:
                attrs = await sftp.lstat(remote)
            except asyncssh.SFTPNoSuchFile:
                return None
            return _remote_stat(attrs)
        return await self._sftp_call("stat", remote, op)

    async def listdir(self, remote: str) -> list[str]:
        async def op(sftp: asyncssh.SFTPClient) -> list[str]:
            try:
                names = await sftp.listdir(remote)
            except asyncssh.SFTPNoSuchFile:
                return []
            return sorted(str(name) for name in names if name not in (".", ".."))
        return await self._sftp_call("listdir", remote, op)

    async def tail(self, remote: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Bytes after `offset`, starting again at 0 when the file shrank (truncated or replaced)."""
        async def op(sftp: asyncssh.SFTPClient) -> tuple[bytes, int]:
            try:
                handle = await sftp.open(remote, "rb")
            except asyncssh.SFTPNoSuchFile:
                return b"", offset
            async with handle:
                size = (await handle.stat()).size or 0
                start = 0 if size < offset else offset
                data = await handle.read(limit, start) if size > start and limit > 0 else b""
            return _binary(data), start + len(data)
        return await self._sftp_call("tail", remote, op)

    async def read_chunks(self, remote: str, offset: int, chunk_size: int = CHUNK, *,
                          expect: int | None = None) -> AsyncIterator[bytes]:
        """The file from `offset` to its end over SFTP (resumable after a cut). Block requests stay in
        flight back to back (READ_AHEAD bytes) while the caller hashes and writes what arrived, so the
        link never idles between chunks; blocks are handed out in file order, chunk_size at most.

        `expect` is where the caller expects the file to end (the manifest's size): no block is asked
        past it but one byte, which tells the end, so a small file costs one read request, not a
        read-ahead window of requests past its end. A file that grew is still read to its true end.
        Each block is one SFTP request (block_size=0: asyncssh neither splits it nor re-asks a short one)."""
        conn, sftp = await self._sftp()
        stall = SFTP_STALL_S
        try:
            handle = await asyncio.wait_for(sftp.open(remote, "rb", block_size=0), stall)
        except TimeoutError:
            raise self._stalled(conn, f"SFTP open of {remote}", stall) from None
        except (OSError, asyncssh.Error) as exc:
            raise self._read_error(conn, exc, remote) from None
        per_chunk = max(1, -(-chunk_size // max(1, sftp.limits.max_read_len or SFTP_READ_FALLBACK)))
        block = max(1, chunk_size // per_chunk)
        reader = _ReadAhead(handle, offset, block, max(per_chunk, READ_AHEAD // block), expect)
        try:
            while not reader.at_end:
                parts: list[bytes] = []
                while len(parts) < per_chunk and not reader.at_end:
                    try:
                        data = await reader.next_block(stall)
                    except TimeoutError:
                        raise self._stalled(conn, f"SFTP read of {remote}", stall) from None
                    except (OSError, asyncssh.Error) as exc:
                        raise self._read_error(conn, exc, remote) from None
                    if data:
                        parts.append(data)
                if parts:
                    yield parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            with contextlib.suppress(Exception):
                await reader.drain()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(handle.close(), CLOSE_TIMEOUT_S)

    def _stalled(self, conn: asyncssh.SSHClientConnection, action: str, stall: float) -> TransportError:
        """An SFTP request unanswered for `stall` seconds: the connection is dropped (its sftp-server is stuck;
        a fresh connection gets a fresh one), and the error says so for the caller's retries."""
        self._lost(conn)
        return TransportError(f"{self.target}: {action} got no answer for {stall:g} s: connection dropped")

    def _read_error(self, conn: asyncssh.SSHClientConnection, exc: BaseException, remote: str) -> Exception:
        if _is_connection_error(exc):
            self._lost(conn)
            return TransportError(f"{self.target}: connection lost while reading {remote}")
        return _os_error(exc, remote)

    async def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None:
        """Write to a temp name beside the target, set the mode, fsync, then posix-rename over the target:
        a reader sees the old file or the new one, never half of it."""
        async def op(sftp: asyncssh.SFTPClient) -> None:
            parent, name = posixpath.split(remote)
            if parent:
                await sftp.makedirs(parent, exist_ok=True)
            temp = posixpath.join(parent, f".rgt-tmp-{name}.{secrets.token_hex(6)}")
            try:
                async with sftp.open(temp, "wb", asyncssh.SFTPAttrs(permissions=mode)) as handle:
                    await handle.write(data)
                    await handle.chmod(mode)  # exact mode, whatever the server's umask
                    with contextlib.suppress(asyncssh.SFTPOpUnsupported):
                        await handle.fsync()
                await self._rename(sftp, temp, remote)
            except BaseException:
                with contextlib.suppress(Exception):
                    await sftp.remove(temp)
                raise
        await self._sftp_call("put", remote, op)

    async def _rename(self, sftp: asyncssh.SFTPClient, temp: str, remote: str) -> None:
        try:
            await sftp.posix_rename(temp, remote)
        except asyncssh.SFTPOpUnsupported:  # not OpenSSH: rename(2) through mv is just as atomic
            result = await self.run(f"mv -f -- {shlex.quote(temp)} {shlex.quote(remote)}")
            if result.rc != 0:
                raise _command_os_error(result, remote, "mv") from None

    async def close(self) -> None:
        """Close this target's connection. Detached jobs live on; a later call reconnects."""
        link = self._pool.discard(self._key)
        if link is not None:
            await link.close()


# -- small helpers -----------------------------------------------------------------------------------------

class _ReadAhead:
    """Whole-block SFTP reads kept in flight ahead of the consumer, returned in file order. A short block
    marks the end of the file; reads queued past it are drained, not cancelled (a cancelled asyncssh read
    leaves its inner request task behind with an exception nobody retrieves).

    With `end` known, the requests cover the bytes up to `end` and one byte more: a short answer means
    the file ends where expected; a full one means it grew, and reading goes on past it as if `end` had
    not been given."""

    def __init__(self, handle: asyncssh.SFTPClientFile, offset: int, block: int, depth: int,
                 end: int | None = None) -> None:
        self._handle = handle
        self._next = offset
        self._block = block
        self._depth = depth
        self._stop = end + 1 if end is not None and end >= offset else None  # no request reaches past it
        self._reads: deque[tuple[asyncio.Future[str | bytes], int]] = deque()
        self.at_end = False

    def _next_size(self) -> int:
        if self._stop is None:
            return self._block
        return max(0, min(self._block, self._stop - self._next))

    async def next_block(self, stall: float) -> bytes:
        """The next block in file order; TimeoutError when it has not come within `stall` seconds (the
        read stays queued for `drain`, not cancelled)."""
        while len(self._reads) < self._depth and (size := self._next_size()):
            self._reads.append((asyncio.ensure_future(self._handle.read(size, self._next)), size))
            self._next += size
        read, asked = self._reads[0]
        if not read.done():
            await asyncio.wait((read,), timeout=stall)
            if not read.done():
                raise TimeoutError
        self._reads.popleft()
        data = _binary(read.result())
        if len(data) < asked:
            self.at_end = True
        elif self._next == self._stop and not self._reads:
            self._stop = None  # even the byte past the expected end came back: the file grew, read on
        return data

    async def drain(self) -> None:
        self.at_end = True
        reads, self._reads = [read for read, _ in self._reads], deque()
        if reads:
            await asyncio.wait_for(asyncio.gather(*reads, return_exceptions=True), CLOSE_TIMEOUT_S)


async def _exchange(process: asyncssh.SSHClientProcess[bytes], stdin: bytes | None, out: tuple[bytearray, int],
                    err: tuple[bytearray, int]) -> None:
    """Feed stdin and drain both outputs concurrently (either side may block on a full window), each up to
    its cap, then wait for the exit status. Output lands in the buffers as it arrives, so a timeout still
    sees the pid. The prelude's pid line counts against stderr's cap (it is a few bytes)."""
    async def feed() -> None:
        with contextlib.suppress(OSError, asyncssh.Error):  # the command may exit without reading stdin
            if stdin:
                process.stdin.write(stdin)
                await process.stdin.drain()
            process.stdin.write_eof()

    await all_or_first_error(feed(), drain_capped(process.stdout.read, *out, "stdout"),
                             drain_capped(process.stderr.read, *err, "stderr"))
    await process.wait_closed()


def _wrap(command: str, cwd: str | None) -> str:
    """The line the login shell runs (POSIX sh, whatever the login shell is). It prints its pid first:
    sshd made that shell a process-group leader, so a timeout can kill the whole group. Then it becomes
    `bash -c command`, exactly like LocalTransport.run. SHLVL=2 stops that bash from sourcing ~/.bashrc
    a second time (bash does so when it thinks sshd started it); what the login shell exported stays."""
    steps = ["printf '%s%s\\n' " + shlex.quote(_PID_MARK.decode()) + ' "$$" >&2']
    if cwd:
        steps.append(f"cd -- {shlex.quote(cwd)} 2>/dev/null || "
                     f"{{ printf '%s\\n' {_NOCWD_MARK.decode()} >&2; exit 1; }}")
    steps.append(f"SHLVL=2 exec bash -c {shlex.quote(command)}")
    return "; ".join(steps)


def _marked_pid(err: bytes) -> int | None:
    start = err.find(_PID_MARK)
    if start < 0:
        return None
    value = err[start + len(_PID_MARK):].split(b"\n", 1)[0]
    return int(value) if value.isdigit() else None


def _without_marks(err: bytes) -> bytes:
    """stderr as the command wrote it: the prelude's own lines removed."""
    start = err.find(_PID_MARK)
    if start >= 0:
        end = err.find(b"\n", start)
        err = err[:start] + (err[end + 1:] if end >= 0 else b"")
    return err.replace(_NOCWD_MARK + b"\n", b"")


def _remote_stat(attrs: asyncssh.SFTPAttrs) -> RemoteStat:
    mode = attrs.permissions or 0
    if stat_module.S_ISLNK(mode):
        kind = "symlink"
    elif stat_module.S_ISREG(mode):
        kind = "file"
    elif stat_module.S_ISDIR(mode):
        kind = "dir"
    else:
        kind = "other"
    mtime = attrs.mtime_ns / 1e9 if attrs.mtime_ns else float(attrs.mtime or 0)  # SFTPv3: whole seconds
    return RemoteStat(size=attrs.size or 0, mtime=mtime, kind=kind)


def _is_connection_error(exc: BaseException) -> bool:
    """Failures that say nothing about the file and everything about the connection."""
    if isinstance(exc, asyncssh.SFTPConnectionLost | asyncssh.SFTPNoConnection):
        return True
    if isinstance(exc, asyncssh.SFTPError):
        return False
    return isinstance(exc, asyncssh.Error | ConnectionError | EOFError | TimeoutError) or (
        isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, None))


def _os_error(exc: BaseException, remote: str) -> OSError:
    """SFTP status codes as the OSErrors LocalTransport raises for the same situation."""
    if isinstance(exc, asyncssh.SFTPNoSuchFile):
        return FileNotFoundError(errno.ENOENT, "no such file on the instance", remote)
    if isinstance(exc, asyncssh.SFTPPermissionDenied):
        return PermissionError(errno.EACCES, "permission denied on the instance", remote)
    if isinstance(exc, OSError):
        return exc
    return OSError(errno.EIO, f"SFTP error on the instance: {_reason(exc)}", remote)


def _command_os_error(result: CommandResult, remote: str, what: str) -> Exception:
    text = " ".join(result.error_text.split())
    if result.rc == 127:
        return TransportError(f"{what} is not installed on the instance")
    if "No such file" in text:
        return FileNotFoundError(errno.ENOENT, "no such file on the instance", remote)
    if "Permission denied" in text:
        return PermissionError(errno.EACCES, "permission denied on the instance", remote)
    if "Is a directory" in text:
        return IsADirectoryError(errno.EISDIR, "is a directory on the instance", remote)
    return OSError(errno.EIO, f"{what} failed on the instance (exit {result.rc}): {text[:200]}", remote)


def _binary(data: str | bytes) -> bytes:
    """SFTP files are opened in binary mode; this only narrows asyncssh's AnyStr for the type checker."""
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", "") or exc) or type(exc).__name__
