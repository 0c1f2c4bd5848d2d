"""One Provider for every cloud with an HTTP API (runpod, vastai, lambda, paperspace, autodl), driven by data.

Why one class: the five clients under providers/cloud/ already speak the same `CloudInstance`, and the
profiles already say, as data, how each API is reached (`[control.api]`), when an instance counts as gone
(`gone_when`) and where SSH listens (`[ssh]`). So the only per-provider fact is which client class
talks to which profile id, and it is the provider's row in providers/table.py; everything else is read from the
profile or the client.

- Credentials come from the client's own lookup (the env var or the provider CLI's file that the profile
  names), never from rgt.toml. The client is built on first use, so a missing key is a one-line ConfigError
  where the key is needed, and the dashboard still draws every other instance meanwhile.
- `get` never says `terminated` unless the provider said the instance is gone by one of the profile's
  `gone_when` rules (gone.py, which the clients' wait_gone asks too); any other failure is `unknown`,
  with the (redacted) error in `detail["error"]`.
- SSH goes to the address the API reports, read through the profile's `[ssh]` table, unless the user set
  `host` in rgt.toml. While the API says `running`, `get` also checks SSH once, so an unknown host key
  reaches the session as `detail["host_key_unknown"]` (the same contract as the `ssh` provider) and the user
  can trust it; SSH trouble never changes the state the API reported.
- A console-controlled profile (AutoDL) with no API key is an SSH box: the `ssh` provider does the work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import ConfigError, RgtError, TransportError
from remote_gpu_trainer.profiles import SIZE_UNITS, ApiControl, Profile, load_profile
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.providers.base import InstanceStatus, Provider, TeardownOutcome, WaitsGone
from remote_gpu_trainer.providers.cloud.client import CloudClient, Launches, UnsupportedAction, auth_file_texts
from remote_gpu_trainer.providers.cloud.credentials import ApiKey, CredentialsMissing, find_key
from remote_gpu_trainer.providers.cloud.gone import decide_gone, shown_state
from remote_gpu_trainer.providers.cloud.http import CloudAPIError, CloudNotFound, HttpOptions
from remote_gpu_trainer.providers.cloud.types import CloudInstance, GpuRequest, StorageBilling
from remote_gpu_trainer.providers.registry import load_dotted
from remote_gpu_trainer.providers.ssh import SSHProvider
from remote_gpu_trainer.providers.table import ProviderRow
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool, SSHSettings, Target

# Placeholders of `[ssh] flavors.host_template` → the CloudInstance field that fills them.
TEMPLATE_FIELDS = {"public_ip": "public_ip", "ip": "public_ip", "public_ipaddr": "public_ip",
                   "ssh_host": "ssh_host", "region": "region"}
SSH_REACH_TIMEOUT_S = 8.0  # reach check: leaves room for the API read inside the session's 20 s budget per get


class CloudProvider(Provider, WaitsGone):
    """The Provider protocol over one cloud API client; one adapter per configured instance.

    `api_base` is the instance's override of the API base URL; `http` is how the client sends its requests
    (tests inject sleep/clock there); `check_ssh=False` turns off the SSH reach check in `get`. The client
    class and its extra options are the provider's row in providers/table.py; its module is imported on first
    use, so a project on one cloud never loads the other clients.
    """

    def __init__(self, provider: str, state_dir: Path, clock: Clock = utc_now, *, api_base: str | None = None,
                 settings: SSHSettings | None = None, pool: SSHPool | None = None,
                 http: HttpOptions | None = None, check_ssh: bool = True) -> None:
        row = table.find(provider)
        if row is None or row.client is None:
            clouds = ", ".join(other.name for other in table.rows() if other.client is not None)
            raise ConfigError(f"no cloud API client for provider {provider!r} (known: {clouds})")
        self.name = provider
        self.row = row
        self.clock = clock
        self.api_base = api_base
        self.profile: Profile = load_profile(provider)
        self.settings = settings or SSHSettings(known_hosts_file=state_dir / "known_hosts")
        self.pool = pool if pool is not None else SSHPool()
        self.http_options = http or HttpOptions()
        self.check_ssh = check_ssh
        self._client: CloudClient | None = None
        self._ssh: SSHProvider | None = None
        if self._console_only_without_key():
            self._ssh = SSHProvider(state_dir, clock, self.settings, self.pool)

    # -- construction -------------------------------------------------------------------------------------

    @property
    def api(self) -> ApiControl:
        api = self.profile.control.api
        if api is None:
            raise ConfigError(f"assets/profiles/{self.name}.toml has no [control.api]: no API client to build")
        return api

    def _find_key(self) -> ApiKey:
        """The key, from the env vars and credential files the profile names (never rgt.toml)."""
        return find_key(self.name, self.api.auth_env, auth_file_texts(self.api))

    def _console_only_without_key(self) -> bool:
        """A console-controlled profile only has an optional read-only API: without a key it is an SSH box."""
        if self.profile.control.mode == "api":
            return False
        try:
            self._find_key()
        except CredentialsMissing:
            return True
        return False

    def client(self) -> CloudClient:
        """The API client, built once; CredentialsMissing (a ConfigError) names the env var when no key exists."""
        if self._client is None:
            client_class = cast(type[CloudClient], load_dotted(str(self.row.client)))
            self._client = client_class(
                api_base=self.api.resolved_base_url(self.api_base, os.environ), api_key=self._find_key(),
                api=self.api, http=self.http_options, **self.row.options)
        return self._client

    def provider_id(self, instance: InstanceConfig) -> str:
        if self._ssh is not None:
            return self._ssh.provider_id(instance)
        return instance.id or instance.name

    def _require_id(self, instance: InstanceConfig) -> str:
        if not instance.id:
            raise ConfigError(f"instances.{instance.name}: provider {self.name!r} needs id = \"<the instance id "
                              f"shown by {self.profile.display_name}>\"")
        return instance.id

    # -- reads --------------------------------------------------------------------------------------------

    async def get(self, instance: InstanceConfig) -> InstanceStatus:
        """The API's word on the instance, mapped onto INSTANCE_STATES; an API failure reads `unknown`."""
        if self._ssh is not None:
            return dataclasses.replace(await self._ssh.get(instance), provider=self.name)
        client = self.client()
        provider_id = self._require_id(instance)
        try:
            found = await client.get(provider_id)
        except CloudNotFound as exc:
            return await self._not_found(instance, provider_id, exc)
        except CloudAPIError as exc:
            return self._unknown(instance, provider_id, client.http.redact(str(exc)))
        return await self._seen(instance, found)

    async def _seen(self, instance: InstanceConfig, found: CloudInstance, *, check_ssh: bool = True) -> InstanceStatus:
        detail = self._detail(instance, found)
        if check_ssh and found.state == "running":
            detail.update(await self._ssh_check(detail.get("ssh_target")))
        price, source = self._price(instance, found)
        state, not_gone = shown_state(self.api.gone_when, found)
        if not_gone is not None:
            detail["gone_by"] = not_gone
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=found.provider_id, state=state,
            gpu=gpu_text(found), price_per_hour=price, price_source=source,
            storage_per_hour=stopped_storage_per_hour(self.profile, found.storage), detail=detail,
        )

    async def _not_found(self, instance: InstanceConfig, provider_id: str, exc: CloudNotFound) -> InstanceStatus:
        """`terminated` only by a `gone_when` rule of the profile (gone.py decides); a not-found the profile
        does not trust is unknown, and so is a list call that fails."""
        try:
            decision = await decide_gone(self.client(), self.api.gone_when, provider_id, exc)
        except CloudAPIError as list_exc:
            return self._unknown(instance, provider_id, self.client().http.redact(str(list_exc)))
        if decision.rule is not None:
            return self._gone(instance, provider_id, decision.rule)
        if decision.instance is not None:
            return await self._seen(instance, decision.instance)
        return self._unknown(instance, provider_id, f"{self.client().http.redact(str(exc))} (the "
                             f"{self.name} profile does not count this as gone)")

    def _gone(self, instance: InstanceConfig, provider_id: str, rule: str) -> InstanceStatus:
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=provider_id, state="terminated", gpu="-",
            price_per_hour=None, price_source="none", storage_per_hour=0.0,
            detail={"evidence": "provider-confirmed", "gone_by": rule},
        )

    def _unknown(self, instance: InstanceConfig, provider_id: str, error: str) -> InstanceStatus:
        """No answer is not an answer: `unknown`, keeping the last price seen so the meter can estimate."""
        last = self.client().last_seen(provider_id)
        price, source = self._price(instance, last)
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=provider_id, state="unknown",
            gpu=gpu_text(last) if last else "?", price_per_hour=price, price_source=source,
            storage_per_hour=stopped_storage_per_hour(self.profile, last.storage) if last else None,
            detail={"error": error},
        )

    def _price(self, instance: InstanceConfig, found: CloudInstance | None) -> tuple[float | None, str]:
        """The API's price, else the user's (rgt.toml), else the profile's, else none."""
        if found is not None and found.price_per_hour is not None:
            return found.price_per_hour, found.price_source
        if instance.price_per_hour is not None:
            return instance.price_per_hour, "user"
        if self.profile.pricing.compute_per_hour is not None:
            return self.profile.pricing.compute_per_hour, "profile"
        return None, "none"

    def _detail(self, instance: InstanceConfig, found: CloudInstance) -> dict[str, Any]:
        """What the meter, the teardown and the SSH layer need from this read (see the module docstring)."""
        detail = found.to_status(instance.name).detail
        detail.pop("ssh_host", None)  # the API's raw SSH fields; the resolved address replaces them below
        detail.pop("ssh_port", None)
        detail.update({
            "gpu_count": found.gpu_count, "api_name": found.name,
            "storage": [dataclasses.asdict(item) for item in found.storage],
            "api": {key: value for key, value in found.detail.items() if value is not None},
        })
        target, source = self._target(instance, found)
        if target is not None:
            detail.update({"ssh_target": str(target), "ssh_user": target.user, "ssh_host": target.host,
                           "ssh_port": target.port, "ssh_source": source})
        return detail

    async def _ssh_check(self, target: str | None) -> dict[str, Any]:
        """One bounded SFTP request over the pooled connection (`SSHTransport.ping`, no shell started on
        the box): reachability and, above all, an unknown host key for the user to trust."""
        if not self.check_ssh or not target:
            return {}
        try:
            await asyncio.wait_for(SSHTransport(target, self.settings, self.pool).ping(SSH_REACH_TIMEOUT_S),
                                   SSH_REACH_TIMEOUT_S)
        except HostKeyUnknown as exc:
            return {"ssh_reachable": False, "ssh_error": str(exc), "host_key_unknown": exc}
        except TimeoutError:
            return {"ssh_reachable": False, "ssh_error": f"{target}: no SSH answer in {SSH_REACH_TIMEOUT_S:g} s"}
        except (RgtError, OSError) as exc:
            return {"ssh_reachable": False, "ssh_error": str(exc)}
        return {"ssh_reachable": True}

    async def list_instances(self, *, strict: bool = False) -> list[InstanceStatus]:
        """Every instance the account has, named by the provider's label; [] where the API cannot list,
        unless `strict` (`rgt status`: an account it cannot list is said, never read as empty)."""
        if self._ssh is not None:
            return []
        try:
            found = await self.client().list_instances()
        except UnsupportedAction:
            if strict:
                raise
            return []
        statuses = []
        for item in found:
            instance = InstanceConfig(name=item.name or item.provider_id, provider=self.name, id=item.provider_id)
            statuses.append(await self._seen(instance, item, check_ssh=False))  # one SSH check per box is get's
        return statuses

    def account(self) -> tuple[str, str] | None:
        """The account this adapter speaks for: (API base URL, where its key came from), never the key, so
        `rgt status` lists each account once; None for a console-only profile without a key (an SSH box)."""
        if self._ssh is not None:
            return None
        return self.api.resolved_base_url(self.api_base, os.environ), self._find_key().source

    def redact(self, text: str) -> str:
        """`text` (an error's) with this account's key taken out, as the HTTP layer redacts its own."""
        return self._client.http.redact(text) if self._client is not None else text

    # -- SSH ------------------------------------------------------------------------------------------------

    def _target(self, instance: InstanceConfig, found: CloudInstance | None) -> tuple[Target | None, str]:
        """The user's `host` wins; else the address the API reported, read through the profile."""
        if instance.host:
            return Target.parse(instance.host), "instance.host"
        if found is None:
            return None, ""
        return ssh_address(self.profile, found), "api"

    def transport(self, instance: InstanceConfig) -> SSHTransport:
        """SSH to the last address `get` saw (or the user's `host`); a clear error before there is one."""
        if self._ssh is not None:
            if not instance.host:
                raise ConfigError(
                    f"instances.{instance.name}: provider {self.name!r} without an API key is reached over SSH "
                    "only: set host = \"user@host:port\" as the provider's console shows it")
            return self._ssh.transport(instance)
        last = self.client().last_seen(instance.id) if instance.id and not instance.host else None
        target, _ = self._target(instance, last)
        if target is None:
            seen = f"it is {last.raw_state or 'without a state'} ({last.state})" if last else "not read yet"
            raise TransportError(
                f"instances.{instance.name}: {self.name} instance {instance.id or '?'} has no SSH address yet "
                f"({seen}); wait until the API reports it running, or set host = \"user@host:port\"")
        return SSHTransport(str(target), self.settings, self.pool)

    # -- verbs (stop and terminate: only ever called by services.teardown) -----------------------------------

    async def stop(self, instance: InstanceConfig) -> None:
        if self._ssh is not None:
            await self._ssh.stop(instance)
            return
        await self.client().stop(self._require_id(instance))

    async def terminate(self, instance: InstanceConfig) -> None:
        """Delegates to the client (which checks first and re-queries on a timeout), then drops the SSH link."""
        if self._ssh is not None:
            await self._ssh.terminate(instance)
            return
        provider_id = self._require_id(instance)
        await self.client().terminate(provider_id)
        await self._drop_ssh(instance)

    def can_start(self) -> bool:
        """A stopped box can be started again through the API: the profile has a `start` endpoint and rgt has a key."""
        api = self.profile.control.api
        return self._ssh is None and api is not None and api.endpoint("start") is not None

    async def start(self, instance: InstanceConfig) -> None:
        """Start the stopped box again (only services/recover/start_box.py calls this, within a person's limits)."""
        if not self.can_start():
            raise UnsupportedAction(f"{self.name}: rgt cannot start instances through this API")
        await self.client().start(self._require_id(instance))

    async def wait_gone(self, instance: InstanceConfig, timeout_s: float = 600.0,
                        poll_s: float = 5.0) -> TeardownOutcome:
        """Poll until the provider says gone, then list what still bills (the client's residual audit)."""
        if self._ssh is None:
            return await self.client().wait_gone(self._require_id(instance), timeout_s=timeout_s, poll_s=poll_s)
        raise UnsupportedAction(
            f"{self.name}: without an API key rgt cannot see the instance: confirm in the "
            f"{self.profile.display_name} console that it is gone, then attest it")

    async def launch(self, request: GpuRequest) -> CloudInstance:
        """Rent an instance where the client can (RunPod, vast.ai, Lambda); elsewhere name the console step."""
        client = self.client() if self._ssh is None else None
        if not isinstance(client, Launches):
            raise UnsupportedAction(
                f"{self.name}: rgt cannot create instances through this API: {create_step(self.profile)}")
        return await client.launch(request)

    async def _drop_ssh(self, instance: InstanceConfig) -> None:
        """A terminated box will not answer again: close its connection instead of letting keepalive find out."""
        last = self.client().last_seen(instance.id) if instance.id else None
        target, _ = self._target(instance, last)
        if target is not None:
            await SSHTransport(str(target), self.settings, self.pool).close()

    async def close(self) -> None:
        """Close the HTTP client and every SSH connection; detached jobs on the boxes live on. A later call opens a
        new client (a session closes its transports between looks and goes on using its providers)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        await self.pool.close_all()


def build(row: ProviderRow, instance: InstanceConfig, state_dir: Path, clock: Clock) -> CloudProvider:
    """Every cloud row's builder (providers/table.py): one adapter per configured instance."""
    return CloudProvider(row.name, state_dir, clock, api_base=instance.api_base)


