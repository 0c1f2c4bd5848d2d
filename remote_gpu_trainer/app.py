"""The Textual App: wires the dashboard to a Session. No business logic lives here."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from remote_gpu_trainer.runtime import tune_process
from remote_gpu_trainer.screens.auto_follow import watch_follow_ups
from remote_gpu_trainer.screens.auto_recover import watch_preemptions
from remote_gpu_trainer.screens.dashboard import DashboardScreen
from remote_gpu_trainer.services.session import Session


class RgtApp(App[None]):
    CSS_PATH = str(Path(__file__).parent / "assets" / "app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "rgt"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("A", "all_boxes", "All boxes", show=False),  # on the dashboard (screens/all_boxes.py)
    ]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        tune_process()  # a no-op when the CLI already did (runtime.py); an app opened another way gets the same

    def on_mount(self) -> None:
        dashboard = DashboardScreen(self.session)
        self.push_screen(dashboard)
        watch_follow_ups(dashboard)  # finished runs with `auto` are pulled and verified (screens/auto_follow.py)
        watch_preemptions(dashboard)  # preempted runs with `recover` limits go to recovery (screens/auto_recover.py)

    async def on_unmount(self) -> None:
        await self.session.close_transports()

    def action_help(self) -> None:
        from remote_gpu_trainer.screens.help import HelpScreen  # Markdown is only loaded when help is first asked for

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_all_boxes(self) -> None:
        """`A`: every box of every project this user opened; from the dashboard only (not over a dialog)."""
        from remote_gpu_trainer.screens.all_boxes import AllBoxesScreen

        if isinstance(self.screen, DashboardScreen):
            self.push_screen(AllBoxesScreen(self.session))

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if not isinstance(screen, DashboardScreen):
            return
        yield SystemCommand("Pull", "Pull the run's files home (p)", screen.action_pull)
        yield SystemCommand("Verify", "Verify the pulled files and load-check checkpoints (v)", screen.action_verify)
        if not self.session.read_only:
            run = screen.current_run()
            control = run.teardown if run is not None else None
            reason = "" if control is None or control.enabled else f" — disabled: {control.why_not}"
            if control is None or control.offered:
                yield SystemCommand("Teardown…", f"Terminate the instance after typing its id (t){reason}",
                                    screen.action_teardown)
        yield SystemCommand("Filter log", "Filter the log (/)", screen.action_filter)
        yield SystemCommand("Deliver", "Claims, figures and tables; b builds them, r reconciles the documents (5)",
                            lambda: screen.action_panel(4))
        yield SystemCommand("Approvals", "An agent's requests: approve, reject, grant an allowance (i)",
                            screen.action_approvals)
        yield SystemCommand("All boxes", "Every box of every project you opened, and orphans (A)",
                            self.action_all_boxes)
        yield SystemCommand("Help", "Keys and glossary (?)", self.action_help)
