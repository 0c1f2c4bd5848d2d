"""The Provider and Transport protocols (docs/architecture.md §3.3), the capabilities only some providers have, and
the small value types they exchange.

Providers are thin: they map verbs to one platform and know nothing of gates, meters or screens.
Transports move bytes and run commands on the far side; the local and SSH transports pass the same
contract tests, so services never ask which one they hold.

What only some providers can do is a capability protocol (Creatable, WaitsGone, BatchJobs), checked with
`isinstance`, never by probing for an attribute: each provider class names the protocols it implements
among its bases, so mypy checks the signatures, and a caller that asks `isinstance(p, WaitsGone)` gets
a provider whose `wait_gone` type-checks.

The protocols name only the generic value types defined here (a scheduler's JobState, a teardown's
TeardownOutcome): each provider converts its own answers into them, and an import-linter contract
(pyproject.toml) keeps this module free of every concrete provider.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.profiles import Profile

# What a command may print before it is stopped (docs/pull.md, "Bounded output"): the largest clean answer is a
# batch of small files (16 MiB, services/evidence/pull_batches.py); a box that prints more is flooding, and
# holding all of it once made `rgt pull` a 1.25 GB process. A caller that needs more passes a larger cap.
STDOUT_CAP = 64 << 20
STDERR_CAP = 4 << 20

INSTANCE_STATES = ("pending", "running", "stopping", "stopped", "terminating", "terminated", "unknown")
PRICE_SOURCES = ("api", "profile", "user", "none")


@dataclass(frozen=True)
class CommandResult:
    """What a command run through a transport returned: its exit status and both outputs as bytes, decoded
    (leniently) only when asked."""

    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def error_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


class OutputCapped(TransportError):
    """A command printed more than its cap on one stream: it was stopped there (process group killed, channel
    closed) and nothing it printed is returned, since a cut answer must never be parsed as a whole one."""

    def __init__(self, where: str, command: str, stream: str, cap: int) -> None:
        super().__init__(f"{where}: `{command_label(command)}` printed more than {cap:,} bytes on {stream} "
                         "(the cap): stopped there, its process group killed")
        self.stream = stream
        self.cap = cap


def command_label(command: str) -> str:
    """A command named in an error by its first two words (never its whole text: arguments are not for
    messages), with control characters escaped."""
    words = command.split()[:2]
    label = " ".join(words)
    label = label if len(label) <= 60 else label[:57] + "..."
    return escape_control(label)


@dataclass(frozen=True)
class RemoteStat:
    """What a transport's `stat` says about one path: size, mtime and kind, the same from the local and SSH
    transports."""

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

    @property
    def actable(self) -> bool:
        """Whether there is a box to stop or tear down: not terminated, and not `unknown` for want of an answer.
        An `unknown` that carries the provider's own word (vast.ai `frozen`, Lambda `unhealthy`, RunPod `ERROR`)
        is an answer: the box exists and bills, so the user must be able to end it (behind the gate)."""
        return self.state != "terminated" and (self.state != "unknown" or bool(self.detail.get("raw_state")))


@dataclass(frozen=True)
class JobState:
    """What a batch scheduler says about one job, already in the run's liveness words (running, finished, dead,
    stalled, unknown) with the scheduler's own detail, so the liveness service needs no scheduler's vocabulary.
    `known` is False when the scheduler no longer knows the job; `walltime` is "used / limit" as it writes them."""

    scheduler: str  # its name in messages ("Slurm")
    job_id: str
    liveness: str
    detail: str
    known: bool = True
    walltime: str = ""


@dataclass(frozen=True)
class Residual:
    """Something that still bills after a teardown, as the API showed it, and what ends it.

    `confirmed` is False for an item the client could not check (an audit call failed): it is listed so the
    user checks by hand, never dropped.
    """

    kind: str
    ident: str
    detail: str
    ended_by: str
    confirmed: bool = True


@dataclass(frozen=True)
class TeardownOutcome:
    """The result of polling after a terminate: gone or not, the last state seen, and what still bills.

    `gone` is True only when the provider itself said so (404, absent, its own final word); a poll that
    failed leaves the state `unknown`, never `terminated`.
    """

    provider: str
    provider_id: str
    gone: bool
    state: str
    raw_state: str
    polls: int
    waited_s: float
    residuals: tuple[Residual, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def meter_stopped(self) -> bool:
        """Gone, nothing residual, and every follow-up audit answered."""
        return self.gone and not self.residuals and not self.errors


class Transport(Protocol):
    """Runs commands and moves bytes on one instance; every call is bounded by a timeout."""

    # Each file fetched on its own costs network round trips (SSH): the pull sends small files in
    # batches through one command instead (services/pull_batches.py). False for a local disk.
    batches_small_files: bool
    # The login's home on a simulated box (its disk is a folder here, so $HOME would name this machine's);
    # None: the box is asked (the box's ledger lives there, services/box_ledger.py).
    fixed_home: str | None

    def resolve(self, remote: str) -> str:
        """The path as processes on the far side see it (identity everywhere but a simulated disk)."""
        ...

    async def run(self, command: str, *, stdin: bytes | None = None, cwd: str | None = None,
                  timeout: float = 30.0, stdout_cap: int = STDOUT_CAP,
                  stderr_cap: int = STDERR_CAP) -> CommandResult:
        """`bash -c command` on the far side. Each stream is kept up to its cap; a command that prints
        more is stopped at once and OutputCapped raised, so memory never grows past the caps."""
        ...

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
    """One platform's verbs, as the services call them. `stop` and `terminate` are only ever called by
    services.teardown. `profile` is the platform's billing and teardown facts (assets/profiles/<name>.toml);
    `provider_id` names the instance as the platform does (the id the user types to confirm a teardown)."""

    name: str
    profile: Profile

    def provider_id(self, instance: InstanceConfig) -> str: ...

    async def get(self, instance: InstanceConfig) -> InstanceStatus: ...

    async def list_instances(self) -> list[InstanceStatus]: ...

    async def stop(self, instance: InstanceConfig) -> None: ...

    async def terminate(self, instance: InstanceConfig) -> None: ...

    def transport(self, instance: InstanceConfig) -> Transport: ...

    async def close(self) -> None: ...


@runtime_checkable
class Creatable(Protocol):
    """Can start billing for an instance itself (`rgt up` on the simulated box); the clouds rent through
    services.rent instead, with a price the user approves."""

    async def create(self, instance: InstanceConfig) -> InstanceStatus: ...


@runtime_checkable
class WaitsGone(Protocol):
    """Can watch a terminated instance until the platform itself says it is gone, then list what still
    bills (volumes, IPs, snapshots): the teardown service's follow-up after a terminate."""

    async def wait_gone(self, instance: InstanceConfig, timeout_s: float = 600.0,
                        poll_s: float = 5.0) -> TeardownOutcome: ...


@runtime_checkable
class BatchJobs(Protocol):
    """Runs go in as jobs of a batch scheduler (Slurm) instead of processes started detached on a box:
    submitted, asked about and cancelled through the scheduler, over the instance's transport."""

    async def submit_job(self, transport: Transport, script_path: str, *, job_name: str, workdir: str,
                         output: str) -> str:
        """Submit the script; returns the scheduler's job id."""
        ...

    async def job_state(self, transport: Transport, job_id: str) -> JobState:
        """What the scheduler says about the job now (`known` False when it no longer knows it)."""
        ...

    async def cancel_job(self, transport: Transport, job_id: str) -> None: ...
