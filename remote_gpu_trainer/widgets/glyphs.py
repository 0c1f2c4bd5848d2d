"""Words and glyphs for states: colour is never the only signal (ux.md §5)."""

from __future__ import annotations

from rich.text import Text

_STYLE = {"ok": "green", "info": "", "warn": "yellow", "error": "bold red", "unknown": "dim"}

STATUS_LEVEL = {
    "verified": "ok", "pass": "ok", "ticked": "ok", "finished": "ok", "terminated": "ok",
    "pending": "info", "pulled": "info", "open": "info", "running": "info", "skipped": "unknown",
    "not_applicable": "unknown", "stopped": "warn", "stalled": "warn", "findings": "warn",
    "missing": "error", "size_mismatch": "error", "hash_mismatch": "error", "unloadable": "error",
    "nonfinite": "error", "dead": "error", "unknown": "unknown",
}
_GLYPH = {"ok": "✔", "info": "·", "warn": "▲", "error": "✖", "unknown": "?"}


def badge(status: str) -> Text:
    """`✔ verified`, `✖ hash_mismatch`, `? unknown`: glyph plus word, styled by level."""
    level = STATUS_LEVEL.get(status, "info")
    return Text(f"{_GLYPH[level]} {status}", style=_STYLE[level])


def money(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"


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
    return f"{sha[:6]}…{sha[-4:]}" if sha else "—"
