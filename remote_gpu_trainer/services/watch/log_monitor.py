"""One run's log, understood: follow it, parse metrics, detect failure signatures, keep the findings.

The pipeline is follower → lines → (metric parser, signature detector) → findings ledger, and its output
is persisted in one transaction per poll (cursor, samples, findings) so a restart neither loses nor
double-counts anything. The stateful rules (stall, spike, GPU idle, finished-but-billing …) run on the
overview's cadence over what the pipeline gathered plus liveness and GPU samples.

A job may print a provider API key (`env`, a config dump). Every key rgt knows (the providers' env vars and
CLI credential files) is redacted from the lines before anything reads them, so no key reaches the metric
samples, the findings' evidence in the state database, the log view, `rgt watch` or a report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits import rules as run_rules
from remote_gpu_trainer.audits.gpu_health import GpuSample
from remote_gpu_trainer.audits.liveness import Liveness
from remote_gpu_trainer.audits.log.ledger import FindingsLedger, LedgerEntry
from remote_gpu_trainer.audits.log.lines import Line, LineSplitter
from remote_gpu_trainer.audits.log.progress import TrainingProgress
from remote_gpu_trainer.audits.log.samples import Hit, Sample, severity_rank
from remote_gpu_trainer.audits.log.signatures import Catalogue
from remote_gpu_trainer.audits.log.thinning import SeriesThinner, by_key
from remote_gpu_trainer.audits.rules.signals import GpuReading
from remote_gpu_trainer.services.box_layout import CELL_STARTED
from remote_gpu_trainer.services.watch.host_signals import HostHistory
from remote_gpu_trainer.services.watch.log_follow import (
    MAX_READS_PER_POLL,
    LogChunk,
    LogFollower,
    Reader,
    finish_even_if_cancelled,
)
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.state.events import EventKind
from remote_gpu_trainer.state.run_logs import LogFinding
from remote_gpu_trainer.text import duration
from remote_gpu_trainer.views import LogLineView

if TYPE_CHECKING:  # the detector (and its prefilter) loads with the first line to classify: a report of a log that
    # gained nothing classifies nothing (docs/architecture.md §5)
    from remote_gpu_trainer.audits.log.detector import LogDetector
    from remote_gpu_trainer.audits.log.metrics import MetricParser  # likewise: parsing waits for a line to parse
    from remote_gpu_trainer.providers.cloud.credentials import KeyScrubber  # and scrubbing for news to scrub

_CELL_MARKER = re.compile("^" + re.escape(CELL_STARTED).replace(re.escape("{cell}"), r"(\S+)") + "$")
_CELL_PREFIX = CELL_STARTED.split("{cell}")[0]  # what every marker line starts with
TAIL_LINES = 200  # what S58 reads ("no Traceback in the last 200 lines")
SERIES_WINDOW = 2000  # newest samples per key kept in memory for the rules (spike needs 200, S76 200)
FIRST_WINDOW = 200  # oldest samples per key, kept too: S72 compares with the first window, S75/S81 read epoch 1
CHART_POINTS = 600  # the chart is thinned to about this many points
NOTIFY_FROM = "warn"  # info rows go to the findings list only
INLINE_LINES = 500  # smaller chunks are digested on the event loop: a thread hop would cost more
BACKFILL_BYTES = 256 << 10  # what a newly opened log view shows of lines read before it opened
STORE_AFTER_S = 30.0  # a caught-up poll stores a thinning bucket opened this long ago (a slow log's samples)


@dataclass(frozen=True)
class Alert:
    """A finding worth a notification: new, or worse than before."""

    run_id: str
    signature: str
    severity: str
    title: str
    message: str
    fix: str


@dataclass(frozen=True)
class LogUpdate:
    """What one poll of the log brought: new lines, whether the file restarted, an unfinished line, more to read."""

    lines: tuple[LogLineView, ...]
    restarted: bool
    partial: str
    more: bool
    alerts: tuple[Alert, ...]


@dataclass(frozen=True)
class ChartData:
    """The loss chart's points (thinned to what a chart can show) and what its x axis counts."""

    steps: tuple[float, ...]  # the x of each point: steps, or epochs when `x` says so
    values: tuple[float, ...]
    title: str
    x: str = "step"  # "step" or "epoch" (a Hugging Face dict series without steps, docs/log-signatures.md §4.5)


