"""The SSH transport: the Transport protocol over one multiplexed asyncssh connection per host.

It implements exactly what LocalTransport implements, so every service (runner, watcher, evidence) works
unchanged over SSH and both pass the same contract tests. Why it is built the way it is (remote-ops.md):

- §1 One connection per host, shared through a pool, with keepalive 10 s x 3 and a 15 s connect timeout;
  commands and SFTP are channels on it. A lost connection is re-made by the next call, a few quick tries
  and then a growing cool-down, so a dead box is not hammered (sshd MaxStartups, fail2ban). Every failure
  is a TransportError: liveness becomes `unknown`, never `dead`. A command is never re-sent once it may
  have started; only a channel that never opened, or an idempotent read, is tried again.
- §2 Host keys are checked strictly and never written to the user's files: a host the user's
  ~/.ssh/known_hosts knows must match it; otherwise rgt's own known_hosts file decides. An unknown key
  raises HostKeyUnknown with the fingerprint so the UI can ask once (accept_host_key records it); a changed
  key raises HostKeyMismatch naming both fingerprints. Authentication and host-key failures are not
  flakiness: they are raised at once, never retried, with no fallback.
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
import random
import re
import secrets
import shlex
import stat as stat_module
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from remote_gpu_trainer.clock import iso_offset, utc_now
from remote_gpu_trainer.errors import ConfigError, HostKeyChanged, TransportError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.providers.base import CommandResult, RemoteStat
from remote_gpu_trainer.providers.transports.detach import launch_with_setsid

__all__ = [
    "DEFAULT_POOL", "AuthFailed", "Backoff", "HostKeyMismatch", "HostKeyUnknown", "SSHPool", "SSHSettings",
    "SSHTransport", "Target", "accept_host_key", "known_hosts_pattern",
]

DEFAULT_PORT = 22
CHUNK = 4 << 20
# OpenSSH allows 10 sessions per connection (MaxSessions): 8 commands, the SFTP session, and one spare
# for killing a timed-out command's process group.
MAX_COMMANDS = 8
READ_AHEAD = 8 << 20  # bytes of SFTP reads kept in flight by read_chunks
SFTP_READ_FALLBACK = 32 << 10  # the read size every SFTP server must serve, when it states no limit
SHA256_TIMEOUT_S = 3600.0
KILL_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0
# Bigger SSH packets and a deeper window cut the per-packet Python work that bounds pull throughput;
# both are advertised limits the server may lower, never raise.
WINDOW = 8 << 20
MAX_PKTSIZE = 256 << 10
# AES-GCM first: one AEAD call per packet (AES-NI), where chacha20-poly1305 costs two in asyncssh.
CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes128-ctr", "aes256-ctr")

_PID_MARK = b"__rgt_pid__="
_NOCWD_MARK = b"__rgt_nocwd__"
_SHA256_LINE = re.compile(rb"^\\?([0-9a-f]{64})\s", re.MULTILINE)

T = TypeVar("T")


# -- errors ------------------------------------------------------------------------------------------------

class HostKeyUnknown(TransportError):
    """First contact with a host no known_hosts file lists. Only the key exchange happened (no login):
    the UI shows the fingerprint, asks once, and calls accept_host_key with `key`."""

    def __init__(self, host: str, port: int, key: asyncssh.SSHKey, known_hosts_file: Path) -> None:
        self.host = host
        self.port = port
        self.key = key
        self.key_type = key.get_algorithm()
        self.fingerprint_sha256 = key.get_fingerprint("sha256")
        self.known_hosts_file = known_hosts_file
        super().__init__(
            f"{_endpoint(host, port)}: unknown host key {self.key_type} {self.fingerprint_sha256}: compare it "
            f"with the provider's console, then accept it to record it in {known_hosts_file}")


class HostKeyMismatch(HostKeyChanged):
    """The host presented a key other than the recorded one: refused before any login, nothing rewritten.

    Rented hosts reuse host:port after a re-create, so this can be legitimate; only the user may decide
    (accept_host_key(..., replace=True) after confirming the new fingerprint)."""

    def __init__(self, host: str, port: int, expected: Sequence[str], presented: asyncssh.SSHKey | None,
                 source: Path) -> None:
        self.host = host
        self.port = port
        self.expected_fingerprints = list(expected)
        self.presented_key = presented
        self.presented_fingerprint = presented.get_fingerprint("sha256") if presented else None
        self.key_type = presented.get_algorithm() if presented else None
        self.source = source
        shown = f"{self.key_type} {self.presented_fingerprint}" if presented else "an unreadable key"
        super().__init__(
            f"{_endpoint(host, port)}: HOST KEY CHANGED: it presented {shown}, {source} expects "
            f"{', '.join(self.expected_fingerprints)}; refusing to connect. If the instance was re-created, "
            f"confirm the new fingerprint (ideally on the provider's console) before replacing the "
            f"{known_hosts_pattern(host, port)} entry")


class NoSFTP(TransportError):
    """The box refused the sftp subsystem (file transfers cannot work; commands still may)."""


class AuthFailed(TransportError):
    """The server refused every key offered. Not flakiness: never retried, the user must fix the keys."""

    def __init__(self, user: str, host: str, port: int) -> None:
        self.user = user
        self.host = host
        self.port = port
        super().__init__(
            f"{user}@{_endpoint(host, port)}: authentication refused: check the IdentityFile in your ssh "
            "config, the ssh-agent, and the public key in the box's authorized_keys")


# -- what to connect to, and how ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """What the user wrote in rgt.toml: an ssh-config alias or `user@host[:port]`; ssh config fills in the
    rest (HostName, User, Port, IdentityFile, ProxyJump) exactly as `ssh` would."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        value = text.strip()
        user, _, rest = value.rpartition("@")
        host, port_text = rest, ""
        if rest.startswith("["):
            host, _, tail = rest[1:].partition("]")
            if tail and not tail.startswith(":"):
                raise ConfigError(f"ssh target {text!r}: expected [host]:port")
            port_text = tail[1:]
        elif rest.count(":") == 1:
            host, port_text = rest.split(":")
        if not host or any(char.isspace() for char in value) or "@" in user:
            raise ConfigError(f"ssh target {text!r}: expected an ssh config alias or user@host[:port]")
        if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ConfigError(f"ssh target {text!r}: port must be a number from 1 to 65535")
        return cls(host, user or None, int(port_text) if port_text else None)

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{user}{host}:{self.port}" if self.port else f"{user}{host}"


