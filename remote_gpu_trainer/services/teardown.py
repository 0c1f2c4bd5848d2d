"""The teardown service: the only code that may stop or terminate an instance (docs/architecture.md §3.4).

At call time it re-evaluates the gate for every run on the instance, checks the typed instance id,
writes the approval (with the exact lines the user was shown) to the event log, evaluates the gate once
more with that approval, logs the action, and only then calls the provider. Afterwards it polls until
the provider says the instance is gone. The property holds whichever face called it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from remote_gpu_trainer.audits.gate import Approval
from remote_gpu_trainer.audits.manifest import is_checkpoint
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import GateRefused, RgtError
from remote_gpu_trainer.fsutil import run_locks
from remote_gpu_trainer.profiles import profile_age_text
from remote_gpu_trainer.providers.base import InstanceStatus, WaitsGone
from remote_gpu_trainer.services import gate as box_gate
from remote_gpu_trainer.services.evidence.local_root import local_link_target
from remote_gpu_trainer.services.evidence.manifest import local_manifest, recorded_adoption
from remote_gpu_trainer.services.evidence.verify import checkpoint_statuses
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.meter import meter_reading
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state import events
from remote_gpu_trainer.text import escape_control, money, short_hash, size
from remote_gpu_trainer.views import TeardownPlan

MAX_LISTED = 4
POLL_START_S = 0.2
POLL_MAX_S = 30.0
POLL_GIVE_UP_S = 600.0
GRID_TIMEOUT_S = 15.0  # the box was just asked for the gate; a second question gets less time


@dataclass(frozen=True)
class WaitStep:
    """One look while the provider confirms the box gone (docs/gate.md §7.1): how long rgt has waited, how
    long it will, and what it asked and heard, so a person never watches a silent wait."""

    elapsed_s: float
    limit_s: float
    state: str
    line: str


WaitProgress = Callable[[WaitStep], None]


@dataclass(frozen=True)
class TeardownResult:
    """How a teardown ended: the instance, the last state seen, whether the provider confirmed it gone, and the
    message to show."""

    instance: str
    final_state: str
    confirmed: bool
    message: str


async def plan(session: Session, instance_name: str, action_id: str = "terminate",
               accept_loss: tuple[str, ...] = ()) -> TeardownPlan:
    """What the confirmation shows: the exact action, what it destroys, what still bills, the evidence.

    The gate is evaluated for the physical box (every run launched on it, services/gate.py), with the box
    asked now whether each job still runs and whether its manifest is still there; for an action that
    destroys a disk the box's ledger is read too (docs/gate.md §7.2). `accept_loss` names the runs whose
    results the user accepts to lose: only their reasons are waived."""
    status = await instance_status(session, instance_name)
    profile = session.profile(instance_name)
    action = profile.action(action_id)
    fixed: list[str] = []
    warnings: list[str] = []
    if action is None:
        fixed.append(f"{profile.display_name} has no {action_id!r} action")
    if not status.actable:  # an unknown that is the provider's own word is a box that bills: it may be ended
        fixed.append(f"instance state is {status.state}: nothing to {action_id} until the provider says so")
    gated = action is None or action.needs_gate
    held: tuple[RunConfig, ...] = ()
    verdict = None
    if gated:  # a box that holds no results of rgt's runs has nothing to pull
        verdict = await box_gate.box_verdict(session, instance_name, status.provider_id, None,
                                             ledger=box_gate.reads_ledger(action))
        held = tuple(b.run for b in verdict.covered)
        warnings = list(verdict.warnings)
    covered = verdict.covered if verdict is not None else tuple(await box_gate.box_runs(session, instance_name))
    run_ids = tuple(b.run.id for b in covered)
    lines = describe(session, instance_name, status, action_id, held)
    if gated and not held and not (verdict and verdict.at_risk):
        lines.append("Evidence:  no run of rgt's was launched on this box or left results on it: nothing to pull")
    lines.extend(f"Warning:   {warning}" for warning in warnings)
    if verdict is not None and verdict.at_risk:
        names = ",".join(loss.name for loss in verdict.at_risk)
        lines.append(f"At risk:   results not known to be home: {names} (to give them up, type those names: "
                     f"--accept-loss {names})")
    lines.extend(await _grid_lines(session, run_ids))
    closed = TeardownPlan(
        instance=instance_name, provider_id=status.provider_id, action_id=action_id,
        action_label=action.label if action else action_id, runs=run_ids, gated=gated, gate_open=False,
        reasons=(), lines=tuple(lines), warnings=tuple(warnings),
        irreversible=action is None or not action.reversible,
        at_risk=verdict.at_risk if verdict is not None else (), fixed=tuple(fixed))
    return closed.accepting(accept_loss)


async def _grid_lines(session: Session, run_ids: tuple[str, ...]) -> list[str]:
    """The [grid] points whose checkpoint is still only on this box (docs/deliver.md §7): shown, recorded with
    the approval, and never part of the gate's decision."""
    from remote_gpu_trainer.services.deliver.completeness import box_checkpoint_lines

    try:
        return await box_checkpoint_lines(session, run_ids, timeout_s=GRID_TIMEOUT_S)
    except (RgtError, OSError) as exc:
        return [f"Grid:      the grid's checkpoints could not be located: {exc}"]


