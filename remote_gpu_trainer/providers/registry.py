"""Provider name → implementation. Names in config.PROVIDERS without an entry here are not built yet: AVAILABLE
lists the ones that are, and only those are offered (`rgt init --provider`, its help).

Imports are lazy: asyncssh and its crypto take longer to import than the whole dashboard takes to draw,
and a project on the embedded `sim` box never needs them.
"""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers.base import Provider

# Providers behind an HTTP API, all served by the one data-driven adapter (cloud/provider.py CLIENTS).
CLOUD_PROVIDERS = ("runpod", "vastai", "lambda", "paperspace", "autodl")
# Every provider provider_for can build (config.PROVIDERS also names ones rgt.toml may mention but this version
# cannot drive, such as kubernetes).
AVAILABLE = ("local", "sim", "ssh", "slurm", *CLOUD_PROVIDERS)


def provider_for(instance: InstanceConfig, state_dir: Path, clock: Clock = utc_now) -> Provider:
    """The provider an instance entry names. Callers hold it as a Provider and ask what else it can do with
    isinstance against the capability protocols of providers.base (Creatable, WaitsGone, BatchJobs)."""
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
        f"(available: {', '.join(AVAILABLE)})"
    )
