"""The approval inbox, drawn (docs/agents.md): the allowances in one line, one table row per request of an
agent, and under it the highlighted request's why and plan, the plan an approval is bound to.

It renders what it is given: the screen (screens/approvals.py) reads the requests and allowances from the
inbox service and computes the highlighted request's plan; this panel only lays them out. Everything an agent
wrote (its why, its client's name) and everything a box said (the plan's lines) is shown escaped, never as
markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.reactive import reactive
from textual.widgets import DataTable, Static

from remote_gpu_trainer.request_views import AllowanceView, RequestView
from remote_gpu_trainer.text import escape_control, money, price, span
from remote_gpu_trainer.widgets.glyphs import badge, plain
from remote_gpu_trainer.widgets.stable_table import StableTable

COLUMNS = ("id", "kind", "subject", "filed by", "state", "age", "price/h")
COMPUTING = "computing the plan… (asking the box what approving would do now)"
EMPTY = "no request from an agent yet: `rgt mcp` files them (docs/agents.md)"


@dataclass(frozen=True)
class InboxShown:
    """What the panel draws: the requests oldest first, the allowances, the time ages are counted to."""

    requests: tuple[RequestView, ...]
    allowances: tuple[AllowanceView, ...]
    now: datetime
    read_only: bool = False

    @property
    def pending(self) -> int:
        return sum(1 for r in self.requests if r.state == "pending")


def filer(actor: str) -> str:
    """`claude-code` for `agent:claude-code` (the column is the agent's name); a person's actor in full."""
    return actor.removeprefix("agent:")


def request_cells(view: RequestView, now: datetime) -> tuple[str | Text, ...]:
    plan = view.plan
    hourly = f"{price(plan.price_per_hour, plan.currency)}" if plan.price_per_hour is not None else "—"
    kind = "finding" if view.kind == "finding_decision" else view.kind
    return (view.id, kind, view.subject, filer(view.filed_by), badge(view.state),
            span((now - view.filed_at).total_seconds()), hourly)


def allowance_text(allowances: tuple[AllowanceView, ...]) -> str:
    """The active allowances in a few words each: what an agent may start without a keystroke."""
    active = [a for a in allowances if a.active]
    if not active:
        return "no allowance: rents wait for you (g grants one)"
    return " · ".join(f"{a.id}: ≤ {money(a.max_price_per_hour)}/h, {money(a.left)} of {money(a.total)} left, "
                      f"until {a.expires_at:%m-%d %H:%M} UTC" for a in active) + " (R revokes)"


def summary_text(shown: InboxShown) -> str:
    head = f"Approvals · {shown.pending} pending of {len(shown.requests)}"
    return f"{head}{' · READ-ONLY' if shown.read_only else ''} · {allowance_text(shown.allowances)}"


def detail_text(view: RequestView, now: datetime, *, computing: bool, read_only: bool, problem: str = "") -> Text:
    """The request in full: who asked what and why, then its plan (or that it is being computed), then what
    approving it takes or how it ended; `problem` says why its plan could not be computed now."""
    age = span((now - view.filed_at).total_seconds())
    lines = [f"{view.id} · {view.kind} of {view.subject} · {view.state} · filed by {view.filed_by} {age} ago",
             f"Why: {view.why}"]
    text = plain("\n".join(lines) + "\n\n", keep_newlines=True)
    if computing:
        text.append(COMPUTING, style="italic")
        return text
    text.append(escape_control("\n".join(view.plan.lines), keep_newlines=True))
    text.append("\n\n")
    if problem and view.state == "pending":
        text.append_text(plain(f"✖ {problem}; the plan above is the one filed", style="bold"))
    else:
        text.append_text(_footing(view, now, read_only))
    return text


def _footing(view: RequestView, now: datetime, read_only: bool) -> Text:
    """How it ended, or what approving it takes now (the plan's own facts: blocked, type_to_confirm)."""
    plan = view.plan
    if view.state != "pending":
        by = f" by {view.decided_by}" if view.decided_by else ""
        when = span((now - view.state_at).total_seconds())
        return plain(f"{view.state}{by} {when} ago: {view.outcome}", keep_newlines=True, style="bold")
    if plan.blocked:
        more = f" (+{len(plan.blocked) - 1} more)" if len(plan.blocked) > 1 else ""
        return plain(f"✖ cannot run now: {plan.blocked[0]}{more}; it stays pending (x rejects it)", style="bold")
    if read_only:
        return plain("read-only: approving is not offered", style="dim")
    if plan.type_to_confirm is not None:
        return plain(f"▲ IRREVERSIBLE: y approves after you type the instance id ({plan.type_to_confirm}); "
                     "x rejects", style="bold")
    return plain("y approves (after a confirmation) · x rejects with a note", style="bold")


class ApprovalsPanel(Vertical):
    DEFAULT_CSS = """
    ApprovalsPanel { height: 1fr; }
    ApprovalsPanel #approvals-summary { height: auto; max-height: 2; padding: 0 1; text-style: bold; }
    ApprovalsPanel #requests { height: auto; max-height: 40%; }
    ApprovalsPanel #request-scroll { height: 1fr; border-top: solid $primary 40%; }
    ApprovalsPanel #request-detail { height: auto; padding: 0 1; }
    """

    shown: reactive[InboxShown | None] = reactive(None, always_update=True, init=False)
    detail: reactive[RequestView | None] = reactive(None, always_update=True, init=False)
    computing: reactive[bool] = reactive(False, init=False)
    problem: reactive[str] = reactive("", init=False)

    def compose(self) -> ComposeResult:
        yield Static("Approvals · reading the inbox…", id="approvals-summary", markup=False)
        table = StableTable(id="requests", cursor_type="row")
        table.add_columns(*COLUMNS)
        yield table
        with VerticalScroll(id="request-scroll"):
            yield Static("", id="request-detail", markup=False)

    def watch_shown(self, shown: InboxShown | None) -> None:
        if shown is None:
            return
        self.query_one("#approvals-summary", Static).update(plain(summary_text(shown)))
        rows = [(r.id, request_cells(r, shown.now)) for r in shown.requests]
        self.query_one("#requests", StableTable).fill(rows)
        if not rows:
            self.query_one("#request-detail", Static).update(EMPTY)
        else:
            self._draw_detail()

    def watch_detail(self) -> None:
        self._draw_detail()

    def watch_computing(self) -> None:
        self._draw_detail()

    def watch_problem(self) -> None:
        self._draw_detail()

    def _draw_detail(self) -> None:
        if self.shown is None or self.detail is None:
            return
        self.query_one("#request-detail", Static).update(
            detail_text(self.detail, self.shown.now, computing=self.computing, read_only=self.shown.read_only,
                        problem=self.problem))

    def highlighted(self) -> str | None:
        """The id of the highlighted request; None when there is none."""
        table = self.query_one("#requests", DataTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return str(row_key.value) if row_key.value is not None else None
