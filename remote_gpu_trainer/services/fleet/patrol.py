"""The patrol (docs/remote-ops.md §9.2): `rgt watch --all` looks at every run of every project on a timer, from
cron or a jump host, and says in one plain line per run what it saw, even when nothing changed.

One tick opens each project as a Session and looks through the engine the dashboard uses (services/overview.py:
observe() then build(), the same meter, liveness look and idle rule), every project and every box at once: a box
that has not answered within the wait prints `unknown` and never delays the others. Once the lines are out, the tick
does what the runs ask for: the automatic follow-ups (services/fleet/auto_follow.py) and, with --notify, each new
event sent once through apprise (services/fleet/notify.py). Nothing here stops, terminates or rents anything.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.notice import rgt_command
from remote_gpu_trainer.clock import Clock, iso_z, utc_now
from remote_gpu_trainer.config.project import CONFIG_NAME, load_project
from remote_gpu_trainer.errors import RgtError, internal_error
from remote_gpu_trainer.services import overview
from remote_gpu_trainer.services.fleet import auto_follow
from remote_gpu_trainer.services.fleet import notify as local_notify
from remote_gpu_trainer.text import duration, escape_control, money
from remote_gpu_trainer.views import InstanceView, Overview, RunView

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.services.watch.liveness import RunState

WAIT_S = 10.0  # how long a tick waits for a box before its line says unknown
FOLLOW_EVENTS = {"verified": "verified", "pulled": "pulled", "failed": "follow_up_failed"}


@dataclass(frozen=True)
class RunLine:
    """What the patrol says of one run in one tick."""

    at: datetime
    project: str
    run: str
    instance: str
    provider: str
    instance_id: str
    box_state: str
    liveness: str
    detail: str
    burn_per_hour: float
    currency: str
    spent: float
    idle_s: float | None  # how long the box has billed with nothing running; None unless idle and billing
    idle_billing: bool
    sentinel: str | None
    auto: str
    next: str

    def text(self) -> str:
        """The line: space-separated key=value fields in a fixed order, plain text, one line."""
        idle = ("?" if self.idle_s is None else duration(self.idle_s)) if self.idle_billing else "-"
        fields = [
            iso_z(self.at), f"{self.project}/{self.run}",
            f"box={self.instance}({self.provider} {self.instance_id} {self.box_state})",
            f"run={self.liveness}({self.detail})" if self.detail else f"run={self.liveness}",
            f"billing={money(self.burn_per_hour, self.currency)}/h", f"spent={money(self.spent, self.currency)}",
            f"idle={idle}", f"sentinel={self.sentinel or '-'}", f"auto={self.auto}", f'next="{self.next}"',
        ]
        return escape_control(" ".join(fields))


@dataclass
class Look:
    """One project looked at in one tick: its lines, or why there are none; the session stays open for the
    follow-ups and notifications that come after the lines."""

    root: Path
    at: datetime
    lines: list[RunLine] = field(default_factory=list)
    problem: str | None = None
    session: Session | None = None
    states: dict[str, RunState] = field(default_factory=dict)
    view: Overview | None = None
    unfinished: bool = False  # after the lines: a follow-up failed or a notification could not be sent

    def problem_line(self) -> str:
        return escape_control(f"{iso_z(self.at)} {self.root} project={self.problem}")

    @property
    def idle_billing(self) -> bool:
        return any(line.idle_billing for line in self.lines)


async def look(root: Path, *, clock: Clock = utc_now, wait_s: float = WAIT_S) -> Look:
    """Open the project at `root` and look at every box and run, each within `wait_s`."""
    from remote_gpu_trainer.services.session import Session

    at = clock()
    if not (root / CONFIG_NAME).is_file():
        return Look(root, at, problem=f"gone(no {CONFIG_NAME} there any more)")
    try:
        session = Session(load_project(root / CONFIG_NAME), clock=clock, provider_timeout_s=wait_s)
    except (RgtError, OSError, sqlite3.Error) as exc:
        return Look(root, at, problem=f"unreadable({exc})")
    except Exception as exc:  # noqa: BLE001 - one project's failure never silences the others' lines
        return Look(root, at, problem=f"unreadable({internal_error(exc)})")
    found = Look(root, at, session=session)
    try:
        seen = await overview.observe(session, wait_s=wait_s)
        found.view = await overview.build(session, seen)
    except (RgtError, OSError, sqlite3.Error) as exc:
        found.problem = f"unreadable({exc})"
        return found
    except Exception as exc:  # noqa: BLE001 - as above: this project's line says it, the others still get theirs
        found.problem = f"unreadable({internal_error(exc)})"
        return found
    found.at, found.states = seen.at, seen.run_states
    found.lines = run_lines(session, found.view, seen.run_states)
    if not found.lines:
        found.problem = "no-runs(rgt.toml has no [runs.*])"
    return found


def run_lines(session: Session, view: Overview, states: dict[str, RunState]) -> list[RunLine]:
    idle = {instance.name for instance, _ in overview.idle_billing(list(view.instances), list(view.runs))}
    boxes = {i.name: i for i in view.instances}
    lines = []
    for run in view.runs:
        box, state = boxes[run.instance], states[run.id]
        lines.append(RunLine(
            at=view.generated_at, project=session.project.name, run=run.id, instance=box.name,
            provider=box.provider, instance_id=box.id, box_state=box.state, liveness=run.liveness,
            detail=run.liveness_detail, burn_per_hour=box.burn_per_hour, currency=box.currency,
            spent=box.cost_so_far, idle_s=_idle_s(session, view, states, box) if box.name in idle else None,
            idle_billing=box.name in idle, sentinel=state.sentinel, auto=auto_follow.status(session, run.id),
            next=next_command(session, run, box, view.runs)))
    return lines


def _idle_s(session: Session, view: Overview, states: dict[str, RunState], box: InstanceView) -> float | None:
    """The box's idle time as `rgt status` prints it (services/overview.idle_seconds)."""
    return overview.idle_seconds(box.burn_per_hour, overview.states_on(session, box.name, states), view.generated_at)