def describe(session: Session, instance_name: str, status: InstanceStatus, action_id: str,
             runs: tuple[RunConfig, ...]) -> list[str]:
    profile = session.profile(instance_name)
    action = profile.action(action_id)
    now = session.clock()
    reading = meter_reading(session, instance_name)
    tiers = profile.destroys_text(action) if action else ["?"]
    reversible = "reversible" if action and action.reversible else "IRREVERSIBLE"
    keeps = profile.keeps_billing_text(action) if action else [str(r.get("what")) for r in profile.residuals]
    age = profile_age_text(profile, now.date())
    price = f"{money(status.price_per_hour)}/h ({status.price_source})" if status.price_per_hour else "no meter"
    lines = [
        f"Action:    {profile.id}  {action.label if action else action_id} {status.provider_id} ({reversible})",
        f"Destroys:  {', '.join(tiers)} and everything on it that was not pulled" if tiers
        else "Destroys:  nothing: every disk stays",
        f"Keeps billing: {'; '.join(keeps) if keeps else 'nothing (per the profile)'}",
        f"Burning:   {price} · spent {money(reading.total)}",
        f"Billing facts: {profile.display_name} profile, {age}",
    ]
    command = session.instance(instance_name).teardown_command
    if command and action_id == "terminate":
        lines.append(f"Command:   {command}  (run here, no shell, once you confirm)")
    elif action:
        lines.extend(f"Caveat:    {caveat}" for caveat in action.caveats)
    for run in runs:
        files = checkpoint_statuses(session.project, run, session.db)
        verified = [f for f in files if f.status == "verified"]
        lines.append(f"Verified here: run {run.id}: {len(verified)}/{len(files)} files verified in runs/{run.id}/")
        globs = run.checkpoint_globs
        checkpoints = [f for f in verified if is_checkpoint(f.path, globs)]
        for f in checkpoints[:MAX_LISTED]:
            lines.append(f"  {f.path}  {size(f.bytes)}  sha256 {short_hash(f.sha256)}")
        if len(checkpoints) > MAX_LISTED:
            lines.append(f"  … and {len(checkpoints) - MAX_LISTED} more verified checkpoint(s)")
        lines.extend(link_lines(session, run))
        lines.extend(cell_lines(session, run))
    return lines


def cell_lines(session: Session, run: RunConfig) -> list[str]:
    """The cells the run's manifest records as failed or never started (docs/gate.md §2): what they left is home
    and verified with the rest; the plan says so, so nobody reads a partial run as a complete one."""
    manifest = local_manifest(session.project.run_dir(run.id), run, recorded_adoption(session.db, run.id))
    if manifest is None or not manifest.cells:
        return []
    named = ", ".join(f"{escape_control(c.cell)} {c.words()}" for c in manifest.cells[:MAX_LISTED])
    more = f", … and {len(manifest.cells) - MAX_LISTED} more" if len(manifest.cells) > MAX_LISTED else ""
    return [f"Cells:     run {run.id}: {len(manifest.cells)} of {len(run.roster)} cell(s) did not finish, as the "
            f"box recorded: {named}{more}; what they left is pulled and verified with the rest"]


