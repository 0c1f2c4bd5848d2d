"""The patrol's own notifications (docs/remote-ops.md §9.2): `rgt watch --all --notify` on a machine that stays
up (a jump host) sends each event of each run once, through apprise, to any of its channels.

The words are audits/notice.py's, the same the box's sentinel sends. The URLs are secrets: they come from the
local file `[notify] apprise_file` names (one apprise URL a line, `#` comments), or, without it, from the
sentinel's `webhook_file` turned into apprise's spelling (`json`: http → json://, https → jsons://; `ntfy`:
http → ntfy://, https → ntfys://; Slack and Discord webhook URLs are apprise URLs as they are). A URL never
reaches an argument list, a log, an event, the state database, a report or an exception's text: apprise's
own logger is silenced, and every problem names the file and the key, never what the file holds.

Each (launch, event) of a run is sent once across processes and ticks: the NOTIFIED event records it, and
the check and the send happen under a per-run lock, so two patrols racing send it once.

Bounded: each channel is sent to from its own daemon thread, and a notification waits for them at most
`[notify] send_timeout_seconds` (default ATTEMPT_S) altogether; a channel that has not answered by then is not
confirmed (the notification is retried at the next tick unless another channel took it), and its thread is
left behind: the patrol ends without waiting for it (`still_hanging`, cli/patrol_verbs.py). Once MAX_HANGING
such threads are still alive in one process, no new send starts until they end: a receiver that never answers
costs a looping patrol a bounded number of threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.notice import Notice, next_commands, notice_text
from remote_gpu_trainer.config.notify import NotifyConfig, read_secret_lines, read_webhook_url, secret_path
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.fsutil import run_lock
from remote_gpu_trainer.remote.rgt_sentinel import ATTEMPT_S
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

MAX_FILE_BYTES = 64 << 10
ACTOR = "patrol"
LOCK_PREFIX = "notify"  # .rgt/locks/notify/<run>.lock: one sender per run at a time, across processes
# what a run's liveness means as a notification; "running" and "unknown" are not events
LIVENESS_EVENTS = {"finished": "finished", "dead": "died", "stalled": "stalled"}
_SCHEMES = {"json": {"http": "json", "https": "jsons"}, "ntfy": {"http": "ntfy", "https": "ntfys"}}
MAX_HANGING = 8  # sends past their deadline still alive in this process: beyond it, no new send starts
_hanging: set[threading.Thread] = set()


@dataclass(frozen=True)
class Channels:
    """Where notifications go: apprise URLs (secret) and the file they came from (safe to name)."""

    urls: tuple[str, ...]
    source: str
    deadline_s: float = float(ATTEMPT_S)  # one notification waits at most this long for its channels

    def __repr__(self) -> str:  # never the URLs, even in a traceback's locals
        return f"Channels({len(self.urls)} URL(s) from {self.source})"


def channels(root: Path, notify: NotifyConfig) -> Channels | None:
    """The project's apprise URLs; None when `[notify]` names neither file. A file that cannot be read or
    holds something else is a ConfigError naming the key and the file."""
    if notify.apprise_file is not None:
        path = secret_path(root, notify.apprise_file)
        where, shape = f"[notify] apprise_file: {path}", "must hold apprise URLs, one a line (nothing else)"
        urls = tuple(read_secret_lines(path, where, MAX_FILE_BYTES, shape))
        if not all("://" in url and all(c.isprintable() and not c.isspace() for c in url) for url in urls):
            raise ConfigError(f"{where}: {shape}")
        return Channels(urls, where, notify.send_timeout_seconds)
    if notify.webhook_file is None:
        return None
    url = read_webhook_url(root, notify)
    return Channels((apprise_url(url, notify.kind),), "[notify] webhook_file", notify.send_timeout_seconds)


def apprise_url(webhook: str, kind: str) -> str:
    """The sentinel's webhook URL in apprise's spelling (Slack and Discord webhooks are apprise URLs as they
    are)."""
    scheme, _, rest = webhook.partition("://")
    mapped = _SCHEMES.get(kind, {}).get(scheme)
    return f"{mapped}://{rest}" if mapped else webhook


@dataclass(frozen=True)
class Delivery:
    """What one notification did: how many channels took it, and how many had not answered by the deadline."""

    taken: int
    unconfirmed: int


async def send(found: Channels, title: str, body: str) -> Delivery:
    """Send one message to every channel at once, each from its own daemon thread, waiting for them at most
    `found.deadline_s`; one channel that hangs never silences the others, and never keeps the process alive."""
    _hanging.difference_update([thread for thread in list(_hanging) if not thread.is_alive()])
    if not found.urls or len(_hanging) >= MAX_HANGING:  # earlier sends still hang: start no more threads
        return Delivery(0, len(found.urls))
    loop = asyncio.get_running_loop()
    waiting: list[tuple[threading.Thread, asyncio.Future[bool]]] = []
    for url in found.urls:
        future: asyncio.Future[bool] = loop.create_future()
        thread = threading.Thread(target=_deliver, args=(url, title, body, loop, future), name="rgt-notify",
                                  daemon=True)
        thread.start()
        waiting.append((thread, future))
    done, pending = await asyncio.wait([future for _, future in waiting], timeout=found.deadline_s)
    _hanging.update(thread for thread, future in waiting if future in pending)
    return Delivery(sum(1 for future in done if future.result()), len(pending))


def still_hanging() -> int:
    """How many sends of this process passed their deadline and have not ended yet."""
    return sum(1 for thread in list(_hanging) if thread.is_alive())


def _deliver(url: str, title: str, body: str, loop: asyncio.AbstractEventLoop, future: asyncio.Future[bool]) -> None:
    taken = _send_one(url, title, body)
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for this answer any more
        loop.call_soon_threadsafe(_settle, future, taken)


def _settle(future: asyncio.Future[bool], taken: bool) -> None:
    if not future.done():
        future.set_result(taken)


def _send_one(url: str, title: str, body: str) -> bool:
    try:
        import apprise  # only the patrol with --notify needs it

        quiet = logging.getLogger("apprise")
        quiet.disabled, quiet.propagate = True, False  # its messages can hold the URL
        target = apprise.Apprise()
        return bool(target.add(url) and target.notify(title=title, body=body))
    except Exception:  # noqa: BLE001 - a channel's failure is a count, never a message that could hold its URL
        return False


def already_notified(session: Session, run_id: str, launch_seq: int, event: str) -> bool:
    return any(e.detail.get("launch_seq") == launch_seq and e.detail.get("event") == event
               for e in session.db.events(run_id=run_id, kind=EventKind.NOTIFIED))


SENT, SKIPPED, UNSENT, UNCONFIRMED = "sent", "skipped", "unsent", "unconfirmed"  # what notify_once did


async def notify_once(session: Session, found: Channels, notice: Notice, launch_seq: int) -> str:
    """Send `notice` unless this launch's event was sent already (by any process): SENT now, SKIPPED (sent
    before, or another patrol is sending it now), UNSENT when every channel refused it, or UNCONFIRMED when none
    took it and some had not answered by the deadline. Neither is recorded, so the next tick tries again."""
    stack = contextlib.ExitStack()
    try:
        stack.enter_context(run_lock(session.project.state_dir, f"{LOCK_PREFIX}/{notice.run}", "notifying"))
    except VerbFailed:
        return SKIPPED  # another patrol is sending this run's events now
    with stack:
        if already_notified(session, notice.run, launch_seq, notice.event):
            return SKIPPED
        title, body = notice_text(notice)
        delivery = await send(found, title, body)
        if delivery.taken == 0:
            return UNCONFIRMED if delivery.unconfirmed else UNSENT
        events.notified(session.db, run_id=notice.run, instance=notice.instance, launch_seq=launch_seq,
                        event=notice.event, channels=delivery.taken, actor=ACTOR)
    return SENT


def notice_for(session: Session, run_id: str, event: str, detail: str, instance_id: str, burn_per_hour: float,
               currency: str) -> Notice:
    """One event of a run as audits/notice.py words it, with the commands that act on it."""
    run = run_config(session, run_id)
    return Notice(run=run_id, instance=run.instance, instance_id=instance_id, event=event, detail=detail,
                  burn_per_hour=burn_per_hour, currency=currency,
                  next=next_commands(run_id, instance_id, str(session.project.root)))
