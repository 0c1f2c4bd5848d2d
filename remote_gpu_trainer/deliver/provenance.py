"""The provenance block of a figure or table (docs/deliver.md §3): the tree's git state, each capsule's checkpoint
seal, the data hash, the command, the builder and the environment, read from the project as the inputs are
(inputs.read_input), so a linked or malformed record reads as absent rather than as evidence.

- `code_state(root) -> dict`: git commit, dirty and dirty_diff_sha256, computed once per `rgt build`.
- `provenance(root, capsules, *, command, builder, env, code) -> dict`: the whole block (checkpoint_sha256 per
  capsule, data_sha256, command, builder, env, created_at).
- `stable_provenance(inputs, source_sha256, prov) -> dict`: the part equal on every rebuild (PNG/SVG metadata).
- `environment(packages, *, backend=None, fonts=()) -> dict`: the env part of it.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from remote_gpu_trainer.clock import iso_z, utc_now
from remote_gpu_trainer.deliver.inputs import MAX_JSON_BYTES, read_input
from remote_gpu_trainer.errors import ConfigError

#: PULL_MANIFEST.json lists every file of a run (about 200 bytes each): the pull's own limit for it applies
#: (services/evidence/manifest.py MANIFEST_MAX_BYTES), so provenance reads every seal a pull accepted
MAX_MANIFEST_BYTES = 256 << 20


def code_state(root: Path) -> dict[str, Any]:
    """git commit, dirty and dirty_diff_sha256 of the project's tree (docs/formats.md defines the hash; the
    one implementation is the capsule helper's). Computed once per `rgt build`, shared by every output."""
    from remote_gpu_trainer.remote.rgt_capsule import code_provenance

    code = code_provenance(str(root))
    return {"git_commit": code["commit"], "git_dirty": code["dirty"], "dirty_diff_sha256": code["dirty_diff_sha256"]}


def provenance(root: Path, capsules: Iterable[str], *, command: str, builder: Mapping[str, str] | None,
               env: Mapping[str, Any], code: Mapping[str, Any] | None = None,
               now: datetime | None = None) -> dict[str, Any]:
    """The provenance block of a figure or table (docs/deliver.md §3). `checkpoint_sha256` of a capsule is its
    `best.pth` hash in the run's PULL_MANIFEST.json (the seal), else run.json's `checkpoints.best.sha256`;
    `data_sha256` is run.json's, one value when every capsule agrees, else the sorted distinct values."""
    keys = sorted(set(capsules))
    manifests: dict[str, Mapping[str, Any]] = {}
    checkpoints: dict[str, str | None] = {}
    data: set[str] = set()
    for key in keys:
        run_id, cell = key.split("/", 1)
        if run_id not in manifests:
            manifests[run_id] = _manifest_shas(_json_or_none(root, f"runs/{run_id}/PULL_MANIFEST.json",
                                                             MAX_MANIFEST_BYTES))
        record = _json_or_none(root, f"runs/{key}/run.json") or {}
        checkpoints[key] = manifests[run_id].get(f"{cell}/best.pth") or _dig(record, "checkpoints", "best", "sha256")
        recorded = _dig(record, "provenance", "data", "data_sha256")
        if isinstance(recorded, str):
            data.add(recorded)
    data_sha: str | list[str] | None = sorted(data) if len(data) > 1 else next(iter(data), None)
    return {**(code if code is not None else code_state(root)), "checkpoint_sha256": checkpoints,
            "data_sha256": data_sha, "command": command, "builder": dict(builder) if builder else None,
            "env": dict(env), "created_at": iso_z(now or utc_now())}


def stable_provenance(document_inputs: Sequence[Mapping[str, Any]], source_sha256: str,
                      prov: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the provenance that is the same on every rebuild of the same inputs (no created_at, no
    dirty-tree hash, which the build's own outputs change): what goes into the PNG and SVG metadata."""
    builder = prov.get("builder")
    return {"inputs": {str(i.get("path")): i.get("sha256") for i in document_inputs},
            "source_sha256": source_sha256, "git_commit": prov.get("git_commit"),
            "builder_sha256": builder.get("sha256") if isinstance(builder, Mapping) else None}


def environment(packages: Sequence[str], *, backend: str | None = None,
                fonts: Sequence[str] = ()) -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version()}
    for name in packages:
        env[name] = package_version(name)
    if backend is not None:
        env["backend"] = backend
    if fonts:
        env["fonts"] = sorted(set(fonts))
    return env


@functools.lru_cache(maxsize=64)
def package_version(name: str) -> str | None:
    """An installed package's version, or None. Looked up once per process: importlib.metadata scans the
    installed distributions on every call (7 ms, 0.2 s of a 30-output build), and the code a process runs does
    not change version while it runs."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _json_or_none(root: Path, rel: str, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file that provenance reads when present; absent, linked or malformed reads as None."""
    try:
        return read_input(root, rel, rel).json(limit)
    except ConfigError:
        return None


def _manifest_shas(manifest: Any) -> dict[str, str]:
    files = manifest.get("files") if isinstance(manifest, dict) else None
    return {str(f["path"]): str(f["sha256"]) for f in files or [] if isinstance(files, list)
            and isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str)}


def _dig(node: Any, *keys: str) -> Any:
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node

