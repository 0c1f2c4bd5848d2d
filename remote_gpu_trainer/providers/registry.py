"""Provider name → implementation. Names in config.PROVIDERS without an entry here are not built yet.

Imports are lazy: asyncssh and its crypto take longer to import than the whole dashboard takes to draw,
and a project on the embedded `sim` box never needs them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config import InstanceConfig
from remote_gpu_trainer.errors import ConfigError

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.cloud.provider import CloudProvider
    from remote_gpu_trainer.providers.local import LocalProvider
    from remote_gpu_trainer.providers.sim import SimProvider
    from remote_gpu_trainer.providers.slurm.provider import SlurmProvider
    from remote_gpu_trainer.providers.ssh import SSHProvider

    AnyProvider = LocalProvider | SimProvider | SSHProvider | SlurmProvider | CloudProvider

# Providers behind an HTTP API, all served by the one data-driven adapter (cloud_provider.CLIENTS).
CLOUD_PROVIDERS = ("runpod", "vastai", "lambda", "paperspace", "autodl")


def provider_for(instance: InstanceConfig, state_dir: Path, clock: Clock = utc_now) -> AnyProvider:
    if instance.provider == "sim":
        from remote_gpu_trainer.providers.sim import SimProvider

        return SimProvider(state_dir / "sim", clock)
    if instance.provider == "local":
        from remote_gpu_trainer.providers.local import LocalProvider

        return LocalProvider()
    if instance.provider == "ssh":
        from remote_gpu_trainer.providers.ssh import SSHProvider

        return SSHProvider(state_dir, clock)
    if instance.provider == "slurm":
        from remote_gpu_trainer.providers.slurm.provider import SlurmProvider

        return SlurmProvider(state_dir, clock)
    if instance.provider in CLOUD_PROVIDERS:
        from remote_gpu_trainer.providers.cloud.provider import CloudProvider

        return CloudProvider(instance.provider, state_dir, clock, api_base=instance.api_base)
    raise ConfigError(
        f"instances.{instance.name}: provider {instance.provider!r} is not available in this version of rgt "
        f"(available: local, sim, ssh, slurm, {', '.join(CLOUD_PROVIDERS)})"
    )
