"""The SSH connection pool: what to connect to (Target, SSHSettings), one shared connection per host, and
how a lost one is re-made (Backoff).

Why it is built the way it is (docs/remote-ops.md):

- §1 One connection per host, shared through a pool, with keepalive 10 s x 3 and a 15 s connect timeout;
  commands and SFTP are channels on it. A lost connection is re-made by the next call, a few quick tries
  and then a growing cool-down, so a dead box is not hammered (sshd MaxStartups, fail2ban). Every failure
  is a TransportError: liveness becomes `unknown`, never `dead`.
- §2 Authentication and host-key failures are not flakiness: they are raised at once, never retried,
  with no fallback (the host keys themselves are ssh_hostkeys.py's).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.clock import iso_offset, utc_now
from remote_gpu_trainer.errors import ConfigError, TransportError
from remote_gpu_trainer.providers.transports.quiet_asyncssh import asyncssh
from remote_gpu_trainer.providers.transports.ssh_hostkeys import (
    HostKeyMismatch,
    HostKeyPolicy,
    HostKeyUnknown,
    host_port,
)

__all__ = [
    "DEFAULT_POOL", "AuthFailed", "Backoff", "Link", "SSHPool", "SSHSettings", "Target", "open_connection",
    "reconnect", "resolve_target",
]

# OpenSSH allows 10 sessions per connection (MaxSessions): 8 commands, the SFTP session, and one spare
# for killing a timed-out command's process group.
MAX_COMMANDS = 8
CLOSE_TIMEOUT_S = 5.0
# Bigger SSH packets and a deeper window cut the per-packet Python work that bounds pull throughput;
# both are advertised limits the server may lower, never raise.
WINDOW = 8 << 20
MAX_PKTSIZE = 256 << 10
# AES-GCM first: one AEAD call per packet (AES-NI), where chacha20-poly1305 costs two in asyncssh.
CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
           "aes128-ctr", "aes256-ctr")


class AuthFailed(TransportError):
    """The server refused every key offered. Not flakiness: never retried, the user must fix the keys."""

    def __init__(self, user: str, host: str, port: int) -> None:
        self.user = user
        self.host = host
        self.port = port
        super().__init__(
            f"{user}@{host_port(host, port)}: authentication refused: check the IdentityFile in your ssh "
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


class ConnectTimedOut(TransportError):
    """The box accepted no SSH session within the connect timeout: asking again at once would only wait as long
    again, so `reconnect` goes to its cool-down instead of its quick retries."""


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


# -- the connection pool -----------------------------------------------------------------------------------

class Link:
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
        self.last_reason = ""  # why the last round of tries failed, said again during the cool-down

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
        self._links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, Link]] = (
            weakref.WeakKeyDictionary())

    def link(self, key: Hashable) -> Link:
        links = self._links.setdefault(asyncio.get_running_loop(), {})
        return links.setdefault(key, Link())

    def discard(self, key: Hashable) -> Link | None:
        return self._links.get(asyncio.get_running_loop(), {}).pop(key, None)

    async def close_all(self) -> None:
        """Close every connection of the running loop (at application exit)."""
        links = self._links.pop(asyncio.get_running_loop(), {})
        for link in links.values():
            await link.close()


DEFAULT_POOL = SSHPool()


# -- opening a connection ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resolved:
    """The target after ssh config: what is really connected to, for messages and ProxyJump."""

    host: str
    port: int
    user: str
    jump: str | None
    proxied: bool = False  # a ProxyJump or ProxyCommand: `host` is looked up at the far end, not here


async def open_connection(target: Target, settings: SSHSettings) -> asyncssh.SSHClientConnection:
    """Connect, through the ProxyJump hops if the config names any; every hop is held to the same
    host-key policy (asyncssh's own ProxyJump would check hops against ~/.ssh/known_hosts only)."""
    resolved = await resolve_target(target, settings)
    hop: asyncssh.SSHClientConnection | None = None
    try:
        for hop_text in resolved.jump.split(",") if resolved.jump else []:
            hop_target = Target.parse(hop_text)
            hop_resolved = await resolve_target(hop_target, settings)
            hop = await _connect_one(hop_target, hop_resolved, settings, hop)
        return await _connect_one(target, resolved, settings, hop)
    except BaseException:
        if hop is not None:
            hop.close()
        raise


async def resolve_target(target: Target, settings: SSHSettings) -> Resolved:
    try:
        options = await asyncssh.SSHClientConnectionOptions.construct(
            config=_config_arg(settings), host=target.host, port=target.port or (),
            username=target.user or (), known_hosts=b"", client_keys=None, agent_path=None,
            x509_trusted_certs=None, x509_trusted_cert_paths=[])
    except (OSError, ValueError, asyncssh.Error) as exc:
        raise ConfigError(f"{target}: cannot read the ssh config: {exc}") from None
    jump = options.tunnel if isinstance(options.tunnel, str) and options.tunnel.lower() != "none" else None
    return Resolved(options.host, options.port, options.username, jump,
                    bool(jump) or bool(getattr(options, "proxy_command", None)))


async def _connect_one(target: Target, resolved: Resolved, settings: SSHSettings,
                       tunnel: asyncssh.SSHClientConnection | None) -> asyncssh.SSHClientConnection:
    policy = HostKeyPolicy(settings.known_hosts_file, settings.user_known_hosts)
    endpoint = host_port(resolved.host, resolved.port)
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
        raise ConnectTimedOut(f"{where}: no answer within {settings.connect_timeout:g} s") from None
    except OSError as exc:
        raise TransportError(f"{where}: cannot connect: {exc.strerror or exc}") from None
    except asyncssh.Error as exc:
        raise TransportError(f"{where}: cannot connect: {exc.reason}") from None
    if tunnel is not None:
        conn.set_tunnel(tunnel)  # closing this connection closes its hops
    return conn


def _config_arg(settings: SSHSettings) -> Any:
    return () if settings.config_paths is None else [str(path) for path in settings.config_paths]


def _connect_options(settings: SSHSettings, policy: HostKeyPolicy) -> dict[str, Any]:
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


async def _host_key_error(target: Target, settings: SSHSettings, policy: HostKeyPolicy,
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
            return TransportError(f"{host_port(lookup.host, lookup.port)}: could not read the host key")
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


async def reconnect(link: Link, target: Target, settings: SSHSettings) -> asyncssh.SSHClientConnection:
    """A few quick tries, then the cool-down. Host-key and auth failures are raised on the spot."""
    backoff = settings.backoff
    wait = link.retry_at - backoff.clock()
    if wait > 0:
        since = iso_offset(link.down_since) if link.down_since else "recently"
        why = f" ({link.last_reason})" if link.last_reason else ""
        raise TransportError(f"{target}: unreachable since {since}{why}; next attempt in {wait:.0f} s")
    last = TransportError(f"{target}: not connected")
    for attempt in range(max(1, backoff.attempts)):
        if attempt:
            await backoff.sleep(backoff.delay(attempt - 1))
        try:
            conn = await open_connection(target, settings)
        except (HostKeyUnknown, HostKeyMismatch, AuthFailed):
            raise
        except ConnectTimedOut as exc:  # it already waited the whole timeout: no quick retry, the cool-down
            last = exc
            break
        except TransportError as exc:
            last = exc
            continue
        link.failures, link.retry_at, link.down_since = 0, 0.0, None
        return conn
    link.failures += 1
    link.last_reason = str(last).removeprefix(f"{target}: ").removeprefix(f"{target} ")
    link.down_since = link.down_since or utc_now()
    link.retry_at = backoff.clock() + backoff.cooldown(link.failures)
    raise last
