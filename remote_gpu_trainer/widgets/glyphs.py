"""Words and glyphs for states: colour is never the only signal (ux.md §5)."""

from __future__ import annotations

from rich.text import Text

from ..formatting import money, short_hash, size

__all__ = ["badge", "money", "short_hash", "size"]

_STYLE = {"ok": "green", "info": "", "warn": "yellow", "error": "bold red", "unknown": "dim"}

STATUS_LEVEL = {
    "verified": "ok", "pass": "ok", "ticked": "ok", "finished": "ok", "terminated": "ok",
    "warn": "warn", "fail": "error",
    "pending": "info", "pulled": "info", "open": "info", "running": "info", "skipped": "unknown",
    "not_applicable": "unknown", "stopped": "warn", "stalled": "warn", "findings": "warn",
    "missing": "error", "size_mismatch": "error", "hash_mismatch": "error", "unloadable": "error",
    "nonfinite": "error", "dead": "error", "unknown": "unknown",
    "critical": "error", "error": "error", "info": "info", "acknowledged": "ok",
}
_GLYPH = {"ok": "✔", "info": "·", "warn": "▲", "error": "✖", "unknown": "?"}


def badge(status: str) -> Text:
    """`✔ verified`, `✖ hash_mismatch`, `? unknown`: glyph plus word, styled by level."""
    level = STATUS_LEVEL.get(status, "info")
    return Text(f"{_GLYPH[level]} {status}", style=_STYLE[level])
