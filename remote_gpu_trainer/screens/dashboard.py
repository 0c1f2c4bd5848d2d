"""The dashboard: instances + meter, checkpoints, live log, checklist; 2×2 when wide, tabs when narrow.

The screen composes panels and forwards intents to the services; every number it shows comes from an
Overview built by services/overview.py, refreshed by workers so the UI thread never waits on the far side.
The screen holds that Overview as a reactive attribute bound to the panels (data_bind): setting it is what
redraws them, and the screen's watch_overview updates the top bar, the alerts and the bindings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Button, DataTable, Input, Static, Tab, Tabs

from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.screens.box_actions import BoxActions
from remote_gpu_trainer.screens.confirm import ConfirmScreen
from remote_gpu_trainer.screens.deliver_actions import DELIVER_PANEL, DeliverActions
from remote_gpu_trainer.screens.finding import FindingScreen
from remote_gpu_trainer.screens.log_poll import log_poll_due, poll_log_once
from remote_gpu_trainer.screens.note import NoteScreen
from remote_gpu_trainer.screens.topbar import topbar_text
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.audit import audit, checklist, findings
from remote_gpu_trainer.services.evidence.verify import VerifyStep
from remote_gpu_trainer.services.instances import host_key_prompts
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch import run_logs
from remote_gpu_trainer.services.watch.log_monitor import Alert
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.views import DeliverView, Overview, RunView
from remote_gpu_trainer.widgets.checklist_panel import ChecklistPanel
from remote_gpu_trainer.widgets.checkpoints_panel import CheckpointsPanel
from remote_gpu_trainer.widgets.deliver_panel import DeliverPanel
from remote_gpu_trainer.widgets.footer import Footer
from remote_gpu_trainer.widgets.glyphs import plain, show_text
from remote_gpu_trainer.widgets.instances_panel import InstancesPanel
from remote_gpu_trainer.widgets.log_panel import LogPanel
from remote_gpu_trainer.widgets.loss_chart import EMPTY_TEXT, LossChart

if TYPE_CHECKING:
    from remote_gpu_trainer.services.evidence.pull import PullProgress
    from remote_gpu_trainer.services.session import Session

PANELS = ("panel-instances", "panel-checkpoints", "panel-log", "panel-checklist", DELIVER_PANEL)
TITLES = ("1 Instances · meter", "2 Checkpoints", "3 Log · loss", "4 Checklist · findings", "5 Deliver")
TAB_TITLES = ("1 Instances", "2 Checkpoints", "3 Log", "4 Checklist", "5 Deliver")  # five fit in 80 columns
REFRESH_S = 2.0  # from the end of one refresh to the start of the next
OVERVIEW_WAIT_S = 1.5  # how long a refresh waits for slow boxes before drawing the rows that answered
LOG_POLL_S = run_logs.LIVE_POLL_S  # the timer's tick; a run that ended is read less often (run_logs.log_poll_interval)
AUDIT_POLL_S = 10.0  # how often the dashboard looks whether an input of the VERIFY audits changed


class DashboardScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("p", "pull", "Pull"),
        Binding("v", "verify", "Verify"),
        Binding("t", "teardown", "Teardown"),
        Binding("s", "stop", "Stop", show=False),
        Binding("i", "approvals", "Approvals"),  # shown while an agent's request waits; else the hidden one
        Binding("i", "inbox", "Approvals", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("f", "follow", "Follow", show=False),
        Binding("e", "first_error", "First error", show=False),
        Binding("c", "toggle_chart", "Chart", show=False),
        Binding("a", "acknowledge", "Acknowledge", show=False),
        Binding("u", "audit", "Audit", show=False),
        Binding("n", "next_run", "Next run", show=False),
        Binding("R", "approve_recovery", "Approve recovery", show=False),
        Binding("b", "build", "Build"),  # b and the first r: only while the Deliver panel is shown
        Binding("r", "reconcile", "Reconcile"),
        Binding("r", "refresh", "Refresh", show=False),  # elsewhere r refreshes
        Binding("space", "tick", "Tick", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("1", "panel(0)", "Instances", show=False),
        Binding("2", "panel(1)", "Checkpoints", show=False),
        Binding("3", "panel(2)", "Log", show=False),
        Binding("4", "panel(3)", "Checklist", show=False),
        Binding("5", "panel(4)", "Deliver", show=False),
    ]

    # repaint=False: a container draws through its children, each redrawn only when its own text changed (issue 29)
    overview: reactive[Overview | None] = reactive(None, always_update=True, init=False, repaint=False)
    run_id: reactive[str | None] = reactive(None, init=False)

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.busy: set[str] = set()
        self.log_backfilled = False
        self.log_polling = False
        self.log_polled_at = -1e9  # time.monotonic() of the last log poll the timer started
        self.refreshing = False  # one overview refresh at a time; a request meanwhile is served after it
        self.refresh_again = False
        self.refresh_timer: Timer | None = None
        self.topbar_shown = ""  # the top bar's text as drawn
        self.offered_shown: tuple[bool | None, ...] = ()  # offered_actions() when the footer was last redrawn
        self.asked_host_keys: set[tuple[str, str]] = set()  # asked once per key per session
        self.deliver = DeliverActions(self, session, busy=self.busy_with, set_busy=self.set_busy)
        self.box = BoxActions(self, session, current_run=self.current_run, busy=self.busy_with,
                              set_busy=self.set_busy, refresh_overview=self.refresh_overview)

    @property
    def deliver_view(self) -> DeliverView | None:
        """What the Deliver panel shows; None until it was first read."""
        return self.deliver.view

    def compose(self) -> ComposeResult:
        yield Static("rgt · loading…", id="topbar")
        yield Static("", id="alert")
        yield Tabs(*(Tab(title, id=f"tab-{index}") for index, title in enumerate(TAB_TITLES)), id="tabs")
        with Container(id="panels"):
            bound = (DashboardScreen.overview, DashboardScreen.run_id)
            yield InstancesPanel(id="panel-instances", classes="panel -active").data_bind(*bound)
            yield CheckpointsPanel(id="panel-checkpoints", classes="panel").data_bind(*bound)
            yield LogPanel(id="panel-log", classes="panel")
            yield ChecklistPanel(id="panel-checklist", classes="panel").data_bind(*bound)
            yield DeliverPanel(id=DELIVER_PANEL, classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        for panel_id, title in zip(PANELS, TITLES, strict=True):
            self.query_one(f"#{panel_id}").border_title = title
        runs = sorted(self.session.project.runs)
        self.run_id = runs[0] if runs else None
        self.call_after_refresh(self.refresh_overview)  # once the first frame is drawn; it re-arms itself when done
        # the log's backfill (a read of the whole log and the signature catalogue's matchers) waits for the first
        # overview to be drawn, or for the poll's first tick when the boxes are slow (issue 29: first frame)
        self.set_interval(LOG_POLL_S, self.log_tick)
        self.set_interval(AUDIT_POLL_S, self.audit_if_changed)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast here can quote the box (a log line, a file name, a provider's error): never markup
        (`[bold red]x` shows as typed), and control characters escaped, newlines kept. The one escaping rule of
        the dashboard's toasts (its Deliver and box actions' included): callers pass the raw text."""
        super().notify(escape_control(message, keep_newlines=True), title=escape_control(title),
                       severity=severity, timeout=timeout, markup=markup)

    # -- data ------------------------------------------------------------------------------------------
    def showing(self) -> bool:
        """Whether what a worker brings back may still be drawn here. A worker outlives the awaits it makes:
        when it finishes after this screen was removed (popped, or the app closing) there is nothing to draw
        on, and the screen's widgets go one by one while it is removed (#topbar before the panels, whose
        children go first), so no query of one widget can tell. The screen's own message loop can: it stops
        before any child is removed. A screen merely covered by another (a modal, help) still shows."""
        return self.is_running and self.is_attached

    @work(group="overview")
    async def refresh_overview(self) -> None:
        """One refresh at a time and never cancelled: a request while one runs is served right after it,
        and the next tick is armed only when a refresh has finished. Each box is asked within its own
        timeout and a row whose box has not answered yet shows what was last known (services/overview.py)."""
        if self.refreshing:
            self.refresh_again = True
            return
        self.refreshing = True
        if self.refresh_timer is not None:
            self.refresh_timer.stop()
            self.refresh_timer = None
        try:
            while True:
                self.refresh_again = False
                try:
                    overview = await observe_and_build(self.session, wait_s=OVERVIEW_WAIT_S)
                except RgtError as exc:
                    self.notify(str(exc), severity="error", timeout=10)
                else:
                    if not self.showing():  # removed meanwhile (or the app is exiting): nothing to draw on
                        return
                    self.overview = overview  # watch_overview and the panels bound to it redraw what changed
                    self.show_alerts(run_logs.take_alerts(self.session))
                if not self.refresh_again:
                    break
        finally:
            self.refreshing = False
            if self.showing():
                self.refresh_timer = self.set_timer(REFRESH_S, self.refresh_overview)

    def show_topbar(self, overview: Overview) -> None:
        """Drawn only when its text changed: each update lays the screen out again (issue 29, idle cost)."""
        if (text := topbar_text(overview, self.current_run(), self.session.clock())) != self.topbar_shown:
            self.topbar_shown = text
            self.query_one("#topbar", Static).update(plain(text))

    def watch_overview(self, previous: Overview | None, overview: Overview | None) -> None:
        """What the screen itself shows of a new overview (the panels bound to it draw their own part):
        the top bar, the alerts, the log's title; the first one also puts the focus on the instances table."""
        if overview is None:
            return
        first = previous is None
        run = self.current_run()
        self.show_topbar(overview)
        alert = self.query_one("#alert", Static)
        show_text(alert, plain("\n".join(overview.alerts), keep_newlines=True))
        alert.set_class(bool(overview.alerts), "-visible")
        log_title = f"3 Log · {run.id} · {run.liveness}" if run is not None else None
        if log_title is not None and self.query_one(LogPanel).border_title != log_title:
            self.query_one(LogPanel).border_title = log_title
        if first and self.app.focused is None:
            self.query_one("#instances", DataTable).focus()
        if first:
            self.call_after_refresh(self.poll_log)
        if (offered := self.offered_actions()) != self.offered_shown:  # the footer recomposes on each refresh
            self.offered_shown = offered
            self.refresh_bindings()
        self.ask_host_keys()
        if self.deliver.active():
            self.deliver.refresh()

    def offered_actions(self) -> tuple[bool | None, ...]:
        """What check_action answers for each of the screen's keys: the footer is redrawn when this changes."""
        return tuple(self.check_action(binding.action.split("(")[0], ()) for binding in self.BINDINGS
                     if isinstance(binding, Binding))

    def ask_host_keys(self) -> None:
        for name, presented in host_key_prompts(self.session).items():
            key = (name, presented.fingerprint_sha256)
            if key not in self.asked_host_keys and not self.read_only_or_modal():
                self.asked_host_keys.add(key)
                self.trust_host_key(name, presented.host, presented.port, presented.key_type,
                                    presented.fingerprint_sha256)
                return

    def read_only_or_modal(self) -> bool:
        return self.app.screen is not self

    @work(group="host-key", exclusive=True)
    async def trust_host_key(self, name: str, host: str, port: int, key_type: str, fingerprint: str) -> None:
        """First contact: show the fingerprint once and let the user decide; never trusted silently."""
        lines = [
            f"Instance {name} ({host}:{port}) presents a host key rgt has never seen:",
            f"  {key_type}  {fingerprint}",
            "Compare it with the provider's console (or `ssh-keygen -lf` of the box's host key).",
            "Trusting records it in .rgt/known_hosts; your ~/.ssh/known_hosts is never written.",
        ]
        if not await self.app.push_screen_wait(ConfirmScreen(f"Unknown host key — {name}", lines, "Trust key")):
            self.notify(f"{name}: host key not trusted; the box stays unknown", severity="warning")
            return
        try:
            await instances.trust_host_key(self.session, name, fingerprint)
        except RgtError as exc:
            self.notify(str(exc), severity="error", timeout=15)
            return
        self.notify(f"{name}: host key trusted ({fingerprint})")
        self.refresh_overview()

    def current_run(self) -> RunView | None:
        if self.overview is None or self.run_id is None:
            return None
        return self.overview.run(self.run_id)

    def log_tick(self) -> None:
        """The log timer: a poll when the shown run's interval (run_logs.log_poll_interval) has passed."""
        if log_poll_due(self):
            self.poll_log()

    @work(group="log")
    async def poll_log(self) -> None:
        """One poll at a time, never cancelled by the next tick: a poll that is digesting a chunk finishes."""
        if self.run_id is None or self.log_polling:
            return
        self.log_polling = True
        try:
            await poll_log_once(self)
        finally:
            self.log_polling = False

    def show_alerts(self, alerts: Sequence[Alert]) -> None:
        """One toast per new or worse finding; the findings list keeps them all (docs/ux.md §7)."""
        for alert in alerts:
            serious = alert.severity in ("error", "critical")
            fix = f"\nfix: {alert.fix}" if alert.fix else ""
            self.notify(f"{alert.message}{fix}", title=alert.title, severity="error" if serious else "warning",
                        timeout=30 if serious else 10)

    # -- actions -----------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("build", "reconcile"):
            return self.deliver.allowed(action)
        if action == "filter" and self.deliver.active():
            return False  # the log's filter: its footer room goes to b and r, so q and ? still show at 80 columns
        if action in ("teardown", "stop") and self.session.read_only:
            return False
        if action in ("approvals", "inbox"):  # `i`: labelled in the footer only while a request waits
            waiting = self.overview is not None and self.overview.pending_requests > 0
            return waiting == (action == "approvals")
        if self.busy_with(action):
            return None  # shown greyed while it runs: pressing it again must not start (or cancel) anything
        run = self.current_run()
        if action in ("teardown", "stop"):  # the service decided; greyed when offered but not enabled
            control = None if run is None else (run.teardown if action == "teardown" else run.stop)
            if control is None or control.enabled or (action == "teardown" and control.waivable):
                return control is not None or None
            return None if control.offered else False
        return True

    def busy_with(self, action: str) -> bool:
        """Pull and verify are one at a time each; teardown and stop share one slot (one box action)."""
        slot = "teardown" if action in ("teardown", "stop") else action
        return slot in self.busy

    def set_busy(self, slot: str, running: bool) -> None:
        (self.busy.add if running else self.busy.discard)(slot)
        self.refresh_bindings()

    def action_panel(self, index: int) -> None:
        self.show_panel(index)
        self.query_one("#tabs", Tabs).active = f"tab-{index}"
        panel = self.query_one(f"#{PANELS[index]}")
        focusable = panel.query("DataTable, LogView")
        if focusable:
            focusable.first().focus()

    @on(Tabs.TabActivated, "#tabs")
    def _tab(self, event: Tabs.TabActivated) -> None:
        if event.tab.id:
            self.show_panel(int(event.tab.id.split("-")[1]))

    def show_panel(self, index: int) -> None:
        """The panel `index` is the active one; the Deliver panel (5) takes the whole area in the wide layout
        too, and its view is read again each time it is shown."""
        for position, panel_id in enumerate(PANELS):
            self.query_one(f"#{panel_id}").set_class(position == index, "-active")
        deliver = PANELS[index] == DELIVER_PANEL
        if deliver:
            self.query_one(DeliverPanel).populate()
        self.set_class(deliver, "-deliver")
        if deliver:
            self.deliver.refresh()
        self.refresh_bindings()

    def action_build(self) -> None:
        self.deliver.build()

    def action_reconcile(self) -> None:
        self.deliver.reconcile()

    @on(DataTable.RowSelected, "#deliver")
    def _deliver_selected(self, event: DataTable.RowSelected) -> None:
        self.deliver.open_output(str(event.row_key.value))

    @on(Button.Pressed, "#teardown")
    def _teardown_clicked(self) -> None:
        """The Terminate button, clicked or pressed: the same path as `t`."""
        if self.check_action("teardown", ()):
            self.action_teardown()

    @work(group="teardown")  # never exclusive: a second press must not cancel a teardown under way
    async def action_teardown(self) -> None:
        await self.box.teardown()

    @work(group="teardown")
    async def action_stop(self) -> None:
        await self.box.stop()

    def action_approvals(self) -> None:
        """`i`: the approval inbox (screens/approvals.py); the header's count is read again when it closes."""
        if self.app.screen is self:
            from remote_gpu_trainer.screens.approvals import ApprovalsScreen  # the inbox's services: when opened

            self.app.push_screen(ApprovalsScreen(self.session), callback=self._approvals_closed)

    def _approvals_closed(self, _: None) -> None:
        self.refresh_overview()

    action_inbox = action_approvals

    def action_approve_recovery(self) -> None:
        """`R`: a person approves the shown run's recovery limits, typing max_spend (screens/recover_approval.py)."""
        from remote_gpu_trainer.screens.recover_approval import open_approval

        open_approval(self, self.run_id)

    def action_refresh(self) -> None:
        self.refresh_overview()

    def action_filter(self) -> None:
        self.action_panel(2)
        field = self.query_one(LogPanel).filter_field()
        field.add_class("-visible")
        field.focus()

    @on(Input.Changed, "#log-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(LogPanel).set_filter(event.value)

    def action_clear_filter(self) -> None:
        for field in self.query("#log-filter").results(Input):  # none before the first `/`
            field.value = ""
            field.remove_class("-visible")
        self.query_one(LogPanel).set_filter("")

    def action_toggle_chart(self) -> None:
        """At 80×24 the chart takes rows the log may need: `c` hides or shows it."""
        chart = self.query_one(LossChart)
        chart.display = not chart.display

    def action_first_error(self) -> None:
        panel = self.query_one(LogPanel)
        self.action_panel(2)
        line = panel.first_error
        if line is None:
            self.notify("no error in the lines held in the log view")
        elif panel.jump_to(line.line_no):
            self.notify(f"line {line.line_no}: {line.text[:120]} (f resumes following)")
        else:
            self.notify(f"line {line.line_no} is filtered out or older than the lines kept: {line.text[:120]}",
                        severity="warning")

    @work(group="acknowledge", exclusive=True)
    async def action_acknowledge(self) -> None:
        """Audits disclose, never block: a finding is acknowledged with a note, logged as an event. A VERIFY
        finding opens its detail, where the note and the disclosure are given."""
        run = self.current_run()
        item = self.query_one(ChecklistPanel).highlighted_item()
        if self.overview is not None and self.overview.audit.finding(item) is not None:
            await self._open_finding(str(item))
            return
        finding = run.finding(item) if run is not None and item else None
        if run is None or finding is None:
            self.notify("highlight a finding in the checklist panel (4) to acknowledge it", severity="warning")
            return
        note = await self.app.push_screen_wait(NoteScreen(f"acknowledge {finding.id}: {finding.message[:60]}"))
        if note is None:
            return
        try:
            findings.acknowledge(self.session, run.id, finding.id, note)
        except RgtError as exc:
            self.notify(str(exc), severity="error")
            return
        self.refresh_overview()

    @on(DataTable.RowSelected, "#checklist")
    def _checklist_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a VERIFY finding opens its detail."""
        key = event.row_key.value
        if self.overview is not None and key is not None and self.overview.audit.finding(str(key)) is not None:
            self.action_acknowledge()

    async def _open_finding(self, finding_id: str) -> None:
        view = self.overview.audit.finding(finding_id) if self.overview is not None else None
        if view is None:
            return
        decision = await self.app.push_screen_wait(FindingScreen(view, audit.finding_detail(view)))
        if decision is None or self.session.read_only:
            return
        try:
            findings.set_status(self.session.db, finding_id, decision.status, note=decision.note,
                                disclosure=decision.disclosure, scope=decision.scope)
        except RgtError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        self.notify(f"{finding_id} {decision.status}")
        self.refresh_overview()

    @work(group="audit", exclusive=True, thread=True)
    def action_audit(self) -> None:
        """Run the VERIFY audits now (they also run after every verification and when an input changes)."""
        outcome = audit.run_audit(self.session.project, self.session.db, actor="user")
        self.app.call_from_thread(self.notify, f"audit: {len(outcome.raised)} raised, {len(outcome.fixed)} fixed")
        self.app.call_from_thread(self.refresh_overview)

    @work(group="audit", exclusive=True, thread=True)
    def audit_if_changed(self) -> None:
        """A changed input (a pulled file, an edited EVIDENCE.json) re-runs the audits in a thread. The first
        audit of a project comes with its first verification (or `u`, or `rgt audit`), not from opening it."""
        if self.session.read_only:
            return
        if audit.audit_if_changed(self.session.project, self.session.db) is not None:
            self.app.call_from_thread(self.refresh_overview)

    def action_next_run(self) -> None:
        """Show the project's next run (its checkpoints, log, gate and checklist); the VERIFY findings are the
        whole project's and stay listed."""
        runs = sorted(self.session.project.runs)
        if len(runs) < 2:
            self.notify("this project has one run")
            return
        self.run_id = runs[(runs.index(self.run_id) + 1) % len(runs)] if self.run_id in runs else runs[0]
        self.log_backfilled = False
        self.query_one(LogPanel).reset(f"run {self.run_id}")
        self.query_one(LossChart).set_series((), (), EMPTY_TEXT)
        self.notify(f"showing run {self.run_id} (n: next run)")
        self.refresh_overview()
        self.poll_log()

    def action_follow(self) -> None:
        following = self.query_one(LogPanel).toggle_follow()
        self.notify("following the log" if following else "log paused (f resumes)")

    @work(group="pull")  # never exclusive: a second press must not cancel the pull that runs
    async def action_pull(self) -> None:
        if self.run_id is None or "pull" in self.busy:
            return
        self.set_busy("pull", True)
        panel = self.query_one(CheckpointsPanel)
        files: dict[str, tuple[int, int]] = {}

        def progress(update: PullProgress) -> None:
            files[update.path] = (update.done, update.total)
            done, total = sum(d for d, _ in files.values()), sum(t for _, t in files.values())
            if self.showing():
                panel.show_progress(done, total, update.line())

        try:
            self.notify(f"pulling {self.run_id}…")
            from remote_gpu_trainer.services.evidence.verbs import pull_run  # the pull's SSH side: when asked for

            result = await pull_run(self.session, self.run_id, progress=progress)
            if result.ok:
                self.notify(f"pulled {len(result.files)} file(s) into runs/{self.run_id}/: verify with v")
            else:
                shown = "; ".join(f"{p.path}: {p.detail}" for p in result.failed[:3])
                more = f" (+{len(result.failed) - 3} more)" if len(result.failed) > 3 else ""
                self.notify(f"✖ pull incomplete: {len(result.failed)} of {len(result.files)} file(s) not fetched: "
                            f"{shown}{more}; fix that, then p again", severity="error", timeout=20)
        except RgtError as exc:
            self.notify(f"pull failed: {exc}", severity="error", timeout=15)
        finally:
            self.set_busy("pull", False)
            if self.showing():
                panel.hide_progress()
        if self.showing():
            self.refresh_overview()

    @work(group="verify")
    async def action_verify(self) -> None:
        if self.run_id is None or "verify" in self.busy:
            return
        self.set_busy("verify", True)
        panel = self.query_one(CheckpointsPanel)

        def progress(step: VerifyStep) -> None:
            if self.showing():
                panel.show_progress(step.hashed, step.total, step.text)

        try:
            self.notify(f"verifying {self.run_id}…")
            from remote_gpu_trainer.services.evidence.verbs import verify_run

            result = await verify_run(self.session, self.run_id, progress=progress)
            if result.ok:
                self.notify("✔ verified: every file matches and every checkpoint loads", timeout=8)
            else:
                first = result.errors[0]
                self.notify(f"✖ verification failed: {first.code} {first.path} ({len(result.errors)} problem(s))",
                            severity="error", timeout=15)
        except RgtError as exc:
            self.notify(f"verify failed: {exc}", severity="error", timeout=15)
        finally:
            self.set_busy("verify", False)
            if self.showing():
                panel.hide_progress()
        if self.showing():
            self.refresh_overview()

    @work(group="tick", exclusive=True)
    async def action_tick(self) -> None:
        panel = self.query_one(ChecklistPanel)
        item = panel.highlighted_item()
        run = self.current_run()
        if item is None or run is None or not self.query_one("#checklist", DataTable).has_focus:
            return
        toggle = checklist.tick_toggle(run.checklist, item)
        if toggle.refusal:
            self.notify(toggle.refusal, severity="warning")
            return
        note: str | None = ""
        if toggle.needs_note:
            note = await self.app.push_screen_wait(NoteScreen(toggle.prompt))
        if note is None:
            return
        checklist.set_tick(self.session.db, run.id, item, toggle.status, note)
        self.refresh_overview()
