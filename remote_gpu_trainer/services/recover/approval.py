"""A person's approval of a run's recovery limits (docs/remote-ops.md §10.1): given once, bound to those limits and to
the run's launch configuration, and checked before every step recovery takes.

Where it lives: the append-only event log (`recovery` events, step `approved` or `revoked`), with the actor who gave
it (`person:<tty>` at a terminal, a person in the TUI, or a person deciding an agent's request in the approval inbox).
Never an allowance: an allowance lets an agent's rent or resume through on its own, and recovery's limits are a
person's decision each time they change. What binds it:
- the limits exactly as rgt.toml states them now (`RecoverLimits.canonical`): a limit edited asks again;
- the run's launch configuration, the keys that say where its files and processes are (run_records.LOCATION_KEYS,
  but the instance, which a recovery onto another box changes): a command or folder edited asks again, and a run
  whose rgt.toml table moved since its launch is not recovered at all (its relaunch would continue elsewhere).
A lost or reset state database holds no approval, so nothing is recovered until a person approves again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.recover import ApprovalCheck
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.run_records import LOCATION_KEYS
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.events import Event, EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import LaunchConstraint, RunConfig
    from remote_gpu_trainer.config.recover import RecoverLimits
    from remote_gpu_trainer.services.session import Session

BOUND_KEYS = tuple(key for key in LOCATION_KEYS if key != "instance")
APPROVED, REVOKED = "approved", "revoked"


def launch_binding(run: RunConfig, launch: LaunchConstraint | None = None) -> str:
    """The digest of the run's launch configuration as rgt.toml states it (BOUND_KEYS), and of what its instance's
    `launch` table says recovery may rent (when it has one: the approval's prompt says a box it rents is trusted at
    its first host key, so an edit of that table asks again)."""
    run = run.as_configured()
    values: dict[str, object] = {key: list(value) if isinstance(value, tuple) else value
                                 for key in BOUND_KEYS for value in (getattr(run, key),)}
    if launch is not None:
        values["launch"] = json.loads(json.dumps(dataclasses.asdict(launch)))
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode("utf-8")).hexdigest()


def binding(session: Session, run: RunConfig) -> str:
    """The run's launch binding with its instance's `launch` table as rgt.toml states it now."""
    instance = session.project.instances.get(run.instance)
    return launch_binding(run, instance.launch if instance is not None else None)


def approval_prompt(session: Session, run_id: str) -> tuple[str, ...]:
    """What a person is shown before approving: the limits in words, and what they are bound to."""
    run = _recoverable(session, run_id)
    limits = run.recover
    assert limits is not None
    currency = session.profile(run.instance).pricing.currency
    return (f"recovery of run {run_id} on its own, after a preemption, within:", *(f"  {line}" for line in
            limits.lines(currency)),
            f"bound to: {run.command!r} in {run.workdir}, results in {run.remote_root}",
            *(("a box it rents through the provider's API is trusted at its first host key, once, under this "
               "approval",) if session.project.instances[run.instance].launch is not None else ()),
            "recovery never tears anything down; a box it rents bills on the meter and shows in `rgt status`")


def approve(session: Session, run_id: str, shown: RecoverLimits, actor: str) -> Event:
    """Record a person's approval of the limits they were `shown` (by `rgt recover --approve`, or in an inbox
    request's plan); refused, with nothing recorded, when rgt.toml states other limits now (edited while they read)."""
    session.require_writable("approving recovery")
    run = _recoverable(session, run_id)
    limits = run.recover
    if limits != shown:
        raise ConfigError(f"run {run_id}: runs.{run_id}.recover changed since it was shown: nothing was approved; "
                          "read the limits again")
    assert limits is not None
    currency = session.profile(run.instance).pricing.currency
    return events.recover_step(session.db, run_id=run_id, instance=run.instance, step=APPROVED, actor=actor,
                                summary=f"recovery of {run_id} approved: " + "; ".join(limits.lines(currency)),
                                detail={"limits": json.loads(limits.canonical()), "binding": binding(session, run)})


def revoke(session: Session, run_id: str, actor: str) -> Event:
    """Withdraw the run's approval: nothing is recovered until a person approves again."""
    session.require_writable("revoking recovery")
    run = run_config(session, run_id)
    return events.recover_step(session.db, run_id=run_id, instance=run.instance, step=REVOKED, actor=actor,
                                summary=f"recovery of {run_id} revoked", detail={})


def check_approval(session: Session, run: RunConfig, limits: RecoverLimits) -> ApprovalCheck:
    """Whether the latest approval or revocation of the run approves `limits` for its launch configuration now."""
    latest = last_decision(session, run.id)
    where = f"`rgt recover {run.id} --approve`"
    if latest is None:
        return ApprovalCheck(False, f"no person approved recovery of {run.id} ({where})")
    if latest.detail.get("step") == REVOKED:
        return ApprovalCheck(False, f"recovery of {run.id} was revoked by {latest.actor} ({where} approves again)")
    if run.location_drift:
        moved = ", ".join(drift.key for drift in run.location_drift)
        return ApprovalCheck(False, f"rgt.toml changed {moved} of {run.id} since its launch: a relaunch would not "
                                    "continue the run where its launch put it")
    if latest.detail.get("limits") != json.loads(limits.canonical()):
        return ApprovalCheck(False, f"runs.{run.id}.recover changed since {latest.actor} approved it: stale ({where})")
    if latest.detail.get("binding") != binding(session, run):
        return ApprovalCheck(False, f"the launch configuration of {run.id} changed since {latest.actor} approved its "
                                    f"recovery: stale ({where})")
    return ApprovalCheck(True, seq=latest.seq)


def last_decision(session: Session, run_id: str) -> Event | None:
    """The latest approval or revocation of the run's recovery in the event log."""
    found = [event for event in session.db.events(run_id=run_id, kind=EventKind.RECOVER)
             if event.detail.get("step") in (APPROVED, REVOKED)]
    return max(found, key=lambda event: event.seq) if found else None


def _recoverable(session: Session, run_id: str) -> RunConfig:
    run = run_config(session, run_id)
    if run.recover is None:
        raise ConfigError(f"run {run_id}: runs.{run_id}.recover is not set in {session.project.file}: write the "
                          "limits there first, e.g. recover = { max_price_per_hour = 0.6, max_spend = 25, "
                          "max_restarts = 3, until = 2026-12-31T08:00:00Z }")
    return run
