"""Completeness as a service (docs/deliver.md §7): find out where every file the `[grid]` points need is, then
let deliver/completeness.py decide, and write `completeness.json` at the project root.

"Here" is the project: a regular file under the project root, never through a link (files under runs/ come
from machines we do not trust), a checkpoint hashed (through the state database's hash cache) and held
against the sha256 its run's PULL_MANIFEST.json seals. "On the box" is asked only for what is not here,
through the run's own transport, bounded by a timeout: the box's PULL_MANIFEST.json when it has one (sizes
and hashes), else one stat per file. A box that does not answer leaves its files `unknown`, never `ok`.

The teardown plan (services/teardown.py) asks `box_checkpoint_lines` which grid points of the runs on a box
have their checkpoint only there: additive lines, the gate itself is decided in audits/gate.py alone.
"""

from __future__ import annotations

import asyncio
import csv
import io
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, parse_manifest
from remote_gpu_trainer.deliver import completeness
from remote_gpu_trainer.deliver.completeness import (
    Artifact,
    BoxListing,
    CompletenessReport,
    FigureClaim,
    Inventory,
    RemoteFile,
)
from remote_gpu_trainer.errors import ConfigError, RgtError
from remote_gpu_trainer.fsutil import atomic_write, lstat_or_none, read_regular
from remote_gpu_trainer.services import instances
from remote_gpu_trainer.services.bindings import bound_run_config, run_config
from remote_gpu_trainer.services.evidence.local_root import hash_with_cache_sync
from remote_gpu_trainer.services.evidence.manifest import acceptable_manifest, read_box_manifest, recorded_adoption
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import size

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.catalogue.model import ProjectEvidence
    from remote_gpu_trainer.config.deliver import GridConfig, GridPoint
    from remote_gpu_trainer.config.project import ProjectConfig
    from remote_gpu_trainer.services.session import Session
    from remote_gpu_trainer.state.db import StateDB

COMPLETENESS_NAME = "completeness.json"
REMOTE_TIMEOUT_S = 30.0  # one box, all its questions: a hung box costs this much, once
MAX_LISTED = 4