def link_lines(session: Session, run: RunConfig) -> list[str]:
    """The links the run's manifest recorded (docs/gate.md §2): never followed or copied, re-created locally only
    when they lead to listed files; one that leads out of the result root is named, since its target is not among
    the results and goes with the box."""
    manifest = local_manifest(session.project.run_dir(run.id), run, recorded_adoption(session.db, run.id))
    if manifest is None or not manifest.links:
        return []
    out = manifest.links_out
    made = sum(1 for link in manifest.links if local_link_target(manifest, link) is not None)
    lines = [f"Links:     run {run.id}: {len(manifest.links)} link(s) recorded, {made} re-created in the local copy"
             + (f"; {len(out)} lead out of the result root (their targets are not results and are not "
                "pulled):" if out else "; each leads to a path inside the result root")]
    lines += [f"  {escape_control(link.path)} -> {escape_control(link.target)}" for link in out[:MAX_LISTED]]
    if len(out) > MAX_LISTED:
        lines.append(f"  … and {len(out) - MAX_LISTED} more")
    return lines


async def execute(session: Session, instance_name: str, typed_id: str | None, shown: list[str] | tuple[str, ...],
                  *, actor: str = "user", action_id: str = "terminate",
                  accept_loss: tuple[str, ...] = (), progress: WaitProgress | None = None) -> TeardownResult:
    """Gated actions need the typed instance id and pass the gate twice; reversible ones a confirmation.
    `accept_loss` (typed by a person: `--accept-loss`, the modal) waives the named runs' reasons only.

    Either way the approval, with what the screen showed and any waiver with its reasons, is in the event
    log before the provider call.
    """
    session.require_writable(f"{action_id} of {instance_name}")
    covered = [b.run.id for b in await box_gate.box_runs(session, instance_name)]
    with run_locks(session.project.state_dir, covered, "tearing down"):  # no pull or verify of them meanwhile
        return await _execute(session, instance_name, typed_id, shown, actor=actor, action_id=action_id,
                              accept_loss=accept_loss, progress=progress)


async def _execute(session: Session, instance_name: str, typed_id: str | None, shown: list[str] | tuple[str, ...],
                   *, actor: str, action_id: str, accept_loss: tuple[str, ...],
                   progress: WaitProgress | None) -> TeardownResult:
    typed = (typed_id or "").strip()
    current = await plan(session, instance_name, action_id, accept_loss)
    unknown = [name for name in accept_loss if name not in current.loss_names]
    if unknown:
        _refuse(session, current, [f"--accept-loss names {', '.join(unknown)}, which "
                                   f"{'is' if len(unknown) == 1 else 'are'} not at risk on this box (at risk: "
                                   f"{', '.join(current.loss_names) or 'none'}): nothing is given up by "
                                   "a name that was not shown"], typed, actor)
    if not current.gate_open:
        _refuse(session, current, list(current.reasons), typed, actor)
    if current.gated and typed != current.provider_id:
        _refuse(session, current, [f"typed id {typed!r} does not match instance id {current.provider_id!r}"],
                typed, actor)
    waived = {loss.name: list(loss.reasons) for loss in current.at_risk if loss.name in current.accepted}
    approval_event = events.teardown_approved(
        session.db, instance=instance_name, provider_id=current.provider_id, action=action_id, typed_id=typed,
        shown=shown, runs=current.runs, gated=current.gated, actor=actor, accepted_loss=waived)
    if current.gated:
        reasons = await _gate_with_approval(session, current, Approval(instance_id=typed, at=approval_event.at))
        if reasons:
            _refuse(session, current, reasons, typed, actor)
    events.teardown_requested(session.db, instance=instance_name, provider_id=current.provider_id, action=action_id,
                              actor=actor)
    provider = session.provider(instance_name)
    instance = session.instance(instance_name)
    try:
        if action_id == "terminate":
            await provider.terminate(instance)
        elif action_id == "stop":
            await provider.stop(instance)
        else:
            raise RgtError(f"unknown teardown action {action_id!r}")
    except RgtError as exc:
        events.teardown_failed(session.db, instance=instance_name, action=action_id, error=str(exc))
        raise
    result = await _confirm(session, instance_name, action_id, progress)
    if action_id == "terminate":  # gone or not: say what still bills (an instance stuck in 'alert' does)
        return await _follow_up(session, instance_name, result)
    return result


