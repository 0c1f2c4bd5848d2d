"""Gathering what the teardown gate decides on, for a physical box (docs/gate.md).

The pure checks are `audits/gate.py`; the only code that acts on them is `services/teardown.py`. This module
answers the two questions in between: which runs does tearing down this box put at risk, and what does the
gate say about each of them right now.

A box is covered by every run ever launched on it: the launch log in the state database names the box each
launch went to, so a run whose table has since left rgt.toml, or that was launched through another instance
entry naming the same box, still keeps the gate closed until its results are home.
"""

from __future__ import annotations

import asyncio
import contextlib
import stat
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.gate import (
    Approval,
    GateDecision,
    GateInputs,
    LocalFile,
    VerificationSeen,
    config_sha256,
    evaluate_evidence_only,
    evaluate_gate,
)
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME, parse_manifest
from remote_gpu_trainer.clock import parse_iso, utc_now
from remote_gpu_trainer.config.project import InstanceConfig, ProjectConfig, RunConfig
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.fsutil import lstat_or_none, read_regular
from remote_gpu_trainer.profile_facts import Action
from remote_gpu_trainer.providers import table as provider_table
from remote_gpu_trainer.run_records import bind_to_launch, run_config_from_record
from remote_gpu_trainer.services import box_ledger, instances
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.box_ledger import LedgerEntry
from remote_gpu_trainer.services.evidence.local_root import (
    box_folders,
    hash_with_cache_sync,
    not_home,
    recorded_links,
    walk_local_root,
)
from remote_gpu_trainer.services.evidence.manifest import RemoteManifest, recorded_adoption, remote_manifest
from remote_gpu_trainer.services.meter import last_status
from remote_gpu_trainer.services.watch.liveness import run_state_of
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import GateView, LossAtRisk

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session



@dataclass(frozen=True)
class BoxRun:
    """A run whose results may live on the box: its configuration, and how rgt knows about it."""

    run: RunConfig
    in_config: bool  # still a table in rgt.toml (else judged by the configuration it was launched/verified under)
    launched: bool  # rgt launched it on this box (a run never launched there left no results of rgt's on it)
    ledger: LedgerEntry | None = None  # the box's own record of its latest launch, when the ledger was read

    @property
    def label(self) -> str:
        return self.run.id if self.in_config else f"{self.run.id} (no longer in rgt.toml)"


async def box_key(instance: InstanceConfig, provider_id: str, state_dir: Path) -> str:
    """The physical box an instance entry names: provider and provider id, or, for an SSH box, every
    identity it is known by, strongest first (docs/gate.md §7 item 6): the host keys trusted for it, the
    addresses its HostName resolves to, the host and port it really connects to (an alias resolved through
    ssh config; the login user does not change the machine). Only a Slurm "cluster" on this machine is not
    an SSH box; an ssh entry for localhost also carries the `ssh:<id>` form older launch records used."""
    if instance.host and provider_table.ssh_hosted(instance.provider, instance.host):
        from remote_gpu_trainer.providers.box_identity import ssh_box  # asyncssh only for SSH boxes
        from remote_gpu_trainer.providers.transports.ssh_pool import SSHSettings

        box = await ssh_box(instance.host, SSHSettings(known_hosts_file=state_dir / "known_hosts"))
        legacy = (f"{instance.provider}:{provider_id}",) if instance.host in provider_table.HERE_HOSTS else ()
        return " ".join((*box.tokens(), *legacy))
    return f"{instance.provider}:{provider_id}"


async def session_box_key(session: Session, name: str) -> str:
    """box_key, and for a cloud box reached over SSH the host keys trusted for the endpoint its provider
    last gave (docs/gate.md §7 item 6): an ssh entry for the same machine then shares its gate. Only the
    keys: a rented box's address and port go to the next box, its host key does not."""
    instance = session.instance(name)
    key = await box_key(instance, session.provider(name).provider_id(instance), session.project.state_dir)
    status = last_status(session, name)
    target = status.detail.get("ssh_target") if status is not None else None
    row = provider_table.find(instance.provider)
    if (row is not None and row.identity == "ssh-host") or not isinstance(target, str) or not target:
        return key
    from remote_gpu_trainer.providers.box_identity import ssh_box
    from remote_gpu_trainer.providers.transports.ssh_pool import SSHSettings

    box = await ssh_box(target, SSHSettings(known_hosts_file=session.project.state_dir / "known_hosts"))
    return " ".join((key, *box.key_tokens()))


