"""Provider name → implementation. Names in config.PROVIDERS without an entry here are not built yet."""

from __future__ import annotations

from pathlib import Path

from ..clock import Clock, utc_now
from ..config import InstanceConfig
from ..errors import ConfigError
from .local import LocalProvider
from .sim import SimProvider
from .slurm_cluster import SlurmProvider
from .ssh import SSHProvider

AnyProvider = LocalProvider | SimProvider | SSHProvider | SlurmProvider


def provider_for(instance: InstanceConfig, state_dir: Path, clock: Clock = utc_now) -> AnyProvider:
    if instance.provider == "sim":
        return SimProvider(state_dir / "sim", clock)
    if instance.provider == "local":
        return LocalProvider()
    if instance.provider == "ssh":
        return SSHProvider(state_dir, clock)
    if instance.provider == "slurm":
        return SlurmProvider(state_dir, clock)
    raise ConfigError(
        f"instances.{instance.name}: provider {instance.provider!r} is not available in this version of rgt "
        "(available: local, sim, ssh, slurm)"
    )
