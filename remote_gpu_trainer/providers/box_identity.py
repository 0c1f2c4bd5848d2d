"""Which instance entries of rgt.toml name the same physical SSH box (docs/architecture.md §3.2: one gate per box;
docs/gate.md §7 item 6: identity by what the box is).

Two entries for one box would each get their own teardown gate, so `rgt down` through one could destroy
results that the other's runs never pulled. config/project.py refuses a repeated provider id without I/O. An SSH or
Slurm host is known by what it is, not by how it is written: the host key a connection to it must present
(strict checking: the keys trusted for it in a known_hosts file), the addresses its HostName resolves to,
and the resolved name and port. Entries sharing any of these are refused when the project is opened, and an
entry whose first contact presents a key another entry is trusted with is refused before the key is trusted
(services/instances.py) or anything launched through it (services/launch/launch.py). The launch log records every
identity of the box (`box_tokens`), and the gate covers a launch whose record shares any of them (`same_box`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote_gpu_trainer.config.project import InstanceConfig, ProjectConfig
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.toml_table import table_line

if TYPE_CHECKING:  # asyncssh loads only when a project has SSH-hosted entries to compare
    from remote_gpu_trainer.providers.transports.ssh_pool import SSHSettings

DEFAULT_PORT = 22
RESOLVE_TIMEOUT_S = 2.0  # a name DNS cannot answer in time counts by its name alone; opening never hangs
KEY_PREFIX, ADDRESS_PREFIX, NAME_PREFIX = "ssh-key:", "ssh-addr:", "ssh:"


@dataclass(frozen=True)
class SSHBox:
    """What one entry's host reaches: the resolved name and port, the addresses that name resolves to here
    (none through a ProxyJump/ProxyCommand, where the far end resolves it), and the fingerprints of the
    host keys trusted for it."""

    host: str  # as written in rgt.toml
    name: str
    port: int
    addresses: frozenset[str] = frozenset()
    fingerprints: frozenset[str] = frozenset()

    def tokens(self) -> tuple[str, ...]:
        """Every identity, strongest first; `ssh:<name>:<port>` is the form launch records carried before
        2026-12-06, so old records keep matching."""
        keys = (f"{KEY_PREFIX}{fingerprint}" for fingerprint in sorted(self.fingerprints))
        addresses = (f"{ADDRESS_PREFIX}{_host_port(address, self.port)}" for address in sorted(self.addresses))
        return (*keys, *addresses, f"{NAME_PREFIX}{self.name}:{self.port}")

    def key_tokens(self) -> tuple[str, ...]:
        """The host-key identities alone: what a rented box keeps while its address and port move on."""
        return tuple(token for token in self.tokens() if token.startswith(KEY_PREFIX))

    def shared_with(self, other: SSHBox) -> str | None:
        """What says `other` is this box, for the refusal; None when nothing does."""
        if (self.name, self.port) == (other.name, other.port):
            return f"both reach {self.name}:{self.port}"
        common = sorted(self.addresses & other.addresses) if self.port == other.port else []
        if common:
            return f"both reach {_host_port(common[0], self.port)}"
        keys = sorted(self.fingerprints & other.fingerprints)
        if keys:
            return f"both present host key {keys[0]}"
        return None


def box_tokens(box: str | None) -> frozenset[str]:
    """The identities a launch record's `box` names, space-separated (one, `provider:id`, before 2026-12-06)."""
    return frozenset(box.split()) if box else frozenset()


def same_box(record_box: str | None, key: str) -> bool:
    """A launch record is on this box when it shares any identity with the box's key (services/gate.py)."""
    return bool(box_tokens(record_box) & box_tokens(key))


async def ssh_endpoint(host: str, settings: SSHSettings) -> tuple[str, int]:
    """(host, port) that `host` connects to; the user does not matter (one box, whoever logs in). An alias
    ssh config cannot resolve (an unreadable config) counts by what was written, so opening a project
    never fails for a reason the connection itself would report better."""
    name, port, _ = await _resolved(host, settings)
    return name, port


async def _resolved(host: str, settings: SSHSettings) -> tuple[str, int, bool]:
    """(name, port, proxied) after ssh config; a config it cannot read leaves what was written."""
    from remote_gpu_trainer.providers.transports.ssh_pool import Target, resolve_target

    target = Target.parse(host)
    try:
        resolved = await resolve_target(target, settings)
        name, port, proxied = resolved.host, resolved.port, resolved.proxied
    except ConfigError:
        name, port, proxied = target.host, target.port or DEFAULT_PORT, False
    return name.lower().rstrip("."), int(port or DEFAULT_PORT), proxied


async def ssh_box(host: str, settings: SSHSettings, *, timeout: float = RESOLVE_TIMEOUT_S) -> SSHBox:
    """Every identity of the box `host` reaches, without connecting: ssh config, the resolver, and the
    known_hosts files a connection would be checked against."""
    from remote_gpu_trainer.providers.transports.ssh_hostkeys import trusted_fingerprints

    name, port, proxied = await _resolved(host, settings)
    addresses = frozenset() if proxied else await resolve_addresses(name, timeout)
    fingerprints = trusted_fingerprints(settings.known_hosts_file, settings.user_known_hosts, name, port)
    return SSHBox(host, name, port, addresses, fingerprints)


