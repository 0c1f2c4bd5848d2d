"""Start the on-box sentinel beside a run (docs/remote-ops.md §9.1).

`plan` decides at launch whether the run is watched and renders every notification it may send (the words come
from audits/notice.py; only the event's detail is filled in on the box). `start` streams the receiver's URL into
a 0600 file on the box over the transport's stdin, writes the sentinel's non-secret config and program into the
run's control folder and starts it detached, the way the job wrapper is started. The URL is held in a
`WebhookUrl`, which never prints it, and goes nowhere but that stdin.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.resources
import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.notice import EVENTS, Notice, next_commands, notice_payload
from remote_gpu_trainer.config.notify import read_webhook_url
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.providers.transports.detach import detached_command
from remote_gpu_trainer.remote.rgt_sentinel import DETAIL, VERSION
from remote_gpu_trainer.services.meter import last_status, meter_reading

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

PROGRAM = "rgt_sentinel.py"
CONFIG = "sentinel.json"
HEARTBEAT = "sentinel.heartbeat"
START_WAIT_S = 15.0
DISK_FULL_PERCENT = 95
SIM_HOME = "/root"  # a simulated box's home, inside its disk


class WebhookUrl:
    """The receiver's URL; its repr and str never show it, so no error, log or report can carry it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "WebhookUrl(<hidden>)"

    __str__ = __repr__


@dataclass(frozen=True)
class SentinelPlan:
    """What one launch's sentinel will send: the kind, the poll interval and one rendered body per event."""

    kind: str
    poll_s: float
    payloads: dict[str, dict[str, Any]]
    url: WebhookUrl = field(repr=False)
    attempt_s: float  # one delivery attempt at most ([notify] send_timeout_seconds)
    retry_delays_s: tuple[float, ...]  # the waits between attempts, then "gave up" ([notify] retry_seconds)


def plan(session: Session, run: RunConfig) -> SentinelPlan | None:
    """None when notifications are off ([notify] absent, or `notify = false` on the run); a ConfigError naming
    `[notify] webhook_file` when its file is missing, unreadable or holds no http(s) URL: before anything runs."""
    notify = session.project.notify
    if not notify.enabled or not run.notify:
        return None
    url = WebhookUrl(read_webhook_url(session.project.root, notify))
    instance_id = instance_id_of(session, run.instance)
    burn, currency = burn_rate(session, run.instance)
    commands = next_commands(run.id, instance_id, str(session.project.root))
    payloads = {}
    for event in EVENTS:
        notice = Notice(run=run.id, instance=run.instance, instance_id=instance_id, event=event,
                        detail="" if event == "finished" else DETAIL, burn_per_hour=burn, currency=currency,
                        next=commands)
        body, headers = notice_payload(notice, notify.kind)
        payloads[event] = {"body": base64.b64encode(body).decode("ascii"), "headers": headers}
    return SentinelPlan(kind=notify.kind, poll_s=notify.poll_seconds, payloads=payloads, url=url,
                        attempt_s=notify.send_timeout_seconds, retry_delays_s=notify.retry_seconds)


def instance_id_of(session: Session, name: str) -> str:
    """The id `rgt down --confirm` expects: what the provider last said, else what the config names."""
    status = last_status(session, name)
    return status.provider_id if status is not None else session.provider(name).provider_id(session.instance(name))


def burn_rate(session: Session, name: str) -> tuple[float, str]:
    """What the box bills per hour at launch, by the meter; before the meter has a sample, the price the
    provider last stated or the user's quote."""
    currency = session.profile(name).pricing.currency
    burn = meter_reading(session, name).burn_per_hour
    if burn > 0:
        return burn, currency
    status = last_status(session, name)
    stated = status.price_per_hour if status is not None else None
    return float(stated or session.instance(name).price_per_hour or 0.0), currency


def secret_name(run: RunConfig, ctl: str) -> str:
    """One secrets file per run and control folder: two projects' runs named alike never share one."""
    return f"notify-{run.id}-{hashlib.sha256(ctl.encode()).hexdigest()[:8]}"


async def stream_secret(transport: Transport, name: str, value: str) -> str:
    """Write `value` to `<home>/.rgt/secrets/<name>` (0600, folder 0700) from the command's stdin, never its
    command line (docs/remote-ops.md §3); returns the file's path on the box. A simulated box's home is inside
    its disk."""
    simulated = transport.resolve("/") != "/"
    home = shlex.quote(transport.resolve(SIM_HOME)) if simulated else '"$HOME"'
    command = (f'umask 077; d={home}/.rgt/secrets; f="$d"/{shlex.quote(name)}; mkdir -p "$d" && chmod 700 "$d" '
               '&& cat > "$f.tmp" && chmod 600 "$f.tmp" && mv -f "$f.tmp" "$f" && printf "%s\\n" "$f"')
    result = await transport.run(command, stdin=value.encode("utf-8") + b"\n", timeout=30)
    path = result.text.strip()
    if result.rc != 0 or not path.startswith("/"):
        raise TransportError(f"could not write the notification secret on the box (exit {result.rc}): "
                             f"{result.error_text.strip()[:200]}")
    return path


async def start(sentinel: SentinelPlan, run: RunConfig, transport: Transport, *, ctl: str, log: str,
                started: float, slurm_job: str | None = None) -> dict[str, Any]:
    """Stream the secret, write the config and the program, start the sentinel detached and wait for its first
    heartbeat. Returns the facts the launch record keeps (nothing secret)."""
    q = transport.resolve
    secret = await stream_secret(transport, secret_name(run, q(ctl)), sentinel.url.reveal())
    config = {
        "version": VERSION, "run": run.id, "instance": run.instance, "kind": sentinel.kind,
        "ctl": q(ctl), "log": q(log), "root": q(run.remote_root), "durable": q(run.remote_root),
        "checkpoint_globs": list(run.checkpoint_globs), "stall_after": run.stall_after,
        "poll_s": sentinel.poll_s, "started_at": started, "disk_full_percent": DISK_FULL_PERCENT,
        "slurm_job": slurm_job, "payloads": sentinel.payloads,
        "attempt_s": sentinel.attempt_s, "retry_delays_s": list(sentinel.retry_delays_s),
    }
    await transport.put_bytes((json.dumps(config, indent=1) + "\n").encode(), f"{ctl}/{CONFIG}")
    program = importlib.resources.files("remote_gpu_trainer.remote").joinpath(PROGRAM).read_bytes()
    await transport.put_bytes(program, f"{ctl}/{PROGRAM}")
    argv = [run.python, q(f"{ctl}/{PROGRAM}"), q(f"{ctl}/{CONFIG}"), secret]
    result = await transport.run(detached_command(transport, argv, ctl, "sentinel.out"), timeout=30)
    if result.rc != 0:
        raise TransportError(f"the sentinel did not start: {result.error_text.strip()[:200]}")
    await _first_heartbeat(transport, ctl)
    return {"poll_s": sentinel.poll_s, "kind": sentinel.kind, "secret_file": secret,
            "where": "login node" if slurm_job else "box"}


async def _first_heartbeat(transport: Transport, ctl: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_WAIT_S
    while loop.time() < deadline:
        if await transport.stat(f"{ctl}/{HEARTBEAT}") is not None:
            return
        await asyncio.sleep(0.1)
    said, _ = await transport.tail(f"{ctl}/sentinel.out", 0, 2000)
    raise TransportError(f"the sentinel wrote no heartbeat within {START_WAIT_S:g} s: "
                         f"{said.decode(errors='replace').strip()[-300:] or 'it printed nothing'}")