async def run_completeness(session: Session, *, timeout_s: float = REMOTE_TIMEOUT_S) -> CompletenessReport:
    """Assess every grid point and write completeness.json; ConfigError (exit 2) without a [grid]."""
    project = session.project
    grid = project.grid
    if grid is None:
        raise ConfigError(f"{project.file}: no [grid]: declare the expected grid (dims, capsule, test_id) to count "
                          "it (docs/deliver.md §7)")
    evidence, inventory = await gather(session, grid, timeout_s=timeout_s)
    report = completeness.assess(grid, evidence, inventory)
    try:
        atomic_write(project.root / COMPLETENESS_NAME, report.to_json().encode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{project.root / COMPLETENESS_NAME}: cannot write: {exc.strerror or exc}") from None
    return report


async def gather(session: Session, grid: GridConfig, *,
                 timeout_s: float = REMOTE_TIMEOUT_S) -> tuple[ProjectEvidence, Inventory]:
    """The evidence as VERIFY reads it, and where every needed file is, here and on the boxes."""
    from remote_gpu_trainer.audits.catalogue.load import load_project

    root = session.project.root
    evidence = await asyncio.to_thread(load_project, root)
    selections = read_selections(root, completeness.selection_paths(grid.points, evidence))
    needed = completeness.artifacts(grid.points, evidence, selections)
    local = await asyncio.to_thread(local_facts, session, needed)
    runs = sorted({a.run_id for a in needed if a.run_id})
    missing = [a for a in needed if a.run_id and a.local not in local]
    boxes = {run_id: await box_listing(session, run_id, [a.remote for a in missing if a.run_id == run_id and a.remote],
                                       timeout_s) for run_id in runs}
    inventory = Inventory(local=local, sealed=sealed_files(session.project, runs, session.db), boxes=boxes,
                          figures=read_figures(root), selections=selections)
    return evidence, inventory


# --- here ----------------------------------------------------------------------------------------------------

def local_file(root: Path, rel: str) -> Path | None:
    """The regular file at `rel` under the root, reached without any link on the way; None otherwise."""
    if rel.startswith("/") or ".." in Path(rel).parts:
        return None
    path = root
    for part in Path(rel).parts:
        path = path / part
        info = lstat_or_none(path)
        if info is None or stat.S_ISLNK(info.st_mode):
            return None
    info = lstat_or_none(path)
    return path if info is not None and stat.S_ISREG(info.st_mode) else None


def local_facts(session: Session, needed: Sequence[Artifact]) -> dict[str, str | None]:
    """Every needed file that is here: its sha256 when the check compares bytes, else None."""
    facts: dict[str, str | None] = {}
    for artifact in needed:
        path = local_file(session.project.root, artifact.local)
        if path is None:
            continue
        try:
            facts[artifact.local] = hash_with_cache_sync(session.db, path) if artifact.hashed else None
        except OSError:
            continue  # unreadable is not here
    return facts


def sealed_files(project: ProjectConfig, runs: Sequence[str], db: StateDB | None = None) -> dict[str, dict[str, str]]:
    """Each run's PULL_MANIFEST.json here, as path -> sha256 (the seal the pull and the verification used; an
    adopted one read by its adoption step, docs/gate.md §2.1, when `db` is given)."""
    sealed: dict[str, dict[str, str]] = {}
    for run_id in runs:
        path = local_file(project.root, f"runs/{run_id}/{MANIFEST_NAME}")
        data = read_regular(path) if path is not None else None
        if data is None:
            continue
        roster = _roster(project, db, run_id)
        adopted = recorded_adoption(db, run_id) if db is not None else None
        manifest, _ = parse_manifest(data, roster=roster, run_id=run_id, adopted=adopted)
        if manifest is not None:
            sealed[run_id] = {entry.path: entry.sha256 for entry in manifest.files}
    return sealed


def _roster(project: ProjectConfig, db: StateDB | None, run_id: str) -> tuple[str, ...]:
    """The cells the run's launch ran (docs/gate.md §7, "Launch-time bindings"); () for a run not in rgt.toml."""
    if run_id not in project.runs:
        return ()
    return (bound_run_config(project, db, run_id) if db is not None else project.runs[run_id]).roster


def read_selections(root: Path, paths: Sequence[str]) -> dict[str, tuple[str, ...] | None]:
    """selections/<id>.json as its ids (`ids`, a list of strings, or `items` of {id}); None when unreadable."""
    found: dict[str, tuple[str, ...] | None] = {}
    for rel in paths:
        body = _json_file(root, rel)
        raw = body.get("ids", body.get("items")) if isinstance(body, dict) else None
        ids = [x.get("id") if isinstance(x, dict) else x for x in raw] if isinstance(raw, list) else None
        ok = ids is not None and all(isinstance(i, str) and completeness.SAFE_ID.match(i) for i in ids)
        found[rel] = tuple(str(i) for i in ids or ()) if ok else None
    return found


def read_figures(root: Path) -> tuple[FigureClaim, ...]:
    """Every figures/<id>/figure.json: the (capsule, test) pairs it draws (its inputs once built, else its
    series as written) and the capsules its source.csv has rows for."""
    folder = root / "figures"
    if not folder.is_dir() or folder.is_symlink():
        return ()
    claims = []
    for entry in sorted(folder.iterdir()):
        body = _json_file(root, f"figures/{entry.name}/figure.json")
        if not isinstance(body, dict):
            continue
        draws = frozenset(_draws(body))
        rows, detail = _source_capsules(root, f"figures/{entry.name}/source.csv")
        claims.append(FigureClaim(entry.name, draws, rows, detail))
    return tuple(claims)


def _draws(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    test_id = body.get("test_id") if isinstance(body.get("test_id"), str) else None
    pairs = [(str(i["capsule"]), i.get("test_id") if isinstance(i.get("test_id"), str) else test_id)
             for i in body.get("inputs") or [] if isinstance(i, dict) and isinstance(i.get("capsule"), str)]
    for series in body.get("series") or []:
        capsules = series.get("capsules") if isinstance(series, dict) else None
        pairs += [(c, test_id) for c in capsules or [] if isinstance(c, str)]
    return pairs


def _source_capsules(root: Path, rel: str) -> tuple[frozenset[str] | None, str]:
    path = local_file(root, rel)
    if path is None:
        return None, "not built"
    try:
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return None, f"unreadable: {exc}"
    return frozenset(c for row in rows for c in str(row.get("capsules") or "").split(";") if c), ""


def _json_file(root: Path, rel: str) -> Any:
    path = local_file(root, rel)
    if path is None:
        return None
    try:
        return loads_strict(path.read_bytes())
    except (OSError, ValueError):
        return None


# --- on the box ----------------------------------------------------------------------------------------------

async def box_listing(session: Session, run_id: str, wanted: Sequence[str],
                      timeout_s: float = REMOTE_TIMEOUT_S) -> BoxListing:
    """What the run's box holds of `wanted` (paths under its result root). Nothing wanted: nothing asked."""
    run = run_config(session, run_id) if run_id in session.project.runs else None  # where its launch put it
    if run is None:
        return BoxListing(run_id, None, False, detail="not a run of rgt.toml: no box to ask")
    if not wanted:
        return BoxListing(run_id, run.remote_root, True, detail="not asked: every file is here")
    try:
        files = await asyncio.wait_for(_ask_box(session, run_id, wanted), timeout_s)
    except TimeoutError:
        return BoxListing(run_id, run.remote_root, False, detail=f"no answer within {timeout_s:g}s")
    except (RgtError, OSError) as exc:
        return BoxListing(run_id, run.remote_root, False, detail=str(exc) or type(exc).__name__)
    return BoxListing(run_id, run.remote_root, True, files)


async def _ask_box(session: Session, run_id: str, wanted: Sequence[str]) -> dict[str, RemoteFile]:
    """The box's manifest (sizes and hashes) when it has one, then a stat for whatever it does not list."""
    run = run_config(session, run_id)
    transport = await instances.remote(session, run.instance)
    base = run.remote_root.rstrip("/")
    files: dict[str, RemoteFile] = {}
    info = await transport.stat(f"{base}/{MANIFEST_NAME}")
    if info is not None and info.kind == "file":
        manifest = acceptable_manifest(await read_box_manifest(transport, f"{base}/{MANIFEST_NAME}"), run,
                                       f"{base}/{MANIFEST_NAME} on the box", recorded_adoption(session.db, run_id))
        files = {e.path: RemoteFile(e.bytes, e.sha256) for e in manifest.files if e.path in set(wanted)}
    for rel in wanted:
        if rel not in files:
            found = await transport.stat(f"{base}/{rel}")
            if found is not None and found.kind == "file":
                files[rel] = RemoteFile(found.size, None)
    return files


# --- the teardown plan's lines -------------------------------------------------------------------------------

async def box_checkpoint_lines(session: Session, run_ids: Sequence[str], *,
                               timeout_s: float = REMOTE_TIMEOUT_S) -> list[str]:
    """Lines for the teardown plan: the grid points of these runs whose checkpoint is only on the box (or
    not here while the box does not answer). Empty without a [grid] or when every checkpoint is home."""
    grid = session.project.grid
    if grid is None:
        return []
    points = [p for p in grid.points if p.run_id in run_ids]
    needed = [completeness.checkpoint_artifact(p) for p in points]
    local = await asyncio.to_thread(local_facts, session, needed)
    away = [a for a in needed if a.local not in local]
    boxes = {run_id: await box_listing(session, run_id, [a.remote for a in away if a.run_id == run_id and a.remote],
                                       timeout_s) for run_id in sorted({a.run_id for a in away if a.run_id})}
    inventory = Inventory(local=local, boxes=boxes)
    answers = [(p, completeness.checkpoint_answer(p, inventory)) for p in points]
    return checkpoint_lines(answers, inventory)


def checkpoint_lines(answers: Sequence[tuple[GridPoint, completeness.Answer]], inventory: Inventory) -> list[str]:
    only_there = [(p, a) for p, a in answers if a.state == completeness.REMOTE_ONLY]
    unknown = [(p, a) for p, a in answers if a.state == completeness.UNKNOWN]
    lines = []
    for point, _ in only_there[:MAX_LISTED]:
        box = inventory.boxes[point.run_id]
        found = box.files.get(f"{point.cell}/{completeness.CHECKPOINT}")
        bytes_text = f", {size(found.bytes)}" if found is not None and found.bytes is not None else ""
        lines.append(f"Grid:      {point.label} ({point.capsule}): checkpoint only on this box"
                     f"{bytes_text}: pull it before teardown (rgt completeness lists the pull list)")
    if len(only_there) > MAX_LISTED:
        lines.append(f"Grid:      … and {len(only_there) - MAX_LISTED} more grid point(s) with the checkpoint only "
                     "on this box")
    for point, _ in unknown[:MAX_LISTED]:
        lines.append(f"Grid:      {point.label} ({point.capsule}): no checkpoint here, and the box did not answer "
                     f"({inventory.boxes[point.run_id].detail})")
    if len(unknown) > MAX_LISTED:
        lines.append(f"Grid:      … and {len(unknown) - MAX_LISTED} more grid point(s) not checked on the box")
    return lines