@dataclass(frozen=True)
class Backoff:
    """How a lost connection is re-made: `attempts` quick tries inside one call (delays growing from
    `first_delay`), then a cool-down from `cooldown_first` to `cooldown_max` with jitter during which calls
    fail at once with 'unreachable'. `sleep` and `clock` are injectable so tests run in milliseconds."""

    attempts: int = 3
    first_delay: float = 1.0
    factor: float = 2.0
    max_delay: float = 8.0
    cooldown_first: float = 15.0
    cooldown_max: float = 300.0
    jitter: float = 0.1
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic

    def delay(self, retry: int) -> float:
        """Seconds before retry number `retry` (0-based) within one call."""
        return self._jittered(min(self.first_delay * self.factor ** retry, self.max_delay))

    def cooldown(self, failures: int) -> float:
        """Seconds to stay away after `failures` consecutive failed rounds."""
        return self._jittered(min(self.cooldown_first * self.factor ** max(failures - 1, 0), self.cooldown_max))

    def _jittered(self, base: float) -> float:
        return max(0.0, base * (1.0 + random.uniform(-self.jitter, self.jitter)))


@dataclass(frozen=True)
class SSHSettings:
    """Everything a connection reads from this machine; every path is injectable (tests never touch ~/.ssh).

    known_hosts_file: rgt's own file (e.g. <project>/.rgt/known_hosts), the only one rgt ever writes.
    user_known_hosts: read-only; a host listed there must match it.
    config_paths: ssh client config files; None means ~/.ssh/config, as ssh does; () means none.
    client_keys: private key files; None means IdentityFile from the config, else ~/.ssh/id_*.
    use_agent: offer the ssh-agent's keys (SSH_AUTH_SOCK or IdentityAgent).
    """

    known_hosts_file: Path
    user_known_hosts: tuple[Path, ...] = (Path("~/.ssh/known_hosts"),)
    config_paths: tuple[Path, ...] | None = None
    client_keys: tuple[Path, ...] | None = None
    use_agent: bool = True
    connect_timeout: float = 15.0
    keepalive_interval: float = 10.0
    keepalive_count_max: int = 3
    backoff: Backoff = field(default_factory=Backoff)


# -- host keys ---------------------------------------------------------------------------------------------

def known_hosts_pattern(host: str, port: int) -> str:
    """The known_hosts host field, as OpenSSH writes it (`host` on 22, `[host]:port` otherwise), so rgt's
    file also works as a UserKnownHostsFile for plain ssh."""
    return host if port == DEFAULT_PORT else f"[{host}]:{port}"


