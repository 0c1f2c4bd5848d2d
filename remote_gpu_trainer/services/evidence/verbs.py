"""`rgt pull` and `rgt verify` as every face calls them: a configured run, under its lock, with the events
that say how each ended. The steps themselves are pull.py and verify.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, Problem, parse_manifest
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import RgtError, TransportError, VerbFailed
from remote_gpu_trainer.fsutil import read_regular, run_lock
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.audit import audit
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence import pull as evidence_pull
from remote_gpu_trainer.services.evidence import verify as evidence_verify
from remote_gpu_trainer.services.evidence.manifest import adopt_manifest, recorded_adoption
from remote_gpu_trainer.services.watch import recovery
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.state import events

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


async def pull_run(session: Session, run_id: str,
                   progress: Callable[[evidence_pull.PullProgress], None] | None = None,
                   actor: str = "user") -> evidence_pull.PullResult:
    """Pull under the run's lock; the event log says finished only when every file arrived verified
    against its manifest hash, else incomplete (with each failed file) or failed (with the error)."""
    run = run_config(session, run_id)
    state = await run_state(session, run_id)
    if state.liveness.state in ("running", "stalled"):
        raise VerbFailed(f"run {run_id} is still {state.liveness.state}: pull once it has finished, "
                         "because the manifest is built once, from the finished files")
    if state.liveness.detail == "not launched":
        await _refuse_never_launched(session, run, run_id)
    with run_lock(session.project.state_dir, run_id, "pulling"):
        events.pull_started(session.db, run_id=run_id, instance=run.instance, actor=actor)
        try:
            transport = await instances.remote(session, run.instance)
            result = await evidence_pull.pull(session.project, run, transport, session.db, progress)
        except (RgtError, OSError) as exc:
            events.pull_failed(session.db, run_id=run_id, instance=run.instance, error=str(exc), actor=actor)
            raise
        except asyncio.CancelledError:
            events.pull_failed(session.db, run_id=run_id, instance=run.instance, error=None, actor=actor)
            raise
    detail = {"files": len(result.files), "fetched": len(result.fetched), "present": len(result.present),
              "failed": [problem.to_dict() for problem in result.failed[:50]]}
    if result.ok:
        events.pull_finished(session.db, run_id=run_id, instance=run.instance, detail=detail, actor=actor)
    else:
        events.pull_incomplete(session.db, run_id=run_id, instance=run.instance, detail=detail,
                               failed=len(result.failed), actor=actor)
    recovery.refresh(session, run_id, state.liveness)
    return result


async def _refuse_never_launched(session: Session, run: RunConfig, run_id: str) -> None:
    """A run this project never launched has nothing to pull, unless its result root holds a manifest or a roster
    cell (a run launched without rgt: its manifest is adopted or built, docs/gate.md §2.1) or a manifest was
    recorded here. Said before anything is written or logged: the builder's "roster cell has no folder
    (missing_dir)" named a symptom, not the cause."""
    if session.db.recorded_manifest(run_id) is not None:
        return
    transport = await instances.remote(session, run.instance)
    root = run.remote_root.rstrip("/")
    for name in (MANIFEST_NAME, *run.roster):
        if await transport.stat(f"{root}/{name}") is not None:
            return  # results are there (a run placed or launched without rgt): the manifest is adopted or built
    raise VerbFailed(f"run {run_id} was not launched yet: nothing to pull from {run.instance} ({run.remote_root} "
                     f"holds no manifest and no roster cell); launch it with `rgt run {run_id}`, or, if it ran "
                     f"from another copy of this project, `rgt adopt {run.instance}` first")


async def verify_run(session: Session, run_id: str,
                     progress: Callable[[evidence_verify.VerifyStep], None] | None = None,
                     actor: str = "user") -> evidence_verify.VerifyResult:
    """Verify the local copy under the run's lock, and log whether it passed; then the VERIFY audits run over
    the project's evidence (docs/verify.md §2), whatever the verification found: they disclose, never block."""
    run = run_config(session, run_id)
    with run_lock(session.project.state_dir, run_id, "verifying"):
        noted = await _adopt_before_verify(session, run)
        result = await evidence_verify.verify(session.project, run, session.db, progress, noted=noted)
    events.verified(session.db, run_id=run_id, instance=run.instance, ok=result.ok, problems=len(result.errors),
                    errors=[e.__dict__ for e in result.errors[:50]], actor=actor)
    recovery.refresh(session, run_id)
    await asyncio.to_thread(audit.run_audit, session.project, session.db, actor=actor)
    return result


async def _adopt_before_verify(session: Session, run: RunConfig) -> list[Problem]:
    """A local manifest this project never recorded (a copy the skill's download loop made, docs/gate.md §2.1)
    is adopted from the box first, as `rgt pull` adopts it: the box's manifest must be these very bytes and
    its tree must match them. A box that does not answer, or holds no manifest, adopts nothing: the local
    bytes are verified as they are, and the gate stays closed until a manifest is recorded. A box that
    answers and refuses says why, as an error of this verification."""
    if session.db.recorded_manifest(run.id) is not None:
        return []
    local = read_regular(session.project.run_dir(run.id) / MANIFEST_NAME)
    if local is None:
        return []
    try:
        transport = await instances.remote(session, run.instance)
        if await transport.stat(f"{run.remote_root.rstrip('/')}/{MANIFEST_NAME}") is None:
            return []
    except (RgtError, OSError, TimeoutError):  # no box to ask, or it does not answer
        return []
    try:
        await adopt_manifest(transport, run, session.db, local=local)
    except VerbFailed as exc:
        return [Problem("manifest_unrecorded", MANIFEST_NAME,
                        f"this project never recorded it, and the box's manifest cannot be adopted: {exc}")]
    except (TransportError, OSError, TimeoutError):
        return []
    return []


def manifest_sizes(session: Session, run_id: str) -> dict[str, int]:
    """Each file's size per the manifest pulled into runs/RUN/ (what a progress bar counts towards); empty
    when there is none yet or it does not parse (the pull and verification say why, not the bar)."""
    run = run_config(session, run_id)
    data = read_regular(session.project.run_dir(run_id) / MANIFEST_NAME)
    if data is None:
        return {}
    manifest, _ = parse_manifest(data, roster=run.roster, run_id=run.id,
                                 adopted=recorded_adoption(session.db, run_id))
    return {entry.path: entry.bytes for entry in manifest.files} if manifest is not None else {}
