"""The verbs that bring a run up and follow it: up, push, run, watch.

Each is `async (session, args) -> exit code`, run by cli/sessions.on_run with the project and the run
already checked.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from remote_gpu_trainer import text
from remote_gpu_trainer.cli import printers, schemas
from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, ConfigError, RgtError, VerbFailed
from remote_gpu_trainer.providers.base import Creatable
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.fleet import auto_follow
from remote_gpu_trainer.services.fleet.progress_line import ProgressTicker, progress_line
from remote_gpu_trainer.services.instances import create_instance, instance_status
from remote_gpu_trainer.services.launch import env_audit
from remote_gpu_trainer.services.launch.env_audit import audit_run_environment
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.watch import recovery, run_logs, watched_state
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState
    from remote_gpu_trainer.services.watch.log_monitor import Alert


async def up(session: Session, args: argparse.Namespace) -> int:
    run = session.project.run(args.run)  # up, push and run prepare the next launch: rgt.toml as it is
    provider = session.provider(run.instance)
    if not isinstance(provider, Creatable):
        from remote_gpu_trainer.services.launch import rent as launcher  # not for sim: it loads the cloud clients

        if await launcher.wants_launch(session, run.instance):
            return await _up_launch(session, args.run, args.approve_price)
    status = (await create_instance(session, run.instance, actor="cli") if isinstance(provider, Creatable)
              else await instance_status(session, run.instance))
    print(f"{run.instance}: {status.state} ({status.provider_id})")
    rows = await audit_run_environment(session, args.run, actor="cli")
    printers.print_audit(rows)
    return EXIT_FAILED if any(r.status == "fail" for r in rows) else EXIT_OK


async def push(session: Session, args: argparse.Namespace) -> int:
    from remote_gpu_trainer.services.launch.launch import push as push_files

    run = session.project.run(args.run)
    session.require_writable("push")
    written = await push_files(session.project, run, await instances.remote(session, run.instance))
    print("\n".join(f"pushed {path}" for path in written) or "nothing to push")
    return EXIT_OK


async def run(session: Session, args: argparse.Namespace) -> int:
    from remote_gpu_trainer.services.launch import launch as runner

    run = session.project.run(args.run)
    if getattr(args, "resume", False):
        return await _resume(session, args)
    if args.rerun:
        args.run = runner.add_rerun(session, args.run, actor="cli")
        run = session.project.run(args.run)
        print(f"added [runs.{args.run}] to {session.project.file} (remote_root {run.remote_root})")
    await runner.refuse_reused_id(session, run)  # before the audit: a reused id is refused at once
    rows = await audit_run_environment(session, args.run, actor="cli")
    printers.print_audit(rows)
    failed = [r for r in rows if r.status == "fail"]
    if failed and not args.ack:
        raise VerbFailed(f"phase-0 audit: {len(failed)} row(s) failed, first: {failed[0].check}: "
                         f"{failed[0].detail}; fix it, or launch anyway with --ack \"why\"")
    if failed:
        env_audit.acknowledge_failed_rows(session, args.run, failed, args.ack, actor="cli")
    detail = await launch_run(session, args.run, actor="cli")
    print(f"launched {args.run} on {run.instance}: pid {detail['pid']}, log {detail['log']}")
    return EXIT_OK


RELAUNCHED, UNDERWAY = "relaunched", "underway"  # what recovery did for a watched run (`recovered`)


async def watch(session: Session, args: argparse.Namespace) -> int:
    """Print the run's state changes and alerts until the job is over (finished, dead or preempted; exit 0
    only for finished with its follow-ups done); `--once`: one pass, exit 1 when the box could not be asked or
    a follow-up failed."""
    run_id = run_config(session, args.run).id
    if args.format == "json":  # the parser allows it with --once only
        state, alerts = await _watch_pass(session, run_id)
        # one document stands alone: every open alert of the run (a stall raised at an earlier pass included),
        # then any of this pass's that the database does not hold
        shown = run_logs.current_alerts(session, run_id)
        held = {alert.signature for alert in shown}
        shown += [alert for alert in alerts if alert.signature not in held]
        printers.print_json(schemas.watch_document(run_id, iso_z(session.clock()), state.liveness, shown))
        return EXIT_FAILED if watched_state.unanswered(state) else EXIT_OK
    last: tuple[str, str] | None = None
    said: set[str] = set()  # recovery's lines already printed: a wait is said once, not at every pass
    ticker = ProgressTicker(args.progress_every)
    while True:
        state, alerts = await _watch_pass(session, run_id)
        printers.print_alerts(alerts, iso_z(session.clock()))
        # a state is said once, when it changes: a running or stalled run's detail ("log silent 12s") changes at
        # every pass and would reprint the same state every interval
        moving = state.liveness.state in ("running", "stalled")
        current = (state.liveness.state, "" if moving else state.liveness.detail)
        if current != last or args.once:
            print(f"{iso_z(session.clock())} run {run_id}: {state.liveness.state} "
                  f"({escape_control(state.liveness.detail)})", flush=True)
            last = current
        followed = await _progress_or_follow_up(session, run_id, state, ticker)
        recovery = await recovered(session, run_id, state, said)
        if recovery and not args.once:  # relaunched, or its box is coming back: watched on
            if recovery == RELAUNCHED:
                last = None  # the relaunched run is watched on, from its new launch
            await asyncio.sleep(args.interval)
            continue
        if args.once:
            return EXIT_OK if followed and not watched_state.unanswered(state) else EXIT_FAILED
        if watched_state.ended_here(state):
            return EXIT_OK if state.liveness.state == "finished" and followed else EXIT_FAILED
        if state.liveness.detail == "not launched":
            raise VerbFailed(f"run {run_id} was never launched: `rgt run {run_id}` first")
        await asyncio.sleep(args.interval)


async def recovered(session: Session, run_id: str, state: RunState, said: set[str] | None = None) -> str:
    """A run with `runs.<id>.recover`: while it runs, its newest checkpoint kept home when due
    (services/recover/checkpoint_home.py); once preempted, handed to recovery (services/recover/run.py). What either
    did is printed (a line in `said` is not printed again). RELAUNCHED when the run was relaunched, UNDERWAY while
    recovery waits for its box to come back or started it again, "" otherwise. Nothing is imported for a run without
    limits."""
    if run_config(session, run_id).recover is None:
        return ""
    from remote_gpu_trainer.audits.preemption import is_preempted
    from remote_gpu_trainer.audits.recover import Step
    from remote_gpu_trainer.services.recover.checkpoint_home import watcher_lines
    from remote_gpu_trainer.services.recover.run import recover_run

    for line in await watcher_lines(session, run_id, state.liveness.state):
        print(f"{iso_z(session.clock())} {line}", flush=True)
    outcome = await recover_run(session, run_id, state)
    if outcome is None:  # another rgt holds the run's lock, or its box changed since this look: look again
        return UNDERWAY if is_preempted(state.liveness) else ""
    line = escape_control(outcome.line())
    if said is None or line not in said:
        print(f"{iso_z(session.clock())} {line}", flush=True)
    if said is not None:
        said.add(line)
    if outcome.relaunched:
        return RELAUNCHED
    return UNDERWAY if outcome.step in (Step.WAIT, Step.START_BOX) else ""


async def _resume(session: Session, args: argparse.Namespace) -> int:
    """`rgt run RUN --resume`: a preempted run relaunched on its still-billing box (services/launch/resume.py)."""
    from remote_gpu_trainer.services.launch.resume import resume_run

    if args.rerun:
        raise ConfigError("--resume relaunches RUN under its own id and --rerun under a new one: pick one")
    detail = await resume_run(session, args.run, actor="cli")
    print(f"resumed {args.run} on {run_config(session, args.run).instance}: pid {detail['pid']}, log {detail['log']}")
    return EXIT_OK


async def _progress_or_follow_up(session: Session, run_id: str, state: RunState, ticker: ProgressTicker) -> bool:
    """A training run's progress line when one is due; a finished run's automatic pull and verification
    (rgt.toml `auto`, services/fleet/auto_follow.py) when no watcher took them yet. False when that follow-up failed."""
    if state.liveness.state in ("running", "stalled"):
        line = await progress_line(session, run_id, ticker)
        if line is not None:
            print(line, flush=True)
        return True
    done = await auto_follow.follow_up(session, run_id, state.liveness.state)
    if done is not None:
        print(f"{iso_z(session.clock())} run {run_id}: auto follow-up {done.outcome}: "
              f"{escape_control(done.summary)}", flush=True)
    return done is None or done.ok


async def _watch_pass(session: Session, run_id: str) -> tuple[RunState, list[Alert]]:
    """One status pass: the log followed (its alerts first), the run's state (with the provider's word when the
    job reads dead or unknown: services/watch/watched_state.py), then the rules' alerts. A box that cannot be reached
    skips the log; its state then says why."""
    alerts: list[Alert] = []
    try:
        update = await run_logs.follow_log(session, run_id)
    except RgtError:
        update = None
    if update is not None:
        alerts.extend(update.alerts)
    state = await watched_state.watched_run_state(session, run_id)
    await run_logs.evaluate_rules(session, run_id, state)
    recovery.refresh(session, run_id, state.liveness)  # .rgt/recovery/<run-id>.md, when the state changed
    alerts.extend(run_logs.take_alerts(session))
    return state, alerts


async def _up_launch(session: Session, run_id: str, approved_price: str | None) -> int:
    """Rent the run's instance: the smoke gate here first, then the plan, then only the stated price launches."""
    from remote_gpu_trainer.services.launch import rent as launcher

    run = session.project.run(run_id)
    launcher.check_launchable(session, run.instance)
    if run.smoke:
        print(f"smoke gate: running `{run.smoke}` here on the CPU …", file=sys.stderr, flush=True)
    smoke = await launcher.run_smoke(session.project, run)
    if not smoke.passed:
        for line in smoke.output_tail.splitlines()[-10:]:
            print(f"  │ {escape_control(line)}", file=sys.stderr)
        raise VerbFailed(f"smoke gate failed: {smoke.summary()}; nothing was rented")
    print(f"smoke gate passed: {smoke.summary()}")
    plan = await launcher.plan_launch(session, run.instance)
    print("\n".join(plan.lines))
    if approved_price is None:
        raise VerbFailed(f"not launched: to rent {run.instance} at {text.price(plan.price, plan.currency)}/h, "
                         f"run `rgt up {run_id} --approve-price {plan.price_text}`")
    created = await launcher.launch(session, plan, run_id, approved_price, smoke, actor="cli")
    price = "?" if created.price_per_hour is None else text.price(created.price_per_hour, plan.currency)
    print(f"launched {run.instance}: {plan.provider} {created.provider_id} ({created.state}) at {price}/h, billing now")
    print(f"next: put {launcher.config_line(created.provider_id)} under [instances.{run.instance}] in "
          f"{session.project.file} (rgt does not edit it), then `rgt up {run_id}` again once it runs for the "
          f"environment audit; remove it with `rgt down {run_id} --confirm {created.provider_id}`")
    return EXIT_OK
