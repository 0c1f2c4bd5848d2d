"""`local`: the user's own workstation. No meter, nothing to tear down; jobs still run detached."""

from __future__ import annotations

import platform
from pathlib import Path

from remote_gpu_trainer.clock import Clock
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.profiles import Profile, load_profile
from remote_gpu_trainer.providers.base import InstanceStatus, Provider
from remote_gpu_trainer.providers.table import ProviderRow
from remote_gpu_trainer.providers.transports.local import LocalTransport


class LocalProvider(Provider):
    name = "local"

    def __init__(self) -> None:
        self.profile: Profile = load_profile("local")

    def provider_id(self, instance: InstanceConfig) -> str:
        return instance.id or platform.node() or "localhost"

    async def get(self, instance: InstanceConfig) -> InstanceStatus:
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=self.provider_id(instance),
            state="running", gpu="local", price_per_hour=None, price_source="none",
        )

    async def list_instances(self) -> list[InstanceStatus]:
        return []

    async def stop(self, instance: InstanceConfig) -> None:
        raise RgtError("the local provider has nothing to stop: it is your own machine")

    async def terminate(self, instance: InstanceConfig) -> None:
        raise RgtError("the local provider has nothing to terminate: it is your own machine")

    def transport(self, instance: InstanceConfig) -> LocalTransport:
        return LocalTransport(root=None)

    async def close(self) -> None:
        return None


def build(row: ProviderRow, instance: InstanceConfig, state_dir: Path, clock: Clock) -> LocalProvider:
    """The `local` row's builder (providers/table.py): this machine needs no state and no clock."""
    return LocalProvider()