def accept_host_key(known_hosts_file: Path, host: str, port: int, key: asyncssh.SSHKey, *,
                    replace: bool = False, instance_id: str | None = None,
                    now: datetime | None = None) -> dict[str, Any]:
    """Record `key` for host:port in rgt's own known_hosts file (trust on first use) and return the receipt.

    Idempotent for the same key. A different key already recorded for that host:port is refused with
    HostKeyMismatch unless `replace` is set (after the user confirmed a re-created instance); then only
    that entry is replaced. The user's ~/.ssh/known_hosts is never touched.
    """
    pattern = known_hosts_pattern(host, port)
    entry = f"{pattern} {_public_key_text(key)}"
    lines = _read_lines(known_hosts_file)
    recorded = [line for line in lines if line.split(maxsplit=1)[:1] == [pattern]]
    if entry not in recorded:
        if recorded and not replace:
            raise HostKeyMismatch(host, port, [_line_fingerprint(line) for line in recorded], key,
                                  known_hosts_file)
        kept = [line for line in lines if line not in recorded] if replace else lines
        known_hosts_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(known_hosts_file, "".join(f"{line}\n" for line in [*kept, entry]).encode("utf-8"))
    receipt: dict[str, Any] = {
        "host": host, "port": port, "key_type": key.get_algorithm(),
        "fingerprint_sha256": key.get_fingerprint("sha256"),
        "observed_at": iso_offset(now or utc_now()), "first_contact_authenticated": False,
    }
    if instance_id is not None:
        receipt["instance_id"] = instance_id
    return receipt


@dataclass
class _Lookup:
    host: str
    port: int
    keys: list[asyncssh.SSHKey]
    source: Path


class _HostKeyPolicy:
    """The `known_hosts` callable handed to asyncssh: trusted keys for the host actually connected to
    (after ssh config resolved the alias). The user's files win when they list the host at all; rgt's
    file is consulted only otherwise. Files are re-read on every connect, so an accepted key counts at
    once. The lookup is kept to tell an unknown key from a changed one afterwards."""

    def __init__(self, settings: SSHSettings) -> None:
        self._user_files = [path.expanduser() for path in settings.user_known_hosts]
        self._rgt_file = settings.known_hosts_file
        self.lookups: list[_Lookup] = []

    def __call__(self, host: str, addr: str, port: int | None) -> tuple[Sequence[Any], ...]:
        result = _match_known_hosts(self._user_files, host, port)
        source = self._user_files[0] if self._user_files else self._rgt_file
        if not (result[0] or result[1]):
            result = _match_known_hosts([self._rgt_file], host, port)
            source = self._rgt_file
        self.lookups.append(_Lookup(host, port or DEFAULT_PORT, list(result[0]), source))
        return result[0], result[1], result[2]

    @property
    def last(self) -> _Lookup | None:
        return self.lookups[-1] if self.lookups else None


def _match_known_hosts(paths: Sequence[Path], host: str, port: int | None) -> tuple[Sequence[Any], ...]:
    """Keys for exactly this host and port. OpenSSH semantics: unlike asyncssh's public `match`, a port-22
    entry is never borrowed for another port (rented boxes share a host name across many ports)."""
    known = asyncssh.import_known_hosts("".join(_valid_known_hosts_lines(paths)))
    return known._match(host, "", port)  # private on purpose: the public match() adds that fallback


def _valid_known_hosts_lines(paths: Sequence[Path]) -> list[str]:
    """Every line that parses; like ssh, one bad line never disables the rest of a user's file."""
    lines: list[str] = []
    for path in paths:
        for line in _read_lines(path):
            try:
                asyncssh.import_known_hosts(line)
            except (ValueError, asyncssh.KeyImportError):
                continue
            lines.append(line + "\n")
    return lines


