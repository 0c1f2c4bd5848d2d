"""What a user of the public "remote-gpu-trainer" agent skill has on the box and at home, made the way the skill's
own scripts make it, for the adoption tests (docs/gate.md §2.1).

Follows github.com/Hanyuyuan6/remote-gpu-trainer at commit 37ed2084260bfa83a8cc40823e51d9881c83aad7:
`scripts/build_pull_manifest.py` (the manifest), `scripts/download_loop.sh` (the local copy) and
`scripts/verify_local.py` (the upstream marker it leaves). Only facts are carried over, no code:

- the manifest is `<root>/PULL_MANIFEST.json`, written to `PULL_MANIFEST.json.tmp` and renamed into place;
- its keys are exactly `schema` ("remote-gpu-trainer/PULL/v1"), `run_id` (the `--run-id` text, stripped: any
  non-empty text, spaces and non-ASCII included), `created_at_utc` (`datetime.now(timezone.utc).isoformat()`,
  microseconds and `+00:00`, taken after every file was hashed), `top_level_dirs` (every folder at the root,
  sorted), `files` (`{path, bytes, sha256}` per regular file under each folder in turn, each folder's files
  in pathlib's order, that is by path parts, not as strings) and `totals` (`{files, bytes}`);
- it is serialized with `indent=2`, `sort_keys=True`, `ensure_ascii=False` and a final newline, in UTF-8;
- the download loop fetches the manifest to `PULL_MANIFEST.json.incoming`, renames it, then copies each folder of
  `top_level_dirs` with `rsync -az --partial` (bytes and modification times kept), and `verify_local.py` then
  writes `PULL_VERIFIED.json` with schema "remote-gpu-trainer/PULL-VERIFIED/v1" beside the data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SKILL_RUN_ID = "sweep λ=3e-4 final (seeds 0-1)"  # the skill takes any text; rgt's run ids are safe names
MANIFEST = "PULL_MANIFEST.json"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def skill_manifest_object(root: Path, run_id: str = SKILL_RUN_ID) -> dict[str, Any]:
    """The manifest's content as the skill's builder puts it together for the folders in `root`."""
    cells = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    files: list[dict[str, Any]] = []
    for cell in cells:
        found = []
        for folder, _, names in os.walk(root / cell):
            found += [Path(folder, name) for name in names if Path(folder, name).is_file()]
        for path in sorted(found, key=lambda item: item.relative_to(root).parts):  # by parts, as pathlib sorts
            files.append({"path": path.relative_to(root).as_posix(), "bytes": path.stat().st_size,
                          "sha256": _sha256(path)})
    return {
        "schema": "remote-gpu-trainer/PULL/v1",
        "run_id": run_id.strip(),
        "created_at_utc": datetime.now(UTC).isoformat(),
        "top_level_dirs": cells,
        "files": files,
        "totals": {"files": len(files), "bytes": sum(entry["bytes"] for entry in files)},
    }


def skill_bytes(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write_skill_manifest(root: Path, run_id: str = SKILL_RUN_ID, obj: dict[str, Any] | None = None) -> bytes:
    """Write PULL_MANIFEST.json into the result root as the skill's builder does; returns its bytes."""
    data = skill_bytes(obj if obj is not None else skill_manifest_object(root, run_id))
    temporary = root / (MANIFEST + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, root / MANIFEST)
    return data


def download_loop_copy(box_root: Path, local_target: Path) -> None:
    """The local copy the skill's download loop makes (with verify_local.py's upstream marker) in local_target."""
    local_target.mkdir(parents=True, exist_ok=True)
    incoming = local_target / (MANIFEST + ".incoming")
    shutil.copy2(box_root / MANIFEST, incoming)
    os.replace(incoming, local_target / MANIFEST)
    manifest = json.loads((local_target / MANIFEST).read_text(encoding="utf-8"))
    for cell in manifest["top_level_dirs"]:
        shutil.copytree(box_root / cell, local_target / cell, dirs_exist_ok=True)  # copy2: bytes and mtimes
    marker = {
        "schema": "remote-gpu-trainer/PULL-VERIFIED/v1", "run_id": manifest["run_id"],
        "manifest_sha256": _sha256(local_target / MANIFEST), "verified_at_utc": datetime.now(UTC).isoformat(),
        "files": len(manifest["files"]), "bytes": sum(entry["bytes"] for entry in manifest["files"]),
    }
    (local_target / "PULL_VERIFIED.json").write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n",
                                                     encoding="utf-8")


def add_tool_files(root: Path) -> None:
    """Files whose order by path parts differs from their order as strings (`tb/` before `tb-old/`, `run/` before
    `run.log`): where the skill's manifest and rgt's own list the same files differently."""
    for relative, text in (("seed0/tb/events.txt", "step 1\n"), ("seed0/tb-old/events.txt", "step 0\n"),
                           ("seed1/run/config.yaml", "lr: 3e-4\n"), ("seed1/run.log", "done\n")):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
