"""What a request would do if it ran now: the plan a person is shown, and the launches it is bound to.

A plan is computed from the box and the services as they are at this moment (the teardown plan of
services/teardown.py for a stop or a teardown, the launch plan of services/launch/rent.py for a rent), never
from what rgt remembers about the request. Its `material` lines are what an approval is bound to: when they
change (a new price, new reasons, another box), the approval goes back to pending. The binding is the latest
launch of every run involved and the box's provider id: a request filed before a relaunch is refused when it
would execute.
"""

from __future__ import annotations

from typing import Any

from remote_gpu_trainer.errors import ConfigError, RgtError
from remote_gpu_trainer.providers.base import Creatable
from remote_gpu_trainer.request_views import RequestPlan
from remote_gpu_trainer.services import gate as box_gate
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.inbox.model import RequestKind, counted_hours
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.meter import last_status
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.text import escape_control, price

Binding = dict[str, Any]


async def plan_request(session: Session, kind: RequestKind, run_id: str | None, instance: str | None,
                       params: dict[str, Any], accept_loss: tuple[str, ...] = ()) -> tuple[RequestPlan, Binding]:
    """The plan and binding of a request of `kind`, as of now; `accept_loss` (a person's, at approval) are the
    runs whose results they give up: their reasons no longer block, and the plan's digest stays the one shown."""
    if kind in (RequestKind.TEARDOWN, RequestKind.STOP):
        assert instance is not None
        return await _teardown_plan(session, instance, "terminate" if kind == RequestKind.TEARDOWN else "stop",
                                    accept_loss)
    if kind == RequestKind.RENT:
        assert run_id is not None
        return await _rent_plan(session, run_id, _hours(params))
    if kind == RequestKind.RESUME:
        assert run_id is not None
        return await _resume_plan(session, run_id, _hours(params))
    if kind == RequestKind.RECOVER:
        assert run_id is not None
        return _recover_plan(session, run_id)
    return _finding_plan(session, params), {}


def _hours(params: dict[str, Any]) -> float:
    hours = params.get("hours", 1.0)
    return float(hours) if isinstance(hours, (int, float)) else 1.0


def launches_of(session: Session, run_ids: list[str]) -> dict[str, int | None]:
    """The latest launch (its seq in the launch log) of each run: a relaunch changes it."""
    latest: dict[str, int | None] = {run_id: None for run_id in run_ids}
    for record in session.db.launch_history():
        if record.run_id in latest:
            latest[record.run_id] = record.seq
    return latest


async def _teardown_plan(session: Session, instance: str, action_id: str,
                         accept_loss: tuple[str, ...]) -> tuple[RequestPlan, Binding]:
    """The teardown modal's own plan (services/teardown.plan): the same lines, the same gate."""
    current = await teardown.plan(session, instance, action_id)
    accepted = current.accepting(accept_loss)
    runs = [b.run.id for b in await box_gate.box_runs(session, instance)]
    burning = next((line.split(" · spent")[0] for line in current.lines if line.startswith("Burning:")), "")
    material = (f"action {action_id} of {instance} ({current.provider_id})", burning,
                *(line for line in current.lines if line.startswith(("Destroys:", "Keeps billing:"))),
                *(f"reason {reason}" for reason in sorted(current.reasons)),
                *(f"at risk {name}" for name in current.loss_names))
    lines = (*current.lines, *(f"Gate:      closed: {reason}" for reason in current.reasons))
    plan = RequestPlan(lines=lines, material=material, irreversible=current.irreversible,
                       type_to_confirm=current.provider_id if current.gated else None,
                       blocked=tuple(accepted.reasons), price_per_hour=_burning_price(session, instance))
    return plan, {"provider_id": current.provider_id, "launches": launches_of(session, runs)}


def _burning_price(session: Session, instance: str) -> float | None:
    status = last_status(session, instance)
    return status.price_per_hour if status is not None else None