@dataclass(frozen=True)
class MonitorSnapshot:
    """Training progress as of the last digest, safe to read from any task."""

    t: float
    step: int | None
    total_steps: int | None
    eta_at_t: float | None  # seconds to the end of training as of `t`

    chart: ChartData

    def eta(self, now: float) -> float | None:
        """The ETA counted down to `now`; None once it ran out (no estimate, never "0 s to go")."""
        if self.eta_at_t is None:
            return None
        left = self.eta_at_t - max(0.0, now - self.t)
        return left if left > 0 else None


class ThinnedSeries:
    """A whole-run series in bounded memory: when full, every other point goes and the stride doubles,
    so the chart always spans the run from its first step with at most `capacity` points."""

    def __init__(self, capacity: int = CHART_POINTS) -> None:
        self.capacity = capacity
        self.points: list[tuple[float, float]] = []
        self.stride = 1
        self._seen = 0
        self.last: tuple[float, float] | None = None

    def add(self, x: float, y: float) -> None:
        self.last = (x, y)
        if self._seen % self.stride == 0:
            self.points.append((x, y))
            if len(self.points) >= self.capacity:
                self.points = self.points[::2]
                self.stride *= 2
        self._seen += 1

    def view(self) -> list[tuple[float, float]]:
        """The kept points plus the newest one, so the line always reaches the present."""
        if self.last is not None and (not self.points or self.points[-1] != self.last):
            return [*self.points, self.last]
        return list(self.points)


