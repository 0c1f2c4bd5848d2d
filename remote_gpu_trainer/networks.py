"""Network environment profiles (docs/remote-ops.md §12): what a run behind the great firewall needs in its
environment, as data in assets/networks/<id>.toml, read with the typed TOML reader.

Why the environment only: the box belongs to someone else and outlives the run's interest in it; a mirror set in
pip.conf or .bashrc would silently change every later job there. The job wrapper exports these variables for the
run's own processes (services/launch/network_env.py), and the phase-0 audit checks the box's proxy settings against the
same list of hosts (audits/env_audit/proxy.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.shipped_toml import ASSETS
from remote_gpu_trainer.toml_table import Problems, SourceLines, Table, parse_toml

SCHEMA = "remote-gpu-trainer/NETWORK/v1"
DEFAULT_LOOPBACK = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class NetworkProfile:
    """An environment profile from assets/networks/<id>.toml: the variables the job wrapper exports, the caches it
    points at, and the hosts a proxy must not see."""

    id: str
    description: str
    env: tuple[tuple[str, str], ...]  # NAME → value, exported as is
    caches: tuple[tuple[str, str], ...]  # NAME → folder under the run's cache_dir
    mirror_hosts: tuple[str, ...]
    loopback: tuple[str, ...] = DEFAULT_LOOPBACK

    def no_proxy_hosts(self) -> tuple[str, ...]:
        """The hosts a proxy must not see: loopback (local services, rendezvous) and the mirrors."""
        return (*self.loopback, *self.mirror_hosts)


def _folder() -> Any:
    return ASSETS / "networks"


def network_ids() -> tuple[str, ...]:
    """Every shipped network profile's id, sorted (the values `runs.<id>.network` accepts)."""
    return tuple(sorted(entry.name[:-5] for entry in _folder().iterdir() if entry.name.endswith(".toml")))


def load_network(network_id: str) -> NetworkProfile:
    """A shipped profile by id; every problem with the file, key and line as one ConfigError."""
    if network_id not in network_ids():
        raise ConfigError(f"network profile {network_id!r} does not exist (known: {', '.join(network_ids())})")
    where = f"assets/networks/{network_id}.toml"
    text = _folder().joinpath(f"{network_id}.toml").read_text(encoding="utf-8")
    problems = Problems()
    top = Table(problems, where, (), parse_toml(where, text), SourceLines(text))
    top.text("schema", required=True, choices=(SCHEMA,))
    top.text("id", required=True, choices=(network_id,))
    description = top.req_text("description")
    mirrors = top.strings("mirror_hosts", required=True, nonempty=True) or ()
    loopback = top.strings("loopback", nonempty=True) or DEFAULT_LOOPBACK
    env, caches = _pairs(top, "env"), _pairs(top, "caches")
    top.done()
    problems.raise_if_any()
    return NetworkProfile(network_id, description, env, caches, mirrors, loopback)


def _pairs(top: Table, key: str) -> tuple[tuple[str, str], ...]:
    """A table of environment variable names to non-empty strings."""
    table = top.table(key)
    if table is None:
        return ()
    pairs = []
    for name in table.data:
        value = table.text(name, required=True, nonempty=True)
        if not name.isidentifier() or not name.isupper():
            table.problem(name, "must be an environment variable name (upper case, letters, digits, _)")
        elif value is not None:
            pairs.append((name, value))
    table.done()
    return tuple(pairs)
