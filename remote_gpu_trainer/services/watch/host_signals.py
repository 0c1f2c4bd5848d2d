"""The live inputs of the host, GPU and save-claim run rules (docs/remote-ops.md §11).

Each watcher tick ships remote/mem_monitor.py on stdin to the box's interpreter beside the liveness look: it
answers the job's cgroup memory and OOM kills, the result root's disk, the GPU compute processes, the claimed
saves' sizes and the memory TSV's new rows. One `HostHistory` per run (on its log monitor) keeps what the rules
need across ticks, bounded: memory samples for S66's 60-s window, the last oom_kill count for S67's delta,
GPU readings and compute snapshots for S91-S93, and the claim checks for S64. Box times are mapped onto the
watcher's clock by the tick's own offset (local now - box now), so every rule reads one timeline.

Nothing here stops, kills or deletes: VRAM holders are reported, never killed.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.gpu_health import SAMPLE_FIELDS, THROTTLE_FIELDS
from remote_gpu_trainer.audits.host_sample import HostSample, parse_host_sample
from remote_gpu_trainer.audits.rules.signals import (
    ClaimedSave,
    ComputeSnapshot,
    DiskUsage,
    GpuReading,
    MemorySample,
)
from remote_gpu_trainer.clock import parse_iso
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import RgtError, TransportError
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.remote import program_stdin
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.box_layout import ctl_dir

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState

HOST_EVERY_S = 15.0  # at most one host sample per run this often (the dashboard refreshes faster)
HOST_TIMEOUT_S = 20.0  # nvidia-smi gets 10 s on the box; a hung disk must not hold the tick longer
MEMORY_KEEP = 720  # cgroup memory samples kept (an hour of 5-s TSV rows)
GPU_KEEP = 240 * 8  # timed GPU readings kept (the GPU rows look at most 240 per GPU)
SNAPSHOT_KEEP = 240
CLAIMS_KEEP = 64  # claimed paths remembered; the newest are asked about
CLAIMS_PER_TICK = 16
SAVE_GRACE_S = 60.0  # a claim logged as "Saving ..." may precede the file: absent twice, this far apart, counts


@dataclass(frozen=True)
class HostSignals:
    """The RunSignals fields one tick adds to the log monitor's (audits/rules/signals.py)."""

    cgroup_memory: tuple[MemorySample, ...] = ()
    oom_kill_delta: int | None = None
    disks: tuple[DiskUsage, ...] = ()
    compute_apps: tuple[ComputeSnapshot, ...] = ()
    gpu_readings: tuple[GpuReading, ...] = ()
    trainer_pids: tuple[int, ...] = ()
    declared_gpus: int | None = None
    claimed_saves: tuple[ClaimedSave, ...] = ()
    relaunch_at: float | None = None
    relaunch_step_before: int | None = None
    started_at: float | None = None  # the launch, on the watcher's clock

    def fields(self) -> dict[str, Any]:
        """Keyword arguments for RunSignals (everything but the GPU readings, which replace `gpu_samples`)."""
        return {"cgroup_memory": self.cgroup_memory, "oom_kill_delta": self.oom_kill_delta, "disks": self.disks,
                "compute_apps": self.compute_apps, "trainer_pids": self.trainer_pids,
                "declared_gpus": self.declared_gpus, "claimed_saves": self.claimed_saves,
                "relaunch_at": self.relaunch_at, "relaunch_step_before": self.relaunch_step_before}


@dataclass
class _Claim:
    """One save a log line claimed (S56, S57): the box paths that could hold it, when it was first seen absent, and
    the verdict once decided, kept across ticks for S64."""

    kind: str  # S56 or S57
    candidates: tuple[str, ...]  # resolved paths on the box, any of which holds the claimed file
    first_absent: float | None = None
    verdict: ClaimedSave | None = None  # decided: never asked again (a later rotation deletes it legitimately)


_PathsOf = Callable[[str, tuple[re.Pattern[str], ...]], list[str]]  # integrity.claimed_paths


@cache
def _claim_patterns() -> tuple[tuple[str, re.Pattern[str], _PathsOf], ...]:
    """(row, regex, the paths it claims in a line) for S56 and S57. VERIFY's integrity module (with ast, its YAML
    reader and the smoke checks) is imported here, with the first log line to look at: a report whose monitor
    read no new line looks at none (docs/architecture.md §5)."""
    from remote_gpu_trainer.audits.catalogue.integrity import claim_patterns, claimed_paths

    return tuple((row, pattern, claimed_paths) for row, pattern in zip(("S56", "S57"), claim_patterns(), strict=False))


