"""Where a provider API key comes from: the environment, else the provider CLI's own credential file.

docs/architecture.md §3.1 and docs/remote-ops.md §3: keys never live in rgt.toml, the state database, logs or reports,
so this module reads only the env vars and files the provider spec names (docs/providers.md §3–§6, `auth_env` and
`auth_files` in the profile). The key is wrapped in `ApiKey`, whose repr and str never show it, so an
accidental `print(client)` or a log line cannot leak it; only `reveal()` hands out the value, and only the
HTTP layer calls it.

A file entry is `path` (the whole file is the key, as vast.ai writes it) or `path#field`: TOML (`.toml`),
JSON (`.json`), or `field = value` lines (anything else, like SkyPilot's `~/.lambda_cloud/lambda_keys`).
A TOML field may be a table path with a `{setting}` in it, as pspace keeps one key per team:
`~/.paperspace/credentials.toml#keys.{team}` is the key of the team that `team` names in `config.toml` beside
that file (pspace's current team); with no team set there, a table holding exactly one key gives that key.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remote_gpu_trainer.errors import ConfigError


class CredentialsMissing(ConfigError):
    """No key in any place the spec names: a configuration problem (exit 2), said in one line."""


@dataclass(frozen=True)
class ApiKey:
    """A provider API key and where it was found. Never printed: repr/str show the source only."""

    _value: str = field(repr=False)
    source: str = ""

    def __post_init__(self) -> None:
        if not self._value or any(ch in self._value for ch in "\r\n\0"):
            # A newline would let a header be split; an empty key would send an anonymous request.
            raise CredentialsMissing(f"the API key from {self.source or 'the caller'} is empty or malformed")

    def reveal(self) -> str:
        """The key itself, for the Authorization header and the redaction list only."""
        return self._value

    @property
    def hint(self) -> str:
        """At most the last 4 characters, which is all the UI may show (docs/remote-ops.md §3)."""
        return "…" + self._value[-4:] if len(self._value) >= 12 else "…"

    def __repr__(self) -> str:
        return f"ApiKey(source={self.source!r}, value=<redacted>)"

    def __str__(self) -> str:
        return f"<API key from {self.source}>"


def find_key(
    provider: str,
    env_names: Sequence[str],
    files: Sequence[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> ApiKey:
    """The first key found: each env var in order, then each credential file in order.

    `environ` and `home` are injectable so tests never read the developer's real keys.
    """
    env = os.environ if environ is None else environ
    for name in env_names:
        value = env.get(name, "").strip()
        if value:
            return ApiKey(value, f"env {name}")
    base = Path.home() if home is None else home
    for entry in files:
        found = _read_file_entry(entry, base)
        if found:
            return ApiKey(found, entry.split("#", 1)[0])
    raise CredentialsMissing(_missing_message(provider, env_names, files))


def _missing_message(provider: str, env_names: Sequence[str], files: Sequence[str]) -> str:
    env_part = " or ".join(env_names) if env_names else "(no env var defined)"
    looked = ", ".join(entry.split("#", 1)[0] for entry in files) or "no credential file"
    return f"no {provider} API key: set {env_part} (also looked at: {looked})"


def _expand(path_text: str, home: Path) -> Path:
    if path_text == "~" or path_text.startswith("~/"):
        return home / path_text[2:]
    return Path(path_text)


def _read_file_entry(entry: str, home: Path) -> str | None:
    """The key in one `path[#field]` entry, or None when the file or the field is absent or unreadable.

    Parse errors are swallowed on purpose: their text can quote the file, and the file holds the key.
    """
    path_text, _, key_name = entry.partition("#")
    path = _expand(path_text, home)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not key_name:
        return text.strip() or None
    try:
        if path.suffix == ".toml" and "{" in key_name:
            return _find_chosen_field(tomllib.loads(text), key_name, path.parent / "config.toml")
        if path.suffix == ".toml":
            return _find_field(tomllib.loads(text), key_name)
        if path.suffix == ".json":
            return _find_field(json.loads(text), key_name)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError):
        return None
    return _find_line_field(text, key_name)


def _norm(name: str) -> str:
    """`apiKey`, `apikey` and `api_key` are one field: runpodctl's viper lower-cases keys, the SDK snakes them."""
    return name.replace("_", "").replace("-", "").lower()