async def box_runs(session: Session, name: str) -> list[BoxRun]:
    """Every run configured on the instance entry, and every run the launch log puts on its box."""
    from remote_gpu_trainer.providers.box_identity import same_box

    key = await session_box_key(session, name)
    launched: dict[str, RunConfig | None] = {}
    for record in session.db.launch_history():
        # any identity shared is this box (box_identity.same_box); None: before schema 2
        if same_box(record.box, key) or (record.box is None and record.instance == name):
            launched[record.run_id] = run_config_from_record(record.config)
    result: dict[str, BoxRun] = {}
    for run_id, run in sorted(session.project.runs.items()):
        if run.instance == name or run_id in launched:
            # where its launch put its files and job (docs/gate.md §7, "Launch-time bindings")
            result[run_id] = BoxRun(run_config(session, run_id), True, run_id in launched)
    for run_id, recorded in sorted(launched.items()):
        if run_id in result:
            continue
        run = _judged_config(session, run_id, recorded, name)
        result[run_id] = BoxRun(run, False, True)
    return [result[run_id] for run_id in sorted(result)]


def _judged_config(session: Session, run_id: str, launched: RunConfig | None, name: str) -> RunConfig:
    """A run no longer in rgt.toml is judged by the configuration its last verification was made under,
    at the places its latest launch bound (the same launch's: unchanged; a later one's: where the new job
    is), else the one it was launched with, else the bare minimum (which then cannot pass)."""
    record = session.db.last_verification_record(run_id)
    verified = run_config_from_record(record.config) if record is not None else None
    if verified is not None:
        return bind_to_launch(verified.as_configured(), launched)
    if launched is not None:
        return launched
    return RunConfig(id=run_id, instance=name, workdir="/", command="", log="", remote_root="/?", roster=("?",))


async def decide(session: Session, name: str, box_run: BoxRun, provider_id: str, approval: Approval | None, *,
                 check_box: bool) -> GateDecision:
    """The gate for one run on the box. With `check_box` the box is asked now: is the job still running,
    is the manifest still there; a box that does not answer leaves a warning, not a pass."""
    run = box_run.run
    remote = None
    liveness = None
    if check_box:
        try:
            transport = await instances.remote(session, name)
            remote = await remote_manifest(transport, run)
            liveness = (await run_state_of(session, run, name)).liveness.state
        except RgtError:
            remote = RemoteManifest(False)
    inputs = await asyncio.to_thread(  # may hash files: never on the event loop
        partial(gather_gate_inputs, session.project, run, session.db, provider_id, approval,
                remote=remote, liveness=liveness))
    return evaluate_gate(inputs) if approval is not None else evaluate_evidence_only(inputs)


