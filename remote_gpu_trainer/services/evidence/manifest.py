"""The manifest on the box: building it there (or adopting the one there), reading it back, and re-reading it
for the gate.

docs/gate.md §2.1-§4. The builder (remote/build_manifest.py) runs on the box with the run's
interpreter and prints the manifest's sha256, which is recorded at once (trust boundary 1): every later
read of the manifest, by the pull or by the gate's G2, is held against that record. A manifest read from
the box is read only when it is a regular file of sane size, and accepted only when it passes every §2 rule.
A manifest this project never recorded that is already on the box (the skill's build_pull_manifest.py wrote
it) is adopted instead (`adopt_manifest`): checked against the tree by the builder, read back and hashed here,
accepted by the one parser's adoption step, and recorded with the run id its bytes name.
"""

from __future__ import annotations

import json
import re
import shlex
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    Adoption,
    Manifest,
    Problem,
    adoptable,
    parse_manifest,
    sha256_bytes,
)
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import TransportError, VerbFailed
from remote_gpu_trainer.fsutil import lstat_or_none
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.remote import program_stdin
from remote_gpu_trainer.services.box_layout import ctl_dir  # the wrapper's control folder: cells' exit codes
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import size

BUILDER_TIMEOUT_S = 3600.0
MANIFEST_MAX_BYTES = 256 << 20  # a manifest of a million files is about 200 MiB
_SHA_LINE = re.compile(r"^MANIFEST_SHA256=([0-9a-f]{64})$", re.MULTILINE)


def builder_stdin(params: dict[str, Any]) -> bytes:
    """The builder's source with its PARAMS line in front (remote.program_stdin)."""
    return program_stdin("build_manifest.py", params)


async def build_manifest(transport: Transport, run: RunConfig, db: StateDB, *,
                         timeout: float = BUILDER_TIMEOUT_S) -> str:
    """Run the builder on the box and record the manifest's hash (trust boundary 1). Returns the hash."""
    params = {"root": transport.resolve(run.remote_root), "run_id": run.id, "roster": list(run.roster),
              "required": list(run.required), "ctl": transport.resolve(ctl_dir(run))}
    where = f"{run.remote_root}/{MANIFEST_NAME}"
    result = await transport.run(f"{shlex.quote(run.python)} -", stdin=builder_stdin(params), timeout=timeout)
    match = _SHA_LINE.search(result.text)
    printed = match.group(1) if match else None
    if result.rc == 0 and printed:
        db.record_manifest(run.id, printed)
        return printed
    if result.rc == 4:
        recorded = db.recorded_manifest(run.id)
        if printed is not None and printed == recorded:
            return printed
        known = "this project never recorded one" if recorded is None else f"recorded {recorded[:12]}"
        why = ""
        if recorded is None:  # one rgt did not build, e.g. the skill's build_pull_manifest.py's: adopt it
            try:
                return await adopt_manifest(transport, run, db, timeout=timeout)
            except VerbFailed as exc:
                why = f", and it cannot be adopted ({exc})"
        raise VerbFailed(f"{where}: a different manifest already exists ({(printed or '?')[:12]}; {known}){why}: "
                         "use a new run id or move the old manifest aside")
    if result.rc == 1:
        raise VerbFailed(f"{run.remote_root}: manifest refused: {_builder_problems(result.error_text)}")
    if result.rc == 127:
        raise VerbFailed(f"{run.python}: interpreter not found on the instance: "
                         f"set python in [runs.{run.id}]")
    tail = " ".join(result.error_text.split())[-300:] or "no output"
    raise VerbFailed(f"{where}: manifest builder failed (exit {result.rc}): {tail}")


async def adopt_manifest(transport: Transport, run: RunConfig, db: StateDB, *, local: bytes | None = None,
                         timeout: float = BUILDER_TIMEOUT_S) -> str:
    """Adopt the manifest already in the run's result root, which this project never recorded (docs/gate.md
    §2.1): the builder checks it against the tree on the box (every file listed with its size, none newer
    than the manifest, nothing it cannot list), then its bytes are read here, hashed here, and must pass the
    parser's adoption step; `local`, when given, must be those very bytes (a copy the skill's download loop
    made). Records the hash with the run id the bytes name and returns the hash; VerbFailed says why not."""
    params = {"root": transport.resolve(run.remote_root), "run_id": run.id, "roster": list(run.roster),
              "required": list(run.required), "adopt": True}
    where = f"{run.remote_root.rstrip('/')}/{MANIFEST_NAME}"
    result = await transport.run(f"{shlex.quote(run.python)} -", stdin=builder_stdin(params), timeout=timeout)
    if result.rc == 1:
        raise VerbFailed(f"checked on the box: {_builder_problems(result.error_text)}")
    if result.rc == 127:
        raise VerbFailed(f"{run.python}: interpreter not found on the instance: set python in [runs.{run.id}]")
    match = _SHA_LINE.search(result.text)
    if result.rc != 0 or match is None:
        tail = " ".join(result.error_text.split())[-300:] or "no output"
        raise VerbFailed(f"the manifest check failed on the box (exit {result.rc}): {tail}")
    data = await read_box_manifest(transport, where)
    if sha256_bytes(data) != match.group(1):
        raise VerbFailed(f"{where} changed while it was checked: pull again")
    if local is not None and local != data:
        raise VerbFailed(f"the local {MANIFEST_NAME} (sha256 {sha256_bytes(local)[:12]}) is not the box's "
                         f"({sha256_bytes(data)[:12]})")
    adoption, problems = adoptable(data, roster=run.roster, run_id=run.id)
    if adoption is None:
        raise VerbFailed(f"refused: {problems_line(problems)}")
    db.record_manifest(run.id, adoption.sha256, adopted_run_id=adoption.run_id)
    return adoption.sha256


