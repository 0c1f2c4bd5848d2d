"""`ssh`: any box reached over SSH. Instance = host; no control plane, so no price API and no terminate.

State comes from reachability: `running` while the box answers, `unknown` when it does not (never
`terminated`), and `terminated` only once the user attests, after the gate, that they ended it in the
provider's console. The price per hour is whatever the user entered (price_source "user").
"""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path
from typing import Any

from remote_gpu_trainer.clock import Clock, iso_offset, utc_now
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import ConfigError, RgtError, TransportError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.profiles import Profile, load_profile
from remote_gpu_trainer.providers.base import InstanceStatus, Provider
from remote_gpu_trainer.providers.table import ProviderRow
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool, SSHSettings

REACH_TIMEOUT_S = 10.0
TEARDOWN_COMMAND_TIMEOUT_S = 120.0


class SSHProvider(Provider):
    name = "ssh"

    def __init__(self, state_dir: Path, clock: Clock = utc_now, settings: SSHSettings | None = None,
                 pool: SSHPool | None = None) -> None:
        self.state_dir = state_dir
        self.clock = clock
        self.settings = settings or SSHSettings(known_hosts_file=state_dir / "known_hosts")
        self.pool = pool if pool is not None else SSHPool()
        self.profile: Profile = load_profile("ssh")

    def transport(self, instance: InstanceConfig) -> SSHTransport:
        if not instance.host:
            raise ConfigError(f"instances.{instance.name}: provider 'ssh' needs host = \"alias\" or \"user@host\"")
        return SSHTransport(instance.host, self.settings, self.pool)

    async def close(self) -> None:
        """Close every connection this provider opened; detached jobs on the boxes live on."""
        await self.pool.close_all()

    def provider_id(self, instance: InstanceConfig) -> str:
        return instance.id or instance.host or instance.name

    # -- the user's attestation is the only teardown record ----------------------------------------------
    def _record_path(self, instance: InstanceConfig) -> Path:
        return self.state_dir / "ssh" / f"{instance.name}.json"

    def _attested(self, instance: InstanceConfig) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._record_path(instance).read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None

    async def get(self, instance: InstanceConfig) -> InstanceStatus:
        attested = self._attested(instance)
        if attested is not None:
            return self._status(instance, "terminated", {"evidence": "user-attested", **attested})
        try:
            await self.transport(instance).ping(REACH_TIMEOUT_S)
        except HostKeyUnknown as exc:
            return self._status(instance, "unknown", {"error": str(exc), "host_key_unknown": exc})
        except (TransportError, OSError, TimeoutError) as exc:
            return self._status(instance, "unknown", {"error": str(exc)})
        return self._status(instance, "running", {})

    def _status(self, instance: InstanceConfig, state: str, detail: dict[str, Any]) -> InstanceStatus:
        price = instance.price_per_hour
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=self.provider_id(instance), state=state, gpu="?",
            price_per_hour=price, price_source="user" if price is not None else "none", detail=detail,
        )

    async def list_instances(self) -> list[InstanceStatus]:
        return []

    async def stop(self, instance: InstanceConfig) -> None:
        raise RgtError(f"{instance.name}: a generic SSH box has no stop rgt can call: use the provider's console")

    async def terminate(self, instance: InstanceConfig) -> None:
        """Called by the teardown service only after the gate and the typed id.

        With a configured `teardown_command` it runs that command here (argv split, no shell) and records
        its success; without one the user has ended the box in the console and this records the attestation.
        """
        evidence = "user-attested"
        if instance.teardown_command:
            await run_teardown_command(instance.name, instance.teardown_command)
            evidence = "command"
        path = self._record_path(instance)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"attested_at": iso_offset(self.clock()), "host": instance.host, "evidence": evidence,
                  "command": instance.teardown_command or ""}
        atomic_write(path, json.dumps(record, sort_keys=True).encode("utf-8"))
        await self.transport(instance).close()


async def run_teardown_command(name: str, command: str, timeout: float = TEARDOWN_COMMAND_TIMEOUT_S) -> None:
    """The user's own teardown (a provider CLI call): its exit status decides; its output is never shown
    in full, since provider CLIs may echo account details."""
    try:
        argv = shlex.split(command)
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
    except (ValueError, OSError) as exc:
        raise RgtError(f"instances.{name}.teardown_command cannot run: {exc}") from None
    try:
        _, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RgtError(f"instances.{name}.teardown_command gave no answer in {timeout:.0f} s: check the "
                       "provider's console; the box may or may not be gone") from None
    if process.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RgtError(f"instances.{name}.teardown_command exited {process.returncode}: {last[0][:200]}")


def build(row: ProviderRow, instance: InstanceConfig, state_dir: Path, clock: Clock) -> SSHProvider:
    """The `ssh` row's builder (providers/table.py)."""
    return SSHProvider(state_dir, clock)