async def resolve_addresses(name: str, timeout: float = RESOLVE_TIMEOUT_S) -> frozenset[str]:
    """The addresses `name` resolves to here (/etc/hosts, DNS, or a literal such as 127.1), normalized
    (an IPv4-mapped IPv6 address is its IPv4 address). Asked on a daemon thread and waited for at most
    `timeout`: a resolver that hangs neither hangs rgt nor keeps it from exiting; no answer is no address."""
    literal = _normalized(name)
    if literal is not None:
        return frozenset({literal})
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[frozenset[str]] = loop.create_future()

    def deliver(found: frozenset[str]) -> None:
        if not answer.done():  # a late answer after the timeout is dropped
            answer.set_result(found)

    def look_up() -> None:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            infos = []
        found = frozenset(address for info in infos if (address := _normalized(str(info[4][0]))) is not None)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for it any more
            loop.call_soon_threadsafe(deliver, found)

    threading.Thread(target=look_up, name=f"rgt-resolve-{name}", daemon=True).start()
    try:
        return await asyncio.wait_for(answer, timeout)
    except TimeoutError:
        return frozenset()


def _normalized(text: str) -> str | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _written(instance: InstanceConfig) -> str:
    """How rgt.toml names the entry's box, for messages."""
    return instance.host or f"{instance.provider} {instance.id or instance.name}"


def _ssh_hosted(instance: InstanceConfig) -> bool:
    """Known by its SSH host, as the provider table says (a Slurm login node on this machine is not)."""
    return table.ssh_hosted(instance.provider, instance.host)


def _default_settings(project: ProjectConfig) -> SSHSettings:
    from remote_gpu_trainer.providers.transports.ssh_pool import SSHSettings

    return SSHSettings(known_hosts_file=project.state_dir / "known_hosts")


async def _boxes(project: ProjectConfig, settings: SSHSettings) -> dict[str, SSHBox]:
    """Every SSH-hosted entry's box, resolved together so opening waits for one resolver timeout at most."""
    names = [name for name, instance in project.instances.items() if _ssh_hosted(instance)]

    async def one(name: str) -> SSHBox | None:
        host = project.instances[name].host
        assert host is not None
        try:
            return await ssh_box(host, settings)
        except ConfigError:
            return None  # a malformed host is reported by the transport with its own message

    found = await asyncio.gather(*(one(name) for name in names))
    return {name: box for name, box in zip(names, found, strict=True) if box is not None}


def _refusal(project: ProjectConfig, name: str, first: str, shared: str, tail: str = "") -> str:
    line = table_line(project.file, ("instances", name))
    first_line = table_line(project.file, ("instances", first))
    return (f"{project.file}{f':{line}' if line else ''}: instances.{name}: names the same box as "
            f"instances.{first}{f' (line {first_line})' if first_line else ''}: {shared} "
            f"({_written(project.instances[first])!r} and {_written(project.instances[name])!r}); keep one entry and "
            f"point every run at it{tail}")


async def same_box_problems(project: ProjectConfig, settings: SSHSettings) -> list[str]:
    """One line per entry that reaches a box an earlier entry already reaches (same resolved name and port,
    same address and port, or a host key both are trusted with)."""
    boxes = await _boxes(project, settings)
    problems: list[str] = []
    for index, (name, box) in enumerate(boxes.items()):
        for first, earlier in list(boxes.items())[:index]:
            shared = earlier.shared_with(box)
            if shared is not None:
                problems.append(_refusal(project, name, first, shared))
                break
    return problems


def check_distinct_boxes(project: ProjectConfig, settings: SSHSettings | None = None) -> None:
    """Raise one ConfigError (exit 2) when two entries reach one SSH box; the first problem plus a count."""
    if sum(1 for instance in project.instances.values() if _ssh_hosted(instance)) < 2:
        return  # nothing to compare: no ssh config is read
    problems = asyncio.run(same_box_problems(project, settings or _default_settings(project)))
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        error = ConfigError(problems[0] + more)
        error.problems = problems  # type: ignore[attr-defined]
        raise error


async def refuse_second_name(project: ProjectConfig, name: str, presented: str | None = None,
                             settings: SSHSettings | None = None) -> None:
    """First contact (docs/gate.md §7 item 6): before a host key is trusted for entry `name` (`presented`,
    its fingerprint) or anything is launched through it, refuse (ConfigError, exit 2) when another entry
    of the project already reaches that box. The check at opening cannot see a key not yet presented."""
    instance = project.instances.get(name)
    if instance is None or (presented is None and not _ssh_hosted(instance)):
        return
    boxes = await _boxes(project, settings or _default_settings(project))
    box = boxes.get(name, SSHBox(_written(instance), "", 0))  # a cloud box's SSH: compared by its key only
    if presented is not None:
        box = SSHBox(box.host, box.name, box.port, box.addresses, box.fingerprints | {presented})
    for other, earlier in boxes.items():
        shared = earlier.shared_with(box) if other != name else None
        if shared is not None:
            tail = "; nothing was trusted" if presented is not None else "; nothing was launched"
            raise ConfigError(_refusal(project, name, other, shared, tail))
