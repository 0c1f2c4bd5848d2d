"""The key bar recomposes once per batch of binding changes (widgets/footer.py, issue 29: start-up), and shows
what textual's own Footer shows."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from remote_gpu_trainer.widgets.footer import Footer
from support.tui_helpers import wait_until


class CountingFooter(Footer):
    recomposed = 0

    async def recompose(self) -> None:
        self.recomposed += 1
        await super().recompose()


class Keys(Screen[None]):
    BINDINGS = [Binding("p", "pull", "Pull"), Binding("v", "verify", "Verify"), Binding("x", "hidden", "x", show=False)]

    def compose(self) -> ComposeResult:
        yield Static("body")
        yield CountingFooter()


class KeysApp(App[None]):
    def on_mount(self) -> None:
        self.push_screen(Keys())


async def test_many_binding_changes_before_a_refresh_recompose_the_footer_once() -> None:
    app = KeysApp()
    async with app.run_test(size=(80, 10)) as pilot:
        footer = app.screen.query_one(CountingFooter)
        await wait_until(pilot, lambda: {key.key for key in footer.query(FooterKey)} >= {"p", "v"})
        before = footer.recomposed
        for _ in range(5):
            app.screen.refresh_bindings()
        await wait_until(pilot, lambda: footer.recomposed > before)
        await pilot.pause()
        await pilot.pause()
        assert footer.recomposed == before + 1
        shown = {key.key for key in footer.query(FooterKey)}
        assert {"p", "v"} <= shown and "x" not in shown  # what textual's Footer shows: the keys with show=True
