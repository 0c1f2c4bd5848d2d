"""Every box in one view (docs/remote-ops.md §9.3): `rgt status [--all]` and the TUI's all-boxes screen.

The box that bills all night belongs to a project nobody has open. This gathers every instance of the
projects asked (the current one, or every project this user opened: services/project_registry.py) through
the one engine the dashboard uses (a Session per project, services/overview.py's observe() and
instance_views(): the same meter, liveness look and verdict), adds each box's idle time, and asks every cloud
account for boxes no project knows (services/fleet/orphans.py).

Every project and box is asked at once, each within its own timeout: a hung box reads `unknown` and never
delays the others, and a project that does not answer at all within its budget is a row that says so. A
project whose folder is gone or whose rgt.toml no longer loads is a row saying why, never a crash.
Sessions are opened read-only: nothing here can stop, terminate or rent anything.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import CONFIG_NAME, load_project
from remote_gpu_trainer.errors import RgtError, internal_error
from remote_gpu_trainer.fleet_views import BoxRunView, BoxView, FleetView, ProjectRowView
from remote_gpu_trainer.services import overview, project_registry
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.fleet import orphans
from remote_gpu_trainer.views import InstanceView

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

ANSWER_GRACE_S = 1.0  # past the per-box timeout, for a box's own "no answer within" to arrive
PROJECT_ROUNDS = 3  # a project's whole look: status and liveness look, then the GPU sample, then the rest


@dataclass
class _Look:
    """One project asked: its row, its boxes, and the session kept open until the accounts were listed."""

    row: ProjectRowView
    boxes: list[BoxView] = field(default_factory=list)
    session: Session | None = None


def registered_roots() -> list[Path]:
    """Every project this user opened, gone or not, in the order first opened: what `rgt status --all` and
    `rgt watch --all` look at. An entry that is not an absolute path (a damaged or hand-edited registry) names
    no project: read as it is, it would be a folder under wherever rgt happens to run."""
    return [known.root for known in project_registry.known_projects() if known.root.is_absolute()]


async def fleet_view(roots: Sequence[Path], *, clock: Clock = utc_now, timeout_s: float = 20.0,
                     known_roots: Sequence[Path] = ()) -> FleetView:
    """The instances of the projects at `roots` and the orphans of their cloud accounts. A box is an orphan
    only when no project at `roots` or `known_roots` (the registry) names it."""
    now = clock()
    unique = list(dict.fromkeys(root.resolve() for root in roots))
    looks = await asyncio.gather(*(look_at(root, clock, timeout_s) for root in unique))
    sessions = [look.session for look in looks if look.session is not None]
    try:
        accounts, account_errors = orphans.cloud_accounts(sessions)
        known = orphans.all_known_ids([(s.project, s.db) for s in sessions])
        known |= _known_elsewhere([r.resolve() for r in known_roots if r.resolve() not in unique])
        found, list_errors = await orphans.list_orphans(accounts, known, timeout_s, now)
    finally:
        for session in sessions:
            await session.close_transports()
            session.close()
    boxes = [box for look in looks for box in look.boxes]
    rows = [look.row for look in looks]
    currency = _currency([b.currency for b in boxes] + [o.currency for o in found])
    burn = sum(b.burn_per_hour for b in boxes if b.currency == currency) + sum(
        o.burn_per_hour for o in found if o.currency == currency)
    return FleetView(generated_at=now, currency=currency, burn_per_hour=burn, instances=tuple(boxes),
                     orphans=tuple(found), projects=tuple(rows), account_errors=(*account_errors, *list_errors))


async def look_at(root: Path, clock: Clock, timeout_s: float) -> _Look:
    """One project's boxes through observe(), bounded: each box within `timeout_s`, the whole project
    within PROJECT_ROUNDS of them."""
    from remote_gpu_trainer.services.session import Session

    file = root / CONFIG_NAME
    if not file.is_file():
        return _Look(ProjectRowView(str(root), None, "gone", f"no {CONFIG_NAME} there any more (moved or "
                                    f"deleted?); `rgt status` keeps listing it until it is back"))
    try:
        session = Session(load_project(file), clock=clock, read_only=True, provider_timeout_s=timeout_s)
    except (RgtError, OSError, sqlite3.Error) as exc:
        return _Look(ProjectRowView(str(root), None, "unreadable", f"{CONFIG_NAME} could not be read: {exc}"))
    except Exception as exc:  # noqa: BLE001 - one project's failure never silences the others' rows
        return _Look(ProjectRowView(str(root), None, "unreadable",
                                    f"{CONFIG_NAME} could not be read: {internal_error(exc)}"))
    name = session.project.name
    try:
        seen = await asyncio.wait_for(overview.observe(session, wait_s=timeout_s + ANSWER_GRACE_S),
                                      PROJECT_ROUNDS * (timeout_s + ANSWER_GRACE_S))
    except TimeoutError:
        detail = f"no answer within {PROJECT_ROUNDS * (timeout_s + ANSWER_GRACE_S):g} s"
        return _Look(ProjectRowView(str(root), name, "no_answer", detail), session=session)
    except (RgtError, OSError, sqlite3.Error) as exc:
        return _Look(ProjectRowView(str(root), name, "unreadable", str(exc)), session=session)
    except Exception as exc:  # noqa: BLE001 - as above
        return _Look(ProjectRowView(str(root), name, "unreadable", internal_error(exc)), session=session)
    boxes = [box_view(session, view, seen) for view in overview.instance_views(session, seen)]
    row = ProjectRowView(str(root), name, "ok", f"{len(boxes)} instance(s)", len(boxes))
    return _Look(row, boxes, session)


def box_view(session: Session, view: InstanceView, seen: overview.Observation) -> BoxView:
    """The dashboard's instance row, with the project it belongs to, its runs and its idle time."""
    runs = [(run_id, seen.run_states[run_id]) for run_id in sorted(session.project.runs)
            if run_config(session, run_id).instance == view.name]
    return BoxView(
        project=session.project.name, root=str(session.project.root), name=view.name, provider=view.provider,
        id=view.id, state=view.state, burn_per_hour=view.burn_per_hour, cost_so_far=view.cost_so_far,
        currency=view.currency, estimate=view.estimate,
        idle_s=overview.idle_seconds(view.burn_per_hour, [state for _, state in runs], seen.at),
        runs=tuple(BoxRunView(run_id, s.liveness.state, s.liveness.detail) for run_id, s in runs),
        note=view.note,
    )


def _known_elsewhere(roots: Sequence[Path]) -> set[tuple[str, str]]:
    """The ids the other registered projects name, read from their rgt.toml and state database only
    (nobody is asked): a box of a project not in this view is not an orphan."""
    from remote_gpu_trainer.state.db import StateDB

    known: set[tuple[str, str]] = set()
    for root in roots:
        try:
            project = load_project(root / CONFIG_NAME)
            db = StateDB(project.state_db, read_only=True) if project.state_db.is_file() else None
        except Exception:  # noqa: BLE001 - its row (with --all) or nothing: an unreadable project names no box
            continue
        try:
            known |= orphans.known_ids(project, db)
        finally:
            if db is not None:
                db.close()
    return known


def _currency(currencies: Sequence[str]) -> str:
    """The headline currency: the one most boxes bill in (USD when there is none)."""
    return Counter(currencies).most_common(1)[0][0] if currencies else "USD"