def _read_lines(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise TransportError(f"{path}: cannot read known hosts ({exc.strerror})") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _public_key_text(key: asyncssh.SSHKey) -> str:
    """`type base64`, without the comment, as known_hosts stores it."""
    return " ".join(key.export_public_key("openssh").decode("ascii").split()[:2])


def _line_fingerprint(line: str) -> str:
    fields = line.split()
    try:
        return asyncssh.import_public_key(" ".join(fields[1:3])).get_fingerprint("sha256")
    except (ValueError, asyncssh.KeyImportError):
        return "an unreadable key"


# -- the connection pool -----------------------------------------------------------------------------------

class _Link:
    """One host's connection and its SFTP session, shared by every transport for that target."""

    def __init__(self) -> None:
        self.conn: asyncssh.SSHClientConnection | None = None
        self.sftp: asyncssh.SFTPClient | None = None
        self.sftp_conn: asyncssh.SSHClientConnection | None = None
        self.lock = asyncio.Lock()
        self.sftp_lock = asyncio.Lock()
        self.sessions = asyncio.Semaphore(MAX_COMMANDS)
        self.failures = 0
        self.retry_at = 0.0
        self.down_since: datetime | None = None

    def alive(self) -> bool:
        return self.conn is not None and not self.conn.is_closed()

    def forget_sftp(self) -> None:
        self.sftp = self.sftp_conn = None

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        self.forget_sftp()
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), CLOSE_TIMEOUT_S)


class SSHPool:
    """Connections keyed by (target, settings), one set per event loop (an asyncssh connection and its
    locks belong to the loop that made them). Callers may own one; DEFAULT_POOL serves everyone else."""

    def __init__(self) -> None:
        self._links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, _Link]] = (
            weakref.WeakKeyDictionary())

    def link(self, key: Hashable) -> _Link:
        links = self._links.setdefault(asyncio.get_running_loop(), {})
        return links.setdefault(key, _Link())

    def discard(self, key: Hashable) -> _Link | None:
        return self._links.get(asyncio.get_running_loop(), {}).pop(key, None)

    async def close_all(self) -> None:
        """Close every connection of the running loop (at application exit)."""
        links = self._links.pop(asyncio.get_running_loop(), {})
        for link in links.values():
            await link.close()


DEFAULT_POOL = SSHPool()


# -- opening a connection ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Resolved:
    """The target after ssh config: what is really connected to, for messages and ProxyJump."""

    host: str
    port: int
    user: str
    jump: str | None


async def _open(target: Target, settings: SSHSettings) -> asyncssh.SSHClientConnection:
    """Connect, through the ProxyJump hops if the config names any; every hop is held to the same
    host-key policy (asyncssh's own ProxyJump would check hops against ~/.ssh/known_hosts only)."""
    resolved = await _resolve(target, settings)
    hop: asyncssh.SSHClientConnection | None = None
    try:
        for hop_text in resolved.jump.split(",") if resolved.jump else []:
            hop_target = Target.parse(hop_text)
            hop_resolved = await _resolve(hop_target, settings)
            hop = await _connect_one(hop_target, hop_resolved, settings, hop)
        return await _connect_one(target, resolved, settings, hop)
    except BaseException:
        if hop is not None:
            hop.close()
        raise


async def _resolve(target: Target, settings: SSHSettings) -> _Resolved:
    try:
        options = await asyncssh.SSHClientConnectionOptions.construct(
            config=_config_arg(settings), host=target.host, port=target.port or (),
            username=target.user or (), known_hosts=b"", client_keys=None, agent_path=None,
            x509_trusted_certs=None, x509_trusted_cert_paths=[])
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise ConfigError(f"{target}: cannot read the ssh config: {exc}") from None
    jump = options.tunnel if isinstance(options.tunnel, str) and options.tunnel.lower() != "none" else None
    return _Resolved(options.host, options.port, options.username, jump)


async def _connect_one(target: Target, resolved: _Resolved, settings: SSHSettings,
                       tunnel: asyncssh.SSHClientConnection | None) -> asyncssh.SSHClientConnection:
    policy = _HostKeyPolicy(settings)
    endpoint = _endpoint(resolved.host, resolved.port)
    where = str(target) if str(target).endswith(endpoint) else f"{target} ({endpoint})"
    try:
        conn = await asyncssh.connect(
            target.host, target.port or (), tunnel=tunnel, username=target.user or (),
            **_connect_options(settings, policy))
    except asyncssh.HostKeyNotVerifiable:
        raise await _host_key_error(target, settings, policy, tunnel) from None
    except asyncssh.KeyExchangeFailed as exc:
        if policy.last is not None and policy.last.keys:  # none of the recorded key types is offered
            raise await _host_key_error(target, settings, policy, tunnel) from None
        raise TransportError(f"{where}: key exchange failed: {exc.reason}") from None
    except asyncssh.PermissionDenied:
        raise AuthFailed(resolved.user, resolved.host, resolved.port) from None
    except asyncssh.DisconnectError as exc:
        raise TransportError(f"{where}: disconnected during login: {exc.reason}") from None
    except TimeoutError:
        raise TransportError(f"{where}: no answer within {settings.connect_timeout:g} s") from None
    except OSError as exc:
        raise TransportError(f"{where}: cannot connect: {exc.strerror or exc}") from None
    except asyncssh.Error as exc:
        raise TransportError(f"{where}: cannot connect: {exc.reason}") from None
    if tunnel is not None:
        conn.set_tunnel(tunnel)  # closing this connection closes its hops
    return conn


