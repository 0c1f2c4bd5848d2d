"""Which instance entries of rgt.toml name the same physical SSH box (docs/architecture.md §3.2: one gate per box).

Two entries for one box would each get their own teardown gate, so `rgt down` through one could destroy
results that the other's runs never pulled. config.py refuses a repeated provider id without I/O; an SSH
or Slurm host needs ssh config to say where an alias really goes (HostName, Port), so that check runs
here, when the project is opened, with the same resolution the SSH transport connects with.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from remote_gpu_trainer.config import InstanceConfig, ProjectConfig, table_line
from remote_gpu_trainer.errors import ConfigError

if TYPE_CHECKING:  # asyncssh loads only when a project has two SSH-hosted entries to compare
    from remote_gpu_trainer.providers.transports.ssh_pool import SSHSettings

SSH_HOST_PROVIDERS = ("ssh", "slurm")  # a Slurm instance's host is its login node, reached over SSH
DEFAULT_PORT = 22
_LOCAL_HOSTS = ("localhost", "127.0.0.1")  # slurm without a remote host runs here: not an SSH box


async def ssh_endpoint(host: str, settings: SSHSettings) -> tuple[str, int]:
    """(host, port) that `host` connects to; the user does not matter (one box, whoever logs in). An alias
    ssh config cannot resolve (an unreadable config) counts by what was written, so opening a project
    never fails for a reason the connection itself would report better."""
    from remote_gpu_trainer.providers.transports.ssh_pool import Target, resolve_target

    target = Target.parse(host)
    try:
        resolved = await resolve_target(target, settings)
        name, port = resolved.host, resolved.port
    except ConfigError:
        name, port = target.host, target.port or DEFAULT_PORT
    return name.lower().rstrip("."), int(port or DEFAULT_PORT)


def _ssh_hosted(instance: InstanceConfig) -> bool:
    return (instance.provider in SSH_HOST_PROVIDERS and bool(instance.host)
            and not (instance.provider == "slurm" and instance.host in _LOCAL_HOSTS))


async def same_box_problems(project: ProjectConfig, settings: SSHSettings) -> list[str]:
    """One line per entry that names an SSH endpoint an earlier entry already names."""
    seen: dict[tuple[str, int], str] = {}
    problems: list[str] = []
    for name, instance in project.instances.items():
        if not _ssh_hosted(instance):
            continue
        assert instance.host is not None
        try:
            endpoint = await ssh_endpoint(instance.host, settings)
        except ConfigError:
            continue  # a malformed host is reported by the transport with its own message
        first = seen.setdefault(endpoint, name)
        if first == name:
            continue
        line = table_line(project.file, ("instances", name))
        first_line = table_line(project.file, ("instances", first))
        problems.append(
            f"{project.file}{f':{line}' if line else ''}: instances.{name}: names the same box as "
            f"instances.{first}{f' (line {first_line})' if first_line else ''}: both reach "
            f"{endpoint[0]}:{endpoint[1]} ({project.instances[first].host!r} and {instance.host!r}); keep one "
            "entry and point every run at it")
    return problems


def check_distinct_boxes(project: ProjectConfig, settings: SSHSettings | None = None) -> None:
    """Raise one ConfigError (exit 2) when two entries reach one SSH box; the first problem plus a count."""
    if sum(1 for instance in project.instances.values() if _ssh_hosted(instance)) < 2:
        return  # nothing to compare: no ssh config is read
    from remote_gpu_trainer.providers.transports.ssh_pool import SSHSettings

    settings = settings or SSHSettings(known_hosts_file=project.state_dir / "known_hosts")
    problems = asyncio.run(same_box_problems(project, settings))
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        error = ConfigError(problems[0] + more)
        error.problems = problems  # type: ignore[attr-defined]
        raise error