# -- pure helpers -----------------------------------------------------------------------------------------------

def ssh_address(profile: Profile, found: CloudInstance) -> Target | None:
    """Where SSH listens, by the profile's `[ssh]`: an SSH endpoint the API names itself (vast.ai's proxy,
    AutoDL's gateway) first, else the first file-transfer flavor whose placeholders and port the API filled
    (RunPod public IP + mapped port 22, Lambda IP on 22, Paperspace public IP). None: nothing to reach yet."""
    ssh = profile.raw.get("ssh", {})
    user = ssh.get("user")
    if found.ssh_host:
        return Target(found.ssh_host, user, found.ssh_port)
    for flavor in ssh.get("flavors", []):
        target = flavor_target(flavor, found)
        if target is not None:
            return target
    return None


def flavor_target(flavor: Mapping[str, Any], found: CloudInstance) -> Target | None:
    """One flavor filled from the API, or None when it moves no files (RunPod basic) or a value is missing."""
    known, port = flavor_port(flavor.get("port_source"), found)
    if not known or not flavor.get("file_transfer", True):
        return None
    values = {name: getattr(found, field) for name, field in TEMPLATE_FIELDS.items()}
    try:
        parsed = Target.parse(str(flavor["host_template"]).format_map(
            {name: value for name, value in values.items() if value}))
    except (KeyError, ValueError, ConfigError):
        return None
    return Target(parsed.host, parsed.user, port or parsed.port)


