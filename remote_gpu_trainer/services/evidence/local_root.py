"""The local root as the pull, verification and the gate all read it: one walk and one hash cache (the small
file-system helpers they share, lstat and read without following links, live in fsutil.py).

The hash cache answers "has this file changed since it was hashed?" from its size, mtime, ctime and inode;
it serves dashboards, the pull's "already here?" check and the gate's freshness check, never a verdict:
verification always re-derives the hash from the bytes (`hash_fresh`), which then seeds the cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME, Manifest, ManifestLink
from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
from remote_gpu_trainer.providers import table as provider_table
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import escape_control

CHUNK = 4 << 20  # bytes read (and streamed) at a time


# File systems that are another machine's disk seen from here: a "copy" on one is the box's files, not a copy.
REMOTE_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "sshfs", "9p", "afs", "ceph",
                       "fuse.rclone", "fuse.s3fs", "fuse.gcsfuse", "davfs", "fuse.davfs"})


def not_home(project_root: Path, run_id: str, box_roots: Iterable[Path] = ()) -> str | None:
    """Why `runs/<run_id>` is not a copy on this machine, or None (docs/gate.md §5): `runs/` or the run's folder
    is a symlink; it resolves inside a box's own folder (`box_roots`: the result roots of boxes whose disk is a
    folder here, the sim and local boxes, and the sim disks under .rgt/sim), a bind mount included (same inode);
    or it lives on a network file system (NFS, SMB, sshfs, other FUSE remotes), which is the box's disk seen
    from here. Home is where the results survive the box: nothing else may hold the marker."""
    runs = project_root / "runs"
    local = runs / run_id
    for path in (runs, local):
        if path.is_symlink():
            return f"{path.relative_to(project_root)} is a symlink (to {os.readlink(path)}): make it a real folder"
    if not local.exists():
        return None
    real = local.resolve()
    for box in (*box_roots, project_root / ".rgt" / "sim"):
        try:
            inside = real == box.resolve() or box.resolve() in real.parents
            if inside or (box.exists() and os.path.samefile(local, box)):
                return f"it is the box's own folder {box} (a copy must survive the box)"
        except OSError:
            continue
    fstype = filesystem_type(real)
    if fstype is not None and (fstype in REMOTE_FS or fstype.startswith("fuse.sshfs")):
        return f"it is on a {fstype} file system, another machine's disk seen from here"
    return None


def box_folders(project: ProjectConfig, run: RunConfig) -> list[Path]:
    """The run's result root where the box's disk is a folder of this machine: a `local` box's path, a sim box's
    folder under .rgt/<provider> (`samefile` against it catches a bind mount); the kind comes from
    providers/table.py. An SSH box's paths name another machine."""
    instance = project.instances.get(run.instance)
    if instance is None:
        return []
    kind = provider_table.kind_of(instance.provider)
    if kind == "local":
        return [Path(run.remote_root)]
    if kind == "sim":
        # a simulated box's disk is .rgt/<provider>/<instance> (providers/sim.py's build, one folder per row)
        return [project.state_dir / instance.provider / run.instance / run.remote_root.lstrip("/")]
    return []


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the file system holding `path`, from the mount table (`mounts`, else /proc/self/mounts: the
    longest mount point that contains it); None where the kernel does not say (not Linux)."""
    try:
        text_of_table = mounts if mounts is not None else Path("/proc/self/mounts").read_text(
            encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = text_of_table.splitlines()
    best: tuple[int, str] | None = None
    text = str(path)
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (text == point or text.startswith(point.rstrip("/") + "/")) and (best is None or len(point) > best[0]):
            best = (len(point), fields[2])
    return best[1] if best else None


def walk_local_root(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every non-directory entry under the local root with its lstat (links never followed), by relative
    path; the manifest and the marker at the root are not entries. Verification and the gate both read
    the local root through this one walk, so they can never disagree about what is there. A name that is not
    UTF-8 (left by some tool; never one the manifest lists) comes out escaped, as every face shows it."""
    stack = [""]
    while stack:
        relative = stack.pop()
        with os.scandir(root / relative if relative else root) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            if not relative and entry.name in (MANIFEST_NAME, MARKER_NAME):
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)
            else:
                yield escape_control(path), info


def local_link_target(manifest: Manifest, link: ManifestLink) -> str | None:
    """The relative target a recorded link gets in the local copy, or None when it is not re-created.

    Only a link the box resolved inside the result root to a listed file, or to a folder holding listed files,
    is re-created, and its target is computed from that resolved path (`inside`), never taken from the box's
    own target text: the local link cannot lead out of the local root, and a loop (which resolves to no file)
    is recorded but never made."""
    inside = link.inside
    if inside is None or inside == link.path:
        return None
    listed = {entry.path for entry in manifest.files}
    if inside not in listed and not any(path.startswith(inside + "/") for path in listed):
        return None
    return os.path.relpath(inside, os.path.dirname(link.path) or ".").replace(os.sep, "/")


def recorded_links(root: Path, manifest: Manifest | None) -> set[str]:
    """The entries under the local root that are the manifest's links as rgt re-created them: a symlink at a
    recorded link's path whose target is exactly `local_link_target`. Anything else stays an error."""
    if manifest is None:
        return set()
    found = set()
    for link in manifest.links:
        target = local_link_target(manifest, link)
        local = root.joinpath(*link.path.split("/"))
        try:
            if target is not None and os.readlink(local) == target:
                found.add(link.path)
        except OSError:
            continue
    return found


def recreate_links(root: Path, manifest: Manifest) -> list[str]:
    """Make the links `local_link_target` allows, where nothing is in their place yet; returns their paths.
    An existing entry is left as it is (verification says whether it is the recorded link)."""
    made = []
    for link in manifest.links:
        target = local_link_target(manifest, link)
        local = root.joinpath(*link.path.split("/"))
        if target is None or os.path.lexists(local):
            continue
        local.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, local)
        made.append(link.path)
    return made


async def hash_with_cache(db: StateDB, path: Path) -> str:
    """SHA-256 of a regular file for dashboards and the gate's freshness check: a file whose size, mtime,
    ctime and inode are unchanged is answered from the cache. Never used for a verdict (see `hash_fresh`)."""
    return await asyncio.to_thread(hash_with_cache_sync, db, path)


def hash_with_cache_sync(db: StateDB, path: Path) -> str:
    """The same, for synchronous callers (the gate, dashboards run it in a worker thread)."""
    cached = db.cached_hash(str(path), FileKey.of(os.lstat(path)))
    if cached is not None:
        return cached
    return hash_fresh_sync(db, path)


async def hash_fresh(db: StateDB, path: Path) -> str:
    """SHA-256 re-derived from the bytes, whatever the cache says; the result seeds the cache."""
    return await asyncio.to_thread(hash_fresh_sync, db, path)


def hash_fresh_sync(db: StateDB, path: Path) -> str:
    """The same, for synchronous callers."""
    digest, key = _hash_stable(path)
    if key is not None:
        db.store_hash(str(path), key, digest)
    return digest


def _hash_stable(path: Path) -> tuple[str, FileKey | None]:
    """Hash from one descriptor; the cache key comes back only if the file did not change meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(f"{path}: not a regular file")
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    stable = FileKey.of(before) == FileKey.of(after)
    return digest.hexdigest(), FileKey.of(after) if stable else None
