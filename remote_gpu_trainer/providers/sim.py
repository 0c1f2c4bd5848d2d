"""`sim`: a rented box simulated on this machine, the embedded default.

Its disk is `.rgt/sim/<instance>/`; its control-plane record (state and history, like a provider API's)
lives beside it in `.rgt/sim/<instance>.json`, outside the disk, so terminate can delete the disk and
still say "terminated". Prices come from assets/profiles/sim.toml, the same schema the clouds use.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from remote_gpu_trainer.clock import Clock, iso_offset, utc_now
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.profiles import Profile, load_profile
from remote_gpu_trainer.providers.base import Creatable, InstanceStatus, Provider
from remote_gpu_trainer.providers.table import ProviderRow
from remote_gpu_trainer.providers.transports.local import LocalTransport


class SimProvider(Provider, Creatable):
    name = "sim"

    def __init__(self, sim_dir: Path, clock: Clock = utc_now) -> None:
        self.sim_dir = sim_dir
        self.clock = clock
        self.profile: Profile = load_profile("sim")

    # -- the simulated control plane ---------------------------------------------------------------
    def disk(self, instance: InstanceConfig) -> Path:
        return self.sim_dir / instance.name

    def _record_path(self, instance: InstanceConfig) -> Path:
        return self.sim_dir / f"{instance.name}.json"

    def _read(self, instance: InstanceConfig) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._record_path(instance).read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None

    def _write(self, instance: InstanceConfig, record: dict[str, Any]) -> None:
        atomic_write(self._record_path(instance), json.dumps(record, indent=2, sort_keys=True).encode("utf-8"))

    def _transition(self, instance: InstanceConfig, state: str, record: dict[str, Any]) -> None:
        record["state"] = state
        record.setdefault("history", []).append({"at": iso_offset(self.clock()), "state": state})
        self._write(instance, record)

    def provider_id(self, instance: InstanceConfig) -> str:
        return instance.id or f"sim-{instance.name}"

    async def create(self, instance: InstanceConfig) -> InstanceStatus:
        """Rent the box: make its disk and start billing (used by `rgt demo` and `rgt up`)."""
        record = self._read(instance)
        if record is not None and record["state"] not in ("terminated",):
            return await self.get(instance)
        self.sim_dir.mkdir(parents=True, exist_ok=True)
        self.disk(instance).mkdir(parents=True, exist_ok=True)
        self._transition(instance, "running", {"id": self.provider_id(instance), "history": []})
        return await self.get(instance)

    # -- Provider protocol -------------------------------------------------------------------------
    async def get(self, instance: InstanceConfig) -> InstanceStatus:
        record = self._read(instance)
        state = "unknown" if record is None else str(record["state"])
        if state == "running" and not self.disk(instance).is_dir():
            state = "unknown"  # the disk vanished behind our back: never claim it is terminated
        pricing = self.profile.pricing
        rented = record is not None  # a box never rented bills nothing: no price to assume for its `unknown`
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=self.provider_id(instance), state=state,
            gpu="none (sim)", price_per_hour=pricing.compute_per_hour if rented else None,
            price_source=pricing.source if rented else "none",
            storage_per_hour=pricing.storage_per_hour if rented else None,
            detail={"disk": str(self.disk(instance)), "history": (record or {}).get("history", []),
                    # the provider's own word for why, where a test plays one that names it (Lambda says
                    # "preempted" of a spot instance it reclaimed): read by audits/preemption.provider_words
                    **({"raw_state": str(record["raw_state"])} if record and record.get("raw_state") else {})},
        )

    async def list_instances(self) -> list[InstanceStatus]:
        result = []
        for path in sorted(self.sim_dir.glob("*.json")):
            instance = InstanceConfig(name=path.stem, provider=self.name)
            result.append(await self.get(instance))
        return result

    async def stop(self, instance: InstanceConfig) -> None:
        record = self._require(instance)
        self._kill_jobs(instance)
        self._transition(instance, "stopped", record)

    async def terminate(self, instance: InstanceConfig) -> None:
        record = self._require(instance)
        self._transition(instance, "terminating", record)
        self._kill_jobs(instance)
        await asyncio.to_thread(shutil.rmtree, self.disk(instance), True)
        self._transition(instance, "terminated", record)

    def transport(self, instance: InstanceConfig) -> LocalTransport:
        return LocalTransport(root=self.disk(instance))

    async def close(self) -> None:
        return None

    # -- helpers -------------------------------------------------------------------------------------
    def _require(self, instance: InstanceConfig) -> dict[str, Any]:
        record = self._read(instance)
        if record is None or record["state"] == "terminated":
            raise RgtError(f"sim instance {instance.name!r} does not exist or is already terminated")
        return record

    def _kill_jobs(self, instance: InstanceConfig) -> None:
        """Powering a box off ends its processes: kill every job group recorded on its disk."""
        for pgid_file in self.disk(instance).rglob(".rgt/*/pgid"):
            text = pgid_file.read_text(encoding="utf-8", errors="replace").strip()
            if text.isdigit():
                try:
                    os.killpg(int(text), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def build(row: ProviderRow, instance: InstanceConfig, state_dir: Path, clock: Clock) -> SimProvider:
    """The `sim` row's builder (providers/table.py): every simulated box of a project under .rgt/sim."""
    return SimProvider(state_dir / "sim", clock)
