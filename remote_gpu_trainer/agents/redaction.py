"""No secret leaves the agent face: what a tool returns and the arguments the event log keeps are scrubbed here.

rgt never reads a credential into a document (docs/architecture.md §3.2), so this is the second line: a value of an
environment variable named like a secret (RUNPOD_API_KEY, HF_TOKEN, ...) and any string shaped like a token or
holding private-key text (secret_shapes.py) is replaced before it reaches the agent, which may forward what it
reads anywhere. Hashes and ids are not secrets: the shape test is the one rgt.toml's reader applies to an `id`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from remote_gpu_trainer.secret_shapes import secret_problem
from remote_gpu_trainer.text import escape_control

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8  # a shorter value would redact ordinary words; real keys are far longer
LOGGED_CHARS = 500  # the head of an argument's text the event log keeps
LOGGED_ITEMS = 50  # the first items of an argument's list the event log keeps


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment variables whose names say they hold a secret, longest first (so a key that
    contains a shorter one is replaced whole)."""
    env = os.environ if environ is None else environ
    values = {value for name, value in env.items()
              if len(value) >= MIN_SECRET_CHARS and secret_problem(name, "") is not None}
    return sorted(values, key=len, reverse=True)


def scrub_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    # "id" is a name, never a key: only the token shapes and private-key text count, not a 64-hex hash
    return REDACTED if secret_problem("id", text) is not None else text


def scrub(value: Any, *, keep_newlines: bool = False) -> Any:
    """`value` (a JSON-shaped document, or a text) with every secret replaced and control characters escaped, keys
    included, as every `--format json` document escapes them (text.escape_all); `keep_newlines` for a page of text
    (a recovery note as a resource)."""
    return _walk(value, environment_secrets(), keep_newlines)


def _walk(value: Any, secrets: list[str], keep_newlines: bool = False) -> Any:
    if isinstance(value, str):
        return escape_control(scrub_text(value, secrets), keep_newlines=keep_newlines)
    if isinstance(value, list | tuple):
        return [_walk(item, secrets, keep_newlines) for item in value]
    if isinstance(value, dict):
        return {_walk(str(key), secrets, keep_newlines): _walk(item, secrets, keep_newlines)
                for key, item in value.items()}
    return value


def clean_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's arguments as the event log keeps them: a value under a key named like a secret, or shaped like one,
    is replaced (an agent may paste a key where a note goes), and each is cut to its head: the log is append-only
    and every changing call is in it, so a megabyte `why` (refused) must not be kept whole, call after call."""
    secrets = environment_secrets()
    kept: dict[str, Any] = {}
    for key, value in arguments.items():
        if isinstance(value, str) and secret_problem(key, value) is not None:
            kept[key] = REDACTED
        else:
            kept[key] = _head(_walk(value, secrets))  # scrubbed whole first: a cut never leaves half a key
    return kept


def _head(value: Any) -> Any:
    """`value` with a long text cut to LOGGED_CHARS and a long list to LOGGED_ITEMS, each saying how long it was."""
    if isinstance(value, str) and len(value) > LOGGED_CHARS:
        return f"{value[:LOGGED_CHARS]}... ({len(value)} characters)"
    if isinstance(value, list | tuple):
        items = [_head(item) for item in value[:LOGGED_ITEMS]]
        return items + ([f"... ({len(value)} items)"] if len(value) > LOGGED_ITEMS else [])
    return value


def secret_argument(arguments: Mapping[str, Any]) -> str | None:
    """The name of the first argument holding a secret (a value of a secret environment variable, a token's shape,
    private-key text), or None. Such a call is refused before it runs: what an agent passes may be recorded (a
    request's `why`, a launch's `ack`) and shown to people, and none of it may carry a key."""
    secrets = environment_secrets()
    for key, value in arguments.items():
        items = value if isinstance(value, list) else [value]
        texts = [item for item in items if isinstance(item, str)]
        if any(secret_problem(key, text) is not None or any(s in text for s in secrets) for text in texts):
            return key
    return None