def claims_in(lines: Iterable[str]) -> list[tuple[str, str]]:
    """(path, row) of every save a line claims (S56, S57), oldest first, once each; URLs are not paths."""
    found: dict[str, str] = {}
    for line in lines:
        for row, pattern, claimed_paths in _claim_patterns():
            for path in claimed_paths(line, (pattern,)):
                if "://" not in path and "\0" not in path:
                    found.setdefault(path, row)
    return list(found.items())


class HostHistory:
    """What the host rules need across ticks, for one run; bounded, and reset with a new launch."""

    def __init__(self) -> None:
        self.memory: deque[MemorySample] = deque(maxlen=MEMORY_KEEP)
        self.gpu: deque[GpuReading] = deque(maxlen=GPU_KEEP)
        self.snapshots: deque[ComputeSnapshot] = deque(maxlen=SNAPSHOT_KEEP)
        self.oom_last: int | None = None
        self.tsv_offset = 0
        self.claims: OrderedDict[str, _Claim] = OrderedDict()
        self.last: HostSample | None = None
        self.sampled_at: float | None = None  # local time of the last sample asked for
        self.sampled_state: str | None = None  # the run's liveness then
        self.skew = 0.0  # local now - box now at the last sample

    def note_claims(self, lines: Iterable[str], run: RunConfig, cell: str | None, transport: Transport) -> None:
        for path, row in claims_in(lines):
            if path not in self.claims:
                self.claims[path] = _Claim(row, _candidates(path, run, cell, transport))
                while len(self.claims) > CLAIMS_KEEP:
                    self.claims.popitem(last=False)

    def open_claims(self) -> list[str]:
        """The newest claimed paths not decided yet (the ones a sample asks about)."""
        return [p for p, c in reversed(self.claims.items()) if c.verdict is None and c.candidates][:CLAIMS_PER_TICK]

    def absorb(self, sample: HostSample, asked: Sequence[str], local_now: float) -> None:
        """Fold one tick's sample in; times move onto the local clock."""
        self.skew = local_now - sample.now
        self.last = sample
        newest = self.memory[-1].t if self.memory else float("-inf")
        for m in (*sample.tsv_memory, *([sample.memory] if sample.memory else [])):
            t = m.t + self.skew
            if t > newest:
                self.memory.append(MemorySample(t, m.current, m.max))
                newest = t
        if sample.tsv_offset is not None:
            self.tsv_offset = sample.tsv_offset
        self.gpu.extend(GpuReading(local_now, g) for g in sample.gpus)
        if sample.apps is not None:
            self.snapshots.append(ComputeSnapshot(local_now, sample.apps))
        for path, check in zip(asked, sample.claims, strict=False):
            claim = self.claims.get(path)
            if claim is not None and check is not None:
                _judge(path, claim, check.exists, check.size, local_now)

    def oom_delta(self) -> int | None:
        """The rise of oom_kill since the last tick (the launch's count, from the TSV, before the first)."""
        sample = self.last
        if sample is None or sample.oom_kill is None:
            return None
        before = self.oom_last if self.oom_last is not None else sample.oom_base
        self.oom_last = sample.oom_kill
        return sample.oom_kill - before if before is not None else None

    def signals(self, run: RunConfig, relaunch: tuple[float | None, int | None],
                started_at: float | None) -> HostSignals:
        """The RunSignals inputs as of now. Trainer pids and declared GPUs only for a run that declares GPUs:
        a CPU run is never 'training on CPU' (S92)."""
        sample = self.last
        gpu_run = run.gpus > 0
        return HostSignals(
            started_at=started_at + self.skew if started_at is not None and sample else started_at,
            cgroup_memory=tuple(self.memory), oom_kill_delta=self.oom_delta(),
            disks=sample.disks if sample else (), compute_apps=tuple(self.snapshots),
            gpu_readings=tuple(self.gpu), trainer_pids=sample.trainer_pids if sample and gpu_run else (),
            declared_gpus=run.gpus if gpu_run else None,
            claimed_saves=tuple(c.verdict for c in self.claims.values() if c.verdict is not None),
            relaunch_at=relaunch[0], relaunch_step_before=relaunch[1])


def _judge(path: str, claim: _Claim, exists: bool, size: int, now: float) -> None:
    """A present, non-empty file settles the claim; absent or empty twice, SAVE_GRACE_S apart, fails it."""
    if exists and size > 0:
        claim.verdict = ClaimedSave(path, claim.kind, exists=True, size=size)
        return
    if claim.first_absent is None:
        claim.first_absent = now
    elif now - claim.first_absent >= SAVE_GRACE_S:
        claim.verdict = ClaimedSave(path, claim.kind, exists=exists, size=size if exists else None)


