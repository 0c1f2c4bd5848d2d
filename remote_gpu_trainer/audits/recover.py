"""May rgt recover a preempted run on its own, and how? (docs/remote-ops.md §10.1): pure decisions over the facts
the recovery service gathers.

Spending is the user's decision. Recovery acts only inside `runs.<id>.recover` (config/recover.py) and only while a
person's approval of exactly those limits stands; every refusal names the limit or the missing approval, so the
user reads why a run waits. What recovery may do is resume the run on its own box when that box is back, start that
box again when its provider stopped it (a RunPod spot pod interrupted to EXITED) within the limits, or rent an
equivalent one within the limits. It never tears anything down (services/teardown.py is the only code that acts on
the teardown gate, and recovery never calls it), and never undoes a stop or teardown a person made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from remote_gpu_trainer.config.recover import RecoverLimits

BACK_STATES = ("running",)  # the preempted box answers again: resume there
COMING_STATES = ("pending", "starting", "restarting", "resuming")  # the provider is bringing it back: wait
GOING_STATES = ("stopping", "terminating")  # the provider is taking it down: wait for where it ends


class Step(StrEnum):
    """What recovery does next for a run."""

    NONE = "none"  # nothing to recover: the run is not preempted
    RESUME_HERE = "resume_here"  # the preempted box is back: relaunch the run there
    START_BOX = "start_box"  # the provider stopped the box and it can be started again: start it within the limits
    RENT = "rent"  # the box is gone: rent an equivalent one within the limits
    WAIT = "wait"  # the provider is bringing the box back: look again later
    REFUSED = "refused"  # preempted, but a limit or the approval forbids recovery: a person decides


@dataclass(frozen=True)
class ApprovalCheck:
    """Whether a person's approval of the run's current limits stands: `ok`, or the reason it does not."""

    ok: bool
    reason: str = ""  # why not: none given, given for other limits, for another launch configuration, revoked
    seq: int | None = None  # the approval event, when there is one that stands


@dataclass(frozen=True)
class RecoveryFacts:
    """What the decision reads, gathered by services/recover/ from the box, the provider and the event log."""

    run_id: str
    preempted: bool
    limits: RecoverLimits | None
    approval: ApprovalCheck
    restarts_used: int  # recoveries already made for the run (each a launch recorded as one)
    spent: float  # what the boxes recovery rented for the run have billed so far
    now: datetime
    box_state: str  # the run's box as its provider says now: running, stopped, terminated, unknown, ...
    box_holds_run: bool  # the box answers and still holds the run's files (its disk is back)
    box_startable: bool = False  # the provider can start the stopped box again through its API (RunPod, vast.ai)
    put_down: str = ""  # rgt down stopped or tore down the box since the run's launch: what it wrote (a person decided)
    rented: str = ""  # the box recovery already began to rent or start since the run's launch (one per launch)
    box_reclaimed: bool = False  # the provider's own word says it took the box (Lambda's `preempted`) while listing it


@dataclass(frozen=True)
class Decision:
    step: Step
    reasons: tuple[str, ...] = ()


def decide(facts: RecoveryFacts) -> Decision:
    """The next step: refusals first (no limits, no standing approval, a limit reached), then where to resume."""
    if not facts.preempted:
        return Decision(Step.NONE, (f"run {facts.run_id} is not preempted",))
    refused = refusals(facts)
    if refused:
        return Decision(Step.REFUSED, tuple(refused))
    if facts.box_state in BACK_STATES and facts.box_holds_run:
        return Decision(Step.RESUME_HERE, ("the preempted box is back and still holds the run",))
    if facts.box_state in COMING_STATES + GOING_STATES:
        return Decision(Step.WAIT, (f"the provider says the box is {facts.box_state}: waiting for it",))
    if facts.box_state == "stopped" and facts.box_startable:
        if facts.rented:
            return _once(facts)
        return Decision(Step.START_BOX, ("the provider stopped the box: it is started again within the limits, and "
                                         "the run resumes there once it answers",))
    if facts.box_reclaimed and facts.box_state != "terminated":
        return Decision(Step.REFUSED, (f"the provider says it took the box but still lists it ({facts.box_state}), "
                                       "and it may bill until terminated: recovery rents nothing beside it; pull what "
                                       "it holds, terminate it with `rgt down`, then `rgt up`",))
    if facts.box_state == "terminated":
        return _rent(facts)
    if facts.box_state == "unknown":
        return Decision(Step.WAIT, ("the provider's answer is unknown: nothing is rented while the box may still "
                                    "be there",))
    unread = " but its run cannot be read" if facts.box_state in BACK_STATES else ""
    return Decision(Step.REFUSED, (f"the box is {facts.box_state}{unread}: recovery neither relaunches there nor "
                                   "rents another while it is there; a person decides",))


def _rent(facts: RecoveryFacts) -> Decision:
    """The box is gone: rent an equivalent one, once per launch of the run."""
    if facts.rented:
        return _once(facts)
    return Decision(Step.RENT, ("the box is terminated: an equivalent box is rented within the limits",))


def _once(facts: RecoveryFacts) -> Decision:
    """Recovery rents or starts at most one box per launch of the run: a second one is a person's decision."""
    return Decision(Step.REFUSED, (f"recovery already rented or started {facts.rented} for this launch, and the box "
                                   f"is {facts.box_state} without the run: one box per launch, a person decides",))


