"""Strict host-key checking for the SSH transport: known_hosts files, fingerprints, trust on first use.

Why it is built the way it is (docs/remote-ops.md):

- §2 Host keys are checked strictly and never written to the user's files: a host the user's
  ~/.ssh/known_hosts knows must match it; otherwise rgt's own known_hosts file decides. An unknown key
  raises HostKeyUnknown with the fingerprint so the UI can ask once (accept_host_key records it); a changed
  key raises HostKeyMismatch naming both fingerprints.

ssh_pool.py hands HostKeyPolicy to asyncssh on every connect and turns a refused key into these errors.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.clock import iso_offset, utc_now
from remote_gpu_trainer.errors import HostKeyChanged, HostKeyNotTrusted, TransportError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.providers.transports.quiet_asyncssh import asyncssh

__all__ = ["HostKeyMismatch", "HostKeyPolicy", "HostKeyUnknown", "accept_host_key", "host_port", "known_hosts_pattern",
           "trusted_fingerprints"]

DEFAULT_PORT = 22


# -- errors ------------------------------------------------------------------------------------------------

class HostKeyUnknown(HostKeyNotTrusted):
    """First contact with a host no known_hosts file lists. Only the key exchange happened (no login):
    the UI shows the fingerprint, asks once, and calls accept_host_key with `key`; the CLI's refusal names
    `rgt trust` (with the instance's name once the session knows it, errors.HostKeyNotTrusted.said)."""

    def __init__(self, host: str, port: int, key: asyncssh.SSHKey, known_hosts_file: Path) -> None:
        self.host = host
        self.port = port
        self.key = key
        self.known_hosts_file = known_hosts_file
        fingerprint = key.get_fingerprint("sha256")
        super().__init__(host_port(host, port), key.get_algorithm(), fingerprint,
                         f"run `rgt trust INSTANCE --fingerprint {fingerprint}` (INSTANCE: the rgt.toml entry for "
                         f"this host), which records it in {known_hosts_file}")


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
            f"{host_port(host, port)}: HOST KEY CHANGED: it presented {shown}, {source} expects "
            f"{', '.join(self.expected_fingerprints)}; refusing to connect. If the instance was re-created, "
            f"confirm the new fingerprint (ideally on the provider's console) before replacing the "
            f"{known_hosts_pattern(host, port)} entry")


def host_port(host: str, port: int) -> str:
    """`host:port` for messages, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
    """One known_hosts lookup made during a connect: the host and port, the trusted keys found and the file that
    decided, kept to tell an unknown key from a changed one."""

    host: str
    port: int
    keys: list[asyncssh.SSHKey]
    source: Path


class HostKeyPolicy:
    """The `known_hosts` callable handed to asyncssh: trusted keys for the host actually connected to
    (after ssh config resolved the alias). The user's files win when they list the host at all; rgt's
    file is consulted only otherwise. Files are read again whenever they changed (_known_hosts), so an accepted
    key counts at once. The lookup is kept to tell an unknown key from a changed one afterwards."""

    def __init__(self, known_hosts_file: Path, user_known_hosts: Sequence[Path]) -> None:
        self._user_files = [path.expanduser() for path in user_known_hosts]
        self._rgt_file = known_hosts_file
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


def trusted_fingerprints(known_hosts_file: Path, user_known_hosts: Sequence[Path], host: str,
                         port: int) -> frozenset[str]:
    """SHA-256 fingerprints of the keys a connection to host:port would accept, chosen as HostKeyPolicy
    chooses them (the user's files when they list the host at all, else rgt's). With strict checking no
    other key can answer there, so these name the box the entry reaches (docs/gate.md §7 item 6)."""
    result = _match_known_hosts([path.expanduser() for path in user_known_hosts], host, port)
    if not (result[0] or result[1]):
        result = _match_known_hosts([known_hosts_file], host, port)
    return frozenset(key.get_fingerprint("sha256") for key in result[0])


def _match_known_hosts(paths: Sequence[Path], host: str, port: int | None) -> tuple[Sequence[Any], ...]:
    """Keys for exactly this host and port. OpenSSH semantics: unlike asyncssh's public `match`, a port-22
    entry is never borrowed for another port (rented boxes share a host name across many ports)."""
    return _known_hosts(paths)._match(host, "", port)  # private on purpose: the public match() adds that fallback


# The parsed known_hosts files, by each file's identity when it was read (see _known_hosts).
_PARSED: dict[tuple[tuple[Path, tuple[int, ...] | None], ...], Any] = {}
_PARSED_MAX = 16
_SETTLED_NS = 2_000_000_000  # a file unchanged this long before it was read is no longer being written


def _known_hosts(paths: Sequence[Path]) -> Any:
    """The files parsed, read again whenever any of them changed. Each connection and each box identity asks
    (a report over 20 boxes parsed the same files 60 times, every line twice: issue 29). A file is known by
    its device, inode, size, and change and modification times, so an accepted key (a new file, renamed in)
    counts at once; a file changed within the last _SETTLED_NS of being read is not kept, since a second
    change within the file system's timestamp granularity would keep every part of that identity."""
    key = tuple((path, _identity(path)) for path in paths)
    known = _PARSED.get(key)
    if known is not None:
        return known
    known = asyncssh.import_known_hosts("".join(_valid_known_hosts_lines(paths)))
    now = time.time_ns()
    if all(ident is None or now - max(ident[3], ident[4]) > _SETTLED_NS for _, ident in key):
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = known
    return known


def _identity(path: Path) -> tuple[int, ...] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TransportError(f"{path}: cannot read known hosts ({exc.strerror})") from None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


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

