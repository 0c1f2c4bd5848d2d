"""A project opened for work: config, state database and providers, behind the verbs every face uses.

The TUI, the CLI verbs and `--report` all go through a Session, so a number or a refusal is computed in
one place. A Session never imports Textual; long work is async and bounded by timeouts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from remote_gpu_trainer.audits.checklist import ChecklistFacts
from remote_gpu_trainer.audits.env_audit import AuditRow, RunRequirements, audit_environment, run_interpreter, worst
from remote_gpu_trainer.audits.gpu_health import GpuSample
from remote_gpu_trainer.audits.liveness import Liveness, classify
from remote_gpu_trainer.audits.log.signatures import Catalogue, load_catalogue
from remote_gpu_trainer.audits.manifest import sha256_bytes
from remote_gpu_trainer.audits.meter import Interval, MeterReading, accrue, billing_model, fill_gap, reported_since
from remote_gpu_trainer.clock import Clock, parse_iso, utc_now
from remote_gpu_trainer.config import (
    InstanceConfig,
    ProjectConfig,
    RunConfig,
    load_project,
    resolve_project_file,
    user_config_dir,
)
from remote_gpu_trainer.errors import RgtError, VerbFailed
from remote_gpu_trainer.fsutil import run_lock
from remote_gpu_trainer.profiles import Profile, profile_age_text
from remote_gpu_trainer.providers.base import BatchJobs, Creatable, InstanceStatus, Transport
from remote_gpu_trainer.providers.registry import provider_for
from remote_gpu_trainer.providers.slurm import commands as slurm
from remote_gpu_trainer.services import checklist, evidence
from remote_gpu_trainer.services import launch as runner
from remote_gpu_trainer.services import liveness as watcher
from remote_gpu_trainer.services.env_audit import run_env_probe, sample_gpus
from remote_gpu_trainer.services.gate import session_box_key
from remote_gpu_trainer.services.log_monitor import Alert, ChartData, LogLineView, LogUpdate, RunLogMonitor
from remote_gpu_trainer.services.meter import held_storage
from remote_gpu_trainer.state.db import Snapshot, StateDB
from remote_gpu_trainer.text import describe_gpus
from remote_gpu_trainer.views import (
    ActionView,
    CheckpointView,
    FindingView,
    GateView,
    InstanceView,
    Overview,
    RunView,
)

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.base import Provider
    from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown

T = TypeVar("T")
PROVIDER_TIMEOUT_S = 20.0
GPU_SAMPLE_S = 10.0
METER_SAMPLE_S = 30.0
UNWATCHED_GAP_S = 300.0  # longer than this without a sample or snapshot: rgt was not watching


@dataclass(frozen=True)
class RunState:
    """The live facts about one run that the overview and `rgt watch` need."""

    liveness: Liveness
    finished_at: datetime | None
    walltime: str | None = None  # a batch job's `elapsed / limit`, for the meter
    exit_code: int | None = None
    started_at: float | None = None  # epoch seconds of the launch the probe saw


class Session:
    def __init__(self, project: ProjectConfig, *, clock: Clock = utc_now, read_only: bool = False,
                 provider_timeout_s: float = PROVIDER_TIMEOUT_S) -> None:
        self.project = project
        self.clock = clock
        self.provider_timeout_s = provider_timeout_s  # each question to a provider or box waits this long
        # a project folder rgt may not write to still serves the read-only verbs (--report, events,
        # --read-only): the state is read from a copy, and every cost-affecting action is refused
        self.folder_read_only = not project_writable(project)
        self.read_only = read_only or self.folder_read_only
        self.db = StateDB(project.state_db, clock, read_only=self.folder_read_only)
        self._providers: dict[str, Provider] = {}
        self.host_key_prompts: dict[str, HostKeyUnknown] = {}  # instance -> the unknown key it presented
        self._gpu_text: dict[str, tuple[float, str]] = {}  # instance -> (monotonic time, panel text)
        self._transports: dict[str, Transport] = {}
        self._monitors: dict[str, RunLogMonitor] = {}
        self._catalogue: Catalogue | None = None
        self._gpu_samples: dict[str, list[GpuSample]] = {}  # instance -> the last sampled GPUs
        self._last_status: dict[str, InstanceStatus] = {}
        self._inflight: dict[str, asyncio.Future[Any]] = {}  # one question per box at a time (see _asked)

    @classmethod
    def open(cls, project_arg: str | None, *, clock: Clock = utc_now, read_only: bool = False) -> Session:
        session = cls(load_project(resolve_project_file(project_arg)), clock=clock, read_only=read_only)
        if session.project.signatures or (user_config_dir() / "signatures.d").is_dir():
            try:
                session.catalogue()  # a bad user signature is a configuration error now, not a silent miss later
            except RgtError:
                session.close()
                raise
        return session

    def close(self) -> None:
        for monitor in self._monitors.values():
            monitor.close()
        self.db.close()

    async def close_transports(self) -> None:
        """Close connections to the far side (jobs keep running: they were launched detached)."""
        for task in list(self._inflight.values()):
            task.cancel()
        self._inflight.clear()
        transports, self._transports = list(self._transports.values()), {}
        closers = [t.close for t in transports] + [p.close for p in self._providers.values()]
        for close in closers:
            try:
                await close()
            except (RgtError, OSError):
                pass

    # -- plumbing ------------------------------------------------------------------------------------
    def instance(self, name: str) -> InstanceConfig:
        """The instance as configured; a box `rgt up` rented (and rgt.toml does not name yet) gets its id."""
        config = self.project.instances[name]
        if config.id is None:
            launched = self.db.launched_provider_id(name)
            if launched is not None:
                return dataclasses.replace(config, id=launched)
        return config

    def provider(self, name: str) -> Provider:
        if name not in self._providers:
            self._providers[name] = provider_for(self.instance(name), self.project.state_dir, self.clock)
        return self._providers[name]

    def profile(self, name: str) -> Profile:
        return self.provider(name).profile

    async def remote(self, name: str) -> Transport:
        """The transport for async work: a cloud box's SSH address comes from its provider, so the
        provider is asked once first when this process has not asked yet."""
        if name not in self._last_status and name not in self._transports:
            await self._asked(f"status:{name}", lambda: self.instance_status(name))
        return self.transport(name)

    def _asked(self, key: str, ask: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """The one question `key` in flight to a box (started by `ask` when none is): a slow box is asked
        once, however many refreshes, reports or verbs wait for it, and a caller that stops waiting does
        not cancel it (the answer still lands in the state for the next refresh)."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(ask())
            self._inflight[key] = task

            def forget(done: asyncio.Future[Any], key: str = key) -> None:
                if self._inflight.get(key) is done:
                    del self._inflight[key]

            task.add_done_callback(forget)
        return asyncio.shield(task)

    async def _answers(self, questions: dict[str, Callable[[], Awaitable[T]]],
                       wait_s: float | None) -> dict[str, T]:
        """Ask every box at once, each within its own timeout, and return the answers that came within
        `wait_s` (all of them when None); the others keep going in the background."""
        futures = {key: self._asked(key, ask) for key, ask in questions.items()}
        if futures:
            await asyncio.wait(futures.values(), timeout=wait_s)
        answers: dict[str, T] = {}
        for key, future in futures.items():
            if future.done():
                answers[key] = future.result()  # the askers catch what a box can do; anything else is a bug
            else:
                future.add_done_callback(_quiet)
        return answers

    def transport(self, name: str) -> Transport:
        if name not in self._transports:
            self._transports[name] = self.provider(name).transport(self.instance(name))
        return self._transports[name]

    def run_config(self, run_id: str) -> RunConfig:
        return self.project.run(run_id)

    def require_writable(self, what: str) -> None:
        if self.folder_read_only:
            raise RgtError(f"{what}: the project folder {self.project.root} is read-only; only --report, "
                           "events and --read-only work there")
        if self.read_only:
            raise RgtError(f"{what} is a cost-affecting action and rgt is in --read-only mode")

    # -- instances and the meter --------------------------------------------------------------------
    async def instance_status(self, name: str) -> InstanceStatus:
        """Ask the provider, record a snapshot when something changed; failures read as `unknown`."""
        instance = self.instance(name)
        provider = self.provider(name)
        try:
            status = await asyncio.wait_for(provider.get(instance), self.provider_timeout_s)
        except (RgtError, OSError, TimeoutError) as exc:
            last = self.db.last_snapshot(name)
            status = InstanceStatus(
                name=name, provider=instance.provider, provider_id=last.provider_id or "" if last else "",
                state="unknown", gpu="?", price_per_hour=last.price_per_hour if last else None,
                price_source=last.price_source if last else "none",
                storage_per_hour=last.storage_per_hour if last else None,
                detail={"error": f"no answer within {self.provider_timeout_s:g} s" if isinstance(exc, TimeoutError)
                        and not str(exc) else str(exc)},
            )
        unknown_key = status.detail.get("host_key_unknown")  # set only by SSH-based providers
        if unknown_key is not None:
            self.host_key_prompts[name] = unknown_key
        else:
            self.host_key_prompts.pop(name, None)
        if instance.price_per_hour is not None and status.price_source != "api":
            # the user's price fills in where the provider has none; an API price stays, and the user's
            # becomes the quote it is compared with (drift)
            status = InstanceStatus(**{**status.__dict__, "price_per_hour": instance.price_per_hour,
                                       "price_source": "user"})
        self.record_snapshot(status)
        self._last_status[name] = status
        return status

    async def trust_host_key(self, name: str, fingerprint: str, actor: str = "user") -> dict[str, Any]:
        """Trust on first use, once, by the user: the fingerprint they compared must be the one presented."""
        await self.instance_status(name)
        presented = self.host_key_prompts.get(name)
        if presented is None:
            raise RgtError(f"instances.{name}: no unknown host key to trust (already trusted, or unreachable)")
        if fingerprint.strip() != presented.fingerprint_sha256:
            raise RgtError(f"instances.{name}: the host presents {presented.fingerprint_sha256}, not "
                           f"{fingerprint.strip()}: nothing was trusted")
        from remote_gpu_trainer.providers.transports.ssh_hostkeys import (
            accept_host_key,  # asyncssh only when a host key is trusted
        )

        receipt = accept_host_key(presented.known_hosts_file, presented.host, presented.port, presented.key,
                                  instance_id=self.provider(name).provider_id(self.instance(name)),
                                  now=self.clock())
        self.db.append_event("host_key_trusted", f"trusted host key of {name}: {receipt['fingerprint_sha256']}",
                             instance=name, actor=actor, detail=receipt)
        self.host_key_prompts.pop(name, None)
        return receipt

    def record_snapshot(self, status: InstanceStatus) -> None:
        """A snapshot when something changed, or after a stretch nobody watched: that stretch is then
        explained from the provider's own clock (uptime, start stamp) or recorded as an estimate."""
        last = self.db.last_snapshot(status.name)
        if last is None and status.state == "unknown":
            return  # nothing known yet, so nothing to bill or to estimate
        now = self.clock()
        seen = Snapshot(at=now, instance=status.name, provider=status.provider, provider_id=status.provider_id,
                        state=status.state, price_per_hour=status.price_per_hour, price_source=status.price_source,
                        storage_per_hour=status.storage_per_hour)
        if last is None:
            self.db.add_snapshot(seen)
            return
        watched = max(filter(None, (last.at, self.db.last_meter_sample_at(status.name))))
        changed = (last.state, last.price_per_hour, last.storage_per_hour) != (
            status.state, status.price_per_hour, status.storage_per_hour)
        if (now - watched).total_seconds() > UNWATCHED_GAP_S:
            self._explain_gap(last, seen, status)
        elif changed:
            self.db.add_snapshot(seen)

    def _explain_gap(self, last: Snapshot, seen: Snapshot, status: InstanceStatus) -> None:
        since = reported_since(status.state, seen.at, uptime_s=_number(status.detail.get("uptime_s")),
                               started_at=_stamp(status.detail.get("started_at")))
        fill = fill_gap(last, seen, since)
        for snapshot in fill.snapshots:
            self.db.add_snapshot(snapshot)
        self.db.add_snapshot(seen)
        if fill.estimate is not None:
            self.db.append_event(
                "meter_gap", f"{status.name}: not watched from {fill.estimate.start:%Y-%m-%d %H:%M} to "
                f"{fill.estimate.end:%Y-%m-%d %H:%M}; billed there at the higher rate (an estimate)",
                instance=status.name, actor="rgt",
                detail={"start": fill.estimate.start.isoformat(), "end": fill.estimate.end.isoformat()})

    def meter_reading(self, name: str, finished_at: datetime | None = None) -> MeterReading:
        """The meter for one instance with its profile's billing rules, what the provider says it holds
        (volumes, disks), the user's quote for drift, and the stretches nobody watched."""
        snapshots = self.db.snapshots(name)
        last_status = self._last_status.get(name)
        quoted = self.instance(name).price_per_hour
        model = billing_model(self.profile(name), held_storage(self.profile(name), last_status), quoted)
        gaps = [Interval(parse_iso(str(e.detail["start"])), parse_iso(str(e.detail["end"])))
                for e in self.db.events(kind="meter_gap") if e.instance == name]
        return accrue(snapshots, self.clock(), finished_at, model=model, gaps=gaps)

    async def create_instance(self, name: str, actor: str = "user") -> InstanceStatus:
        """Start billing for a sim box (the embedded default's `up`); logged before it happens."""
        self.require_writable("creating an instance")
        provider = self.provider(name)
        if not isinstance(provider, Creatable):
            raise RgtError(f"instances.{name}: provider {provider.name!r} cannot create instances here")
        current = await self.instance_status(name)
        if current.state in ("running", "pending"):
            return current
        price = provider.profile.pricing.compute_per_hour
        self.db.append_event("approval", f"create instance {name} at ${price}/h", instance=name, actor=actor,
                             detail={"action": "create", "price_per_hour": price})
        await provider.create(self.instance(name))
        return await self.instance_status(name)

    # -- runs ------------------------------------------------------------------------------------------
    async def env_audit(self, run_id: str, actor: str = "user") -> list[AuditRow]:
        """Phase 0 on the run's instance: one probe, sixteen rows, stored and logged (remote-ops.md §4)."""
        run = self.run_config(run_id)
        transport = await self.remote(run.instance)
        workdir, durable = transport.resolve(run.workdir), transport.resolve(run.remote_root)
        made = await transport.run(f"mkdir -p {shlex.quote(workdir)} {shlex.quote(durable)}", timeout=30)
        if made.rc != 0:
            raise VerbFailed(f"cannot create {run.workdir} or {run.remote_root} on {run.instance}: "
                             f"{made.error_text.strip()[:200]}")
        # Row 8 checks the interpreter the command runs, not a python3 that may lack the run's torch.
        python = run_interpreter(run.command, run.python, explicit=run.python_explicit, run_id=run_id)
        facts = await run_env_probe(transport, scratch=run.workdir, durable=run.remote_root, python=python.path,
                                    workdir=run.workdir)
        rows = audit_environment(facts, RunRequirements(gpus=run.gpus, interpreter_why=python.why,
                                                        ckpt_tier_survives=self.profile(run.instance).durable_survives()))
        self.db.add_audit(run_id, "env", [dataclasses.asdict(row) for row in rows])
        counts = {status: sum(1 for r in rows if r.status == status) for status in ("fail", "warn", "pass")}
        self.db.append_event("env_audit", f"environment audit of {run.instance} for {run_id}: worst "
                             f"{worst(rows)} ({counts['fail']} fail, {counts['warn']} warn)", run_id=run_id,
                             instance=run.instance, actor=actor, detail={"rows": [dataclasses.asdict(r) for r in rows]})
        return rows

    def last_env_audit(self, run_id: str) -> tuple[AuditRow, ...]:
        record = self.db.last_audit(run_id, "env")
        return tuple(AuditRow(**row) for row in record[1]) if record else ()

    async def launch(self, run_id: str, actor: str = "user") -> dict[str, Any]:
        self.require_writable("launching a run")
        run = self.run_config(run_id)
        current = await self.run_state(run_id)
        if current.liveness.state in ("running", "stalled"):
            raise VerbFailed(f"run {run_id} is already {current.liveness.state} ({current.liveness.detail}): "
                             "its inputs are not touched")
        await self.refuse_reused_id(run)
        primitive = str(self.profile(run.instance).raw.get("detach", {}).get("primitive", "setsid"))
        stale = self._monitors.pop(run_id, None)
        if stale is not None:
            stale.close()
        provider = self.provider(run.instance)
        detail = await runner.launch(self.project, run, await self.remote(run.instance), self.db, self.clock,
                                     actor=actor, method="sbatch" if primitive == "sbatch" else "setsid",
                                     batch=provider if isinstance(provider, BatchJobs) else None,
                                     box=await session_box_key(self, run.instance))
        # the wrapper appends to the log: this launch's lines start at the recorded offset (a shared log
        # would otherwise replay the previous launch's crashes as this one's)
        self.db.reset_log_state(run_id, int(str(detail.get("log_offset", 0))))
        return detail

    def add_rerun(self, run_id: str, actor: str = "user") -> str:
        """Copy the run's table to a new id (`rgt run --rerun`) and reload rgt.toml; returns the new id."""
        from remote_gpu_trainer.services.project_files import add_rerun

        self.require_writable("a re-run")
        taken = {record.run_id for record in self.db.launch_history()}
        new_id = add_rerun(self.project, run_id, taken)
        self.project = load_project(self.project.file)
        self.db.append_event("rerun", f"run {new_id} added to rgt.toml as a re-run of {run_id}", run_id=new_id,
                             actor=actor, detail={"of": run_id, "remote_root": self.project.run(new_id).remote_root})
        return new_id

    async def refuse_reused_id(self, run: RunConfig) -> None:
        """Run ids are append-only: an id whose results exist anywhere (files in the result root on the
        box, a manifest recorded, a local root here) is never launched again, or new results would mix with
        evidence already pulled or verified. `rgt run --rerun ID` launches a copy under a new id."""
        held = []
        if self.db.recorded_manifest(run.id) is not None:
            held.append("a manifest recorded")
        if self.project.run_dir(run.id).exists():
            held.append(f"a local root runs/{run.id}/")
        transport = await self.remote(run.instance)
        if await transport.listdir(run.remote_root):
            held.append(f"results in {run.remote_root} on {run.instance}")
        if held:
            raise VerbFailed(f"run {run.id} already has {', '.join(held)}: run ids are append-only, so it is not "
                             f"launched again; `rgt run {run.id} --rerun` launches a copy under a new id")

    async def run_state(self, run_id: str) -> RunState:
        run = self.run_config(run_id)
        return await self.run_state_of(run, run.instance)

    async def run_state_of(self, run: RunConfig, instance_name: str) -> RunState:
        """The job's state on the box `instance_name` names (also for a run no longer in rgt.toml)."""
        launch = self.db.launch(run.id)
        try:
            transport = await self.remote(instance_name)
            probe = await watcher.probe(run, transport, launch)
            provider = self.provider(instance_name)
            job = await provider.job_state(transport, str(launch["slurm_job"])) if launch and \
                launch.get("slurm_job") and isinstance(provider, BatchJobs) else None
        except RgtError as exc:
            return RunState(Liveness("unknown", str(exc)), None)
        finished = datetime.fromtimestamp(probe.finished_at, UTC) if probe.finished_at else None
        liveness = classify(probe, launched=launch is not None, t_log=run.stall_after, t_ckpt=2 * run.stall_after)
        if job is not None:
            liveness = batch_liveness(job, liveness)
        return RunState(liveness, finished, job.walltime() if job is not None and job.state else None,
                        exit_code=probe.exit_code, started_at=probe.started_at)

    async def tail_log(self, run_id: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        run = self.run_config(run_id)
        return await (await self.remote(run.instance)).tail(runner.log_path(run), offset, limit)

    # -- the followed log: lines, metrics, findings -----------------------------------------------------
    def catalogue(self) -> Catalogue:
        """Shipped signatures plus the user's (signatures.d and rgt.toml), checked once per session."""
        if self._catalogue is None:
            self._catalogue = load_catalogue(user_dirs=(user_config_dir() / "signatures.d",),
                                             user_rows=self.project.signatures, user_origin=str(self.project.file))
        return self._catalogue

    def log_monitor(self, run_id: str) -> RunLogMonitor | None:
        """The run's log pipeline, once the run was launched (before that there is no log to follow)."""
        if run_id not in self._monitors:
            if self.db.launch(run_id) is None:
                return None
            run = self.run_config(run_id)
            self._monitors[run_id] = RunLogMonitor(
                run_id, lambda offset, limit: self.tail_log(run_id, offset, limit), self.db, self.catalogue(),
                now=lambda: self.clock().timestamp(), total_steps=run.total_steps or None)
        return self._monitors[run_id]

    async def follow_log(self, run_id: str, max_reads: int = 8) -> LogUpdate | None:
        """New lines since the last call (at most `max_reads` MiB), classified, with the alerts they raised;
        None before launch. The TUI reads 1 MiB at a time so each batch renders before the next."""
        monitor = self.log_monitor(run_id)
        return await monitor.poll(max_reads) if monitor is not None else None

    async def log_backfill(self, run_id: str) -> list[LogLineView]:
        """What a log view opening now should show of the lines read before it (by any rgt process)."""
        monitor = self.log_monitor(run_id)
        launch = self.db.launch(run_id)
        if monitor is None or launch is None:
            return []
        return await monitor.backfill(int(str(launch.get("log_offset", 0))))

    async def catch_up_logs(self, max_polls: int = 16) -> None:
        """Read what the logs gained since rgt last looked (bounded), so a headless report is current."""
        for run_id in sorted(self.project.runs):
            for _ in range(max_polls):
                try:
                    update = await self.follow_log(run_id)
                except RgtError:
                    break
                if update is None or not update.more:
                    break

    def loss_chart(self, run_id: str) -> ChartData | None:
        monitor = self.log_monitor(run_id)
        return monitor.chart() if monitor is not None else None

    def take_alerts(self) -> list[Alert]:
        """Alerts raised by the stateful rules since the last call (the log's own come with each update)."""
        alerts: list[Alert] = []
        for monitor in self._monitors.values():
            alerts.extend(monitor.pending_alerts)
            monitor.pending_alerts.clear()
        return alerts

    def acknowledge_finding(self, run_id: str, signature: str, note: str, actor: str = "user") -> None:
        if not note.strip():
            raise RgtError("an acknowledgement needs a note saying why")
        if not self.db.acknowledge_log_finding(run_id, signature, note.strip()):
            raise RgtError(f"run {run_id} has no finding {signature}")
        self.db.append_event("finding_ack", f"acknowledged {signature} on run {run_id}: {note.strip()}",
                             run_id=run_id, actor=actor, detail={"signature": signature, "note": note.strip()})

    async def evaluate_rules(self, run_id: str, state: RunState) -> None:
        monitor = self._monitors.get(run_id)
        if monitor is None:
            return
        run = self.run_config(run_id)
        monitor.pending_alerts.extend(await monitor.evaluate(
            state.liveness, self._gpu_samples.get(run.instance, []), t_log=run.stall_after,
            started_at=state.started_at, exit_code=state.exit_code))

    async def pull(self, run_id: str, progress: Callable[[evidence.PullProgress], None] | None = None,
                   actor: str = "user") -> evidence.PullResult:
        """Pull under the run's lock; the event log says finished only when every file arrived verified
        against its manifest hash, else incomplete (with each failed file) or failed (with the error)."""
        run = self.run_config(run_id)
        state = await self.run_state(run_id)
        if state.liveness.state in ("running", "stalled"):
            raise VerbFailed(f"run {run_id} is still {state.liveness.state}: pull once it has finished, "
                             "because the manifest is built once, from the finished files")
        with run_lock(self.project.state_dir, run_id, "pulling"):
            self.db.append_event("pull", f"pull of run {run_id} started", run_id=run_id, instance=run.instance,
                                 actor=actor)
            try:
                result = await evidence.pull(self.project, run, await self.remote(run.instance), self.db, progress)
            except (RgtError, OSError) as exc:
                self.db.append_event("pull_failed", f"pull of run {run_id} failed: {exc}", run_id=run_id,
                                     instance=run.instance, actor=actor, detail={"error": str(exc)})
                raise
            except asyncio.CancelledError:
                self.db.append_event("pull_failed", f"pull of run {run_id} interrupted", run_id=run_id,
                                     instance=run.instance, actor=actor, detail={"error": "cancelled"})
                raise
        detail = {"files": len(result.files), "fetched": len(result.fetched), "present": len(result.present),
                  "failed": [problem.to_dict() for problem in result.failed[:50]]}
        if result.ok:
            self.db.append_event("pull", f"pull of run {run_id} finished: {len(result.files)} file(s) here, "
                                 "each matching its manifest hash", run_id=run_id, instance=run.instance,
                                 actor=actor, detail=detail)
        else:
            self.db.append_event("pull_incomplete", f"pull of run {run_id} incomplete: {len(result.failed)} of "
                                 f"{len(result.files)} file(s) not fetched", run_id=run_id, instance=run.instance,
                                 actor=actor, detail=detail)
        return result

    async def verify(self, run_id: str, progress: Callable[[str], None] | None = None,
                     actor: str = "user") -> evidence.VerifyResult:
        run = self.run_config(run_id)
        with run_lock(self.project.state_dir, run_id, "verifying"):
            result = await evidence.verify(self.project, run, self.db, progress)
        summary = "passed" if result.ok else f"failed ({len(result.errors)} problem(s))"
        self.db.append_event("verify", f"verification of run {run_id} {summary}", run_id=run_id,
                             instance=run.instance, actor=actor,
                             detail={"ok": result.ok, "errors": [e.__dict__ for e in result.errors[:50]]})
        return result

    # -- the gate as the dashboard shows it --------------------------------------------------------------
    def gate_view(self, run_id: str, provider_id: str, liveness: str | None = None) -> GateView:
        """The evidence conditions always; `open` also needs a teardown action the profile names. The box's
        manifest is not re-read here (the teardown plan does that), so the view carries that warning."""
        run = self.run_config(run_id)
        profile = self.profile(run.instance)
        action = profile.action("terminate")
        inputs = evidence.gather_gate_inputs(self.project, run, self.db, provider_id, None, liveness=liveness)
        decision = evidence.evaluate_evidence_only(inputs)
        if action is None:
            reasons = (f"{profile.display_name} has no teardown action: nothing to destroy", *decision.reasons)
            return GateView(False, "none", (), reasons, evidence_ok=decision.open)
        label = f"{run.instance}: {action.label} ({profile.id} {action.id} {provider_id})"
        return GateView(decision.open, label, tuple(profile.destroys_text(action)), tuple(decision.reasons),
                        evidence_ok=decision.open)

    # -- overview ----------------------------------------------------------------------------------------
    async def overview(self, wait_s: float | None = None) -> Overview:
        """The one view every face renders. Every box is asked at once, each within its own timeout; with
        `wait_s` (the dashboard) a box that has not answered by then shows what was last known, marked as
        waiting, while its question goes on for the next refresh; without it (a report) all answers are
        awaited, so a hung box costs its timeout once, not once per question."""
        now = self.clock()
        names = sorted(self.project.instances)
        run_ids = sorted(self.project.runs)
        status_answers, run_answers = await asyncio.gather(
            self._answers({f"status:{name}": partial(self.instance_status, name) for name in names}, wait_s),
            self._answers({f"run:{run_id}": partial(self._bounded_run_state, run_id) for run_id in run_ids}, wait_s))
        statuses = {name: status_answers.get(f"status:{name}") or self._waiting_status(name) for name in names}
        run_states = {run_id: run_answers.get(f"run:{run_id}") or WAITING_RUN for run_id in run_ids}
        gpu_answers = await self._answers({f"gpu:{name}": partial(self.gpu_text, name, statuses[name])
                                           for name in names}, wait_s)
        gpus = {name: gpu_answers[f"gpu:{name}"] for name in names if f"gpu:{name}" in gpu_answers}
        instances = []
        for name, status in statuses.items():
            finished = [s.finished_at for rid, s in run_states.items()
                        if self.project.runs[rid].instance == name and s.finished_at is not None]
            reading = self.meter_reading(name, max(finished) if finished else None)
            profile = self.profile(name)
            instances.append(InstanceView(
                name=name, provider=status.provider, id=status.provider_id, state=status.state,
                gpu=gpus.get(name, status.gpu), price_per_hour=status.price_per_hour,
                price_source=status.price_source,
                billing=billing_text(status, self._walltime(name, run_states)), cost_so_far=reading.total,
                burn_per_hour=reading.burn_per_hour,
                estimate=reading.estimate, verified_month=profile.oldest_verified(),
                stale=profile.is_stale(now), currency=profile.pricing.currency,
                facts_age=profile_age_text(profile, now.date()),
                drift=reading.drift.text if reading.drift is not None else "",
                since_finished=reading.since_finished,
                note="; ".join([str(status.detail.get("error", ""))[:300], *reading.notes()]).strip("; "),
            ))
            self._sample_meter(name, status.state, reading.burn_per_hour, reading.total, reading.estimate)
        for run_id, state in run_states.items():
            if state is not WAITING_RUN:  # rules judge fresh answers only
                await self.evaluate_rules(run_id, state)
        # gathering the gate's inputs may hash files the cache does not know: never on the event loop
        runs = await asyncio.to_thread(
            lambda: [self._run_view(run_id, run_states[run_id], statuses) for run_id in sorted(self.project.runs)])
        instances = [with_cost_to_finish(i, runs) for i in instances]
        alerts = tuple(idle_burn_alerts(instances, runs)) + tuple(
            f"▲ PRICE DRIFT {i.name}: {i.drift}" for i in instances if i.drift)
        return Overview(
            project=self.project.name, generated_at=now,
            currency=instances[0].currency if instances else "USD",
            total=sum(i.cost_so_far for i in instances), burn_per_hour=sum(i.burn_per_hour for i in instances),
            instances=tuple(instances), runs=tuple(runs), read_only=self.read_only, alerts=alerts,
        )

    async def _bounded_run_state(self, run_id: str) -> RunState:
        """The job's state within the provider timeout: a box that accepts connections and never speaks
        costs one timeout, then reads unknown."""
        try:
            return await asyncio.wait_for(self.run_state(run_id), self.provider_timeout_s)
        except TimeoutError:
            return RunState(Liveness("unknown", f"the box gave no answer within {self.provider_timeout_s:g} s"),
                            None)

    def _waiting_status(self, name: str) -> InstanceStatus:
        """What a row shows while its box has not answered this refresh: the last known facts, marked."""
        last = self._last_status.get(name)
        note = "waiting for the provider's answer"
        if last is not None:  # the last answer stands, and so does what went wrong with it
            previous = last.detail.get("error")
            text = f"{previous} (asking again)" if previous else f"{note} (showing the last one)"
            return dataclasses.replace(last, detail={**last.detail, "error": text})
        instance = self.instance(name)
        snapshot = self.db.last_snapshot(name)
        return InstanceStatus(
            name=name, provider=instance.provider, provider_id=snapshot.provider_id or "" if snapshot else "",
            state="unknown", gpu="?", price_per_hour=snapshot.price_per_hour if snapshot else instance.price_per_hour,
            price_source=snapshot.price_source if snapshot else "none",
            storage_per_hour=snapshot.storage_per_hour if snapshot else None, detail={"error": note})

    def _walltime(self, name: str, run_states: dict[str, RunState]) -> str | None:
        times = [s.walltime for rid, s in sorted(run_states.items())
                 if self.project.runs[rid].instance == name and s.walltime]
        return times[-1] if times else None

    async def gpu_text(self, name: str, status: InstanceStatus) -> str:
        """What the GPUs are doing, sampled at most every GPU_SAMPLE_S per instance; "no GPU" is a state."""
        if not self.profile(name).gpu_sampling or status.state != "running":
            return status.gpu
        cached = self._gpu_text.get(name)
        if cached is not None and time.monotonic() - cached[0] < GPU_SAMPLE_S:
            return cached[1]
        try:
            samples = await sample_gpus(self.transport(name))
        except RgtError:
            text = f"{cached[1]} (stale)" if cached else "?"
        else:
            text = describe_gpus(samples)
            self._gpu_samples[name] = samples or []
        self._gpu_text[name] = (time.monotonic(), text)
        return text

    def _sample_meter(self, name: str, state: str, burn: float, total: float, estimate: bool) -> None:
        """One stored sample per instance per METER_SAMPLE_S: the UI ticks every 2 s, the record needs less."""
        last = self.db.last_meter_sample_at(name)
        if last is None or (self.clock() - last).total_seconds() >= METER_SAMPLE_S:
            self.db.add_meter_sample(name, state, burn, total, estimate)

    def _run_view(self, run_id: str, state: RunState, statuses: dict[str, InstanceStatus]) -> RunView:
        run = self.run_config(run_id)
        status = statuses[run.instance]
        files = evidence.checkpoint_statuses(self.project, run, self.db)
        gate = self.gate_view(run_id, status.provider_id, state.liveness.state)
        if gate.open and status.state in ("terminated", "unknown"):  # nothing to act on: the plan agrees
            gate = dataclasses.replace(gate, open=False, reasons=(state_reason(status.state),))
        facts = checklist_facts(self.project, run, self.db, gate)
        items = checklist.evaluate(run_id, facts, self.db)
        findings = tuple(
            FindingView(id=f"{run_id}:{item.id}", check=item.id, severity="warn", status="open",
                        message=f"{item.title}: {item.note}")
            for item in items if item.kind == "auto" and item.status == "findings"
        ) + self._log_findings(run_id)
        monitor = self._monitors.get(run_id)
        progress = monitor.snapshot if monitor is not None else None
        running = state.liveness.state in ("running", "stalled")
        return RunView(
            id=run_id, instance=run.instance,
            evidence_state=evidence_state(self.db.launch(run_id) is not None, state.liveness, gate,
                                          self.db.recorded_manifest(run_id), status.state),
            liveness=state.liveness.state, liveness_detail=state.liveness.detail,
            checkpoints=tuple(CheckpointView(f.path, f.bytes if f.sha256 else None, f.sha256 or None, f.status,
                                             f.detail) for f in files),
            gate=gate, findings=findings, checklist=tuple(items), log=runner.log_path(run),
            metric=f"{run.metric.name} ({run.metric.direction})" if run.metric else None,
            environment=self.last_env_audit(run_id),
            step=progress.step if progress else None,
            total_steps=progress.total_steps if progress else None,
            eta_s=progress.eta(self.clock().timestamp()) if progress and running else None,
            teardown=self.action_view(run.instance, status.state, "terminate", gate.reasons),
            stop=self.action_view(run.instance, status.state, "stop", gate.reasons),
        )

    def action_view(self, instance: str, state: str, action_id: str, gate_reasons: tuple[str, ...]) -> ActionView:
        """Whether the instance's `action_id` is offered and enabled, whether it is irreversible, and why
        not: the one decision the button, the key, the palette and the modal render. A gated action
        (one that destroys data) needs the evidence gate open; a plain one only a box to act on."""
        profile = self.profile(instance)
        action = profile.action(action_id)
        if action is None:
            return ActionView(action_id, action_id.capitalize(), offered=False, enabled=False,
                              irreversible=action_id == "terminate",
                              reasons=(f"{profile.display_name} has no {action_id!r} action",))
        reasons: list[str] = []
        if self.read_only:
            reasons.append("read-only session: nothing is torn down from here")
        if action.needs_gate:
            reasons.extend(gate_reasons)
        if state in ("terminated", "unknown") and state_reason(state) not in reasons:
            reasons.append(state_reason(state))
        return ActionView(action_id, action.label, offered=not self.read_only and state != "terminated",
                          enabled=not reasons, irreversible=not action.reversible, reasons=tuple(reasons))

    def _log_findings(self, run_id: str) -> tuple[FindingView, ...]:
        """The log's signature findings as the report and the checklist panel show them."""
        rows = self.catalogue().rows
        views = []
        for f in self.db.log_findings(run_id):
            row = rows.get(f.signature)
            cause = row.cause if row is not None else "user signature"
            where = f"line {f.line_no}: " if f.line_no else ""
            views.append(FindingView(
                id=f.signature, check=f"log:{row.source if row is not None else 'log'}", severity=f.severity,
                status=f.status, message=f"{cause} ({where}{f.evidence[:160]})",
                fix=row.fix if row is not None else "", count=f.count, evidence=f.last_evidence))
        return tuple(views)


def project_writable(project: ProjectConfig) -> bool:
    """Whether rgt may write the project's state: `.rgt/` when it exists, else the project folder (where
    it would be created). A read-only mount is refused by access() for root too."""
    import os

    folder = project.state_dir if project.state_dir.exists() else project.root
    if not os.access(folder, os.W_OK):
        return False
    return not project.state_db.exists() or os.access(project.state_db, os.W_OK)


def state_reason(state: str) -> str:
    """Why nothing can be done to a box whose state is terminated or unknown."""
    return f"instance state is {state}: nothing to tear down until the provider says otherwise"


WAITING_RUN = RunState(Liveness("unknown", "waiting for the box's answer"), None)


def _quiet(future: asyncio.Future[Any]) -> None:
    """Retrieve a background answer's outcome nobody waits for (so asyncio does not warn about it)."""
    if not future.cancelled():
        future.exception()


def batch_liveness(job: slurm.SlurmJob, files: Liveness) -> Liveness:
    """A batch job: Slurm says whether it is queued, running or ended; once ended, the wrapper's files
    (exit code and artifacts) decide finished versus incomplete, as for any detached job."""
    state, detail = slurm.liveness_of(job)
    if state == "finished":
        return files if files.state in ("finished", "dead") else Liveness("unknown", "ended; no exit code file")
    if state == "dead" and files.state == "dead" and files.detail.startswith("exit"):
        return files
    return Liveness(state, f"Slurm job {job.job_id}: {detail}")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _stamp(value: object) -> datetime | None:
    """An API time stamp (ISO 8601, or epoch seconds) as an aware datetime; None when absent or unreadable."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str) and value:
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    return None


def billing_text(status: InstanceStatus, walltime: str | None = None) -> str:
    """What is being paid for right now, in words; a batch job's walltime where there is one."""
    if walltime is not None:
        return f"allocation · walltime {walltime}"
    if status.state in ("running", "pending", "stopping", "terminating"):
        return "compute" if status.price_per_hour else "no meter"
    if status.state == "stopped":
        return "storage only" if status.storage_per_hour else "nothing"
    if status.state == "terminated":
        return "nothing"
    return "unknown (last known rate)"


def evidence_state(launched: bool, liveness: Liveness, gate: GateView, manifest: str | None,
                   instance_state: str) -> str:
    """The run's rung on the evidence ladder (gate-and-manifests.md §8), each entered on its own evidence."""
    if instance_state == "terminated" and gate.evidence_ok:
        return "torn_down"
    if gate.evidence_ok:
        return "pull_verified"
    if manifest is not None:
        return "hash_verified"
    if not launched:
        return "planned_not_started"
    if liveness.state == "finished":
        return "trained"
    if liveness.state == "dead":
        return "failed"
    if liveness.state == "unknown":
        return "unknown"
    return "launched"


def checklist_facts(project: ProjectConfig, run: RunConfig, db: StateDB, gate: GateView) -> ChecklistFacts:
    local_root = project.run_dir(run.id)
    last = db.last_verification(run.id)
    verified_paths = {f["path"]: f for f in (last or {}).get("files", []) if f.get("status") == "verified"}
    metric_files: dict[str, tuple[bytes | None, bool]] = {}
    for cell in run.roster:
        rel = f"{cell}/best_metrics.json"
        path = local_root / rel
        data = path.read_bytes() if path.is_file() else None
        record = verified_paths.get(rel)
        verified = bool(gate.evidence_ok and record is not None and data is not None
                        and sha256_bytes(data) == record.get("sha256"))
        metric_files[cell] = (data, verified)
    return ChecklistFacts(
        gate_evidence_ok=gate.evidence_ok, evidence_reasons=gate.reasons, roster=run.roster,
        metric_name=run.metric.name if run.metric else None,
        metric_direction=run.metric.direction if run.metric else None, metric_files=metric_files,
    )


def with_cost_to_finish(instance: InstanceView, runs: list[RunView]) -> InstanceView:
    """What finishing the training still costs on this box: the longest ETA of its runs × its burn rate."""
    etas = [r.eta_s for r in runs if r.instance == instance.name and r.eta_s is not None]
    if not etas:
        return instance
    eta = max(etas)
    return dataclasses.replace(instance, eta_s=eta, cost_to_finish=instance.burn_per_hour * eta / 3600)


def idle_burn_alerts(instances: list[InstanceView], runs: list[RunView]) -> list[str]:
    """A finished or dead job on a box that still bills: one line with the money and the next step."""
    alerts = []
    for instance in instances:
        if instance.burn_per_hour <= 0:
            continue
        idle = [r for r in runs if r.instance == instance.name and r.liveness in ("finished", "dead")]
        busy = [r for r in runs if r.instance == instance.name and r.liveness in ("running", "stalled")]
        if idle and not busy:
            run = idle[0]
            here = run.checkpoints and all(c.status not in ("pending", "missing") for c in run.checkpoints)
            step = "teardown (t)" if run.gate.open else ("verify (v)" if here else "pull (p) → verify (v)")
            alerts.append(
                f"$ BURN {instance.name}: job {run.liveness}, box still billing "
                f"${instance.burn_per_hour:.2f}/h (${instance.since_finished:.2f} since it finished) "
                f"→ next: {step}"
            )
    return alerts
