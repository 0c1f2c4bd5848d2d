"""Where a run is, how fast it moves, when it will finish (docs/log-signatures.md §3.3): fed with parsed samples.

Pure and bounded: it keeps scalars plus two fixed-size windows (recent step intervals and recent
regressions), however long the run. Why a median of per-step intervals: eval pauses, checkpoint saves and
log buffering make single intervals lie; the median of the last few hundred is what ETA and S85 can trust.

Rules of the counter:
- Exact steps (HF tqdm, `step=`, structured files) win over approximate ones (Lightning bars, HF epoch ×
  steps_per_epoch): once an exact step is seen, approximate steps are ignored, so rounding in one source
  cannot look like a regression against the other.
- Samples older than the newest one already observed are history (a restart replaying stored series key
  by key): they may raise the maximum, never count as progress or regression.
- Samples sharing one timestamp (one poll's chunk) are one advance: the interval is measured from the
  last position at an earlier time, so a chunk of 10 steps after 2 s reads 0.2 s/step, not 2 s/step.
- A sample's time is when rgt read its line, not when the job wrote it; the two agree only while reading
  keeps up with the log. Positions read in a burst (a backlog read over several polls, a history restored
  from the state database) are `timed=False`: they move the counter but measure no interval, so a backlog
  of 5,000 steps read 50 ms apart never reads as 10 µs a step (an "ETA 0s"). The next timed advance is
  measured from the last of them.
- An ETA counted down to nothing while steps remain is no estimate (the run is slower than measured, or
  paused): None, never "0 s to go".
- A step below the last one seen is a regression when it is also below the maximum (S65): a relaunch that
  ignored its saved state, or a second run appended to the same log. Counting then follows the new run.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Iterable

from remote_gpu_trainer.audits.log.samples import Sample

DEFAULT_WINDOW = 200  # step advances kept for the median interval
DEFAULT_MAX_REGRESSIONS = 100
DEFAULT_HORIZON_S = 3600.0  # intervals older than this no longer describe the run's speed


class TrainingProgress:
    """Step counter, speed, ETA, frozen time and step regressions of one run."""

    def __init__(self, total_steps: int | None = None, window: int = DEFAULT_WINDOW,
                 max_regressions: int = DEFAULT_MAX_REGRESSIONS, horizon_s: float = DEFAULT_HORIZON_S) -> None:
        self.configured_total = total_steps  # from the run's config: wins over anything parsed
        self.horizon_s = horizon_s
        self._parsed_total: int | None = None
        self._max: int | None = None
        self._last: int | None = None  # the latest step observed (differs from _max after a regression)
        self._last_t = -math.inf  # when `_last` was reached
        self._latest_t = -math.inf  # the newest sample time seen: older samples are history
        self._anchor: tuple[int, float] | None = None  # position before the current instant's advance
        self._exact_seen = False
        self._intervals: deque[tuple[float, float]] = deque(maxlen=window)  # (t, seconds per step)
        self._regressions: deque[tuple[int, int]] = deque(maxlen=max_regressions)

    @property
    def current_step(self) -> int | None:
        """The highest step seen (None before any)."""
        return self._max

    @property
    def latest_step(self) -> int | None:
        """The step of the newest observation: below `current_step` after a regression."""
        return self._last

    @property
    def total_steps(self) -> int | None:
        """The configured total, else the latest total a log line revealed."""
        return self.configured_total if self.configured_total is not None else self._parsed_total

    @property
    def regressions(self) -> tuple[tuple[int, int], ...]:
        """Recent (max_before, new_step) pairs, oldest first (S65)."""
        return tuple(self._regressions)

    @property
    def intervals_held(self) -> int:
        """How many step intervals the speed window holds (bounded by `window`)."""
        return len(self._intervals)

    def observe(self, samples: Iterable[Sample], timed: bool = True) -> None:
        """Feed parser output as it comes: `total_steps` samples set the total, every step counts; `timed`
        False for samples read in a burst (their positions count, their times measure nothing)."""
        for sample in samples:
            if sample.key == "total_steps":
                self.observe_total(sample.value)
            elif sample.step is not None and (sample.step != self._last or sample.t < self._latest_t):
                self.observe_step(sample.step, sample.t, sample.approx_step, timed)

    def observe_total(self, total: float | None) -> None:
        """A planned total from the log (a bar total, `step N/M`); None or nan: the log no longer knows it."""
        if total is None or not math.isfinite(total):
            self._parsed_total = None
        elif total >= 1:
            self._parsed_total = int(total)

    def observe_step(self, step: int, t: float, approx: bool = False, timed: bool = True) -> None:
        """One position seen at time t; `approx` for derived steps (Lightning bars, HF epoch × steps); `timed`
        False when t is only when a burst was read (no interval is measured up to it)."""
        if approx and self._exact_seen:
            return
        if not approx and not self._exact_seen:
            self._exact_seen = True
            if self._last is not None:  # approximate positions so far: start over on the exact scale
                self._reset()
        if t < self._latest_t:
            self._max = step if self._max is None else max(self._max, step)
            return
        self._latest_t = t
        last, top = self._last, self._max
        if last is None or top is None:
            self._max, self._last, self._last_t = step, step, t
        elif step > last and not timed:
            self._last, self._last_t, self._max, self._anchor = step, t, max(top, step), None
        elif step > last:
            self._advance(last, top, step, t)
        elif step < last:
            self._regress(top, step, t)

    def _reset(self) -> None:
        self._max = self._last = self._anchor = None
        self._last_t = self._latest_t = -math.inf
        self._intervals.clear()

    def _advance(self, last: int, top: int, step: int, t: float) -> None:
        if t > self._last_t:
            self._anchor = (last, self._last_t)
            self._intervals.append((t, (t - self._last_t) / (step - last)))
        elif self._anchor is not None and self._intervals:  # same instant: widen this advance's interval
            anchor_step, anchor_t = self._anchor
            self._intervals[-1] = (t, (t - anchor_t) / (step - anchor_step))
        self._last, self._last_t, self._max = step, t, max(top, step)

    def _regress(self, top: int, step: int, t: float) -> None:
        if step < top:
            self._regressions.append((top, step))
        self._last, self._last_t, self._anchor = step, t, None

    def seconds_per_step(self, now: float) -> float | None:
        """Median of the recent per-step intervals (within `horizon_s` of `now`); None without data."""
        recent = [per_step for t, per_step in self._intervals if t >= now - self.horizon_s]
        return statistics.median(recent) if recent else None

    def steps_per_second(self, now: float) -> float | None:
        seconds = self.seconds_per_step(now)
        return 1.0 / seconds if seconds else None

    def eta_seconds(self, now: float) -> float | None:
        """Remaining steps × median interval, counted from the last advance; None while unknowable (also
        once that count reached zero with steps still to go)."""
        total = self.total_steps
        if total is None or self._last is None:
            return None
        if self._last >= total:
            return 0.0
        seconds = self.seconds_per_step(now)
        if not seconds:
            return None
        left = (total - self._last) * seconds - max(0.0, now - self._last_t)
        return left if left > 0 else None

    def frozen_for(self, now: float) -> float | None:
        """Seconds since the step last changed ("step frozen at N"); None before any step."""
        if self._last is None:
            return None
        return max(0.0, now - self._last_t)
