"""rgt.toml `[notify]`: where the box's sentinel sends its notifications (docs/remote-ops.md §9.1).

```toml
[notify]
webhook_file = "~/.config/rgt/webhook"   # a local file holding the receiver's URL (never the URL itself)
kind = "json"                             # json | ntfy | slack | discord
poll_seconds = 30                         # how often the sentinel looks (optional)
send_timeout_seconds = 30                 # one delivery attempt (sentinel) or notification (patrol), at most (optional)
retry_seconds = [2, 5, 15, 30, 60, 120]   # the sentinel's waits between attempts, then it gives up (optional)
apprise_file = "~/.config/rgt/apprise"   # the local patrol's apprise URL(s), one a line (rgt watch --all --notify)

[runs.r1]
notify = false                            # this run is launched without a sentinel
```

The URL stays in its file: rgt.toml is committed, printed and recorded, so it names only where the URL is. The
file is read when a run with notifications is launched (`read_webhook_url`), and what it holds goes to the box
over the transport's stdin, never into a config object, an event or a report.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from remote_gpu_trainer.audits.notice import KINDS
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.remote.rgt_sentinel import (
    ATTEMPT_S,
    MAX_ATTEMPT_S,
    MAX_RETRIES,
    MAX_RETRY_S,
    RETRY_DELAYS_S,
    url_problem,
)
from remote_gpu_trainer.toml_table import Table

DEFAULT_POLL_S = 30.0
MAX_URL_BYTES = 4096


@dataclass(frozen=True)
class NotifyConfig:
    """`[notify]`; `webhook_file` None means notifications are off for every run."""

    webhook_file: str | None = None
    kind: str = "json"
    poll_seconds: float = DEFAULT_POLL_S
    apprise_file: str | None = None  # `rgt watch --notify` (services/fleet/notify.py); None: derived from webhook_file
    send_timeout_seconds: float = float(ATTEMPT_S)  # one attempt of the sentinel, one notification of the patrol
    retry_seconds: tuple[float, ...] = tuple(float(d) for d in RETRY_DELAYS_S)  # the sentinel's retries

    @property
    def enabled(self) -> bool:
        return self.webhook_file is not None


def read_notify_config(top: Table) -> NotifyConfig:
    body = top.table("notify") if top.has("notify") else None
    if body is None:
        return NotifyConfig()
    body.expect({"webhook_file", "kind", "poll_seconds", "apprise_file", "send_timeout_seconds", "retry_seconds"})
    body.done()
    apprise_file = body.text("apprise_file", nonempty=True)
    if apprise_file is not None and "://" in apprise_file:
        body.problem("apprise_file", "looks like a URL: put the apprise URL(s) in a file (chmod 600) and name that "
                     "file here; rgt.toml is committed and printed, the URLs must not be")
        apprise_file = None
    webhook_file = body.text("webhook_file", required=not body.has("apprise_file"), nonempty=True)
    if webhook_file is not None and "://" in webhook_file:
        body.problem("webhook_file", "looks like a URL: put the URL in a file (chmod 600) and name that file "
                     "here; rgt.toml is committed and printed, the URL must not be")
        webhook_file = None
    kind = body.text("kind", choices=KINDS, default="json") or "json"
    poll = body.number("poll_seconds", DEFAULT_POLL_S, above=True, message="must be a number of seconds > 0")
    send = body.number("send_timeout_seconds", float(ATTEMPT_S), above=True,
                       message=f"must be a number of seconds > 0, at most {MAX_ATTEMPT_S}")
    if send is not None and send > MAX_ATTEMPT_S:
        body.problem("send_timeout_seconds", f"must be a number of seconds > 0, at most {MAX_ATTEMPT_S}")
        send = float(ATTEMPT_S)
    return NotifyConfig(webhook_file=webhook_file, kind=kind, poll_seconds=poll or DEFAULT_POLL_S,
                        apprise_file=apprise_file, send_timeout_seconds=send or float(ATTEMPT_S),
                        retry_seconds=_retries(body))


def _retries(body: Table) -> tuple[float, ...]:
    """`retry_seconds`: at most MAX_RETRIES waits, each a number of seconds from 0 to MAX_RETRY_S, so that a
    receiver that never answers is given up within a bound (docs/remote-ops.md §9.1)."""
    default = tuple(float(d) for d in RETRY_DELAYS_S)
    value = body.value("retry_seconds")
    if value is None:
        return default
    fits = isinstance(value, list) and len(value) <= MAX_RETRIES and all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= MAX_RETRY_S for v in value)
    if not fits:
        body.problem("retry_seconds", f"must be a list of at most {MAX_RETRIES} numbers of seconds, each from 0 "
                     f"to {MAX_RETRY_S}")
        return default
    return tuple(float(v) for v in value)


def secret_path(root: Path, named: str) -> Path:
    """The file a `[notify]` key names: `~` is the user's home, a relative path is under the project."""
    path = Path(named).expanduser()
    return path if path.is_absolute() else root / path


def webhook_path(root: Path, notify: NotifyConfig) -> Path:
    return secret_path(root, notify.webhook_file or "")


def read_secret_lines(path: Path, where: str, limit: int, shape: str) -> list[str]:
    """The non-blank, non-`#` lines of a secret file (`where` names the key and the file), read at most
    `limit` bytes. The one reader of the webhook and apprise files: a FIFO, a device or a folder is refused
    without waiting on it or reading it whole, and every problem is a ConfigError that never echoes what the
    file holds (`shape` says what it must hold)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO opens without a writer
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ConfigError(f"{where}: is not a regular file; it {shape}")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: is not UTF-8 text; it {shape}") from None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if len(data) > limit or not lines:
        raise ConfigError(f"{where}: {shape}")
    return lines


def read_webhook_url(root: Path, notify: NotifyConfig) -> str:
    """The receiver's URL from its file: one line, http or https."""
    where = f"[notify] webhook_file: {webhook_path(root, notify)}"
    shape = "must hold one http:// or https:// URL on one line (nothing else)"
    lines = read_secret_lines(webhook_path(root, notify), where, MAX_URL_BYTES, shape)
    url = lines[0]
    if len(lines) != 1 or url_problem(url) is not None:  # the sentinel's own check: scheme, host, no control char
        raise ConfigError(f"{where}: {shape}")
    return url
