"""Plain-text renderings of money, sizes, hashes and progress, shared by the TUI, the CLI and reports."""

from __future__ import annotations

import os
import statistics

from .audits.gpu_health import GpuSample
from .services.evidence import PullProgress


def utf8_terminal() -> bool:
    """Braille and glyphs need UTF-8 (ux.md §5). Only a locale that names another encoding turns them off:
    an unset locale is what most terminals that render Textual at all look like."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name, "")
        if value:
            return "utf-8" in value.lower() or "utf8" in value.lower() or value in ("C.UTF-8",)
    return True


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
    return f"{progress.phase:<11} {progress.path}  {size(progress.done)}/{size(progress.total)} ({percent:.0f}%)"


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