def _config_arg(settings: SSHSettings) -> Any:
    return () if settings.config_paths is None else [str(path) for path in settings.config_paths]


def _connect_options(settings: SSHSettings, policy: _HostKeyPolicy) -> dict[str, Any]:
    return {
        "config": _config_arg(settings),
        "known_hosts": policy,
        "x509_trusted_certs": None,  # trust comes from known_hosts files only
        "x509_trusted_cert_paths": [],
        "client_keys": () if settings.client_keys is None else [str(path) for path in settings.client_keys],
        "agent_path": () if settings.use_agent else None,
        "connect_timeout": settings.connect_timeout,
        "keepalive_interval": settings.keepalive_interval,
        "keepalive_count_max": settings.keepalive_count_max,
        "encryption_algs": list(CIPHERS),
        "window": WINDOW,
        "max_pktsize": MAX_PKTSIZE,
    }


async def _host_key_error(target: Target, settings: SSHSettings, policy: _HostKeyPolicy,
                          tunnel: asyncssh.SSHClientConnection | None) -> TransportError:
    """Tell an unknown key from a changed one, with the key the host presents (a second key exchange,
    never a login). For a change, the presented key of the recorded type is fetched, so the two
    fingerprints compare like with like."""
    lookup = policy.last
    if lookup is None:
        return TransportError(f"{target}: host key not verifiable")
    algs = [alg.decode("ascii") for key in lookup.keys for alg in key.sig_algorithms]
    presented = await _server_key(target, settings, tunnel, algs) if algs else None
    if presented is None:
        presented = await _server_key(target, settings, tunnel, [])
    if not lookup.keys:
        if presented is None:
            return TransportError(f"{_endpoint(lookup.host, lookup.port)}: could not read the host key")
        return HostKeyUnknown(lookup.host, lookup.port, presented, settings.known_hosts_file)
    return HostKeyMismatch(lookup.host, lookup.port, [key.get_fingerprint("sha256") for key in lookup.keys],
                           presented, lookup.source)


async def _server_key(target: Target, settings: SSHSettings, tunnel: asyncssh.SSHClientConnection | None,
                      algs: list[str]) -> asyncssh.SSHKey | None:
    try:
        return await asyncio.wait_for(asyncssh.get_server_host_key(
            target.host, target.port or (), tunnel=tunnel, config=_config_arg(settings),
            server_host_key_algs=algs or ()), settings.connect_timeout)
    except (OSError, TimeoutError, asyncssh.Error):
        return None


def _endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- the transport -----------------------------------------------------------------------------------------