def gather_gate_inputs(project: ProjectConfig, run: RunConfig, db: StateDB, instance_id: str,
                       approval: Approval | None, *, now: datetime | None = None,
                       action_described: bool = True, remote: RemoteManifest | None = None,
                       liveness: str | None = None) -> GateInputs:
    """Read what the gate decides on: marker and manifest bytes, every local entry with its hash, the last
    verification recorded, the run's latest launch, and (when given) the box's manifest and the job's state.

    Hashes come from the cache when the file is unchanged (size, mtime, ctime, inode), so evaluating the gate
    twice in a row (dialog open, then right before the call) is cheap. `action_described` is G6, decided by
    the teardown screen.
    """
    root = project.run_dir(run.id)
    marker = read_regular(root / MARKER_NAME)
    manifest_bytes = read_regular(root / MANIFEST_NAME)
    manifest_info = lstat_or_none(root / MANIFEST_NAME)
    listed: dict[str, int] = {}
    manifest = None
    adopted = recorded_adoption(db, run.id)
    if manifest_bytes is not None:
        manifest, _ = parse_manifest(manifest_bytes, roster=run.roster, run_id=run.id, adopted=adopted)
        if manifest is not None:
            listed = {entry.path: entry.bytes for entry in manifest.files}
    files = tuple(_gate_listing(root, listed, db, recorded_links(root, manifest)))
    record = db.last_verification_record(run.id)
    seen = None if record is None else VerificationSeen(
        ok=record.ok, at=record.at, manifest_sha256=record.manifest_sha256, marker_sha256=record.marker_sha256,
        config_sha256=record.config_sha256)
    launches = db.launch_history(run.id)
    return GateInputs(
        run_id=run.id, roster=tuple(run.roster), required=tuple(run.required),
        checkpoint_globs=tuple(run.checkpoint_globs), marker=marker, manifest=manifest_bytes,
        manifest_mtime_ns=manifest_info.st_mtime_ns if manifest_info is not None else None,
        recorded_manifest_sha256=db.recorded_manifest(run.id),
        adopted_run_id=adopted.run_id if adopted is not None else None, local_files=files,
        instance_id=instance_id, approval=approval, now=now or utc_now(), action_described=action_described,
        remote_manifest_sha256=remote.sha256 if remote is not None else None,
        remote_checked=remote is not None and remote.reachable,
        verification=seen, config_sha256=config_sha256(run),
        launched_at=launches[-1].at if launches else None, manifest_built_at=db.manifest_built_at(run.id),
        liveness=liveness, not_home=not_home(project.root, run.id, box_folders(project, run)),
    )


def _gate_listing(root: Path, listed: dict[str, int], db: StateDB, links: set[str]) -> list[LocalFile]:
    """Every entry under the local root but the manifest and marker and the manifest's links as the pull
    re-created them (`links`, which are not files); listed files of the right size hashed."""
    if not root.is_dir():
        return []
    result: list[LocalFile] = []
    for path, info in walk_local_root(root):
        if path in links:  # the manifest's own link, as the pull re-created it: not a file
            continue
        regular = stat.S_ISREG(info.st_mode)
        digest = None
        if regular and listed.get(path) == info.st_size:
            with contextlib.suppress(OSError):
                digest = hash_with_cache_sync(db, root.joinpath(*path.split("/")))
        result.append(LocalFile(path, info.st_size, info.st_mtime_ns, digest, regular))
    return sorted(result)


async def may_hold_results(session: Session, name: str, box_run: BoxRun) -> tuple[bool, str | None]:
    """Whether the run's results may be on the box, and, when that could not be checked, the reason that
    keeps the gate closed for it (docs/gate.md §7.2, "unknown is never empty").

    A launch record, or an entry in the box's ledger, says so. Without one (never launched, or the state
    database was deleted or reset) the run still counts when it has a local root here or files in its result
    root on the box: rgt's memory is not the evidence. A box that cannot be asked is not taken as empty."""
    if box_run.launched or session.project.run_dir(box_run.run.id).exists():
        return True, None
    try:
        transport = await instances.remote(session, name)
        return bool(await transport.listdir(box_run.run.remote_root)), None
    except (RgtError, OSError, TimeoutError) as exc:
        return True, (f"the box could not be asked whether {box_run.run.remote_root} holds results of run "
                      f"{box_run.run.id} ({escape_control(str(exc)) or type(exc).__name__}): unknown is not empty")


@dataclass(frozen=True)
class BoxVerdict:
    """The gate for a physical box before any approval: the runs covered, each run whose results are not
    known to be home with its reasons (what `--accept-loss` names), what no name can waive, and warnings."""

    covered: tuple[BoxRun, ...]
    at_risk: tuple[LossAtRisk, ...]
    warnings: tuple[str, ...]
    fixed: tuple[str, ...] = ()  # reasons no run's name waives (e.g. the approval's own)
    # the part of `at_risk` a configured run's own evidence gate does not show (a run only the launch log or the
    # ledger knows, another project's run, a box that cannot be asked, a launch only the ledger records):
    # what the dashboard and `--report` add to the runs' own gates (services/overview.py)
    beyond_runs: tuple[LossAtRisk, ...] = ()

    def reasons(self, accepted: Collection[str] = ()) -> list[str]:
        """Every reason the gate is closed, once the runs named in `accepted` are waived."""
        return [*self.fixed, *(reason for loss in self.at_risk if loss.name not in accepted
                               for reason in loss.reasons)]