def flavor_port(source: str | None, found: CloudInstance) -> tuple[bool, int | None]:
    """(known, port) for a flavor's `port_source`; a None port is ssh's default (22)."""
    if source is None:
        return True, None
    if source.startswith("fixed:") and source[6:].isdigit():
        return True, int(source[6:])
    if source.startswith("api:"):
        return found.ssh_port is not None, found.ssh_port
    return False, None  # "console": only the user knows it (then `host` in rgt.toml)


def gpu_text(found: CloudInstance) -> str:
    count = f"{found.gpu_count}x " if found.gpu_count and found.gpu_count > 1 else ""
    return f"{count}{found.gpu}" if found.gpu else "?"


def stopped_storage_per_hour(profile: Profile, storage: tuple[StorageBilling, ...]) -> float | None:
    """What the instance's own disks bill per hour while it is stopped; None when one of them has no price.

    Storage that survives terminate (network volumes, NFS) is left out: it bills on its own clock as a residual.
    """
    if profile.pricing.storage_per_hour is not None:
        return profile.pricing.storage_per_hour
    total = 0.0
    for item in storage:
        if not item.bills_while_stopped or item.survives_terminate:
            continue
        per_hour = item_per_hour(profile, item)
        if per_hour is None:
            return None
        total += per_hour
    return total


def item_per_hour(profile: Profile, item: StorageBilling) -> float | None:
    """The API's own hourly figure first, then its per-GB price (spread over the profile's hours per month),
    then the profile's rate; sizes are taken in the rate's unit."""
    if item.price_per_hour is not None:
        return item.price_per_hour
    if item.size_gb is None:
        return None
    if item.price_per_gb_month is not None:
        return item.size_gb * item.price_per_gb_month / profile.pricing.hours_per_month
    rate = profile.pricing.storage_rate(item.name)
    return rate.per_hour(round(item.size_gb * SIZE_UNITS[rate.unit]), profile.pricing.hours_per_month) if rate else None


def create_step(profile: Profile) -> str:
    """How the user creates an instance by hand, from the profile: its CLI command, else its console."""
    command = profile.control.cli.get("create")
    where = f"run `{command}`" if command else f"use the {profile.display_name} console"
    if profile.control.console_url:
        where += f" ({profile.control.console_url})"
    return f"{where}, then put its id (or its SSH host) in rgt.toml"
