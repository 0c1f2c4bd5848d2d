"""Instances and the running meter, with the teardown control and the gate's reasons."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Button, Static

from remote_gpu_trainer.text import duration
from remote_gpu_trainer.views import Overview
from remote_gpu_trainer.widgets.glyphs import badge, money, plain, show_text
from remote_gpu_trainer.widgets.stable_table import StableTable


class InstancesPanel(Vertical):
    # repaint=False: a container draws through its children, each redrawn only when its own text changed (issue 29)
    overview: reactive[Overview | None] = reactive(None, always_update=True, init=False, repaint=False)
    run_id: reactive[str | None] = reactive(None, init=False)

    def compose(self) -> ComposeResult:
        table = StableTable(id="instances", cursor_type="row")
        table.add_columns("instance", "state", "price/h", "source", "spent", "burn/h", "facts", "gpu")
        yield table
        yield Static("", id="meter-summary")
        yield Static("gate: waiting for the first refresh", id="gate-status")
        with Horizontal(id="teardown-row"):
            yield Button("Terminate… (t)", id="teardown", variant="error", disabled=True)

    def watch_overview(self, overview: Overview | None) -> None:
        if overview is not None:
            self.show(overview, self.run_id, overview.read_only)

    def show(self, overview: Overview, run_id: str | None, read_only: bool) -> None:
        rows = []
        for i in overview.instances:
            facts = f"{i.verified_month}{' ▲STALE' if i.stale else ''}"
            spent = money(i.cost_so_far) + ("~" if i.estimate else "")
            rows.append((i.name, (f"{i.name} ({i.provider})", badge(i.state), money(i.price_per_hour),
                                  i.price_source, spent, money(i.burn_per_hour), facts, i.gpu)))
        self.query_one("#instances", StableTable).fill(rows)
        run = overview.run(run_id) if run_id else None
        summary = self.query_one("#meter-summary", Static)
        if run is not None:
            instance = overview.instance(run.instance)
            since = f" · {money(instance.since_finished)} since the job finished" if instance and \
                instance.since_finished > 0 else ""
            note = f" · {instance.note}" if instance and instance.note else ""
            if instance is not None and instance.cost_to_finish is not None:
                note = (f" · ETA {duration(instance.eta_s)} · "
                        f"{money(instance.cost_to_finish, instance.currency)} to finish{note}")
            lines = [f"id {instance.id if instance else '?'} · billing {instance.billing if instance else '?'}"
                     f"{since}{note}"]
            lines += run.other_notes  # why other boxes read unknown: their rows have no room to say
            show_text(summary, plain("\n".join(lines), keep_newlines=True))
        gate_status = self.query_one("#gate-status", Static)
        button = self.query_one("#teardown", Button)
        button.display = not read_only
        if run is None:
            show_text(gate_status, "no run selected")
            button.disabled = True
            return
        if run.gate.open:
            show_text(gate_status, plain(f"✔ GATE OPEN · {run.gate.action}"))
            gate_status.add_class("-open")
        else:
            reasons = "; ".join(run.gate.reasons[:3]) + (" …" if len(run.gate.reasons) > 3 else "")
            show_text(gate_status, plain(f"✖ GATE CLOSED ({len(run.gate.reasons)}): {reasons}"))
            gate_status.remove_class("-open")
        control = run.teardown  # decided in the service; the key, the palette and the modal read the same
        button.display = control.offered
        button.disabled = not control.enabled
        button.tooltip = None if control.enabled else plain("\n".join(control.reasons), keep_newlines=True)
