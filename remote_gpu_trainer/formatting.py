"""Plain-text renderings of money, sizes, hashes and progress, shared by the TUI, the CLI and reports."""

from __future__ import annotations

import os
import re
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: audits import this module, so it must not import services at run time
    from .audits.gpu_health import GpuSample
    from .services.evidence import PullProgress

# What a box may write that a terminal, the TUI or a report reader would act on instead of show: C0 controls
# (ESC starts a terminal command, BS and CR overwrite what was shown), DEL, C1 controls (0x9b is a one-byte
# CSI on some terminals), Unicode line and paragraph separators, and the bidirectional overrides that can
# make a file name read differently from its bytes. A tab only moves the cursor right, so it stays.
_CONTROL_CHARS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_CONTROL_BUT_BREAKS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def utf8_terminal() -> bool:
    """Braille and glyphs need UTF-8 (ux.md §5). Only a locale that names another encoding turns them off:
    an unset locale is what most terminals that render Textual at all look like."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name, "")
        if value:
            return "utf-8" in value.lower() or "utf8" in value.lower() or value in ("C.UTF-8",)
    return True


def escape_control(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\x1b`, `\\n`, `\\u202e`), so text that
    came from a box (file names, log lines, error bodies) can be printed, put in a widget or a report and
    never move the cursor, recolour the terminal, set its title or hide what follows. `keep_newlines` is
    for multi-line fields; in a single-line field (a table cell, a report line) a newline is escaped too,
    so a file name cannot forge a second row."""
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL_CHARS
    if pattern.search(text) is None:
        return text  # the common case costs one scan
    return pattern.sub(_escaped, text)


def has_control(text: str, *, line_breaks_ok: bool = False) -> bool:
    """Whether `escape_control` would change `text`; `line_breaks_ok` ignores `\\n` and `\\r`, so a whole
    chunk of a log can be checked in one scan before it is cut into lines."""
    pattern = _CONTROL_BUT_BREAKS if line_breaks_ok else _CONTROL_CHARS
    return pattern.search(text) is not None


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = {"\n": "\\n", "\r": "\\r"}.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def duration(seconds: float | None) -> str:
    """`45s`, `12m05s`, `3h07m`: ETAs and ages at a glance."""
    if seconds is None:
        return "—"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{(whole % 3600) // 60:02d}m"


def money(value: float | None, currency: str = "USD") -> str:
    """Money is rounded only here, when rendered; the model keeps full precision."""
    if value is None:
        return "—"
    symbol = "$" if currency == "USD" else f"{currency} "
    return f"{symbol}{value:,.2f}"


def size(value: int | None) -> str:
    if value is None:
        return "—"
    amount = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if amount < 1024 or unit == "TB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{value} B"


def short_hash(sha: str | None) -> str:
    """`5a2c11…7b31`: enough to compare by eye, short enough for a table."""
    return f"{sha[:6]}…{sha[-4:]}" if sha else "—"


def pull_progress_line(progress: PullProgress) -> str:
    percent = 100.0 * progress.done / progress.total if progress.total else 100.0
    return (f"{progress.phase:<11} {escape_control(progress.path)}  {size(progress.done)}/{size(progress.total)}"
            f" ({percent:.0f}%)")


def describe_gpus(samples: list[GpuSample] | None) -> str:
    """`2× util 87% · mem 61/80 GiB · 71°C` (medians over GPUs), or `no GPU`."""
    if samples is None:
        return "no GPU"
    if not samples:
        return "no GPU visible"

    def middle(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    util = middle([s.util_pct for s in samples])
    used = middle([s.memory_used_mib for s in samples])
    total = middle([s.memory_total_mib for s in samples])
    temp = max((s.temperature_c for s in samples if s.temperature_c is not None), default=None)
    parts = [f"util {util:.0f}%" if util is not None else "util ?"]
    if used is not None and total is not None:
        parts.append(f"mem {used / 1024:.0f}/{total / 1024:.0f} GiB")
    if temp is not None:
        parts.append(f"{temp:.0f}°C")
    return f"{len({s.index for s in samples})}× " + " · ".join(parts)
