"""What the CLI prints: JSON documents, the text tables of the verbs, and the pull and verify progress.

Everything a verb shows that came from the box, a provider or the event log goes through `escape_control`
(text) or is escaped inside the JSON document, so no output can recolour the terminal or forge a line.
Progress goes to stderr: one rich progress bar when stderr is a terminal (the bar is drawn there), plain
lines otherwise (a log file or a pipe gets what it always got).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.text import escape_all, escape_control, size

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn, Task, TaskID

    from remote_gpu_trainer.audits.env_audit import AuditRow
    from remote_gpu_trainer.services.evidence.pull import PullProgress
    from remote_gpu_trainer.services.evidence.verify import VerifyStep
    from remote_gpu_trainer.services.watch.log_monitor import Alert
    from remote_gpu_trainer.state.events import Event

AUDIT_GLYPHS = {"pass": "✔", "warn": "▲", "fail": "✖", "skipped": "·"}
PLAIN_EVERY_S = 0.5  # plain pull lines: every file's outcome, downloading figures at most twice a second
ALWAYS_SHOWN = ("done", "failed", "resuming", "retrying")
LOUD_PHASES = ("failed", "resuming", "retrying")  # printed above the bar as well
DESCRIPTION_WIDTH = 40  # the verify bar's step text, padded so the bar does not jump


def on_terminal() -> bool:
    """Whether progress may be drawn as a live bar: stderr, where it goes, is a terminal."""
    return sys.stderr.isatty()


# -- JSON ------------------------------------------------------------------------------------------------------

def print_json(document: Mapping[str, Any]) -> None:
    """One JSON document on stdout: every string escaped like the report's, keys in the order built."""
    print(json.dumps(escape_all(document), indent=2, ensure_ascii=False, default=str))


# -- tables ----------------------------------------------------------------------------------------------------

def print_audit(rows: Sequence[AuditRow]) -> None:
    for row in rows:
        print(f"{AUDIT_GLYPHS.get(row.status, '?')} {row.status:<7} {row.id:>2} {row.check:<22} "
              f"{escape_control(row.detail)}")


def print_alerts(alerts: Sequence[Alert], stamp: str) -> None:
    for alert in alerts:
        text = f"{alert.severity.upper()} {alert.title}: {alert.message}" + (f" → fix: {alert.fix}" * bool(alert.fix))
        print(f"{stamp} {escape_control(text)}", flush=True)


def print_events(events: Sequence[Event]) -> None:
    """The event log: one line per event, then the lines the screen showed and the refusal's reasons."""
    # the actor column is as wide as its widest entry (`agent:claude-code`, `person:/dev/pts/3`), at least 5
    width = min(max((len(event.actor) for event in events), default=5), 48)
    for event in events:
        where = " ".join(part for part in (event.instance, event.run_id) if part)
        actor = escape_control(event.actor)
        print(f"{event.seq:>5} {event.at.isoformat()} {event.kind:<10} {actor:<{width}} {where:<16} "
              f"{escape_control(event.summary)}")
        for line in event.detail.get("shown", []):
            print(f"{'':>6}│ {escape_control(str(line))}")
        for reason in event.detail.get("reasons", []):
            print(f"{'':>6}✖ {escape_control(str(reason))}")


def print_lines(lines: Sequence[str]) -> None:
    for line in lines:
        print(escape_control(line))


# -- progress --------------------------------------------------------------------------------------------------

class PlainPullProgress:
    """Pull progress on stderr: every file's outcome and every resume or retry, downloading figures at
    most twice a second."""

    def __init__(self) -> None:
        self._last = 0.0

    def __call__(self, progress: PullProgress) -> None:
        now = time.monotonic()
        text = progress.line()
        always = progress.phase in ALWAYS_SHOWN
        if always or now - self._last > PLAIN_EVERY_S:
            self._last = now
            print(text, file=sys.stderr, flush=True)


def plain_verify_progress(step: VerifyStep) -> None:
    print(escape_control(step.text), file=sys.stderr)


class PullBar:
    """One bar for the whole pull: bytes fetched of the bytes still to fetch, with rate and ETA.

    The manifest's sizes (`sizes`, read once the pull has written the manifest here) give the total; a file
    already here is taken out of the total rather than counted as fetched, so the rate is the wire's."""

    def __init__(self, bar: Progress, task: TaskID, sizes: Callable[[], Mapping[str, int]]) -> None:
        self._bar, self._task, self._sizes = bar, task, sizes
        self._total: int | None = None
        self._done: dict[str, int] = {}
        self._present = 0

    def __call__(self, progress: PullProgress) -> None:
        if self._total is None:
            self._total = sum(self._sizes().values())
        if progress.phase == "present":
            self._present += progress.total
        else:
            self._done[progress.path] = progress.done
        if progress.phase in LOUD_PHASES:
            self._bar.console.print(escape_control(progress.line()), highlight=False, markup=False)
        total = max(self._total - self._present, sum(self._done.values()))
        self._bar.update(self._task, total=total, completed=sum(self._done.values()))


class VerifyBar:
    """One bar for a verification: the bytes hashed of the total each step carries (VerifyStep.hashed and
    .total), with rate and ETA; the step's text is the bar's description (the checkpoint load checks that follow
    the hashing have no byte count of their own)."""

    def __init__(self, bar: Progress, task: TaskID) -> None:
        self._bar, self._task = bar, task

    def __call__(self, step: VerifyStep) -> None:
        shown = escape_control(step.text)[:DESCRIPTION_WIDTH].ljust(DESCRIPTION_WIDTH)
        self._bar.update(self._task, total=step.total or None, completed=step.hashed, description=shown)


@contextmanager
def pull_progress(run_id: str, sizes: Callable[[], Mapping[str, int]]) -> Iterator[Callable[[PullProgress], None]]:
    """The pull's progress callback: a bar on a terminal, plain lines elsewhere."""
    if not on_terminal():
        yield PlainPullProgress()
        return
    with _bar() as bar:
        yield PullBar(bar, bar.add_task(f"pull {run_id}", total=None), sizes)


@contextmanager
def verify_progress() -> Iterator[Callable[[VerifyStep], None]]:
    """The verification's progress callback: a bar on a terminal, plain lines elsewhere."""
    if not on_terminal():
        yield plain_verify_progress
        return
    with _bar() as bar:
        yield VerifyBar(bar, bar.add_task("verify", total=None))


@contextmanager
def _bar() -> Iterator[Progress]:
    """The bar: what it is at, then bytes done of the total, the rate and the time left, in the sizes of
    `text.size` (the units the plain pull lines and the checkpoint panel use)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    # markup off: the description holds file names from the box, and `[/]x` or `[blink]` is a name, not style
    columns = (TextColumn("{task.description}", markup=False), BarColumn(),
               _text_column(_bytes_text, "progress.download"), _text_column(_rate_text, "progress.data.speed"),
               TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        yield bar


def _bytes_text(task: Task) -> str:
    total = "?" if task.total is None else size(int(task.total))
    return f"{size(int(task.completed))}/{total}"


def _rate_text(task: Task) -> str:
    speed = task.finished_speed or task.speed
    return "?/s" if speed is None else f"{size(int(speed))}/s"


def _text_column(render: Callable[[Task], str], style: str) -> ProgressColumn:
    """A rich progress column showing `render(task)` (rich is imported only when a bar is drawn)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class TextOf(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(render(task), style=style)

    return TextOf()
