"""Helpers every watcher rule family shares: how far a rule looks, the row severities, the evidence
formatting, and the tail scans over one key's series (docs/log-signatures.md §2, §3).

Why tail scans: a series can hold 100k samples and the rules run every few seconds, so every helper walks a
key's series from its newest end (or from its start for "first window" questions) and stops as soon as it
has what it needs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Protocol

from remote_gpu_trainer.audits.log.samples import Hit, Sample
from remote_gpu_trainer.audits.rules.signals import RunSignals
from remote_gpu_trainer.text import span


class Stamped(Protocol):
    """Anything with a step and a time: a Sample or a LossPoint, as named in a row's evidence."""

    @property
    def step(self) -> int | None: ...

    @property
    def t(self) -> float: ...


# ---- how far the rules look ------------------------------------------------------------------------
EVENT_LOOKBACK = 50  # event rows (S70–S73) without `since`: the newest 50 samples of the key
MAX_REPLAY = 1000  # with `since`: at most this many new samples are judged per call
SCAN_CAP = 20_000  # no tail walk goes further back than this many samples of one key
STEP_SCAN = 2_000
REGRESSION_TAIL = 500

ROW_SEVERITY = {
    "S58": "error", "S59": "critical", "S60": "warn", "S61": "warn", "S62": "info", "S63": "warn",
    "S64": "critical", "S65": "error", "S66": "warn", "S67": "critical", "S68": "warn", "S69": "warn",
    "S70": "error", "S71": "warn", "S72": "error", "S73": "error", "S74": "warn", "S75": "warn",
    "S76": "warn", "S77": "warn", "S78": "error", "S79": "warn", "S80": "warn", "S81": "warn",
    "S82": "warn", "S83": "warn", "S84": "warn", "S85": "warn", "S86": "info", "S87": "warn",
    "S88": "critical", "S89": "warn", "S90": "warn", "S91": "warn", "S92": "error", "S93": "warn",
    "S94": "warn",
}


# ---- formatting ------------------------------------------------------------------------------------

def fmt_num(x: float) -> str:
    """Two decimals for ordinary magnitudes, three significant digits for tiny or huge ones."""
    if not math.isfinite(x):
        return str(x)
    size = abs(x)
    if size >= 1e5 or (0 < size < 1e-2):
        return f"{x:.3g}"
    return f"{x:.2f}"


fmt_dur = span  # the rules' name for text.span, the one coarse duration (45s, 40m, 3.1h)


def fmt_at(sample: Stamped) -> str:
    """Where a sample is: its step, else its epoch (a Hugging Face dict line states no step, docs/log-signatures.md
    §4.5; a LossPoint has no epoch), else its time."""
    if sample.step is not None:
        return f"step {sample.step}"
    epoch = getattr(sample, "epoch", None)
    return f"epoch {epoch:g}" if epoch is not None else f"t={sample.t:.0f}"


def hit(s: RunSignals, row: str, evidence: str, severity: str | None = None, detail: str = "") -> list[Hit]:
    return [Hit(signature=row, severity=severity or ROW_SEVERITY[row], evidence=evidence, t=s.now, detail=detail)]


# ---- series helpers --------------------------------------------------------------------------------

def newest_first(seq: Sequence[Any], limit: int = SCAN_CAP) -> Iterator[Any]:
    """Items newest first, at most `limit` of them."""
    return islice(reversed(seq), limit)


def finite_values(samples: Iterable[Sample]) -> list[float]:
    return [x.value for x in samples if math.isfinite(x.value)]


def tail_of(seq: Sequence[Sample], n: int, finite: bool = True) -> list[Sample]:
    """The newest n samples (finite ones only by default), oldest first."""
    out = [x for x in islice((x for x in newest_first(seq) if not finite or math.isfinite(x.value)), n)]
    out.reverse()
    return out


def event_window(s: RunSignals, key: str) -> list[Sample]:
    """Samples an event row judges: those newer than `since`, or the newest EVENT_LOOKBACK; oldest first."""
    out = []
    for x in newest_first(s.of(key), MAX_REPLAY if s.since is not None else EVENT_LOOKBACK):
        if s.since is not None and x.t <= s.since:
            break
        out.append(x)
    out.reverse()
    return out


def age_of(s: RunSignals, t: float | None) -> float | None:
    return None if t is None else s.now - t


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class StepState:
    """The step counter (§3.3): its current value and when it first showed it."""

    step: int
    since: float


def step_state(s: RunSignals) -> StepState | None:
    """The highest step any key reached at its newest end, and the earliest time a sample showed it."""
    top: int | None = None
    for key in s.keys():
        for x in newest_first(s.of(key), STEP_SCAN):
            if x.step is not None:
                top = x.step if top is None else max(top, x.step)
                break
    if top is None:
        return None
    since = math.inf
    for key in s.keys():
        for x in newest_first(s.of(key), STEP_SCAN):
            if x.step is None:
                continue
            if x.step != top:
                break
            since = min(since, x.t)
    return StepState(top, since)


def step_frozen_for(s: RunSignals) -> float | None:
    state = step_state(s)
    return None if state is None else s.now - state.since


def latest_step(s: RunSignals, key: str) -> int | None:
    for x in newest_first(s.of(key), STEP_SCAN):
        if x.step is not None:
            return int(x.step)
    state = step_state(s)
    return state.step if state else None


def is_alive(s: RunSignals) -> bool:
    return s.liveness is not None and s.liveness.state in ("running", "stalled")
