"""Plain-text renderings of money, sizes, hashes and progress, shared by the TUI, the CLI and reports."""

from __future__ import annotations

from .services.evidence import PullProgress


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
