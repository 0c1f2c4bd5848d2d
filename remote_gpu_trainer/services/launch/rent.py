"""`rgt up` where the provider's API can rent a box (RunPod, vast.ai, Lambda): smoke gate → plan → typed price.

Why this order: a rented GPU bills from its first second, so nothing is rented until
1. the run's own `smoke` command passed here, on the CPU (`CUDA_VISIBLE_DEVICES=""`), in this call sequence:
   `launch` takes the `SmokeResult` itself, so no flag or stale record can stand in for it;
2. the user typed the price the plan stated (e.g. `0.44`), which is checked against that plan.
The approval, with the exact lines shown, is in the append-only event log before the provider call
(docs/architecture.md §3.4). The approved price then becomes the request's ceiling, so the launch can never rent above
what was approved: a vast.ai offer that got dearer since the plan is refused by the client, not rented.

Where the launched id lives: rgt never rewrites rgt.toml. The new provider id is recorded in the state database
(a `launched` event whose detail has `provider_id`, plus an instance snapshot so the meter bills it), `rgt events`
lists it, `launched_id()` finds it, and `rgt up` prints the `id = "..."` line to add under `[instances.<name>]`.
Until that line is there the session reads the instance as `unknown` at the launched price. Meanwhile a second
`rgt up` refuses while that id (or the configured one) is still alive, so a forgotten edit never rents twice.

A pod RunPod created above the ceiling (its REST create takes none) is recorded like any launch, reported loudly
with its id and how to remove it, and left to the teardown service: only `rgt down` stops or terminates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import signal
import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer import text
from remote_gpu_trainer.config.project import InstanceConfig, LaunchConstraint, ProjectConfig, RunConfig
from remote_gpu_trainer.errors import ConfigError, RgtError, VerbFailed
from remote_gpu_trainer.profiles import Profile
from remote_gpu_trainer.providers.cloud.client import LaunchOverBudget, Quotes, UnsupportedAction
from remote_gpu_trainer.providers.cloud.provider import CloudProvider, create_step, stopped_storage_per_hour
from remote_gpu_trainer.providers.cloud.types import CloudInstance, GpuRequest, Quote
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.billing import Snapshot
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

SMOKE_TAIL_BYTES = 8192  # what is kept of the smoke command's output: enough for a traceback
SMOKE_TAIL_LINES = 30
READ_TIMEOUT_S = 20.0  # one provider read while checking for an instance that is already there


# -- the smoke gate --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SmokeResult:
    """One local run of a run's `smoke` command; `launch` accepts only a passed one for the same command."""

    run_id: str
    command: str
    returncode: int | None  # None: it did not start, or it was killed at the timeout
    timed_out: bool
    duration_s: float
    output_tail: str
    error: str = ""  # why it did not start

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def summary(self) -> str:
        if self.error:
            return self.error
        if self.timed_out:
            return f"`{self.command}` still running after {self.duration_s:.0f} s: killed (smoke_timeout)"
        return f"`{self.command}` exited {self.returncode} after {self.duration_s:.1f} s"

    def record(self) -> dict[str, Any]:
        """What the approval event keeps: the facts, not the output (it may print anything, secrets included)."""
        return {"command": self.command, "returncode": self.returncode, "timed_out": self.timed_out,
                "duration_s": round(self.duration_s, 3), "passed": self.passed}


async def run_smoke(project: ProjectConfig, run: RunConfig) -> SmokeResult:
    """Run the run's `smoke` command here, as a CPU check: argv (no shell), cwd the project root, no GPUs.

    `CUDA_VISIBLE_DEVICES=""` hides any local GPU so the check proves the code runs where nothing is rented yet;
    `RGT_SMOKE=1` lets the script know. The whole process group is killed at `smoke_timeout` (or when the
    caller is cancelled), so a stuck check never outlives the verb.
    """
    if not run.smoke:
        raise ConfigError(f"{project.file}: runs.{run.id}: no smoke command: add smoke = \"python train.py "
                          "--smoke\" (a short CPU check that must pass before `rgt up` rents a GPU)")
    argv = shlex.split(run.smoke)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "RGT_SMOKE": "1"}
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=project.root, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        return SmokeResult(run.id, run.smoke, None, False, 0.0, "",
                           error=f"`{run.smoke}` did not start: {argv[0]}: {exc.strerror or exc}")
    tail = bytearray()
    timed_out = False
    try:
        await asyncio.wait_for(_drain(proc, tail), run.smoke_timeout)
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid)
            await proc.wait()
    return SmokeResult(run.id, run.smoke, None if timed_out else proc.returncode, timed_out,
                       time.monotonic() - started, _tail_text(bytes(tail)))