def _candidates(path: str, run: RunConfig, cell: str | None, transport: Transport) -> tuple[str, ...]:
    """Where a claimed path may be on the box: as the job wrote it when absolute (the job prints the paths it
    sees, which a simulated box does not map); else under the workdir (the job's current folder) or the current
    cell's output folder."""
    if path.startswith("/"):
        return (path,)
    root = run.remote_root.rstrip("/")
    cells = [cell] if cell else list(run.roster)
    raw = [f"{run.workdir.rstrip('/')}/{path}", *(f"{root}/{c}/{path}" for c in cells)]
    out = []
    for item in raw:
        try:
            out.append(transport.resolve(item))
        except TransportError:
            continue
    return tuple(out)


async def tick(session: Session, run: RunConfig, history: HostHistory, log: Iterable[str], cell: str | None,
               launch: dict[str, Any] | None, state: RunState) -> HostSignals:
    """This tick's host inputs for the run's rules: a fresh sample at most every HOST_EVERY_S, or at once when
    the run's state changed (the memory TSV fills the gaps), folded into `history`, the run's log monitor's.
    `log` is the monitor's tail (the saves it claims) and `cell` the cell it is at: passed in, since the log
    monitor (services/watch/log_monitor.py) holds a HostHistory and so imports this module. Sampled here,
    on the watcher's path, not in every liveness look: launch checks and waits ask for the state far more
    often than the rules run."""
    now = session.clock().timestamp()
    changed = state.liveness.state != history.sampled_state
    if launch is not None and (history.sampled_at is None or changed or now - history.sampled_at >= HOST_EVERY_S):
        history.sampled_at, history.sampled_state = now, state.liveness.state
        try:
            transport = await instances.remote(session, run.instance)
        except RgtError:
            transport = None
        if transport is not None:
            history.note_claims(log, run, cell, transport)
            await sample_host(run, transport, history, now)
    return history.signals(run, relaunch_of(launch), state.started_at)


async def sample_host(run: RunConfig, transport: Transport, history: HostHistory, now: float) -> HostSample | None:
    """One host sample folded into `history`, or None (no interpreter, a box that does not answer): the rules
    then read those inputs as unknown, never as bad."""
    asked = history.open_claims()
    mounts = [run.remote_root, run.workdir]
    try:
        params = {
            "ctl": transport.resolve(ctl_dir(run)), "mounts": [transport.resolve(m) for m in mounts],
            "claims": [list(history.claims[p].candidates) for p in asked],
            "gpu_fields": [",".join((*SAMPLE_FIELDS, field)) for field in THROTTLE_FIELDS],
            "offset": history.tsv_offset,
        }
        text = await _sample_text(run, transport, params)
    except (RgtError, OSError, TimeoutError):
        return None
    sample = parse_host_sample(text, mounts, len(asked)) if text is not None else None
    if sample is not None:
        history.absorb(sample, asked, now)
    return sample


async def _sample_text(run: RunConfig, transport: Transport, params: dict[str, Any]) -> str | None:
    """remote/mem_monitor.py's sample lines, None when the program failed. A box that is this machine (sim, local)
    is sampled in a worker thread: the same program over the same /proc, cgroups, disks and nvidia-smi, without an
    interpreter's start-up per tick (~27 ms of CPU, the most of `rgt --report` on a sim box after its imports,
    docs/architecture.md §5). Elsewhere the box's interpreter runs it from stdin; -S because it needs the standard
    library only and `site` (a venv's .pth files) was half of that start-up (as the pull's streamer)."""
    if isinstance(transport, LocalTransport):
        transport.ensure_alive()
        return await asyncio.wait_for(asyncio.to_thread(_sample_here, params), HOST_TIMEOUT_S)
    result = await transport.run(f"{shlex.quote(run.python)} -S -", stdin=program_stdin("mem_monitor.py", params),
                                 timeout=HOST_TIMEOUT_S)
    return result.text if result.rc == 0 else None


def _sample_here(params: dict[str, Any]) -> str | None:
    from remote_gpu_trainer.remote import mem_monitor

    lines: list[str] = []
    try:
        mem_monitor.sample(params, emit=lines.append)
    except Exception:  # noqa: BLE001 - as the program's non-zero exit on the box: the inputs read as unknown
        return None
    return "".join(f"{line}\n" for line in lines)


def relaunch_of(launch: dict[str, Any] | None) -> tuple[float | None, int | None]:
    """(relaunch time, last step before it) from the launch record: a launch of a run id that had one
    before records the step its series had reached (services/launch/launch.py)."""
    if not launch or not isinstance(launch.get("step_before"), int):
        return None, None
    try:
        at = parse_iso(str(launch.get("started_at"))).timestamp()
    except (TypeError, ValueError):
        return None, None
    return at, int(launch["step_before"])
