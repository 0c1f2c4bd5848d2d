"""Push a run's inputs and launch it detached on its instance (docs/remote-ops.md §6).

One wrapper per run runs the roster's cells in order, appends their output to the run's log, and writes
the exit code of each cell and of the whole run to files: detached jobs are orphaned, so without those
files nobody could learn how the job ended. `DONE` appears only when every cell exited 0 and every
required artifact exists. What is needed to re-attach (control folder, pid, log) goes into the state db.
Where those files live on the box is services/box_layout.py's, which the watchers read without this verb.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.liveness import Liveness
from remote_gpu_trainer.clock import Clock, iso_offset, utc_now
from remote_gpu_trainer.config.project import ProjectConfig, RunConfig, load_project
from remote_gpu_trainer.errors import ConfigError, RgtError, VerbFailed
from remote_gpu_trainer.providers.base import BatchJobs, Transport
from remote_gpu_trainer.providers.box_identity import refuse_second_name
from remote_gpu_trainer.run_records import run_config_from_record, run_config_record
from remote_gpu_trainer.services import box_ledger, instances
from remote_gpu_trainer.services.box_layout import (
    CELL_STARTED,
    LAUNCH_JSON,
    SLURM_OUT,
    cell_command,
    cell_root,
    ctl_dir,
    log_path,
    resume_lines,
    wrapper_path,
)
from remote_gpu_trainer.services.gate import session_box_key
from remote_gpu_trainer.services.launch import guards, network_env, sentinel
from remote_gpu_trainer.services.project_files import add_rerun as copy_run_table
from remote_gpu_trainer.services.watch import monitors, recovery
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import escape_control

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


def wrapper_script(run: RunConfig, transport: Transport) -> str:
    q = shlex.quote
    ctl = q(transport.resolve(ctl_dir(run)))
    log = q(transport.resolve(log_path(run)))
    lines = [
        "#!/usr/bin/env bash",
        "# rgt job wrapper: runs the cells in order, records exit codes; DONE only on full success.",
        "set -u",
        "exec </dev/null",
        f"CTL={ctl}",
        f"LOG={log}",
        'echo $$ > "$CTL/pid.tmp" && mv "$CTL/pid.tmp" "$CTL/pid"',
        'echo $$ > "$CTL/pgid"',
        "cut -d' ' -f22 /proc/$$/stat > \"$CTL/pid_start\" 2>/dev/null || true",
        "export PYTHONUNBUFFERED=1",
        *network_env.wrapper_lines(run, transport),  # runs.<id>.network (docs/remote-ops.md §12)
        "rc=0",
        "child=0",
        'trap \'[ "$child" -ne 0 ] && kill -TERM "$child" 2>/dev/null; rc=143\' TERM INT HUP',
        f"cd {q(transport.resolve(run.workdir))} || {{ echo 127 > \"$CTL/exit_code\"; exit 127; }}",
        *guards.mem_monitor_start(run),
    ]
    for cell in run.roster:
        out = q(transport.resolve(cell_root(run, cell)))
        lines += guards.disk_gate(run, transport, cell)
        lines += [
            'if [ "$rc" -eq 0 ]; then',
            f"  mkdir -p {out}",
            f'  echo "{CELL_STARTED.format(cell=cell)}" >> "$LOG"',
            *resume_lines(run, transport, cell),
            f"  ( {cell_command(run, transport, cell)} ) >> \"$LOG\" 2>&1 &",
            "  child=$!",
            '  wait "$child"; crc=$?',
            "  child=0",
            f'  echo "$crc" > "$CTL/{cell}.exit_code"',
            f'  echo "== rgt: cell {cell} exited $crc" >> "$LOG"',
            '  [ "$crc" -ne 0 ] && rc=$crc',
            "fi",
        ]
    artifacts = " ".join(
        q(transport.resolve(f"{cell_root(run, cell)}/{name}"))
        for cell in run.roster for name in run.required
    )
    lines += [
        *guards.mem_monitor_stop(),
        'date -u +%Y-%m-%dT%H:%M:%S+00:00 > "$CTL/finished_at"',
        'echo "$rc" > "$CTL/exit_code.tmp" && mv "$CTL/exit_code.tmp" "$CTL/exit_code"',
        'if [ "$rc" -eq 0 ]; then',
        "  ok=1",
        f"  for f in {artifacts}; do [ -s \"$f\" ] || ok=0; done",
        '  [ "$ok" -eq 1 ] && touch "$CTL/DONE"',
        "fi",
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


async def push(project: ProjectConfig, run: RunConfig, transport: Transport) -> list[str]:
    """Copy the run's `push` files into its workdir; returns the remote paths written. A file lands as its
    name; a folder (Hydra's `conf/`) lands as itself with its regular files below it, symlinks and
    `__pycache__` left out, so a config tree the script finds by relative path arrives whole."""
    written = []
    for item in run.push:
        local = project.root / item
        if local.is_dir() and not local.is_symlink():
            files = [(f"{local.name}/{rel}", path) for rel, path in _folder_files(local)]
        elif local.is_file():
            files = [(local.name, local)]
        else:
            raise ConfigError(f"runs.{run.id}.push: {local} does not exist")
        for rel, path in files:
            remote = f"{run.workdir.rstrip('/')}/{rel}"
            try:
                await transport.put_bytes(path.read_bytes(), remote)
            except OSError as exc:  # a full or read-only disk on the box: one line, not an internal error
                raise VerbFailed(f"runs.{run.id}.push: cannot write {remote} on {run.instance}: "
                                 f"{exc.strerror or exc}") from None
            written.append(remote)
    return written


def _folder_files(folder: Path) -> list[tuple[str, Path]]:
    """(posix path below `folder`, path) of its regular files, sorted; symlinks and __pycache__ skipped."""
    found = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if "__pycache__" in rel.parts or any(p.is_symlink() for p in [path, *path.parents][:len(rel.parts)]):
            continue
        if path.is_file():
            found.append((rel.as_posix(), path))
    return found


async def launch(project: ProjectConfig, run: RunConfig, transport: Transport, db: StateDB,
                 clock: Clock = utc_now, *, actor: str = "user", method: str = "setsid",
                 batch: BatchJobs | None = None, box: str | None = None,
                 notify: sentinel.SentinelPlan | None = None, ledger: bool = False,
                 recover: dict[str, object] | None = None) -> dict[str, object]:
    """Push, then start the wrapper detached (`setsid`) or as a batch job (`sbatch`, submitted through
    `batch`, the provider's batch-job verbs); refuses while a recorded launch is still alive, so the inputs
    of a live run are never rewritten. With `ledger` the run's entry is written into the box's ledger
    before the job starts (services/box_ledger.py): a box that cannot take it gets no job. `recover` marks a
    relaunch that recovery made (services/recover/run.py), in the launch record, where restarts are counted."""
    if method == "sbatch" and batch is None:
        raise ConfigError(f"instances.{run.instance}: its profile launches runs with sbatch, but its provider "
                          "has no batch jobs")
    ctl = ctl_dir(run)
    result = await transport.run(f"rm -rf {shlex.quote(transport.resolve(ctl))}", timeout=30)
    if result.rc != 0:
        raise VerbFailed(f"cannot reset control folder {ctl}: {result.error_text.strip()[:200]}")
    pushed = await push(project, run, transport)
    log_before = await transport.stat(log_path(run))
    started = clock()
    launch_json = {
        "run_id": run.id, "cells": list(run.roster),
        "command": run.command, "started_at": iso_offset(started), "method": method,
    }
    await transport.put_bytes((json.dumps(launch_json, indent=2) + "\n").encode(), f"{ctl}/{LAUNCH_JSON}")
    await transport.put_bytes(guards.mem_monitor_source(), f"{ctl}/{guards.MEM_MONITOR}")
    detail: dict[str, object] = {"ctl_dir": ctl, "log": log_path(run), "started_at": iso_offset(started),
                                 "method": method, "pushed": pushed,
                                 "log_offset": log_before.size if log_before is not None else 0,
                                 **guards.relaunch_detail(db, run.id), **({"recover": recover} if recover else {})}
    if ledger:
        entry = box_ledger.new_entry(project, run, control_folder=ctl, log=log_path(run),
                                     started_at=iso_offset(started), transport=transport)
        try:
            detail["ledger"] = await box_ledger.write_entry(transport, entry, ctl)
        except (RgtError, OSError) as exc:
            raise VerbFailed(f"run {run.id} was not launched: the box's ledger could not be written: "
                             f"{escape_control(str(exc))}") from None
        detail["launch_id"] = entry.launch_id
    if method == "sbatch" and batch is not None:
        wrapper = wrapper_path(run)
        await transport.put_bytes(wrapper_script(run, transport).encode(), wrapper, mode=0o700)
        detail["slurm_job"] = await batch.submit_job(
            transport, transport.resolve(wrapper), job_name=f"rgt-{run.id}", workdir=transport.resolve(run.workdir),
            output=transport.resolve(f"{ctl}/{SLURM_OUT}"))
        detail["pid"] = None
    else:
        detail["pid"] = await transport.launch_detached(wrapper_script(run, transport), ctl)
    unwatched = await _start_sentinel(notify, run, transport, detail, started.timestamp())
    db.record_launch(run.id, run.instance, detail, box=box, config=run_config_record(run))
    handle = f"Slurm job {detail['slurm_job']}" if method == "sbatch" else f"pid {detail['pid']}"
    events.run_launched(db, run_id=run.id, instance=run.instance, handle=handle, detail=detail, actor=actor)
    if unwatched is not None:
        raise VerbFailed(f"run {run.id} was launched ({handle}), but its sentinel did not start: {unwatched}; "
                         "nothing is notified while rgt is not running")
    return detail


async def _start_sentinel(notify: sentinel.SentinelPlan | None, run: RunConfig, transport: Transport,
                          detail: dict[str, object], started: float) -> str | None:
    """The sentinel beside the started job (docs/remote-ops.md §9.1); its facts go into the launch record.
    Returns why it did not start: the job runs anyway, and the launch is recorded before the verb fails."""
    if notify is None:
        return None
    try:
        detail["sentinel"] = await sentinel.start(notify, run, transport, ctl=ctl_dir(run), log=log_path(run),
                                                  started=started, slurm_job=_text(detail.get("slurm_job")))
    except RgtError as exc:
        detail["sentinel"] = {"error": str(exc)[:300]}
        return str(exc)
    return None


def _text(value: object) -> str | None:
    return str(value) if value is not None else None


async def launch_run(session: Session, run_id: str, actor: str = "user", *, resume: bool = False,
                     recover: dict[str, object] | None = None) -> dict[str, Any]:
    """`rgt run`: refuse a run that is still running or whose id already holds results, then launch it
    detached and start its log where this launch's lines begin. `resume` (services/launch/resume.py, which has
    checked preemption and auto_resume) relaunches on the results already there."""
    session.require_writable("launching a run")
    run = session.project.run(run_id)  # a new launch binds the next job to rgt.toml as it is
    notify = sentinel.plan(session, run)  # a bad [notify] webhook_file stops the launch before anything runs
    current = await run_state(session, run_id)
    if current.liveness.state in ("running", "stalled"):
        raise VerbFailed(f"run {run_id} is already {current.liveness.state} ({current.liveness.detail}): "
                         "its inputs are not touched")
    if not resume:
        await refuse_reused_id(session, run)
    primitive = str(session.profile(run.instance).raw.get("detach", {}).get("primitive", "setsid"))
    monitors.forget_monitor(session, run_id)  # the new launch's lines start at a new offset
    provider = session.provider(run.instance)
    # a key trusted since the project was opened may show this entry to be another's box (docs/gate.md §7)
    await refuse_second_name(session.project, run.instance)
    transport = await instances.remote(session, run.instance)
    detail = await launch(session.project, run, transport, session.db, session.clock, actor=actor,
                          method="sbatch" if primitive == "sbatch" else "setsid",
                          batch=provider if isinstance(provider, BatchJobs) else None,
                          box=await session_box_key(session, run.instance), notify=notify,
                          ledger=box_ledger.keeps_ledger(session.profile(run.instance)), recover=recover)
    # the wrapper appends to the log: this launch's lines start at the recorded offset (a shared log
    # would otherwise replay the previous launch's crashes as this one's)
    session.db.reset_log_state(run_id, int(str(detail.get("log_offset", 0))))
    recovery.refresh(session, run_id, Liveness("running", "launched"))
    return detail


def add_rerun(session: Session, run_id: str, actor: str = "user") -> str:
    """Copy the run's table to a new id (`rgt run --rerun`) and reload rgt.toml; returns the new id."""
    session.require_writable("a re-run")
    taken = {record.run_id for record in session.db.launch_history()}
    new_id = copy_run_table(session.project, run_id, taken)
    session.project = load_project(session.project.file)
    events.rerun_added(session.db, run_id=new_id, of=run_id, remote_root=session.project.run(new_id).remote_root,
                       actor=actor)
    return new_id


async def refuse_reused_id(session: Session, run: RunConfig) -> None:
    """Run ids are append-only: an id whose results exist anywhere (files in the result root on the
    box, a manifest recorded, a local root here) is never launched again, or new results would mix with
    evidence already pulled or verified. `rgt run --rerun ID` launches a copy under a new id."""
    held = []
    if session.db.recorded_manifest(run.id) is not None:
        held.append("a manifest recorded")
    if session.project.run_dir(run.id).exists():
        held.append(f"a local root runs/{run.id}/")
    transport = await instances.remote(session, run.instance)
    for root in _result_roots(session, run):  # rgt.toml's, and each earlier launch's (an edited remote_root)
        if await transport.listdir(root):
            held.append(f"results in {root} on {run.instance}")
    if held:
        raise VerbFailed(f"run {run.id} already has {', '.join(held)}: run ids are append-only, so it is not "
                         f"launched again; `rgt run {run.id} --rerun` launches a copy under a new id")


def _result_roots(session: Session, run: RunConfig) -> list[str]:
    """Every result root the run id has used on this instance: rgt.toml's now, and each recorded launch's. A
    remote_root edited after an unpulled launch must not let the id launch again beside results nobody pulled
    (the launch log keeps one latest launch per run for the gate, so the earlier root would be forgotten)."""
    roots = [run.remote_root]
    for record in session.db.launch_history(run.id):
        launched = run_config_from_record(record.config)
        if launched is not None and launched.instance == run.instance and launched.remote_root not in roots:
            roots.append(launched.remote_root)
    return roots