async def _drain(proc: asyncio.subprocess.Process, tail: bytearray) -> None:
    """Read the output to EOF keeping only its last SMOKE_TAIL_BYTES, then wait for the exit code."""
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(65536):
        tail.extend(chunk)
        del tail[:-SMOKE_TAIL_BYTES]
    await proc.wait()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail_text(data: bytes) -> str:
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-SMOKE_TAIL_LINES:])


# -- the plan ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchPlan:
    """What the approval shows and what `launch` will send; `price` is what the user types to approve.

    `price` is the API's own quote where it gives one before creating (vast.ai's cheapest fitting offer,
    Lambda's instance-type price), else the ceiling from rgt.toml (RunPod's REST create quotes nothing).
    """

    instance: str
    provider: str
    request: GpuRequest
    ceiling: float
    expected: float | None
    price: float
    currency: str
    lines: tuple[str, ...]

    @property
    def price_text(self) -> str:
        return text.price_text(self.price)


def has_launch_api(profile: Profile) -> bool:
    """The profile says `up` goes through the API's create call (data, not a list of names in code)."""
    up = profile.raw.get("verbs", {}).get("up", {})
    return isinstance(up, dict) and up.get("via") == "api" and up.get("action") == "create"


async def wants_launch(session: Session, instance_name: str) -> bool:
    """Whether `rgt up` should rent: the provider can launch and no configured instance is alive."""
    provider = session.provider(instance_name)
    if not isinstance(provider, CloudProvider) or not has_launch_api(provider.profile):
        return False
    if not session.instance(instance_name).id:
        return True
    return (await instance_status(session, instance_name)).state == "terminated"


def check_launchable(session: Session, instance_name: str) -> tuple[CloudProvider, LaunchConstraint]:
    """What can be refused without the network, so `rgt up` says it before a minutes-long smoke run:
    a provider with a launch API, a launch constraint in rgt.toml, and an API key where the profile looks."""
    provider = _launch_provider(session, instance_name)
    constraint = _constraint(session, session.instance(instance_name))
    provider.client()  # CredentialsMissing (a ConfigError) names the env var and the file it looked for
    return provider, constraint


async def plan_launch(session: Session, instance_name: str) -> LaunchPlan:
    """The request from the constraint, the price it will bill and the lines to approve; refuses a double launch."""
    provider, constraint = check_launchable(session, instance_name)
    await _refuse_double_launch(session, instance_name, provider)
    request = gpu_request(instance_name, constraint)
    quote = await _quote(provider, request)
    price = quote.price if quote.price is not None else constraint.max_price_per_hour
    currency = provider.profile.pricing.currency
    return LaunchPlan(
        instance=instance_name, provider=provider.name, request=request, ceiling=constraint.max_price_per_hour,
        expected=quote.price, price=price, currency=currency,
        lines=plan_lines(provider.profile, instance_name, request, quote, price),
    )


def gpu_request(instance_name: str, constraint: LaunchConstraint) -> GpuRequest:
    return GpuRequest(
        gpu_type=constraint.gpu, image=constraint.image or "", gpu_count=constraint.count,
        max_price_per_hour=constraint.max_price_per_hour, disk_gb=constraint.disk_gb, name=f"rgt-{instance_name}",
        interruptible=constraint.interruptible, region=constraint.region, ssh_key_names=constraint.ssh_keys,
    )


def plan_lines(profile: Profile, instance_name: str, request: GpuRequest, quote: Quote,
               price: float) -> tuple[str, ...]:
    """The approval screen, as lines: the event log keeps exactly these with the approval."""
    api = profile.control.api
    endpoint = api.endpoint("create") if api is not None else None
    call = f" ({endpoint.method} {endpoint.path})" if endpoint is not None else ""
    parts = [f"{request.gpu_count}x {request.gpu_type}", f"disk {request.disk_gb} GB",
             f"region {request.region or 'any'}", "interruptible (spot)" if request.interruptible else "on-demand"]
    if request.image:
        parts.insert(1, f"image {request.image}")
    ceiling = request.max_price_per_hour or price
    currency = profile.pricing.currency
    lines = [
        f"Action:    {profile.display_name}: create an instance for {instance_name}{call}",
        f"Request:   {', '.join(parts)}",
        f"Price:     {text.price(price, currency)}/h: {quote.text}",
        f"Ceiling:   {text.price(ceiling, currency)}/h (max_price_per_hour); the approved price is the "
        "launch's ceiling",
        "Bills:     from creation until `rgt down` sees it gone",
    ]
    lines += [f"Danger:    {item.text}" for item in profile.surface_to_user if item.kind == "danger"]
    lines.append(f"Approve:   type {text.price_text(price)} ({currency} per hour)")
    return tuple(lines)