async def _rent_plan(session: Session, run_id: str, hours: float) -> tuple[RequestPlan, Binding]:
    """Renting the run's box: the cloud's launch plan and quote (services/launch/rent.py), or, for a box the
    provider creates from its profile (the sim box), the profile's price."""
    run = session.project.run(run_id)
    provider = session.provider(run.instance)
    if isinstance(provider, Creatable):
        status = await instance_status(session, run.instance)
        hourly = provider.profile.pricing.compute_per_hour
        currency = provider.profile.pricing.currency
        blocked = (f"{run.instance} is already {status.state} ({status.provider_id}): nothing to rent",) \
            if status.state in ("running", "pending") else ()
        lines = (f"Action:    rent {run.instance} ({provider.profile.display_name}) for run {run_id}",
                 f"Price:     {_price(hourly, currency)}/h (profile), billing from the start until a person "
                 "tears it down", *_hours_lines(hourly, hours, currency))
        material = (f"rent {run.instance} {provider.name}", f"price {hourly} {currency}")
        plan = RequestPlan(lines=lines, material=material, price_per_hour=hourly, currency=currency, blocked=blocked)
        return plan, {"launches": launches_of(session, [run_id])}
    from remote_gpu_trainer.services.launch import rent

    if not await rent.wants_launch(session, run.instance):
        raise ConfigError(f"run {run_id}: instances.{run.instance} names a box that is there already: nothing to "
                          "rent (rgt_status shows it)")
    launch = await rent.plan_launch(session, run.instance)
    lines = (*launch.lines, *_hours_lines(launch.price, hours, launch.currency))
    plan = RequestPlan(lines=lines, material=(f"rent {run.instance} {launch.provider}",
                                              f"price {launch.price_text} {launch.currency}",
                                              f"request {launch.request}"),
                       price_per_hour=launch.price, currency=launch.currency)
    return plan, {"launches": launches_of(session, [run_id])}


def _hours_lines(hourly: float | None, hours: float, currency: str) -> tuple[str, ...]:
    if hourly is None:
        return ()
    counted = counted_hours(hours)
    tail = "" if counted == hours else f" (at least {counted:g} h is counted)"
    return (f"Asked for: {hours:g} h, {_price(hourly * counted, currency)} counted against an allowance{tail}",)


def _price(amount: float | None, currency: str) -> str:
    return "?" if amount is None else price(amount, currency)


async def _resume_plan(session: Session, run_id: str, hours: float) -> tuple[RequestPlan, Binding]:
    """Relaunching a preempted run on its box (services/launch/resume.py checks the rest when it runs)."""
    run = run_config(session, run_id)
    try:
        status = await instance_status(session, run.instance)
    except RgtError as exc:
        raise ConfigError(f"run {run_id}: {run.instance} could not be asked: {exc}") from None
    currency = session.profile(run.instance).pricing.currency
    hourly = status.price_per_hour
    blocked = () if status.state == "running" else (
        f"{run.instance} is {status.state}: a resume runs only on the box that still bills",)
    lines = (f"Action:    resume run {run_id} on {run.instance} ({status.provider_id}): its command again, "
             "under its own id, loading its own checkpoints",
             f"Price:     {_price(hourly, currency)}/h ({status.price_source}) while it runs",
             *_hours_lines(hourly, hours, currency))
    material = (f"resume {run_id} on {status.provider_id}", f"price {hourly} {currency}")
    plan = RequestPlan(lines=lines, material=material, price_per_hour=hourly, currency=currency, blocked=blocked)
    return plan, {"provider_id": status.provider_id, "launches": launches_of(session, [run_id])}


def _recover_plan(session: Session, run_id: str) -> tuple[RequestPlan, Binding]:
    """A person's approval of the run's recovery limits as rgt.toml states them now (services/recover/approval.py):
    the material is the limits and the launch configuration they bind, so an edit of either sends it back."""
    from remote_gpu_trainer.services.recover.approval import approval_prompt, binding

    run = run_config(session, run_id)
    lines = approval_prompt(session, run_id)  # refuses a run without limits, in one line
    assert run.recover is not None
    plan = RequestPlan(lines=lines, material=(f"limits {run.recover.canonical()}", f"binding {binding(session, run)}"))
    return plan, {"provider_id": None, "launches": launches_of(session, [run_id])}


def _finding_plan(session: Session, params: dict[str, Any]) -> RequestPlan:
    """A finding's acknowledgement or waiver, with the note and disclosure the agent proposes: what it changes
    is what rides with the claims (docs/verify.md)."""
    finding = str(params.get("finding", ""))
    record = session.db.finding_record(finding)
    if record is None:
        raise ConfigError(f"no VERIFY finding {finding} (rgt_findings lists them)")
    decision = str(params.get("decision", ""))
    note, disclosure = str(params.get("note", "")), str(params.get("disclosure", ""))
    lines = (f"Finding:   {record.id} [{record.check}] {record.severity} {record.status}: "
             f"{escape_control(record.subject)}: {escape_control(record.message)}",
             f"Decision:  {decision}",
             f"Note:      {escape_control(note)}",
             *((f"Disclosure: {escape_control(disclosure)} (rides with the claims it touches)",) if disclosure else ()))
    material = (f"finding {record.id} {record.status} {record.fingerprint}", f"decision {decision}", f"note {note}",
                f"disclosure {disclosure}")
    return RequestPlan(lines=lines, material=material)
