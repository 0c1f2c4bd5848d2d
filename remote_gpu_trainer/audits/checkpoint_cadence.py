"""How often a run on an interruptible box should checkpoint (docs/remote-ops.md §10): Young/Daly, pure.

W = sqrt(2 · μ · C): μ the mean time between preemptions, C the time to write one checkpoint. Checkpointing
more often than W wastes time writing; less often loses more work per preemption. The spec's example: C = 30 s,
μ = 3 h gives W ≈ 805 s, which at 2 s per iteration is 402 iterations, rounded down to 400 (two significant
digits, so the figure is a round number and the interval never exceeds W).

C comes from the run itself: a log line that says how long a save took ("checkpoint saved in 31.2s"), else the
gap between the newest checkpoint's creation and its last write (a file written as a temp and renamed keeps
the temp's creation time). μ comes from the provider profile's `[preemption] mtbp_hours`, overridden per
instance or per run in rgt.toml. A missing input gives no interval, never a guess.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

MIN_WRITE_S = 1.0  # file times are coarse and a save rarely costs the step loop less: C is never taken below it
STALE_FACTOR = 2.0  # the newest checkpoint older than 2 × W raises S94
_UNIT_S = {"ms": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "m": 60.0,
           "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0}
# "saved checkpoint ... in 31.2s", "checkpoint written (took 12 s)", "save_checkpoint took 1.5 min",
# "ckpt save time: 30.1s": a save word, then within the line a duration after in/took/time.
_SAVE_TIME = re.compile(
    r"(?i)\b(?:sav(?:e|ed|ing)|wr(?:ote|itten|iting)|checkpoint(?:ed)?|ckpt)\b.{0,120}?"
    r"\b(?:in|took|time[:=]?|duration[:=]?)\s*(\d+(?:\.\d+)?)\s*(ms|s|secs?|seconds?|m|mins?|minutes?)\b")
_CKPT_WORD = re.compile(r"(?i)checkpoint|ckpt|\.pth?\b|\.safetensors\b|state_dict|model")


@dataclass(frozen=True)
class Cadence:
    """The Young/Daly interval for one run, with what it was computed from."""

    interval_s: float  # W
    write_s: float  # C as used (after the floor)
    write_source: str  # "log" | "file times"
    mtbp_s: float  # μ
    mtbp_source: str  # "rgt.toml runs.<id>", "rgt.toml instances.<name>", "profile <id>"
    iterations: int | None = None  # W in iterations, rounded down; None when s/iteration is unknown
    s_per_iteration: float | None = None

    @property
    def stale_after_s(self) -> float:
        return STALE_FACTOR * self.interval_s


def young_daly(mtbp_s: float, write_s: float) -> float:
    """W = sqrt(2 · μ · C)."""
    return math.sqrt(2.0 * mtbp_s * write_s)


def iterations_per_checkpoint(interval_s: float, s_per_iteration: float) -> int:
    """W in iterations, rounded down to two significant digits (402.5 → 400): a round number to put in a
    config that never exceeds W; at least one."""
    whole = math.floor(interval_s / s_per_iteration + 1e-9)
    if whole < 100:
        return max(1, whole)
    scale = 10 ** (len(str(whole)) - 2)
    return whole // scale * scale


def write_time_from_lines(lines: Iterable[str]) -> float | None:
    """The median save time the log states (checkpoint lines only), None when no line says."""
    times = []
    for line in lines:
        match = _SAVE_TIME.search(line)
        if match is not None and _CKPT_WORD.search(line):
            times.append(float(match.group(1)) * _UNIT_S[match.group(2).lower()])
    return statistics.median(times) if times else None


def write_time_from_file(birth: float | None, mtime: float | None) -> float | None:
    """Creation to last write of the newest checkpoint; None where the file system keeps no creation time."""
    if birth is None or mtime is None or birth <= 0 or mtime < birth:
        return None
    return mtime - birth


def cadence(*, mtbp_s: float | None, mtbp_source: str, log_write_s: float | None, file_write_s: float | None,
            s_per_iteration: float | None = None) -> Cadence | None:
    """The interval from the inputs at hand: the log's save time before the file times; None without μ or C."""
    if mtbp_s is None or mtbp_s <= 0:
        return None
    write, source = (log_write_s, "log") if log_write_s is not None else (file_write_s, "file times")
    if write is None:
        return None
    write = max(write, MIN_WRITE_S)
    interval = young_daly(mtbp_s, write)
    steps = iterations_per_checkpoint(interval, s_per_iteration) if s_per_iteration and s_per_iteration > 0 else None
    return Cadence(interval, write, source, mtbp_s, mtbp_source, steps, s_per_iteration if steps else None)
