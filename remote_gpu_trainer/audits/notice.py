"""The words of a notification, in one place (docs/remote-ops.md §9.1).

A notification reaches a person who is not looking at rgt, often on a phone at night: it must say which run,
on which box, what happened, what the box still costs per hour, and the exact commands to run next. The
sentinel on the box sends messages rendered here at launch (it cannot import rgt), and the local patrol renders
its notifications here too, so both say the same thing in the same words. Pure: no I/O.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from remote_gpu_trainer.text import price

EVENTS = ("finished", "died", "stalled", "disk_full")  # the sentinel's events; other callers may add words
KINDS = ("json", "ntfy", "slack", "discord")

_HAPPENED = {
    "finished": "finished: exit 0, every required file present",
    "died": "died",
    "stalled": "stalled: alive, but its log and checkpoints went silent",
    "disk_full": "is filling its durable disk",
}
_NTFY_PRIORITY = {"finished": "default", "died": "high", "stalled": "high", "disk_full": "urgent"}
_NTFY_TAGS = {"finished": "white_check_mark", "died": "x", "stalled": "hourglass", "disk_full": "floppy_disk"}


@dataclass(frozen=True)
class Notice:
    """One event of one run, with what a reader needs to act on it. `detail` refines the event (`exit 137`,
    `log silent 2h`); `burn_per_hour` is what the box bills while nobody acts, in `currency`."""

    run: str
    instance: str
    instance_id: str
    event: str
    detail: str
    burn_per_hour: float
    currency: str
    next: tuple[str, ...]


def rgt_command(verb: str, run_id: str, project: str | None = None, *options: str) -> str:
    """One rgt command line for a reader to paste: `rgt VERB RUN [PROJECT] [OPTIONS]`, every argument
    shell-quoted (a project folder with a space, a provider id with a quote). The one spelling of a next
    command, for notifications and the patrol's line alike."""
    args = [run_id, *([project] if project else []), *options]
    return " ".join(["rgt", verb, *(shlex.quote(arg) for arg in args)])


def next_commands(run_id: str, instance_id: str, project: str | None = None) -> tuple[str, ...]:
    """The commands that bring the results home and then, once the gate is open, end the billing."""
    return (rgt_command("pull", run_id, project), rgt_command("verify", run_id, project),
            rgt_command("down", run_id, project, "--confirm", instance_id))


def happened(event: str, detail: str = "") -> str:
    """The event in words, with its detail when it adds something."""
    words = _HAPPENED.get(event, event.replace("_", " "))
    return f"{words} ({detail})" if detail else words


def notice_text(n: Notice) -> tuple[str, str]:
    """(title, body): the title names the run, the box and the event; the body adds the price still burning
    and the next commands, one per line."""
    title = f"rgt: run {n.run} {n.event.replace('_', ' ')} on {n.instance}"
    burn = f"{price(n.burn_per_hour, n.currency)}/h" if n.burn_per_hour > 0 else "nothing known"
    body = "\n".join([
        f"Run {n.run} on {n.instance} ({n.instance_id}) {happened(n.event, n.detail)}.",
        f"The box is still billing {burn} until it is torn down.",
        "Next:",
        *(f"  {command}" for command in n.next),
    ])
    return title, body


def notice_payload(n: Notice, kind: str) -> tuple[bytes, dict[str, str]]:
    """The request body and headers one receiver kind expects: `json` (a generic webhook: an object with the
    fields), `ntfy` (plain text, Title/Priority/Tags headers), `slack` ({"text"}), `discord` ({"content"})."""
    title, body = notice_text(n)
    if kind == "json":
        document = {"run": n.run, "instance": n.instance, "instance_id": n.instance_id, "event": n.event,
                    "detail": n.detail, "burn_per_hour": n.burn_per_hour, "currency": n.currency,
                    "next": list(n.next), "title": title, "text": body}
        return _json(document)
    if kind == "ntfy":
        headers = {"Content-Type": "text/plain; charset=utf-8", "Title": _header(title),
                   "Priority": _NTFY_PRIORITY.get(n.event, "default"), "Tags": _NTFY_TAGS.get(n.event, "bell")}
        return body.encode("utf-8"), headers
    if kind == "slack":
        return _json({"text": f"*{title}*\n{body}"})
    if kind == "discord":
        return _json({"content": f"**{title}**\n{body}"[:2000]})  # Discord refuses content over 2000 characters
    raise ValueError(f"unknown notification kind {kind!r}: one of {', '.join(KINDS)}")


def _json(document: dict[str, object]) -> tuple[bytes, dict[str, str]]:
    return json.dumps(document, ensure_ascii=False).encode("utf-8"), {"Content-Type": "application/json"}


def _header(text: str) -> str:
    """HTTP header values are Latin-1 and one line: anything else becomes '?' rather than a refused request."""
    return " ".join(text.split()).encode("latin-1", errors="replace").decode("latin-1")
