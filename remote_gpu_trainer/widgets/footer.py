"""The key bar at the foot of a screen: textual's Footer, recomposed once per batch of binding changes.

Textual's Footer recomposes (removes and mounts again every key, with their styles) once per
`bindings_updated_signal`, and a screen publishes that signal on each focus change and refresh_bindings():
the dashboard published it 9 times before its first frame was drawn, 9 full recomposes queued after the same
refresh (benchmarks/bench_startup.py). This Footer queues at most one: the one that runs reads the bindings as
they are then, which is what the last of the 9 drew, so what is shown does not change, only the waste does.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    def __init__(self) -> None:
        super().__init__()
        self._recompose_queued = False

    def bindings_changed(self, screen: Screen[object]) -> None:
        """textual's Footer.bindings_changed (8.2), with one queued recompose instead of one per signal."""
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._recompose_queued:
            self._recompose_queued = True
            self.call_after_refresh(self._recompose_once)

    async def _recompose_once(self) -> None:
        self._recompose_queued = False
        await self.recompose()
