"""The Provider and Transport protocols (DESIGN.md §3.3) and the small value types they exchange.

Providers are thin: they map verbs to one platform and know nothing of gates, meters or screens.
Transports move bytes and run commands on the far side; the local and SSH transports pass the same
contract tests, so services never ask which one they hold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from remote_gpu_trainer.config import InstanceConfig

INSTANCE_STATES = ("pending", "running", "stopping", "stopped", "terminating", "terminated", "unknown")
PRICE_SOURCES = ("api", "profile", "user", "none")


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def error_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class RemoteStat:
    size: int
    mtime: float
    kind: str  # "file" | "dir" | "symlink" | "other"


@dataclass(frozen=True)
class InstanceStatus:
    """What a provider says about one instance right now; `state` is always one of INSTANCE_STATES."""

    name: str
    provider: str
    provider_id: str
    state: str
    gpu: str
    price_per_hour: float | None
    price_source: str
    storage_per_hour: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Transport(Protocol):
    """Runs commands and moves bytes on one instance; every call is bounded by a timeout."""

    # Each file fetched on its own costs network round trips (SSH): the pull sends small files in
    # batches through one command instead (services/pull_batches.py). False for a local disk.
    batches_small_files: bool

    def resolve(self, remote: str) -> str:
        """The path as processes on the far side see it (identity everywhere but a simulated disk)."""
        ...

    async def run(self, command: str, *, stdin: bytes | None = None, cwd: str | None = None,
                  timeout: float = 30.0) -> CommandResult: ...

    async def launch_detached(self, script: str, ctl_dir: str) -> int:
        """Start `script` (bash) in its own session, stdin from /dev/null; returns the wrapper pid."""
        ...

    async def stat(self, remote: str) -> RemoteStat | None: ...

    async def listdir(self, remote: str) -> list[str]: ...

    async def tail(self, remote: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        """Bytes after `offset` (restarting at 0 if the file shrank) and the new offset."""
        ...

    async def sha256(self, remote: str) -> str: ...

    def read_chunks(self, remote: str, offset: int, chunk_size: int = 4 << 20, *,
                    expect: int | None = None) -> AsyncIterator[bytes]:
        """The file from `offset` to its true end. `expect` (where the caller expects it to end) is a
        hint a transport may use to ask for no bytes past it; it never shortens what is read."""
        ...

    async def put_bytes(self, data: bytes, remote: str, mode: int = 0o644) -> None: ...

    async def close(self) -> None: ...


class Provider(Protocol):
    """One platform's verbs. `stop` and `terminate` are only ever called by services.teardown."""

    name: str

    async def get(self, instance: InstanceConfig) -> InstanceStatus: ...

    async def list_instances(self) -> list[InstanceStatus]: ...

    async def stop(self, instance: InstanceConfig) -> None: ...

    async def terminate(self, instance: InstanceConfig) -> None: ...

    def transport(self, instance: InstanceConfig) -> Transport: ...

    async def close(self) -> None: ...