async def _follow_up(session: Session, instance_name: str, result: TeardownResult) -> TeardownResult:
    """After the provider confirmed the terminate: what still bills (volumes, IPs, snapshots, an instance
    left in an alert state), from the provider's own audit where it has one, else from the profile."""
    provider = session.provider(instance_name)
    wait_gone = provider.wait_gone if isinstance(provider, WaitsGone) else None  # API providers audit what bills
    residuals: list[str] = []
    checked = wait_gone is not None
    if wait_gone is not None:
        try:
            outcome = await wait_gone(session.instance(instance_name), timeout_s=60.0 if result.confirmed else 1.0,
                                      poll_s=2.0)
        except RgtError as exc:
            residuals.append(f"could not list what still bills: {exc}: check the console")
        else:
            residuals.extend(f"{r.kind} {r.ident}: {r.detail} (ends with: {r.ended_by})"
                             + ("" if r.confirmed else " (unchecked)") for r in outcome.residuals)
            residuals.extend(f"audit error: {error}" for error in outcome.errors)
    profile = session.profile(instance_name)
    action = profile.action("terminate")
    if not checked and action is not None:
        residuals.extend(profile.keeps_billing_text(action))
    if not residuals:
        return result
    message = f"{result.message}; still billing: " + "; ".join(residuals)
    events.residuals_billing(session.db, instance=instance_name, residuals=residuals,
                             source="provider" if checked else "profile")
    return TeardownResult(result.instance, result.final_state, result.confirmed, message)


async def _gate_with_approval(session: Session, current: TeardownPlan, approval: Approval) -> list[str]:
    """The gate at call time, for every run on the box: the box's manifest re-read, the job's state and the
    ledger asked now (when the box answers), the approval checked against the latest verification; the runs
    the user accepted to lose stay waived, nothing else."""
    action = session.profile(current.instance).action(current.action_id)
    verdict = await box_gate.box_verdict(session, current.instance, current.provider_id, approval,
                                         ledger=box_gate.reads_ledger(action))
    return [*current.fixed, *verdict.reasons(current.accepted)]


async def _confirm(session: Session, instance_name: str, action_id: str,
                   progress: WaitProgress | None = None) -> TeardownResult:
    """A provider's 'OK' is not proof: re-query until the state says so, backing off, then give up. Each
    look is reported to `progress` with the time waited and the state heard."""
    wanted = "terminated" if action_id == "terminate" else "stopped"
    delay, waited = POLL_START_S, 0.0
    began = time.monotonic()
    asked = f"{session.profile(instance_name).display_name}'s state of {instance_name}"
    while True:
        status = await instance_status(session, instance_name)
        if progress is not None and status.state != wanted:
            elapsed = time.monotonic() - began
            progress(WaitStep(elapsed, POLL_GIVE_UP_S, status.state,
                              f"waiting for {instance_name} to be {wanted}: {elapsed:.0f} s of at most "
                              f"{POLL_GIVE_UP_S:.0f} s; asked {asked}: {status.state}, next look in "
                              f"{min(delay, POLL_GIVE_UP_S):.1f} s"))
        if status.state == wanted:
            evidence = str(status.detail.get("evidence", "provider-confirmed"))
            how = "recorded as user-attested" if evidence == "user-attested" else "confirmed by the provider"
            message = f"{instance_name} {wanted}, {how}"
            events.teardown_confirmed(session.db, instance=instance_name, terminated=wanted == "terminated",
                                      message=message, evidence=evidence, state=status.state)
            return TeardownResult(instance_name, status.state, True, message)
        if waited >= POLL_GIVE_UP_S:
            raw = status.detail.get("raw_state")
            said = f"{status.state} (the provider says {raw!r})" if raw and raw != status.state else status.state
            message = f"provider still lists {instance_name} as {said}: it may still bill; check the console"
            events.teardown_unconfirmed(session.db, instance=instance_name, message=message)
            return TeardownResult(instance_name, "unknown", False, message)
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, POLL_MAX_S)


def _refuse(session: Session, current: TeardownPlan, reasons: list[str], typed_id: str, actor: str) -> None:
    events.gate_refused(session.db, instance=current.instance, action=current.action_id, reasons=reasons,
                        typed_id=typed_id, actor=actor)
    open_names = [name for name in current.loss_names if name not in current.accepted]
    hint = (f"results not known to be home: {', '.join(open_names)}; pull and verify them, or, to give them up, "
            f"type their names: --accept-loss {','.join(open_names)}") if open_names else ""
    raise GateRefused(f"teardown of {current.instance} refused: {reasons[0]}"
                      + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""), reasons, hint)