def recorded_adoption(db: StateDB, run_id: str) -> Adoption | None:
    """The adoption recorded with the run's manifest hash, or None (rgt built it, or nothing is recorded)."""
    recorded, named = db.recorded_manifest(run_id), db.adopted_run_id(run_id)
    return Adoption(recorded, named) if recorded is not None and named is not None else None


def _builder_problems(stderr: str) -> str:
    """The first problems of the builder's JSON list, in one line."""
    try:
        problems = json.loads(stderr.strip().split("\n")[-1])  # not splitlines: U+2028 in a name is no line end
        items = [Problem(str(p["code"]), str(p["path"]), str(p["detail"])) for p in problems]
    except (ValueError, IndexError, KeyError, TypeError, RecursionError):  # the box wrote it: anything goes
        return " ".join(stderr.split())[-300:] or "no details"
    return problems_line(items)


async def read_box_manifest(transport: Transport, remote: str) -> bytes:
    """The box's manifest bytes, read only when it is a regular file no larger than any manifest can be:
    a link to /dev/zero would fill memory, and opening a FIFO would hang the pull (and the SFTP session)."""
    info = await transport.stat(remote)
    if info is None:
        raise VerbFailed(f"{remote}: the manifest on the box is gone: build it again (rgt pull builds it)")
    if info.kind != "file" or info.size > MANIFEST_MAX_BYTES:
        what = f"a {info.kind}" if info.kind != "file" else f"{size(info.size)}, more than any manifest"
        raise VerbFailed(f"{remote}: the manifest on the box is {what}: refused unread; investigate the box")
    data = bytearray()
    async for chunk in transport.read_chunks(remote, 0, expect=info.size):
        data += chunk
        if len(data) > info.size:
            raise VerbFailed(f"{remote}: the manifest on the box grew while it was read: refused; pull again")
    return bytes(data)


def acceptable_manifest(data: bytes, run: RunConfig, where: object, adopted: Adoption | None = None) -> Manifest:
    """The parsed manifest, or VerbFailed naming `where` and its first problems: one broken rule refuses it."""
    manifest, problems = parse_manifest(data, roster=run.roster, run_id=run.id, adopted=adopted)
    if manifest is None or problems:
        raise VerbFailed(f"{where}: manifest refused: {problems_line(problems) if problems else 'unreadable'}")
    return manifest


def local_manifest(root: Path, run: RunConfig, adopted: Adoption | None = None) -> Manifest | None:
    """The manifest in the local root when it is a regular file that parses; None otherwise (no verdict)."""
    path = root / MANIFEST_NAME
    info = lstat_or_none(path)
    if info is None or not stat.S_ISREG(info.st_mode):
        return None
    manifest, _ = parse_manifest(path.read_bytes(), roster=run.roster, run_id=run.id, adopted=adopted)
    return manifest


@dataclass(frozen=True)
class RemoteManifest:
    """The box's manifest as re-read now: `reachable` False when the box did not answer (then nothing
    is known); reachable with `sha256` None means the manifest is gone from the result root."""

    reachable: bool
    sha256: str | None = None
    detail: str = ""


async def remote_manifest(transport: Transport, run: RunConfig) -> RemoteManifest:
    """G2's re-read of the manifest on the box. A missing file is an answer (gone); only a box that cannot
    be reached is 'not re-checked'."""
    where = f"{run.remote_root.rstrip('/')}/{MANIFEST_NAME}"
    try:
        info = await transport.stat(where)
        if info is None or info.kind != "file":
            return RemoteManifest(True, None, "missing" if info is None else f"not a regular file ({info.kind})")
        return RemoteManifest(True, await transport.sha256(where))
    except (TransportError, OSError, TimeoutError) as exc:
        return RemoteManifest(False, None, str(exc) or type(exc).__name__)


def problems_line(problems: Sequence[Problem], limit: int = 3) -> str:
    """The first problems in one line, for CLI errors."""
    shown = "; ".join(problem.line() for problem in problems[:limit])
    more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
    return shown + more
