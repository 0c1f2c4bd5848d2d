"""The views of every box in one place: `rgt status [--all]` and the TUI's all-boxes screen (docs/remote-ops.md
§9.3). Data only, like views.py (no I/O, no services, no Textual): services/fleet/status.py builds them, the CLI and
widgets/all_boxes_panel.py lay them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

ORPHAN_MARK = "orphan: billing, unknown to rgt"


@dataclass(frozen=True)
class BoxRunView:
    """One run on a box and its liveness, as the overview's liveness look read it."""

    id: str
    liveness: str  # running | finished | dead | stalled | unknown
    detail: str


@dataclass(frozen=True)
class BoxView:
    """One instance of one known project: what it is, what it bills, and how long it has sat idle."""

    project: str  # the project's name
    root: str  # the project folder
    name: str
    provider: str
    id: str
    state: str
    burn_per_hour: float
    cost_so_far: float
    currency: str
    estimate: bool  # the cost includes an assumed rate
    idle_s: float | None  # billing with no run running or stalled since its last run finished; None: busy/no bill
    runs: tuple[BoxRunView, ...]
    note: str = ""  # why the state is what it is (a timeout, an API error)


@dataclass(frozen=True)
class OrphanView:
    """A box a configured cloud account lists that no known project names (rgt.toml `id` or `rgt up`)."""

    provider: str
    account: str  # the API base and where its key came from: never the key
    id: str
    name: str
    state: str
    price_per_hour: float | None
    price_source: str
    currency: str
    bills: bool  # it costs money now (anything but terminated, or stopped with free storage)
    mark: str = ORPHAN_MARK
    burn_per_hour: float = 0.0  # by the meter's rule (audits/meter.first_rates), as inside a project
    estimate: bool = False
    unknown_price: bool = False


@dataclass(frozen=True)
class ProjectRowView:
    """One project of the view: read, gone (no rgt.toml any more) or unreadable (the reason, one line)."""

    root: str
    name: str | None
    status: str  # ok | gone | unreadable | no_answer
    detail: str
    instances: int = 0


@dataclass(frozen=True)
class FleetView:
    """Every box of the projects asked, the orphans of their cloud accounts, and what could not be asked."""

    generated_at: datetime
    currency: str
    burn_per_hour: float  # instances and billing orphans in `currency`
    instances: tuple[BoxView, ...]
    orphans: tuple[OrphanView, ...]
    projects: tuple[ProjectRowView, ...]
    account_errors: tuple[str, ...]  # one line per cloud account (or instance's account) that was not listed

    @property
    def errors(self) -> tuple[str, ...]:
        """What could not be asked: each project not read, then each account not listed."""
        return tuple(f"{p.root}: {p.detail}" for p in self.projects if p.status != "ok") + self.account_errors

    @property
    def complete(self) -> bool:
        """Every project read, every account listed, no box unknown, no orphan billing: exit 0 only then."""
        return (not self.errors and not any(o.bills for o in self.orphans)
                and all(b.state != "unknown" for b in self.instances))

