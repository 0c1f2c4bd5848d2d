"""Provider name → implementation. Names in config.PROVIDERS without an entry here are not built yet.

Imports are lazy: asyncssh and its crypto take longer to import than the whole dashboard takes to draw,
and a project on the embedded `sim` box never needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..clock import Clock, utc_now
from ..config import InstanceConfig
from ..errors import ConfigError

if TYPE_CHECKING:
    from .cloud_provider import CloudProvider
    from .local import LocalProvider
    from .sim import SimProvider
    from .slurm_cluster import SlurmProvider
    from .ssh import SSHProvider

    AnyProvider = LocalProvider | SimProvider | SSHProvider | SlurmProvider | CloudProvider

# Providers behind an HTTP API, all served by the one data-driven adapter (cloud_provider.CLIENTS).
CLOUD_PROVIDERS = ("runpod", "vastai", "lambda", "paperspace", "autodl")


def provider_for(instance: InstanceConfig, state_dir: Path, clock: Clock = utc_now) -> AnyProvider:
    if instance.provider == "sim":
        from .sim import SimProvider

        return SimProvider(state_dir / "sim", clock)
    if instance.provider == "local":
        from .local import LocalProvider

        return LocalProvider()
    if instance.provider == "ssh":
        from .ssh import SSHProvider

        return SSHProvider(state_dir, clock)
    if instance.provider == "slurm":
        from .slurm_cluster import SlurmProvider

        return SlurmProvider(state_dir, clock)
    if instance.provider in CLOUD_PROVIDERS:
        from .cloud_provider import CloudProvider

        return CloudProvider(instance.provider, state_dir, clock, api_base=instance.api_base)
    raise ConfigError(
        f"instances.{instance.name}: provider {instance.provider!r} is not available in this version of rgt "
        f"(available: local, sim, ssh, slurm, {', '.join(CLOUD_PROVIDERS)})"
    )