def refusals(facts: RecoveryFacts) -> list[str]:
    """Every reason recovery may not act for this run now (empty: it may)."""
    limits = facts.limits
    if limits is None:
        return [f"runs.{facts.run_id}.recover is not set in rgt.toml: recovery has no limits to act within"]
    reasons = []
    if not facts.approval.ok:
        reasons.append(facts.approval.reason)
    if facts.put_down:
        reasons.append(f"{facts.put_down}: a person put the box down, and recovery never undoes that")
    if facts.now >= limits.until:
        reasons.append(f"the recovery window ended at {limits.until.isoformat()} (runs.{facts.run_id}.recover.until)")
    if facts.restarts_used >= limits.max_restarts:
        reasons.append(f"{facts.restarts_used} of {limits.max_restarts} restart(s) used "
                       f"(runs.{facts.run_id}.recover.max_restarts)")
    if facts.spent >= limits.max_spend:
        reasons.append(f"recovery spent {facts.spent:.2f} of {limits.max_spend:.2f} "
                       f"(runs.{facts.run_id}.recover.max_spend)")
    return reasons


def quote_refusals(limits: RecoverLimits, *, price_per_hour: float | None, gpu: str, own_gpu: str | None,
                   spent: float, run_id: str) -> list[str]:
    """Why a quoted box may not be rented by recovery (empty: it may): a price above max_price_per_hour or unknown,
    a GPU class outside the declared list (or, without one, other than the run's own), or an hour of it that would
    take recovery's spending past max_spend."""
    reasons = []
    if price_per_hour is None:
        reasons.append("the quote states no price: nothing is rented at an unknown price")
    elif price_per_hour > limits.max_price_per_hour:
        reasons.append(f"the quote is {price_per_hour:.4f}/h, above max_price_per_hour {limits.max_price_per_hour:.4f} "
                       f"(runs.{run_id}.recover)")
    allowed = limits.gpus or ((own_gpu,) if own_gpu else ())
    if not allowed:
        reasons.append(f"no GPU class to rent: set runs.{run_id}.recover.gpus or the instance's launch.gpu")
    elif gpu.strip().lower() not in {name.strip().lower() for name in allowed}:
        reasons.append(f"the quote is for {gpu!r}, not one of {', '.join(allowed)}")
    if price_per_hour is not None and spent + price_per_hour > limits.max_spend:
        reasons.append(f"an hour at {price_per_hour:.4f} would take recovery's spending from {spent:.2f} past "
                       f"max_spend {limits.max_spend:.2f}")
    return reasons


def home_copy_due(last_asked: float, interval_s: float, now: float) -> bool:
    """Whether the box is asked for the run's newest checkpoints again (services/recover/checkpoint_home.py): once per
    interval (the Young/Daly cadence W), counted from the last time it was asked or a copy was kept; times on one
    monotonic clock, 0 for never."""
    return last_asked <= 0 or now - last_asked >= interval_s
