"""Words and glyphs for states: colour is never the only signal (docs/ux.md §5)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from remote_gpu_trainer.text import escape_control, money, short_hash, size

__all__ = ["badge", "money", "plain", "short_hash", "show_text", "size"]

_STYLE = {"ok": "green", "info": "", "warn": "yellow", "error": "bold red", "unknown": "dim"}

STATUS_LEVEL = {
    "verified": "ok", "pass": "ok", "ticked": "ok", "finished": "ok", "terminated": "ok",
    "warn": "warn", "fail": "error",
    "pending": "info", "pulled": "info", "open": "info", "running": "info", "skipped": "unknown",
    "not_applicable": "unknown", "stopped": "warn", "stalled": "warn", "findings": "warn",
    "missing": "error", "size_mismatch": "error", "hash_mismatch": "error", "unloadable": "error",
    "nonfinite": "error", "dead": "error", "unknown": "unknown",
    "critical": "error", "error": "error", "info": "info", "acknowledged": "ok",
    "not_run": "unknown", "waived": "unknown", "fixed": "ok",
    # DELIVER: the claim ladder, a figure's or table's build, a reconcile drift
    "planned": "info", "evaluated": "info", "pull_verified": "info", "audited": "ok", "paper_supported": "ok",
    "not_built": "unknown", "current": "ok", "stale": "warn", "qa_failed": "error", "drift": "error",
    # the approval inbox: a request's state (services/inbox/model.py); pending and running are above
    "executing": "info", "done": "ok", "failed": "error", "refused": "warn", "rejected": "info",
}
_GLYPH = {"ok": "✔", "info": "·", "warn": "▲", "error": "✖", "unknown": "?"}


def plain(text: str, *, keep_newlines: bool = False, style: str = "") -> Text:
    """Text for a widget that may quote the box (a file name, a log line, an error): a Text is never parsed
    as markup, so `[bold red]x` shows as typed, and control characters are shown escaped, not obeyed."""
    return Text(escape_control(text, keep_newlines=keep_newlines), style=style)


def show_text(static: Static, content: Text | str) -> None:
    """`static.update(content)` unless it already shows exactly that: an update lays the whole screen out again,
    and the dashboard hands every panel its text each refresh (an idle dashboard must cost nothing, issue 29)."""
    shown = static.content
    if isinstance(content, Text) and isinstance(shown, Text):
        same = (content.plain, content.style, content.spans) == (shown.plain, shown.style, shown.spans)
    else:
        same = isinstance(content, str) and isinstance(shown, str) and content == shown
    if not same:
        static.update(content)


def badge(status: str) -> Text:
    """`✔ verified`, `✖ hash_mismatch`, `? unknown`: glyph plus word, styled by level."""
    level = STATUS_LEVEL.get(status, "info")
    return Text(f"{_GLYPH[level]} {status}", style=_STYLE[level])