def _find_field(data: Any, key_name: str) -> str | None:
    """The field at the top level, or in a `default` profile table (the RunPod SDK writes `[default]`)."""
    if not isinstance(data, dict):
        return None
    wanted = _norm(key_name)
    for scope in (data, data.get("default")):
        if isinstance(scope, dict):
            for name, value in scope.items():
                if _norm(str(name)) == wanted and isinstance(value, str) and value.strip():
                    return value.strip()
    return None


def _find_chosen_field(data: Any, key_name: str, settings: Path) -> str | None:
    """`table.{setting}`: the string at `table.<value of setting in the settings file>` (pspace's
    `keys.{team}`, the team from `config.toml`); with the setting unset, the table's only string, if it has one."""
    table_name, _, chosen = key_name.partition(".")
    setting = chosen.strip("{}")
    table = data.get(table_name) if isinstance(data, dict) else None
    if not isinstance(table, dict) or not chosen.startswith("{") or not chosen.endswith("}"):
        return None
    try:
        current = tomllib.loads(settings.read_text(encoding="utf-8")).get(setting)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        current = None
    if isinstance(current, str) and current.strip():
        value = table.get(current.strip())
        return value.strip() if isinstance(value, str) and value.strip() else None
    keys = [v.strip() for v in table.values() if isinstance(v, str) and v.strip()]
    return keys[0] if len(keys) == 1 else None


def _find_line_field(text: str, key_name: str) -> str | None:
    """`field = value` or `field: value` lines, as SkyPilot writes `~/.lambda_cloud/lambda_keys`."""
    wanted = _norm(key_name)
    for line in text.splitlines():
        for sep in ("=", ":"):
            name, found, value = line.partition(sep)
            if found and _norm(name.strip()) == wanted:
                value = value.strip().strip("'\"")
                if value:
                    return value
    return None


# -- every key rgt could know, for redacting text that did not come from rgt (a job's log) -------------------

def known_keys(*, environ: Mapping[str, str] | None = None, home: Path | None = None) -> tuple[str, ...]:
    """Every provider key present now in any env var or credential file a profile names, not just the first
    per provider: a job that prints `env` leaks all of them, whichever one rgt itself would use."""
    from remote_gpu_trainer.profiles import list_profiles  # lazily: the profiles are parsed only when a log is followed

    env = os.environ if environ is None else environ
    base = Path.home() if home is None else home
    found: set[str] = set()
    for profile in list_profiles():
        api = profile.control.api
        if api is None:
            continue
        found.update(value.strip() for name in api.auth_env if (value := env.get(name, "")).strip())
        for auth_file in api.auth_files:
            in_file = _read_file_entry(f"{auth_file.path}#{auth_file.key}" if auth_file.key else auth_file.path, base)
            if in_file:
                found.add(in_file)
    return tuple(sorted(found))


class KeyScrubber:
    """Redacts known keys from text at log speed: a text is first searched (in C) for every 8-character piece
    of every key, and only a text holding one goes through cloud/http.py's `redact`, which also removes a
    key cut in half (a line truncated mid-key). With no key known it costs nothing."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = tuple(k for k in keys if len(k) >= 6)
        self._pieces: tuple[str, ...] = ()
        if self.keys:
            from remote_gpu_trainer.providers.cloud.http import (
                FRAGMENT,  # httpx is imported only when there is a key to look for
            )

            self._pieces = tuple({k[i:i + FRAGMENT] for k in self.keys
                                  for i in range(max(1, len(k) - FRAGMENT + 1))})

    def __bool__(self) -> bool:
        return bool(self.keys)

    def touches(self, text: str) -> bool:
        """Whether `text` holds a key or a piece of one (the cheap test, for a whole chunk at once)."""
        return any(piece in text for piece in self._pieces)

    def scrub(self, text: str) -> str:
        if not self.keys or not self.touches(text):
            return text
        from remote_gpu_trainer.providers.cloud.http import redact

        return redact(text, self.keys)