def _launch_provider(session: Session, instance_name: str) -> CloudProvider:
    provider = session.provider(instance_name)
    if not isinstance(provider, CloudProvider) or not has_launch_api(provider.profile):
        raise UnsupportedAction(f"instances.{instance_name}: {provider.profile.display_name} has no launch API "
                                f"rgt can use: {create_step(provider.profile)}")
    return provider


def _constraint(session: Session, instance: InstanceConfig) -> LaunchConstraint:
    if instance.launch is None:
        raise ConfigError(f"{session.project.file}: instances.{instance.name}: nothing to launch from: add "
                          f"launch = {{ gpu = \"...\", max_price_per_hour = ... }}, or set id = \"<instance id>\"")
    return instance.launch


async def _quote(provider: CloudProvider, request: GpuRequest) -> Quote:
    """The price the API will bill, where its client can tell before creating anything (read-only calls)."""
    client = provider.client()
    if isinstance(client, Quotes):
        return await client.quote(request)
    return Quote(None, f"{provider.profile.display_name} quotes no price before creating, so you approve the "
                       "ceiling; an instance created above it is reported and must be torn down")


async def _refuse_double_launch(session: Session, instance_name: str, provider: CloudProvider) -> None:
    """One box per instance name: refuse while the configured id or the last launched id is not gone."""
    instance = session.instance(instance_name)
    if instance.id:
        status = await instance_status(session, instance_name)
        if status.state != "terminated":
            raise VerbFailed(
                f"instances.{instance_name} already has {provider.name} instance {instance.id} ({status.state}): "
                f"rgt launches no second one; use it (`rgt up RUN` audits it) or tear it down with `rgt down`")
    launched = launched_id(session.db, instance_name)
    if launched and launched != instance.id:
        state = await _state_of(provider, dataclasses.replace(instance, id=launched))
        if state != "terminated":
            raise VerbFailed(
                f"instances.{instance_name} was launched as {provider.name} instance {launched} ({state}) by an "
                f"earlier `rgt up`: put id = \"{launched}\" under [instances.{instance_name}] in "
                f"{session.project.file.name}; rgt launches no second one")


async def _state_of(provider: CloudProvider, instance: InstanceConfig) -> str:
    """The provider's state word for an id rgt.toml does not name yet; a failed read is `unknown`."""
    try:
        return (await asyncio.wait_for(provider.get(instance), READ_TIMEOUT_S)).state
    except ConfigError:
        raise
    except (RgtError, OSError, TimeoutError):
        return "unknown"


def launched_id(db: StateDB, instance_name: str) -> str | None:
    """The provider id of the last instance `rgt up` launched for this name (over budget or not), if any."""
    return db.launched_provider_id(instance_name)


# -- the launch ----------------------------------------------------------------------------------------------------

