"""The dashboard's top bar in words: project, requests waiting, burn, spend, the gate, the run and the data's age.

A function of the overview alone (and the time it is drawn at), kept out of screens/dashboard.py so the screen
module stays one screen's worth of code; the screen draws it only when the text changed (issue 29: an idle
dashboard redraws nothing).
"""

from __future__ import annotations

from datetime import datetime

from remote_gpu_trainer.text import money
from remote_gpu_trainer.views import Overview, RunView


def topbar_text(overview: Overview, run: RunView | None, now: datetime) -> str:
    gate = "—"
    if run is not None:
        gate = "GATE OPEN" if run.gate.open else f"GATE CLOSED {len(run.gate.reasons)}"
    age = max(0, int((now - overview.generated_at).total_seconds()))
    waiting = overview.pending_requests  # an agent's requests: shown only when there are some
    parts = [f"rgt · {overview.project}", *([f"⚑ {waiting} request{'s' * (waiting != 1)}"] if waiting else []),
             f"burn {money(overview.burn_per_hour)}/h", f"spent {money(overview.total)}", gate]
    if run is not None:
        parts.append(f"{run.id} {run.liveness}")
    if overview.read_only:
        parts.append("READ-ONLY")
    parts.append(f"{age}s ago")
    return " · ".join(parts)