async def covered_runs(session: Session, name: str, *, ledger: bool = False
                       ) -> tuple[list[BoxRun], list[LossAtRisk], list[str]]:
    """The runs tearing down this box puts at risk (the gate must hold for each), the runs only the box's
    ledger names that belong to another project (each at risk by itself), and warnings. With `ledger`
    (an action that destroys a disk) the box's ledger is read: a run of this project that only the box
    remembers is covered too, and a ledger that cannot be read keeps the gate closed for every run that
    may be there, never counts as empty."""
    known = await box_runs(session, name)
    foreign: list[LossAtRisk] = []
    warnings: list[str] = []
    if ledger:
        known, foreign, warnings = await _with_ledger(session, name, known)
    covered: list[BoxRun] = []
    unknown: list[LossAtRisk] = []
    for box_run in known:
        holds, why = await may_hold_results(session, name, box_run)
        if holds:
            covered.append(box_run)
        if why:
            unknown.append(LossAtRisk(box_run.run.id, (f"{box_run.label}: {why}",)))
    return covered, [*unknown, *foreign], warnings


async def _with_ledger(session: Session, name: str, known: list[BoxRun]
                       ) -> tuple[list[BoxRun], list[LossAtRisk], list[str]]:
    """`known` with the box's ledger added: this project's runs only the box remembers (launched there, with
    the bindings the box recorded), the other projects' runs as losses at risk. A ledger that cannot be read
    leaves the last copy rgt read of it (`.rgt/ledgers/`) as the best knowledge, and a warning."""
    own_id = box_ledger.project_id(session.project)
    try:
        transport = await instances.remote(session, name)
        entries = await box_ledger.read_ledger(transport)
    except (RgtError, OSError, TimeoutError) as exc:
        entries = box_ledger.cached_ledger(session.project, name)
        warnings = [f"the box's ledger could not be read ({escape_control(str(exc)) or type(exc).__name__}): "
                    f"judged by rgt's own records{' and the copy read before' if entries else ''}; "
                    "runs rgt never recorded may be on it"]
        unknown_ledger = True
    else:
        box_ledger.cache_ledger(session.project, name, entries)
        warnings, unknown_ledger = [], False
    by_id = {box_run.run.id: box_run for box_run in known}
    foreign: list[LossAtRisk] = []
    for entry in entries:
        if not box_ledger.is_ours(entry, session.project, own_id):
            foreign.append(LossAtRisk(
                entry.loss_name(), (f"{entry.shown()}: on the box's ledger, a run of another project; this "
                                    "project cannot tell whether its results are home",)))
            continue
        present = by_id.get(entry.run_id)
        if present is None:
            run = entry.run_config() or _judged_config(session, entry.run_id, None, name)
            by_id[entry.run_id] = BoxRun(run, False, True, ledger=entry)
        else:
            by_id[entry.run_id] = replace(present, launched=True, ledger=entry)
    if unknown_ledger:  # every run that may be there: nothing is taken as never launched
        for run_id, box_run in list(by_id.items()):
            if not box_run.launched:
                foreign.append(LossAtRisk(run_id, (
                    f"{box_run.label}: the box's ledger could not be read, so whether another copy of rgt "
                    "launched it there is unknown: unknown is not empty",)))
                by_id[run_id] = replace(box_run, launched=True)
    return [by_id[run_id] for run_id in sorted(by_id)], foreign, warnings