def next_command(session: Session, run: RunView, box: InstanceView, runs: Sequence[RunView] = ()) -> str:
    """The one command a person runs next for this run, with the project's folder so it works from anywhere
    (audits/notice.rgt_command: shell-quoted, as the notifications spell it). Once its own results are home, a
    sibling run on the same box comes first (overview.box_next_step): `rgt down` would refuse."""
    where = str(session.project.root)
    if run.liveness in ("running", "stalled"):
        return rgt_command("watch", run.id, where)
    if run.liveness_detail == "not launched":
        return rgt_command("run", run.id, where)
    if run.liveness not in ("finished", "dead"):
        return rgt_command("watch", run.id, where, "--once")
    target, step = overview.box_next_step(run, runs)
    if step == "teardown":
        if box.state == "terminated" or box.burn_per_hour <= 0:
            return "-"
        return rgt_command("down", run.id, where, "--confirm", box.id)
    return rgt_command(step, target.id, where)


async def after_lines(found: Look, notify: bool) -> list[str]:
    """What the tick does once its lines are out: each finished run's follow-up, then (with `notify`) each new
    event sent once. Returns one message per thing done or refused, for stderr."""
    session = found.session
    if session is None or found.view is None or session.folder_read_only:
        return []
    said: list[str] = []
    follow_ups: dict[str, auto_follow.FollowUp] = {}
    for line in found.lines:
        done = await auto_follow.follow_up(session, line.run, found.states[line.run].liveness.state)
        if done is not None:
            follow_ups[line.run] = done
            found.unfinished |= not done.ok
            said.append(f"{line.project}/{line.run}: auto follow-up {done.outcome}: {done.summary}")
    if not notify:
        return said
    try:
        channels = local_notify.channels(session.project.root, session.project.notify)
    except RgtError as exc:
        channels, problem = None, f"{session.project.name}: not notified: {exc}"
    else:
        problem = f"{session.project.name}: not notified: rgt.toml [notify] names no apprise_file or webhook_file"
    if channels is None:
        found.unfinished = True
        return [*said, problem]
    for line in found.lines:
        said += await _notify(found, line, follow_ups.get(line.run), channels)
    return said


async def _notify(found: Look, line: RunLine, done: auto_follow.FollowUp | None,
                  channels: local_notify.Channels) -> list[str]:
    """The run's new events, each sent once per launch: its liveness (finished, died, stalled) and the
    outcome of a follow-up this tick made. One that no channel took marks the look unfinished."""
    session = found.session
    assert session is not None
    seq = auto_follow.latest_launch(session, line.run)
    if seq is None:
        return []
    words = []
    if line.liveness in local_notify.LIVENESS_EVENTS:
        words.append((local_notify.LIVENESS_EVENTS[line.liveness], line.detail))
    done = done or auto_follow.recorded(session, line.run)  # one sent in an earlier tick that no channel took
    if done is not None and done.outcome in FOLLOW_EVENTS:
        words.append((FOLLOW_EVENTS[done.outcome], done.summary))
    said = []
    for event, detail in words:
        notice = local_notify.notice_for(session, line.run, event, detail, line.instance_id, line.burn_per_hour,
                                         line.currency)
        outcome = await local_notify.notify_once(session, channels, notice, seq)
        if outcome == local_notify.SENT:
            said.append(f"{line.project}/{line.run}: notified {event}")
        elif outcome == local_notify.UNSENT:
            found.unfinished = True
            said.append(f"{line.project}/{line.run}: {event} not notified: no channel took it "
                        f"({channels.source}); the next tick tries again")
        elif outcome == local_notify.UNCONFIRMED:
            found.unfinished = True
            said.append(f"{line.project}/{line.run}: {event} not notified: not confirmed within "
                        f"{channels.deadline_s:g} s ({channels.source}); the next tick tries again")
    return said


async def close(found: Look) -> None:
    if found.session is not None:
        try:
            await found.session.close_transports()
        finally:
            found.session.close()


async def tick(roots: list[Path], *, clock: Clock = utc_now, wait_s: float = WAIT_S) -> list[Look]:
    """Every project looked at once, in the order given."""
    return list(await asyncio.gather(*(look(root, clock=clock, wait_s=wait_s) for root in roots)))
