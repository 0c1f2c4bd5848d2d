"""A project opened for work: config, state database, and the provider, transport and log-monitor caches.

The TUI, the CLI verbs and `--report` all go through a Session, so a number or a refusal is computed in
one place: the verbs live in the services that own them (instances, launch, liveness, run_logs,
evidence/verbs, overview, ...), each taking the session; the methods at the end of the class forward to
them for callers that hold only a session. A Session never imports Textual; long work is async and bounded
by timeouts, and one question per box is in flight at a time (asked()).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from remote_gpu_trainer.audits.gpu_health import GpuSample
from remote_gpu_trainer.audits.log.signatures import Catalogue, load_catalogue
from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import (
    InstanceConfig,
    ProjectConfig,
    RunConfig,
    load_project,
    resolve_project_file,
    user_config_dir,
)
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.profiles import Profile
from remote_gpu_trainer.providers.base import InstanceStatus, Transport
from remote_gpu_trainer.providers.registry import provider_for
from remote_gpu_trainer.services import instances, project_registry
from remote_gpu_trainer.services.bindings import bound_run_config
from remote_gpu_trainer.services.evidence import verbs as evidence_verbs
from remote_gpu_trainer.services.evidence.pull import PullProgress, PullResult
from remote_gpu_trainer.services.evidence.verify import VerifyResult, VerifyStep
from remote_gpu_trainer.services.launch import env_audit as env
from remote_gpu_trainer.services.launch import launch as runner
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch import liveness as watcher
from remote_gpu_trainer.services.watch import run_logs
from remote_gpu_trainer.services.watch.log_monitor import Alert, ChartData, LogUpdate, RunLogMonitor
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.views import AuditRow, LogLineView, Overview

if TYPE_CHECKING:
    from remote_gpu_trainer.providers.base import Provider
    from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown

T = TypeVar("T")
PROVIDER_TIMEOUT_S = 20.0


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
        self.gpu_text_cache: dict[str, tuple[float, str]] = {}  # instance -> (monotonic time, panel text)
        self._transports: dict[str, Transport] = {}
        self.monitors: dict[str, RunLogMonitor] = {}
        self._catalogue: Catalogue | None = None
        self.gpu_samples: dict[str, list[GpuSample]] = {}  # instance -> the last sampled GPUs
        self.last_status: dict[str, InstanceStatus] = {}
        self._inflight: dict[str, asyncio.Future[Any]] = {}  # one question per box at a time (see asked)

    @classmethod
    def open(cls, project_arg: str | None, *, clock: Clock = utc_now, read_only: bool = False) -> Session:
        session = cls(load_project(resolve_project_file(project_arg)), clock=clock, read_only=read_only)
        project_registry.remember(session.project.root, clock)  # so `rgt status --all` finds it later
        if session.project.signatures or (user_config_dir() / "signatures.d").is_dir():
            try:
                session.catalogue()  # a bad user signature is a configuration error now, not a silent miss later
            except RgtError:
                session.close()
                raise
        return session

    def close(self) -> None:
        for monitor in self.monitors.values():
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
        if name not in self.last_status and name not in self._transports:
            await self.asked(f"status:{name}", lambda: self.instance_status(name))
        return self.transport(name)

    def asked(self, key: str, ask: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
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

    async def answers(self, questions: dict[str, Callable[[], Awaitable[T]]],
                      wait_s: float | None) -> dict[str, T]:
        """Ask every box at once, each within its own timeout, and return the answers that came within
        `wait_s` (all of them when None); the others keep going in the background."""
        futures = {key: self.asked(key, ask) for key, ask in questions.items()}
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
        """Where the run's files and processes are: rgt.toml's table with the location keys its latest launch
        bound (services/bindings.py); what rgt.toml now says otherwise is its `location_drift`. Launching reads
        `project.run` (rgt.toml as it is) instead: a new launch binds the next job."""
        return bound_run_config(self.project, self.db, run_id)

    def require_writable(self, what: str) -> None:
        if self.folder_read_only:
            raise RgtError(f"{what}: the project folder {self.project.root} is read-only; only --report, "
                           "events and --read-only work there")
        if self.read_only:
            raise RgtError(f"{what} is a cost-affecting action and rgt is in --read-only mode")

    def catalogue(self) -> Catalogue:
        """Shipped signatures plus the user's (signatures.d and rgt.toml), checked once per session."""
        if self._catalogue is None:
            self._catalogue = load_catalogue(user_dirs=(user_config_dir() / "signatures.d",),
                                             user_rows=self.project.signatures, user_origin=str(self.project.file))
        return self._catalogue

    def log_monitor(self, run_id: str) -> RunLogMonitor | None:
        """The run's log pipeline, once the run was launched (before that there is no log to follow)."""
        if run_id not in self.monitors:
            if self.db.launch(run_id) is None:
                return None
            run = self.run_config(run_id)
            self.monitors[run_id] = RunLogMonitor(
                run_id, lambda offset, limit: self.tail_log(run_id, offset, limit), self.db, self.catalogue(),
                now=lambda: self.clock().timestamp(), total_steps=run.total_steps or None)
        return self.monitors[run_id]

    async def tail_log(self, run_id: str, offset: int, limit: int = 1 << 20) -> tuple[bytes, int]:
        run = self.run_config(run_id)
        return await (await self.remote(run.instance)).tail(runner.log_path(run), offset, limit)

    # -- the verbs: each lives in the service that owns it; these forward for callers holding a session ----
    async def instance_status(self, name: str) -> InstanceStatus:
        return await instances.instance_status(self, name)

    async def trust_host_key(self, name: str, fingerprint: str, actor: str = "user") -> dict[str, Any]:
        return await instances.trust_host_key(self, name, fingerprint, actor)

    async def create_instance(self, name: str, actor: str = "user") -> InstanceStatus:
        return await instances.create_instance(self, name, actor)

    async def env_audit(self, run_id: str, actor: str = "user") -> list[AuditRow]:
        return await env.audit_run_environment(self, run_id, actor)

    async def launch(self, run_id: str, actor: str = "user") -> dict[str, Any]:
        return await runner.launch_run(self, run_id, actor)

    async def run_state(self, run_id: str) -> watcher.RunState:
        return await watcher.run_state(self, run_id)

    async def follow_log(self, run_id: str, max_reads: int = 8) -> LogUpdate | None:
        return await run_logs.follow_log(self, run_id, max_reads)

    async def log_backfill(self, run_id: str) -> list[LogLineView]:
        return await run_logs.log_backfill(self, run_id)

    def loss_chart(self, run_id: str) -> ChartData | None:
        return run_logs.loss_chart(self, run_id)

    def take_alerts(self) -> list[Alert]:
        return run_logs.take_alerts(self)

    async def evaluate_rules(self, run_id: str, state: watcher.RunState) -> None:
        await run_logs.evaluate_rules(self, run_id, state)

    async def pull(self, run_id: str, progress: Callable[[PullProgress], None] | None = None,
                   actor: str = "user") -> PullResult:
        return await evidence_verbs.pull_run(self, run_id, progress, actor)

    async def verify(self, run_id: str, progress: Callable[[VerifyStep], None] | None = None,
                     actor: str = "user") -> VerifyResult:
        return await evidence_verbs.verify_run(self, run_id, progress, actor)

    async def overview(self, wait_s: float | None = None) -> Overview:
        """Observe every box (recording snapshots, meter samples and rule findings), then build the
        Overview: services/overview.py's observe() and build() in one call."""
        return await observe_and_build(self, wait_s)



def project_writable(project: ProjectConfig) -> bool:
    """Whether rgt may write the project's state: `.rgt/` when it exists, else the project folder (where
    it would be created). A read-only mount is refused by access() for root too."""
    import os

    folder = project.state_dir if project.state_dir.exists() else project.root
    if not os.access(folder, os.W_OK):
        return False
    return not project.state_db.exists() or os.access(project.state_db, os.W_OK)


def _quiet(future: asyncio.Future[Any]) -> None:
    """Retrieve a background answer's outcome nobody waits for (so asyncio does not warn about it)."""
    if not future.cancelled():
        future.exception()