async def box_verdict(session: Session, name: str, provider_id: str, approval: Approval | None, *,
                      check_box: bool = True, ledger: bool = False) -> BoxVerdict:
    """The gate for the box: every run covered judged (`decide`), each run's reasons kept apart so the user
    can accept one run's loss by its name, never another's."""
    covered, at_risk, warnings = await covered_runs(session, name, ledger=ledger)
    losses = {loss.name: list(loss.reasons) for loss in at_risk}
    beyond = {loss.name: list(loss.reasons) for loss in at_risk}
    for box_run in covered:
        decision = await decide(session, name, box_run, provider_id, approval, check_box=check_box)
        prefix = f"{box_run.label}: " if len(covered) > 1 or not box_run.in_config else ""
        found = [prefix + reason for reason in decision.reasons]
        from_ledger = [prefix + reason for reason in _ledger_launch_reasons(session, box_run)]
        warnings.extend(prefix + warning for warning in decision.warnings)
        if found or from_ledger:
            losses.setdefault(box_run.run.id, []).extend([*found, *from_ledger])
        extra = from_ledger if box_run.in_config else [*found, *from_ledger]
        if extra:
            beyond.setdefault(box_run.run.id, []).extend(extra)
    return BoxVerdict(tuple(covered), _losses(losses), tuple(warnings), beyond_runs=_losses(beyond))


def _losses(reasons: dict[str, list[str]]) -> tuple[LossAtRisk, ...]:
    return tuple(LossAtRisk(name, tuple(reasons[name])) for name in sorted(reasons) if reasons[name])


def _ledger_launch_reasons(session: Session, box_run: BoxRun) -> list[str]:
    """The box's ledger records a launch of the run after its last verification here (a launch this rgt
    did not record: another copy of the project, a lost database): the box holds newer results."""
    entry = box_run.ledger
    if entry is None:
        return []
    try:
        started = parse_iso(entry.started_at)
    except ValueError:
        return [f"the box's ledger records a launch at an unreadable time ({escape_control(entry.started_at)})"]
    record = session.db.last_verification_record(box_run.run.id)
    if record is None or record.at >= started:
        return []
    return [f"the box's ledger records a launch at {escape_control(entry.started_at)}, after the last "
            "verification here: pull and verify its results"]


def reads_ledger(action: Action | None) -> bool:
    """An action that destroys a disk destroys whatever any run of any project left there: the box's
    ledger is read (docs/gate.md §7.2). A reversible stop or a job's cancel destroys no storage."""
    return action is None or bool(action.destroys)


async def teardown_verdict(session: Session, name: str, provider_id: str) -> BoxVerdict:
    """The box's gate for its terminate action as every face shows it before anyone approves: the dashboard
    and `--report` (services/overview.py) ask this, the teardown plan asks `box_verdict` with the box asked
    again. A box whose identity cannot be worked out is a closed gate with the reason, never an open one."""
    action = session.profile(name).action("terminate")
    try:
        return await box_verdict(session, name, provider_id, None, check_box=False, ledger=reads_ledger(action))
    except (RgtError, OSError, TimeoutError) as exc:
        return BoxVerdict((), (), (), fixed=(f"the box's gate could not be worked out: {escape_control(str(exc))}",))


async def box_reasons(session: Session, name: str, provider_id: str, approval: Approval | None, *,
                      check_box: bool = True) -> tuple[list[BoxRun], list[str], list[str]]:
    """The runs covered, every reason the gate is closed for the box (each prefixed with its run when there
    are several), and the warnings (a box that did not answer)."""
    verdict = await box_verdict(session, name, provider_id, approval, check_box=check_box)
    return list(verdict.covered), verdict.reasons(), list(verdict.warnings)


def gate_view(session: Session, run_id: str, provider_id: str, liveness: str | None = None) -> GateView:
    """The gate as the dashboard shows it: the evidence conditions always; `open` also needs a teardown
    action the profile names. The box's manifest is not re-read here (the teardown plan does that), so the
    view carries that warning."""
    run = run_config(session, run_id)
    profile = session.profile(run.instance)
    action = profile.action("terminate")
    inputs = gather_gate_inputs(session.project, run, session.db, provider_id, None, liveness=liveness)
    decision = evaluate_evidence_only(inputs)
    if action is None:
        reasons = (f"{profile.display_name} has no teardown action: nothing to destroy", *decision.reasons)
        return GateView(False, "none", (), reasons, evidence_ok=decision.open)
    label = f"{run.instance}: {action.label} ({profile.id} {action.id} {provider_id})"
    return GateView(decision.open, label, tuple(profile.destroys_text(action)), tuple(decision.reasons),
                    evidence_ok=decision.open)