class SSHTransport:
    """The Transport protocol on a box reached over SSH (DESIGN.md §3.3). Remote paths are the box's own
    paths: `resolve` is the identity."""

    batches_small_files = True  # four SFTP requests per file: small files go in batches through one command

    def __init__(self, target: str, settings: SSHSettings, pool: SSHPool | None = None) -> None:
        self.target = Target.parse(target)
        self.settings = settings
        self._pool = pool if pool is not None else DEFAULT_POOL
        self._key = (self.target, settings)

    def resolve(self, remote: str) -> str:
        return remote

    # -- connection ---------------------------------------------------------------------------------------

    def _link(self) -> _Link:
        return self._pool.link(self._key)

    async def _connection(self) -> asyncssh.SSHClientConnection:
        link = self._link()
        async with link.lock:
            if link.conn is not None and link.alive():
                return link.conn
            link.conn = None
            link.forget_sftp()
            link.conn = await self._reconnect(link)
            return link.conn

    async def _reconnect(self, link: _Link) -> asyncssh.SSHClientConnection:
        """A few quick tries, then the cool-down. Host-key and auth failures are raised on the spot."""
        backoff = self.settings.backoff
        wait = link.retry_at - backoff.clock()
        if wait > 0:
            since = iso_offset(link.down_since) if link.down_since else "recently"
            raise TransportError(f"{self.target}: unreachable since {since}; next attempt in {wait:.0f} s")
        last = TransportError(f"{self.target}: not connected")
        for attempt in range(max(1, backoff.attempts)):
            if attempt:
                await backoff.sleep(backoff.delay(attempt - 1))
            try:
                conn = await _open(self.target, self.settings)
            except (HostKeyUnknown, HostKeyMismatch, AuthFailed):
                raise
            except TransportError as exc:
                last = exc
                continue
            link.failures, link.retry_at, link.down_since = 0, 0.0, None
            return conn
        link.failures += 1
        link.down_since = link.down_since or utc_now()
        link.retry_at = backoff.clock() + backoff.cooldown(link.failures)
        raise last

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
                try:
                    link.sftp = await conn.start_sftp_client()
                except (OSError, asyncssh.Error) as exc:
                    self._lost(conn)
                    raise NoSFTP(f"{self.target}: no SFTP on this connection ({_reason(exc)}): the box "
                                         "needs the sftp subsystem for file transfers") from None
                link.sftp_conn = conn
            return conn, link.sftp

    async def _sftp_call(self, what: str, remote: str,
                         op: Callable[[asyncssh.SFTPClient], Awaitable[T]]) -> T:
        """Run an idempotent SFTP operation; one more try on a fresh connection if the old one died."""
        for attempt in (0, 1):
            conn, sftp = await self._sftp()
            try:
                return await op(sftp)
            except (OSError, asyncssh.Error) as exc:
                if not _is_connection_error(exc):
                    raise _os_error(exc, remote) from None
                self._lost(conn)
                if attempt:
                    raise TransportError(f"{self.target}: connection lost during {what} {remote}") from None
        raise AssertionError("unreachable")

    # -- commands -----------------------------------------------------------------------------------------

    async def run(self, command: str, *, stdin: bytes | None = None, cwd: str | None = None,
                  timeout: float = 30.0) -> CommandResult:
        """`bash -c command` on the box, like LocalTransport.run: exit status (negative signal number when
        killed by one), stdout and stderr. On timeout or cancel the remote process group is killed and
        TimeoutError (or the cancel) propagates; a connection lost mid-command is a TransportError, since
        the outcome is unknown, and the command is never re-sent."""
        async with self._link().sessions:
            conn, process = await self._start(_wrap(command, cwd), timeout)
            out, err = bytearray(), bytearray()
            try:
                await asyncio.wait_for(_exchange(process, stdin, out, err), timeout)
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
        a fresh connection is safe; a live server refusing the channel (MaxSessions) is reported as is."""
        for attempt in (0, 1):
            conn = await self._connection()
            try:
                return conn, await asyncio.wait_for(conn.create_process(command, encoding=None), timeout)
            except asyncssh.ChannelOpenError as exc:
                if not conn.is_closed():
                    raise TransportError(f"{self.target}: the server refused a channel: {exc.reason}") from None
                self._lost(conn)
                if attempt:
                    raise TransportError(f"{self.target}: cannot open a channel: {exc.reason}") from None
            except TimeoutError:
                self._lost(conn)
                raise TransportError(f"{self.target}: no channel within {timeout:g} s: connection dropped, "
                                     "outcome unknown") from None
            except (OSError, asyncssh.Error) as exc:
                self._lost(conn)
                raise TransportError(f"{self.target}: cannot start a command: {_reason(exc)}") from None
        raise AssertionError("unreachable")

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
        try:
            handle = await sftp.open(remote, "rb", block_size=0)
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
                        data = await reader.next_block()
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

    async def next_block(self) -> bytes:
        while len(self._reads) < self._depth and (size := self._next_size()):
            self._reads.append((asyncio.ensure_future(self._handle.read(size, self._next)), size))
            self._next += size
        read, asked = self._reads.popleft()
        data = _binary(await read)
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


async def _exchange(process: asyncssh.SSHClientProcess[bytes], stdin: bytes | None, out: bytearray,
                    err: bytearray) -> None:
    """Feed stdin and drain both outputs concurrently (either side may block on a full window), then
    wait for the exit status. Output lands in `out`/`err` as it arrives, so a timeout still sees the pid."""
    async def feed() -> None:
        with contextlib.suppress(OSError, asyncssh.Error):  # the command may exit without reading stdin
            if stdin:
                process.stdin.write(stdin)
                await process.stdin.drain()
            process.stdin.write_eof()

    async def drain(reader: asyncssh.SSHReader[bytes], sink: bytearray) -> None:
        while chunk := await reader.read(1 << 16):
            sink += chunk

    await asyncio.gather(feed(), drain(process.stdout, out), drain(process.stderr, err))
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
