"""What a secret looks like in rgt.toml (DESIGN: secrets never live there), told by key names and token shapes.

Never by length alone: a Lambda instance id is 32 hex digits and a project may be named by a UUID, and both were
refused as "an API key" when any 32 characters of letters and digits counted as one. The value is never echoed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_SECRET_KEY_NAME = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
# Secrets are told by their shape, never by length alone (a Lambda instance id is 32 hex digits, a project name
# may be a UUID): the prefixes providers and forges give their tokens, anywhere in a value (a teardown command
# with a key in it leaks it as surely as an `id` does), and bearer tokens.
_SECRET_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?:rpa_[A-Za-z0-9]{16,}|secret_[A-Za-z0-9_.\-]{16,}|sk-[A-Za-z0-9_\-]{20,}"
    r"|gh[opsu]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{20,}|hf_[A-Za-z0-9]{30,}"
    r"|xox[abpr]-[A-Za-z0-9\-]{10,}|A[KS]IA[A-Z0-9]{16})|Bearer\s+[A-Za-z0-9_.\-=]{16,}"
)
# A whole value of the shape of a vast.ai API key (64 hex digits) or a JWT, under a key that is not an identifier
_SECRET_VALUE = re.compile(r"^[0-9a-f]{64}$|^eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*$")
_IDENTIFIER_KEYS = frozenset({"id", "name", "host", "instance"})  # what a value means here: a name, never a key
# Private-key text in PEM or OpenSSH armour (RSA, EC, DSA, OPENSSH, ENCRYPTED, PKCS#8, PGP's key block), anywhere
# in a value: an SSH key pasted into a command or an env value leaks the box as surely as an API key leaks the account
_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")


def secret_problem(key: str, value: Any) -> str | None:
    """Why `key = value` may not stand in rgt.toml, or None: a key named like a secret, private-key text or a
    token's shape anywhere in a string (a teardown command with a key in it leaks it as surely as an `id` does),
    or a whole value shaped like a vast.ai key or a JWT under a key that is not an identifier."""
    if _SECRET_KEY_NAME.search(key):
        return ("looks like a secret: keep API keys in environment variables or the provider CLI's credential "
                "file, never in rgt.toml")
    if isinstance(value, str) and _PRIVATE_KEY.search(value):
        return ("value holds private-key text (-----BEGIN ... PRIVATE KEY-----): remove it from rgt.toml; keep the "
                "key in a file of its own (~/.ssh, mode 0600) and name that file in ~/.ssh/config")
    if isinstance(value, str) and (_SECRET_TOKEN.search(value) or (
            key not in _IDENTIFIER_KEYS and _SECRET_VALUE.match(value))):
        return "value looks like an API key or token: remove it from rgt.toml and use an environment variable"
    return None


def secrets_in(data: dict[str, Any], table: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """(table, key, problem) for every secret-looking key or value of a parsed rgt.toml. Every value is looked
    at, the strings of arrays too (`args = ["--token", "..."]`), and the tables in arrays (`[[storage]]`, named
    `key[index]`); toml_table bounds the nesting, so the walk is bounded too."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from secrets_in(value, (*table, key))
            continue
        problem = secret_problem(key, value)
        if problem is None and isinstance(value, list):
            found: list[str] = []
            yield from _array_secrets(table, key, value, found)
            problem = found[0] if found else None
        if problem is not None:
            yield table, key, problem


def _array_secrets(table: tuple[str, ...], key: str, items: list[Any],
                   found: list[str]) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """The secrets of an array's tables (yielded), and the first secret among its strings (put in `found`, said
    of the array's key)."""
    for index, item in enumerate(items):
        if isinstance(item, dict):
            yield from secrets_in(item, (*table, f"{key}[{index}]"))
        elif isinstance(item, list):
            yield from _array_secrets(table, key, item, found)
        elif not found:
            problem = secret_problem(key, item)
            if problem is not None:
                found.append(problem)
