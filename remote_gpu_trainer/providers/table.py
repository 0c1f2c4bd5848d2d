"""Every provider rgt knows, declared once: one row each, read by the configuration (which names rgt.toml may use
and what a `launch` table needs), `rgt init` (what it offers and the template's instance lines), the gate and the
box identity (how a box is known), rent and the orphan sweep (which providers rent through a cloud API), and the
registry (how `provider_for` builds one).

Why one table: these facts used to sit in six lists in five modules, so a new cloud needed edits in four places
beside its client and profile; now adding a provider is its client, its profile and one row here.

What a provider can do once built (Creatable, WaitsGone, BatchJobs, and a cloud client's Launches and Quotes) is
not repeated here: each class names those protocols among its bases, and callers ask with `isinstance`
(providers/base.py). The rows say only what must be known without building the provider.

This module imports nothing of rgt (config.py imports it) and nothing heavy: implementations are named by dotted
"module:attribute" strings and imported by the registry when an instance needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

KINDS = ("local", "sim", "ssh", "slurm", "cloud", "unbuilt")
IDENTITIES = ("provider-id", "ssh-host")
# A host naming this machine: a Slurm "cluster" there is run without SSH, so it has no SSH endpoint to compare.
HERE_HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class ProviderRow:
    """One provider's facts. `builder` is "module:callable", called by providers/registry.py as
    `callable(row, instance, state_dir, clock)` to build the Provider; None: a name rgt.toml may use that this
    version cannot drive (kind "unbuilt"), never offered by `rgt init`. `client` ("module:Class") and `options`
    (extra keyword arguments of its constructor) are a cloud's API client (providers/cloud/provider.py)."""

    name: str
    kind: str  # one of KINDS
    builder: str | None
    client: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # `rgt up` may rent a box through the API (services rent it at a price the user approves); what the `launch`
    # table of rgt.toml must set, must not set, and which of its flags must not be true (with the reason said).
    launches: bool = False
    launch_needs: tuple[str, ...] = ()
    launch_forbids: tuple[str, ...] = ()
    launch_refuses: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    launch_example: str = ""  # the provider's keys in `rgt init`'s commented launch line
    # How the box is known (docs/gate.md §7 item 6): by provider and provider id, or by its SSH host (host keys,
    # addresses); `here_hosts_local`: a host in HERE_HOSTS is this machine, not an SSH box.
    identity: str = "provider-id"
    here_hosts_local: bool = False
    needs_host: bool = False  # rgt.toml must set `host` (the box has no id of its own)

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.identity not in IDENTITIES:
            raise ValueError(f"provider row {self.name!r}: kind {self.kind!r} / identity {self.identity!r} unknown")
        if (self.builder is None) != (self.kind == "unbuilt"):
            raise ValueError(f"provider row {self.name!r}: a builder exactly when the kind is not 'unbuilt'")

    @property
    def built(self) -> bool:
        """This version can drive it (rgt init offers it)."""
        return self.builder is not None


_PROVIDERS = "remote_gpu_trainer.providers"
_CLOUD = f"{_PROVIDERS}.cloud"
_CLOUD_BUILDER = f"{_CLOUD}.provider:build"


def _cloud(name: str, client: str, **facts: Any) -> ProviderRow:
    return ProviderRow(name, "cloud", _CLOUD_BUILDER, client=f"{_CLOUD}.{client}", **facts)


# Lambda picks its own image (Lambda Stack) and needs a registered SSH key name; RunPod and vast.ai need an image
# and use the SSH keys already on the account.
_ROWS: dict[str, ProviderRow] = {row.name: row for row in (
    ProviderRow("local", "local", f"{_PROVIDERS}.local:build"),
    ProviderRow("sim", "sim", f"{_PROVIDERS}.sim:build"),
    ProviderRow("ssh", "ssh", f"{_PROVIDERS}.ssh:build", identity="ssh-host", needs_host=True),
    # a Slurm instance's host is its login node, reached over SSH (or this machine)
    ProviderRow("slurm", "slurm", f"{_PROVIDERS}.slurm.provider:build", identity="ssh-host",
                here_hosts_local=True),
    ProviderRow("kubernetes", "unbuilt", None),
    _cloud("runpod", "runpod:RunPodClient", launches=True, launch_needs=("image",), launch_forbids=("ssh_keys",),
           launch_example='image = "runpod/pytorch", disk_gb = 50'),
    _cloud("vastai", "vastai:VastAIClient", launches=True, launch_needs=("image",), launch_forbids=("ssh_keys",),
           launch_example='image = "runpod/pytorch", disk_gb = 50'),
    _cloud("lambda", "lambda_cloud:LambdaClient", launches=True, launch_needs=("ssh_keys",),
           launch_forbids=("image",), launch_example='ssh_keys = ["my-key"]',
           launch_refuses=MappingProxyType({"interruptible": "Lambda has no spot instances: remove it or set false"})),
    _cloud("paperspace", "paperspace:PaperspaceClient"),
    # read-only Pro API, only once a key exists
    _cloud("autodl", "autodl:AutoDLClient", options=MappingProxyType({"pro_api": True})),
)}


def rows() -> tuple[ProviderRow, ...]:
    """Every row, in the order messages list them."""
    return tuple(_ROWS.values())


def find(name: str) -> ProviderRow | None:
    return _ROWS.get(name)


def names() -> tuple[str, ...]:
    """Every provider name rgt.toml may use."""
    return tuple(_ROWS)


def available() -> tuple[str, ...]:
    """The providers this version can build: the only ones `rgt init` offers."""
    return tuple(row.name for row in _ROWS.values() if row.built)


def kind_of(name: str) -> str | None:
    """The provider's kind (one of KINDS), or None for a name the table does not hold: callers that treat a
    kind's machinery specially (a local box's folder, a sim box's disk, a Slurm queue's preemption) ask this,
    never the provider's name."""
    row = _ROWS.get(name)
    return row.kind if row is not None else None


def of_kind(kind: str) -> tuple[str, ...]:
    return tuple(row.name for row in _ROWS.values() if row.kind == kind)


def launching() -> tuple[str, ...]:
    """The providers whose API can create an instance (`rgt up` rents one)."""
    return tuple(row.name for row in _ROWS.values() if row.launches)


def ssh_hosted(provider: str, host: str | None) -> bool:
    """Whether the entry's box is known by its SSH host rather than by provider and id: an SSH-identified
    provider with a host, unless that host is this machine for a provider that then runs here."""
    row = _ROWS.get(provider)
    return (row is not None and row.identity == "ssh-host" and bool(host)
            and not (row.here_hosts_local and host in HERE_HOSTS))


def register(row: ProviderRow) -> None:
    """Add a provider at run time (a plugin, or a test's throwaway provider); a name is never replaced."""
    if row.name in _ROWS:
        raise ValueError(f"provider {row.name!r} is already in the table")
    _ROWS[row.name] = row


def unregister(name: str) -> None:
    """Take out a row `register` added (the shipped rows stay)."""
    if name in _SHIPPED:
        raise ValueError(f"provider {name!r} ships with rgt: it cannot be taken out")
    _ROWS.pop(name, None)


_SHIPPED = frozenset(_ROWS)