class RunLogMonitor:
    def __init__(self, run_id: str, read: Reader, db: StateDB, catalogue: Callable[[], Catalogue],
                 now: Callable[[], float], total_steps: int | None = None) -> None:
        self.run_id = run_id
        self.db = db.twin()  # its own connection: polls write from a worker thread
        self._owns_db = self.db is not db
        self._catalogue = catalogue
        self.now = now
        self.follower = LogFollower(read, db.log_cursor(run_id))
        self._stored_cursor = self.follower.cursor  # what the database holds: a poll that moved nothing writes nothing
        self._parser: MetricParser | None = None  # made on first use (the `parser` property)
        self._detector: LogDetector | None = None  # made on first use (the `detector` property)
        self.ledger = FindingsLedger()
        self.progress = TrainingProgress(total_steps=total_steps)
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)  # the digest's own; others read `tail`
        # the last lines, replaced whole after each digest: the rules read it on the loop while a poll digests in a
        # thread, and iterating the deque itself then was `deque mutated during iteration` (bench_log_ingest.py)
        self.tail: tuple[str, ...] = ()
        self.series: dict[str, deque[Sample]] = {}
        self.first_series: dict[str, list[Sample]] = {}
        self.last_line_t: float | None = None
        self.pending_alerts: list[Alert] = []  # from the stateful rules, taken by the UI or `rgt watch`
        self.host = HostHistory()  # the host rules' inputs across ticks (services/watch/host_signals.py)
        self._lock = asyncio.Lock()  # one poll or rule evaluation at a time: they share the parser state
        self.loss = ThinnedSeries()
        self.loss_x = ""  # what the chart's x is: "step", or "epoch" for a series whose lines state no step
        self.nonfinite_at: str | None = None  # "step 120" / "epoch 1.25": where the loss first went non-finite
        self.behind = False  # the last poll left lines unread: the next one's lines were written before it
        self.cell: str | None = None  # the roster cell the log is at (the wrapper's marker line says)
        self.saved = 0  # sample rows of this run stored so far: a cell boundary is recorded as a count
        self.thinner = SeriesThinner()  # which samples are stored (dense series downsampled on the way in)
        self._restore()
        # what other tasks read while a poll digests in its thread: replaced whole, never mutated
        self.snapshot = self._snapshot(self.now())

    # The catalogue (its TOML parsed, every pattern checked), the detector (its compiled regexes), the metric parser
    # (its own) and the scrubber (every profile parsed for the key names it reads) are made when the first new line
    # arrives: a monitor that only catches up with a log it has read already (`rgt --report` on a finished run, the
    # dashboard's first look) never needs them.
    @functools.cached_property
    def catalogue(self) -> Catalogue:
        return self._catalogue()

    @property
    def parser(self) -> MetricParser:
        if self._parser is None:
            from remote_gpu_trainer.audits.log.metrics import MetricParser

            self._parser = MetricParser()
        return self._parser

    @property
    def detector(self) -> LogDetector:
        if self._detector is None:
            from remote_gpu_trainer.audits.log.detector import LogDetector

            self._detector = LogDetector(self.catalogue)
        return self._detector

    @functools.cached_property
    def scrubber(self) -> KeyScrubber:
        from remote_gpu_trainer.providers.cloud.credentials import KeyScrubber, known_keys  # with the first news

        return KeyScrubber(known_keys())  # read once per monitor: keys set later need a new session

    def close(self) -> None:
        """Store what the thinner still holds (its open buckets), then let go of the connection."""
        rows = self.thinner.flush()
        if rows and not self.db.read_only:
            self.db.save_log_progress(self.run_id, self.follower.cursor, rows, [])
            self.saved += len(rows)
        if self._owns_db:
            self.db.close()

    def _restore(self) -> None:
        """After a restart: the findings (so nothing re-notifies) and the current cell's recent series (for
        rules and ETA)."""
        for f in self.db.log_findings(self.run_id):
            self.ledger.restore(LedgerEntry(f.signature, f.severity, f.count, f.first_t, f.last_t, f.evidence,
                                            f.last_evidence, f.line_no, ""))
        self.saved = self.db.metric_sample_count(self.run_id)
        cells = self.db.events(run_id=self.run_id, kind=EventKind.CELL_STARTED)
        self.cell = str(cells[-1].detail.get("cell")) if cells else None
        boundary = int(cells[-1].detail.get("samples_before", 0)) if cells else 0
        since = self.db.metric_sample_seq(self.run_id, boundary) if boundary else 0
        if since is None:
            return  # the current cell has no sample yet
        self.thinner.resume(self.db.metric_counts(self.run_id, since))
        for key in self.db.metric_keys(self.run_id):
            self._remember(self.db.metric_samples(self.run_id, key, first=FIRST_WINDOW, from_seq=since))
            self.series.pop(key, None)
            recent = self.db.metric_samples(self.run_id, key, last=SERIES_WINDOW, from_seq=since)
            self._remember(recent)
            self.progress.observe(recent, timed=False)  # history read at once: positions, not intervals
        self._chart_add(self.db.metric_samples(self.run_id, "loss", max_points=CHART_POINTS // 2, from_seq=since))

    async def backfill(self, launch_offset: int, max_bytes: int = BACKFILL_BYTES) -> list[LogLineView]:
        """The lines already ingested (by this or an earlier rgt) that a freshly opened log view should
        show: the tail before the cursor, classified by a scratch detector so errors keep their colour.
        Nothing is recorded: these lines were counted when they were first read."""
        cursor = self.follower.cursor
        start = max(launch_offset, cursor.offset - max_bytes)
        if cursor.offset <= start:
            return []
        data, _ = await self.follower.read(start, cursor.offset - start)
        # split, redacted and classified in a thread: the dashboard's frames (its first one with data) keep coming
        return await asyncio.to_thread(self._backfill_views, data, start > launch_offset, cursor.line_no)

    def _backfill_views(self, data: bytes, mid_line: bool, last_no: int) -> list[LogLineView]:
        splitter = LineSplitter()
        lines = self._redacted(splitter.feed(data) + splitter.flush())
        if mid_line and lines:
            lines = lines[1:]  # began mid-line
        from remote_gpu_trainer.audits.log.detector import LogDetector

        scratch = LogDetector(self.catalogue)
        first_no = last_no - len(lines) + 1
        level = worst_by_line(scratch.feed_lines([line.text for line in lines], first_no, 0.0) + scratch.flush(0.0))
        return [LogLineView(first_no + i, line.text, level.get(first_no + i))
                for i, line in enumerate(lines) if not line.redraw]

    async def poll(self, max_reads: int = MAX_READS_PER_POLL) -> LogUpdate:
        """Read what the log gained (at most `max_reads` MiB) and digest it; a big chunk is digested in a
        worker thread so the UI's frames keep coming while a backlog is read."""
        async with self._lock:
            chunk = await self.follower.poll(max_reads)
            t = self.now()
            if len(chunk.lines) > INLINE_LINES:
                views, alerts = await finish_even_if_cancelled(asyncio.to_thread(self._ingest, chunk, t))
            else:
                views, alerts = self._ingest(chunk, t)
        partial = self.scrubber.scrub(chunk.partial) if chunk.partial and self.scrubber else chunk.partial
        return LogUpdate(tuple(views), chunk.restarted, partial, chunk.more, tuple(alerts))

    def _ingest(self, chunk: LogChunk, t: float) -> tuple[list[LogLineView], list[Alert]]:
        """Parse, detect, remember and record one chunk (runs in a worker thread for big chunks; the
        asyncio lock held by `poll` keeps every other user of this state out meanwhile)."""
        if chunk.lines and self.scrubber:
            chunk = dataclasses.replace(chunk, lines=tuple(self._redacted(chunk.lines)))
        texts = [line.text for line in chunk.lines]
        hits = self.detector.feed_lines(texts, chunk.first_line_no, t) if texts else []
        rows: list[Sample] = []  # what is stored: the thinner's pick of the parsed samples
        # a backlog read over several polls (the previous or this one left lines unread) was written before
        # it was read: its positions count, its read times measure no speed (audits/log/progress.py)
        timed = not (self.behind or chunk.more)
        self.behind = chunk.more
        joined = "\n" + "\n".join(texts)  # one C-level search says whether a cell marker is there at all
        for cell, lines in _cells(chunk.lines) if "\n" + _CELL_PREFIX in joined else [(None, chunk.lines)]:
            if cell is not None:
                rows.extend(self.thinner.flush())  # the old cell's open buckets, before its boundary
                self._new_cell(cell, t, self.saved + len(rows))
            parsed = self._parse(lines, t)
            if parsed:
                groups = by_key(parsed)
                self._remember(groups)
                self.progress.observe(parsed, timed)
                self._chart_add(groups.get("loss", ()))
                rows.extend(self.thinner.add(groups))
        if not chunk.more:
            rows.extend(self.thinner.flush(opened_before=t - STORE_AFTER_S))
        level = worst_by_line(hits)
        first, get = chunk.first_line_no, level.get
        views = [LogLineView(first + i, line.text, get(first + i)) for i, line in enumerate(chunk.lines)
                 if not line.redraw]
        self._tail.extend(view.text for view in views[-TAIL_LINES:])
        self.tail = tuple(self._tail)
        if chunk.lines:
            self.last_line_t = t
        alerts = self._record(hits, rows)
        self.snapshot = self._snapshot(t)
        return views, alerts

    def _redacted(self, lines: Sequence[Line]) -> list[Line]:
        """The lines with every known key removed; one search over the joined chunk when none is there."""
        if not self.scrubber or not self.scrubber.touches("\n".join(line.text for line in lines)):
            return list(lines)
        return [line._replace(text=self.scrubber.scrub(line.text)) for line in lines]

    def _parse(self, lines: Sequence[Line], t: float) -> list[Sample]:
        """Metric samples of some lines. Of a run of progress-bar redraws only the last frame is parsed (the
        one a terminal would show): the frames before it are older values of the same counters. A blank
        frame is no newer value: tqdm clears its bar with one before it prints a line (Hugging Face's dicts
        come as `bar\\r<blanks>\\r{...}`), and the bar before it is the newest position."""
        samples: list[Sample] = []
        if not lines:
            return samples  # a poll that read nothing makes no parser
        feed = self.parser.feed
        last = len(lines) - 1
        for index, line in enumerate(lines):
            if line.redraw and index < last:
                after = lines[index + 1]
                if after.redraw and after.text and not after.text.isspace():
                    continue
            samples.extend(feed(line.text, t))
        return samples

    def _new_cell(self, cell: str, t: float, samples_before: int) -> None:
        """The wrapper started the roster's next cell in the same log: a new training from step 0, so its
        series, progress and chart start afresh (otherwise seed1's first steps read as a step regression
        and a loss spike of seed0). The boundary is recorded so a restarted rgt restores this cell only."""
        self._parser = None  # a fresh parser for the new cell's first line
        self.thinner = SeriesThinner()
        self.progress = TrainingProgress(total_steps=self.progress.configured_total)
        self.series.clear()
        self.first_series.clear()
        self.loss = ThinnedSeries()
        self.loss_x = ""
        self.nonfinite_at = None
        self.cell = cell
        events.cell_started(self.db, run_id=self.run_id, cell=cell, t=t, samples_before=samples_before)

    async def evaluate(self, liveness: Liveness | None, gpu: Sequence[GpuSample | GpuReading], t_log: float,
                       started_at: float | None, exit_code: int | None,
                       more: Mapping[str, Any] | None = None) -> list[Alert]:
        async with self._lock:
            return self._evaluate(liveness, gpu, t_log, started_at, exit_code, more)

    def _evaluate(self, liveness: Liveness | None, gpu: Sequence[GpuSample | GpuReading], t_log: float,
                 started_at: float | None, exit_code: int | None,
                 more: Mapping[str, Any] | None = None) -> list[Alert]:
        """The stateful rows (process, metric, GPU) over what has been gathered so far; `more` holds further
        RunSignals fields the caller gathered (e.g. the checkpoint cadence's)."""
        flushed: list[Hit] = []
        if self._detector is not None and liveness is not None and liveness.state in ("finished", "dead"):
            # the log is complete: close an open traceback block (a detector never fed has none open)
            flushed = self._detector.flush(self.now())
        all_samples = []
        for key, window in self.series.items():
            head = self.first_series.get(key, [])
            oldest_kept = window[0] if window else None
            skip = head.index(oldest_kept) if oldest_kept in head else len(head)  # the two windows may overlap
            all_samples.extend(head[:skip])
            all_samples.extend(window)
        signals = run_rules.RunSignals(
            now=self.now(), t_log=t_log, started_at=started_at, liveness=liveness, exit_code=exit_code,
            log_tail=self.tail, last_log_line_t=self.last_line_t, samples=all_samples,
            planned_steps=self.progress.total_steps, gpu_samples=tuple(gpu), **(more or {}),
        )
        return self._record([*flushed, *run_rules.evaluate(signals)], [])

    def _record(self, hits: Sequence[Hit], samples: Sequence[Sample]) -> list[Alert]:
        alerts: list[Alert] = []
        changed: set[str] = set()
        for hit in hits:
            if self.ledger.add(hit) and severity_rank(hit.severity) >= severity_rank(NOTIFY_FROM):
                alerts.append(self._alert(hit))
            changed.add(hit.signature)
        findings = [self._finding(entry) for entry in self.ledger.entries() if entry.signature in changed]
        cursor = self.follower.cursor
        if samples or findings or cursor != self._stored_cursor:  # an empty poll's commit was ~3 ms of a report
            self.db.save_log_progress(self.run_id, cursor, samples, findings)
            self._stored_cursor = cursor
        self.saved += len(samples)
        return alerts

    def _alert(self, hit: Hit) -> Alert:
        return make_alert(self.run_id, self.catalogue, hit.signature, hit.severity, hit.evidence)

    @staticmethod
    def _finding(e: LedgerEntry) -> LogFinding:
        return LogFinding(signature=e.signature, severity=e.severity, count=e.count, first_t=e.first_t,
                          last_t=e.last_t, evidence=e.first_evidence, last_evidence=e.last_evidence, line_no=e.line_no)

    def _remember(self, samples: Sequence[Sample] | dict[str, list[Sample]]) -> None:
        """Into the rules' windows per key: the first FIRST_WINDOW and the newest SERIES_WINDOW samples."""
        for key, group in (samples if isinstance(samples, dict) else by_key(samples)).items():
            head = self.first_series.setdefault(key, [])
            if len(head) < FIRST_WINDOW:
                head.extend(group[:FIRST_WINDOW - len(head)])
            window = self.series.get(key)
            if window is None:
                window = self.series[key] = deque(maxlen=SERIES_WINDOW)
            window.extend(group)

    def _chart_add(self, loss: Sequence[Sample]) -> None:
        """The loss at its own line's position: by step, or by epoch for a series whose lines state none (a
        Hugging Face dict, §4.5); the first sample with a position decides, and a point with none on that axis
        is left out of an epoch chart (a step chart counts it on, as before)."""
        for sample in loss:
            if not self.loss_x and (sample.step is not None or sample.epoch is not None):
                self.loss_x = "step" if sample.step is not None else "epoch"
            by_epoch = self.loss_x == "epoch"
            if not math.isfinite(sample.value):
                if self.nonfinite_at is None:
                    self.nonfinite_at = _position(sample, by_epoch)
                continue
            if by_epoch:
                if sample.epoch is None:
                    continue
                x = sample.epoch
            else:
                x = float(sample.step) if sample.step is not None else float(self.loss._seen)
            self.loss.add(x, sample.value)

    def _snapshot(self, t: float) -> MonitorSnapshot:
        points = self.loss.view()
        step, total = self.progress.current_step, self.progress.total_steps
        eta = self.progress.eta_seconds(t) if total and step is not None and step < total else None
        parts: list[str] = []
        if self.loss.last is not None or self.nonfinite_at is not None:
            parts.append(f"loss {self.loss.last[1]:.4g}" if self.loss.last else "loss")
            if step is not None:
                parts.append(f"step {step}" + (f"/{total}" if total else ""))
            if eta is not None:
                parts.append(f"ETA {duration(eta)}")
            if self.nonfinite_at is not None:
                parts.append(f"NON-FINITE at {self.nonfinite_at}")
        if parts and self.cell is not None:
            parts.insert(0, f"cell {self.cell}")
        title = " · ".join(parts) or "loss chart: no loss parsed from the log yet"
        chart = ChartData(tuple(p[0] for p in points), tuple(p[1] for p in points), title, self.loss_x or "step")
        return MonitorSnapshot(t, step, total, eta, chart)

    def chart(self) -> ChartData:
        """The loss over the whole run (thinned), with what a chart cannot show in its title."""
        return self.snapshot.chart


def make_alert(run_id: str, catalogue: Catalogue, signature: str, severity: str, evidence: str) -> Alert:
    """An alert in the words of its catalogue row: `S61 <cause> · r1`, the evidence, the row's fix."""
    row = catalogue.rows.get(signature)
    cause = row.cause if row else signature
    return Alert(run_id, signature, severity, f"{signature} {cause} · {run_id}", evidence[:200], row.fix if row else "")


def open_alerts(run_id: str, catalogue: Catalogue, findings: Sequence[LogFinding]) -> list[Alert]:
    """The run's findings that are open (not acknowledged) at `warn` or above, each as its alert with its worst
    severity and newest evidence: what a one-shot look reports, since a row alerts only once (§1 Alerts)."""
    return [make_alert(run_id, catalogue, f.signature, f.severity, f.last_evidence) for f in findings
            if f.status == "open" and severity_rank(f.severity) >= severity_rank(NOTIFY_FROM)]


def _position(sample: Sample, by_epoch: bool) -> str:
    """Where a sample is, in words: its step, or its epoch on an epoch chart (or when it has no step)."""
    if sample.step is not None and not by_epoch:
        return f"step {sample.step}"
    if sample.epoch is not None:
        return f"epoch {sample.epoch:g}"
    return f"step {sample.step}" if sample.step is not None else "an unknown step"


def worst_by_line(hits: Sequence[Hit]) -> dict[int, str]:
    """The worst severity per log line; a traceback's hit lands on the line that named it, not where it closed."""
    level: dict[int, str] = {}
    for hit in hits:
        if hit.line_no is not None and severity_rank(hit.severity) > severity_rank(level.get(hit.line_no, "")):
            level[hit.line_no] = hit.severity
    return level


def _cells(lines: Sequence[Line]) -> list[tuple[str | None, Sequence[Line]]]:
    """The chunk cut at the wrapper's cell markers: (the cell a piece starts, or None, the piece's lines)."""
    pieces: list[tuple[str | None, Sequence[Line]]] = []
    cell: str | None = None
    start = 0
    for index, line in enumerate(lines):
        found = _CELL_MARKER.match(line.text) if line.text.startswith(_CELL_PREFIX) else None
        if found:
            pieces.append((cell, lines[start:index]))
            cell, start = found.group(1), index + 1
    pieces.append((cell, lines[start:]))
    return [(c, piece) for c, piece in pieces if piece or c is not None]