async def launch(session: Session, plan: LaunchPlan, run_id: str, approved_price: str, smoke: SmokeResult,
                 actor: str = "user") -> CloudInstance:
    """Rent what `plan` showed, for `run_id`, once the smoke gate passed and the typed price is the stated one.

    Order: checks (nothing written but a refusal), then the approval event with the shown lines, then the action
    event, then the provider call; the new id is recorded whatever the outcome that created an instance.
    """
    session.require_writable(f"launching {plan.instance}")
    run = session.project.run(run_id)  # renting is for the next launch: rgt.toml as it is
    if run.instance != plan.instance:
        raise ConfigError(f"run {run_id} runs on {run.instance!r}, not on {plan.instance!r}")
    _check_smoke(run, smoke)
    if not price_matches(approved_price, plan.price_text):
        events.launch_refused(session.db, run_id=run_id, instance=plan.instance, typed_price=approved_price.strip(),
                              price_text=plan.price_text, shown=plan.lines, actor=actor)
        raise VerbFailed(f"launch of {plan.instance} refused: typed price {approved_price.strip()!r} is not the "
                         f"stated {plan.price_text} ({plan.currency}/h); nothing was rented")
    provider = _launch_provider(session, plan.instance)
    await _refuse_double_launch(session, plan.instance, provider)
    request = dataclasses.replace(plan.request, max_price_per_hour=plan.price)
    approval = events.launch_approved(
        session.db, run_id=run_id, instance=plan.instance, price_shown=text.price(plan.price, plan.currency),
        typed_price=approved_price.strip(), price_per_hour=plan.price, ceiling=plan.ceiling, shown=plan.lines,
        request=dataclasses.asdict(request), smoke=smoke.record(), actor=actor)
    events.launch_requested(session.db, run_id=run_id, instance=plan.instance, approval_seq=approval.seq, actor=actor)
    try:
        created = await provider.launch(request)
    except LaunchOverBudget as exc:
        _record(session, plan, run_id, exc.instance, EventKind.LAUNCH_OVER_BUDGET)
        raise VerbFailed(over_budget_message(session, plan, run_id, exc.instance)) from exc
    except (RgtError, OSError) as exc:
        events.launch_failed(session.db, run_id=run_id, instance=plan.instance, error=str(exc))
        if isinstance(exc, ConfigError):
            raise
        raise VerbFailed(f"launch of {plan.instance} failed: {exc}; if {provider.profile.display_name} created "
                         f"it anyway it bills: check {provider.profile.control.console_url or 'the console'}") from exc
    _record(session, plan, run_id, created, EventKind.LAUNCHED)
    return created


def _check_smoke(run: RunConfig, smoke: SmokeResult) -> None:
    if smoke.run_id != run.id or smoke.command != run.smoke:
        raise VerbFailed(f"the smoke result is for run {smoke.run_id} (`{smoke.command}`), not for run {run.id} "
                         f"(`{run.smoke}`): run the smoke gate for this run")
    if not smoke.passed:
        raise VerbFailed(f"smoke gate failed: {smoke.summary()}; nothing was rented")


def _record(session: Session, plan: LaunchPlan, run_id: str, created: CloudInstance, kind: EventKind) -> None:
    """The new id in the event log and a snapshot, so the meter bills it and `launched_id` finds it."""
    known = created.price_per_hour is not None
    price = created.price_per_hour if created.price_per_hour is not None else plan.price
    events.instance_rented(
        session.db, over_budget=kind is EventKind.LAUNCH_OVER_BUDGET, run_id=run_id, instance=plan.instance,
        provider=plan.provider, provider_id=created.provider_id, state=created.state, raw_state=created.raw_state,
        price_per_hour=price, price_shown=text.price(price, plan.currency),
        price_source=created.price_source if known else "user", config_line=config_line(created.provider_id))
    storage = stopped_storage_per_hour(session.profile(plan.instance), created.storage)
    session.db.add_snapshot(Snapshot(
        at=session.clock(), instance=plan.instance, provider=plan.provider, provider_id=created.provider_id,
        state=created.state, price_per_hour=price, price_source=created.price_source if known else "user",
        storage_per_hour=storage), detail={"source": kind, "run_id": run_id})


def over_budget_message(session: Session, plan: LaunchPlan, run_id: str, created: CloudInstance) -> str:
    shown = "an unknown price" if created.price_per_hour is None else text.price(created.price_per_hour, plan.currency)
    console = session.profile(plan.instance).control.console_url or "the provider's console"
    return (f"OVER BUDGET: {plan.provider} created {created.provider_id} at {shown}/h, above the approved "
            f"{text.price(plan.price, plan.currency)}/h, and it is BILLING NOW; rgt did not remove it: put "
            f"{config_line(created.provider_id)} under [instances.{plan.instance}] and run `rgt down {run_id} "
            f"--confirm {created.provider_id}`, or terminate it in {console}")


def config_line(provider_id: str) -> str:
    return f'id = "{provider_id}"'


# -- prices as typed ------------------------------------------------------------------------------------------------

def price_matches(typed: str, stated: str) -> bool:
    """Equal as numbers (`0.44`, `0.440` and `$0.44/h` all state 0.44); anything unreadable is no approval."""
    number = typed.strip().removeprefix("$").removesuffix("/h").strip()
    try:
        return Decimal(number) == Decimal(stated)
    except InvalidOperation:
        return False

