"""The JSON document of an output, figure.json or table.json (docs/deliver.md §3): the user writes some keys and
a build (re)writes the generated ones (GENERATED_KEYS); reading it strictly, checking its schema and id, merging
the generated keys in without touching the user's, and writing it.

- `read_json_object(path, missing) -> dict`: a user-written JSON object read as a regular file only, strictly.
- `load_document(path, schema, id_key, ident) -> dict`, `merge_document(user, generated) -> dict`.
- `document_bytes(document) -> bytes`, `write_document(path, document)`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from remote_gpu_trainer.deliver.inputs import INPUT_KEYS
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import atomic_write, lstat_or_none, read_regular
from remote_gpu_trainer.strict_json import loads_strict

#: keys a build (re)writes; every other key of figure.json / table.json is the user's and kept as written
GENERATED_KEYS = ("inputs", "source", "provenance", "outputs", "qa", "disclosure")


def read_json_object(path: Path, missing: str) -> dict[str, Any]:
    """A user-written JSON object (figure.json, table.json, EVIDENCE.json) read as a regular file only (a link
    could point anywhere) and strictly (NaN, Infinity and duplicate keys are no evidence); every way it can fail
    is one line naming the file. `missing` says what to do when it is absent."""
    if lstat_or_none(path) is None:
        raise ConfigError(f"{path}: no such file: {missing}")
    try:
        raw = read_regular(path)
    except OSError as exc:
        raise ConfigError(f"{path}: unreadable: {exc.strerror or exc}") from None
    if raw is None:
        raise ConfigError(f"{path}: not a regular file (a link or a folder): refused unread")
    try:
        document = loads_strict(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: malformed JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: not a JSON object")
    return document


def load_document(path: Path, schema: str, id_key: str, ident: str) -> dict[str, Any]:
    """figure.json / table.json as the user wrote it; a wrong schema or id is refused naming the key."""
    document = read_json_object(path, f"write it (docs/formats.md), then `rgt build {id_key.split('_')[0]} {ident}`")
    if document.get("schema") != schema:
        raise ConfigError(f"{path}: schema: {document.get('schema')!r}, expected {schema!r}")
    if document.get(id_key, ident) != ident:
        raise ConfigError(f"{path}: {id_key}: {document.get(id_key)!r} is not the folder's name {ident!r}")
    return document


def merge_document(user: Mapping[str, Any], generated: Mapping[str, Any]) -> dict[str, Any]:
    """The user's document with the generated keys (GENERATED_KEYS) replaced: user keys keep their order and
    values; an inputs[] entry the user wrote keeps its own keys and gains path/sha256/split; `qa.human_viewed`
    is the user's tick (T03) and survives a rebuild."""
    merged = {k: v for k, v in user.items()}
    for key in GENERATED_KEYS:
        if key not in generated:
            continue
        value = generated[key]
        if key == "inputs" and isinstance(user.get("inputs"), list):
            value = _merged_inputs(user["inputs"], value)
        if key == "qa" and isinstance(user.get("qa"), Mapping) and isinstance(value, Mapping):
            value = {**value, "human_viewed": bool(user["qa"].get("human_viewed", False))}
        merged[key] = value
    return merged


def _merged_inputs(user: list[Any], generated: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    def identity(entry: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(entry.get(k) for k in INPUT_KEYS)

    written = {identity(e): e for e in user if isinstance(e, Mapping)}
    return [{**written.get(identity(entry), {}), **entry} for entry in generated]


def document_bytes(document: Mapping[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_document(path: Path, document: Mapping[str, Any]) -> None:
    atomic_write(path, document_bytes(document))
