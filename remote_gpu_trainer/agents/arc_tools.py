"""The handlers of the run's own arc: push, run, watch, pull, verify (tools.py lists them).

Each calls the service its CLI verb calls (cli/launch_verbs.py, cli/evidence_verbs.py), with the agent as the actor,
and returns the document that verb prints with `--format json` (cli/schemas.py); where a verb has no JSON form yet
(push, run) the document is the verb's printed facts as keys. Nothing here rents, resumes, stops or terminates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from remote_gpu_trainer.agents.calls import Call, Outcome
from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.errors import VerbFailed

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

RunId = Annotated[str, Field(description="the run's id: a [runs.ID] table of rgt.toml")]
PUSH_SCHEMA = "rgt-push/v1"
RUN_SCHEMA = "rgt-run/v1"


async def push(call: Call, run: RunId) -> Outcome:
    from remote_gpu_trainer.services import instances
    from remote_gpu_trainer.services.launch.launch import push as push_files

    config = call.run(run)
    session = call.writable("push")
    written = await push_files(session.project, config, await instances.remote(session, config.instance))
    return Outcome({"schema": PUSH_SCHEMA, "run": config.id, "instance": config.instance, "pushed": written})


async def launch(call: Call, run: RunId,
                 ack: Annotated[str, Field(description="launch past failed phase-0 rows anyway, and why (recorded "
                                                       "in the event log); empty: a failed row refuses")] = "",
                 rerun: Annotated[bool, Field(description="launch a copy of the run under a new id (rgt.toml gets "
                                                          "the new [runs.ID] table), as `rgt run --rerun`")] = False,
                 ) -> Outcome:
    """`rgt run`: the phase-0 environment audit, then the launch; failed rows refuse unless `ack` says why."""
    from remote_gpu_trainer.services.launch import env_audit
    from remote_gpu_trainer.services.launch import launch as runner

    call.run(run)
    session = call.writable("run")
    original = run
    if rerun:
        run = runner.add_rerun(session, run, actor=call.actor)
    config = call.run(run)
    await runner.refuse_reused_id(session, config)  # before the audit: a reused id is refused at once
    rows = await env_audit.audit_run_environment(session, run, actor=call.actor)
    document: dict[str, Any] = {
        "schema": RUN_SCHEMA, "run": run, "instance": config.instance, "rerun_of": original if rerun else None,
        "environment": [{"id": r.id, "check": r.check, "status": r.status, "detail": r.detail} for r in rows],
        "acknowledged": None, "launched": None}
    failed = [r for r in rows if r.status == "fail"]
    if failed and not ack.strip():
        return Outcome(document, VerbFailed(
            f"phase-0 audit: {len(failed)} row(s) failed, first: {failed[0].check}: {failed[0].detail}; fix it, "
            "or launch anyway with ack=\"why\""))
    if failed:
        env_audit.acknowledge_failed_rows(session, run, failed, ack, actor=call.actor)
        document["acknowledged"] = ack
    detail = await runner.launch_run(session, run, actor=call.actor)
    document["launched"] = {"pid": detail["pid"], "log": detail["log"]}
    return Outcome(document)


async def watch(call: Call, run: RunId) -> Outcome:
    """One look, as `rgt watch RUN --once --format json`, with the training's progress figures beside it."""
    from remote_gpu_trainer.cli import schemas
    from remote_gpu_trainer.cli.launch_verbs import _watch_pass  # the pass `rgt watch` makes, not a copy of it
    from remote_gpu_trainer.services.watch import run_logs

    config = call.run(run)
    session = call.session()
    _new_launch_new_monitor(session, config.id)
    state, alerts = await _watch_pass(session, config.id)
    shown = run_logs.current_alerts(session, config.id)  # every open alert, then this pass's the database lacks
    held = {alert.signature for alert in shown}
    shown += [alert for alert in alerts if alert.signature not in held]
    document = schemas.watch_document(config.id, iso_z(session.clock()), state.liveness, shown)
    document["progress"] = progress_figures(call, config.id)
    return Outcome(document)


def _new_launch_new_monitor(session: Session, run_id: str) -> None:
    """The watch session is kept between calls (tools.py): a launch made since (by rgt_run, another face) starts
    its lines at a new offset, so the monitor that followed the previous one is dropped, as launching drops it."""
    from remote_gpu_trainer.services.watch.monitors import forget_monitor

    launch = session.db.launch(run_id)
    current = None if launch is None else (launch.get("at"), launch.get("log_offset"))
    followed: dict[str, Any] = session.cache(__name__, dict)
    if run_id in followed and followed[run_id] != current:
        forget_monitor(session, run_id)
    followed[run_id] = current


def progress_figures(call: Call, run_id: str) -> dict[str, Any] | None:
    """Step, total, ETA and the last loss, from the log monitor the dashboard and `rgt watch`'s progress line read
    (services/fleet/progress_line.py); None before the log showed a step."""
    from remote_gpu_trainer.services.watch.monitors import opened_monitor

    session = call.session()
    monitor = opened_monitor(session, run_id)
    snapshot = monitor.snapshot if monitor is not None else None
    if monitor is None or snapshot is None or snapshot.step is None:
        return None
    eta = snapshot.eta(session.clock().timestamp())
    last = monitor.loss.last
    return {"step": snapshot.step, "total_steps": snapshot.total_steps,
            "eta_s": None if eta is None else round(eta, 3), "loss": None if last is None else last[1]}


async def pull(call: Call, run: RunId) -> Outcome:
    from remote_gpu_trainer.cli import schemas
    from remote_gpu_trainer.services.evidence import verbs as evidence_verbs
    from remote_gpu_trainer.services.evidence.pull import PullProgress

    config = call.run(run)
    session = call.writable("pull")
    done: dict[str, int] = {}
    sizes: dict[str, int] = {}

    def progress(step: PullProgress) -> None:
        if not sizes:
            sizes.update(evidence_verbs.manifest_sizes(session, config.id))
        done[step.path] = step.done
        call.progress(sum(done.values()), float(sum(sizes.values())) or None, step.line())

    result = await evidence_verbs.pull_run(session, config.id, progress=progress, actor=call.actor)
    where = session.project.run_dir(config.id)
    document = schemas.pull_document(config.id, where, result)
    if result.ok:
        return Outcome(document)
    return Outcome(document, VerbFailed(
        f"pull of {config.id} incomplete: {len(result.failed)} of {len(result.files)} file(s) were not fetched and "
        f"verified against the manifest into {where}: fix the reasons in `failed`, then rgt_pull again"))


async def verify(call: Call, run: RunId) -> Outcome:
    from remote_gpu_trainer.cli import schemas
    from remote_gpu_trainer.services.evidence import verbs as evidence_verbs
    from remote_gpu_trainer.services.evidence.verify import VerifyStep

    config = call.run(run)
    session = call.writable("verify")

    def progress(step: VerifyStep) -> None:
        call.progress(step.hashed, float(step.total) or None, step.text)

    outcome = await evidence_verbs.verify_run(session, config.id, progress=progress, actor=call.actor)
    document = schemas.verify_document(config.id, session.project.run_dir(config.id), outcome)
    if outcome.ok:
        return Outcome(document)
    first = outcome.errors[0]
    return Outcome(document, VerbFailed(f"verification of {config.id} failed: {len(outcome.errors)} problem(s), "
                                        f"first: {first.code} {first.path} {first.detail}".rstrip()))
