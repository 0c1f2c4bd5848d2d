"""Completeness reconciliation (docs/deliver.md §7): every point of rgt.toml's `[grid]` against what is here
and what is still only on a box, before anything is disclosed or torn down.

Pure: `artifacts()` says which files each point needs, the service (services/deliver/completeness.py) finds out where
each one is (here, sealed by PULL_MANIFEST.json; on the run's box; nowhere; or not known because the box did
not answer) and hands that `Inventory` to `assess()`, which decides. Nothing here opens a file or a connection.

Each point gets five checks, each `ok`, `missing`, `remote_only`, `mismatch`, `unknown` (the box holding the
only possible copy did not answer: never `ok`) or `n/a` (VISUALS of a point no figure draws):

- CKPT: `best.pth` is here with the sha256 its run's PULL_MANIFEST.json seals; only on the box is
  `remote_only` and lands on the pull list.
- SPLIT: metrics.json's own `split` field is the split the grid claims (the field, never the folder's name).
- INPUTS: the split manifest run.json names is here, unchanged, with every member and fitted artifact.
- VISUALS: every figure that draws the point has a source row for it, and the test's declared visuals
  (conditions × roles × the selection's ids) are all there.
- UNIFORM: the point has the outputs (metric names, per-item columns, visual roster) the other points of its
  test have, and its metrics.json names the checkpoint it was computed from (checkpoint_sha256 = best.pth's).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from remote_gpu_trainer.audits.catalogue.load import SAFE_ID
from remote_gpu_trainer.audits.catalogue.model import Capsule, ProjectEvidence
from remote_gpu_trainer.config.deliver import GridConfig, GridPoint

SCHEMA = "remote-gpu-trainer/COMPLETENESS/v1"
CHECKS = ("CKPT", "SPLIT", "INPUTS", "VISUALS", "UNIFORM")
OK, MISSING, REMOTE_ONLY, MISMATCH, UNKNOWN = "ok", "missing", "remote_only", "mismatch", "unknown"
NOT_APPLICABLE = "n/a"
HERE = "here"  # where an artifact is: here, or one of MISSING, REMOTE_ONLY, UNKNOWN
RANK = {OK: 0, NOT_APPLICABLE: 0, REMOTE_ONLY: 1, UNKNOWN: 2, MISSING: 3, MISMATCH: 4}  # the worst one speaks
STATES = ("complete", "pull", "unknown", "incomplete")
CHECKPOINT = "best.pth"
#: the most visuals one point may declare (conditions × roles × ids): run.json is written on the box, and a few
#: kB of names would otherwise make rgt list, stat and ask the box for billions of paths
MAX_VISUALS = 100_000
COVERAGE_WORDS = {MISSING: "are nowhere", UNKNOWN: "are not here (the box did not answer)",
                  REMOTE_ONLY: "are only on the box"}


@dataclass(frozen=True)
class Artifact:
    """A file a check needs: its project-relative path here and, for a capsule file, its run and its path
    under the run's result root on the box (`<cell>/...`)."""

    check: str
    local: str
    run_id: str | None = None
    remote: str | None = None
    hashed: bool = False  # the service hashes it here (a checkpoint, a fitted artifact)


@dataclass(frozen=True)
class RemoteFile:
    """One file on a run's box: its size, and its sha256 when the box's PULL_MANIFEST.json lists it."""

    bytes: int | None = None
    sha256: str | None = None  # known when the box's PULL_MANIFEST.json lists it


@dataclass(frozen=True)
class BoxListing:
    """What one run's box said about the files asked for. `remote_root` None: rgt.toml names no box for the
    run; `reachable` False: the box was asked and did not answer (nothing is known about it)."""

    run_id: str
    remote_root: str | None
    reachable: bool
    files: Mapping[str, RemoteFile] = field(default_factory=dict)  # path under the result root -> file
    detail: str = ""


@dataclass(frozen=True)
class FigureClaim:
    """A figure that draws points: (capsule, test id or None for any test) pairs, and the capsules its
    source.csv has rows for (None: no readable source.csv, i.e. not built)."""

    figure_id: str
    draws: frozenset[tuple[str, str | None]]
    source_capsules: frozenset[str] | None
    detail: str = ""


@dataclass(frozen=True)
class Inventory:
    """Everything the service found out. `local`: project-relative path -> sha256 of the bytes here (None
    when present but not hashed); a path not in it is not here. `sealed`: run -> PULL_MANIFEST.json path
    (`<cell>/...`) -> sha256. `selections`: selection path -> its ids (None: absent or unreadable)."""

    local: Mapping[str, str | None] = field(default_factory=dict)
    sealed: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    boxes: Mapping[str, BoxListing] = field(default_factory=dict)
    figures: tuple[FigureClaim, ...] = ()
    selections: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Answer:
    """A state with its reason: where an artifact is (here, remote_only, missing, unknown), or one check's answer for
    a grid point."""

    state: str
    detail: str = ""


@dataclass(frozen=True)
class PointResult:
    """One grid point's state with each check's answer; `to_dict` is its entry in completeness.json."""

    point: GridPoint
    state: str  # complete | pull (only remote-only gaps) | unknown | incomplete
    checks: Mapping[str, Answer]

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"point": self.point.as_dict(), "capsule": self.point.capsule,
                                "test_id": self.point.test_id, "state": self.state}
        body.update({check: self.checks[check].state for check in CHECKS})
        body["details"] = {check: self.checks[check].detail for check in CHECKS if self.checks[check].detail}
        return body


@dataclass(frozen=True)
class PullItem:
    """One remote-only file: where it goes here, where it is on the box, and the points that need it."""

    path: str
    run_id: str
    remote: str
    bytes: int | None
    sha256: str | None
    points: tuple[str, ...]


@dataclass(frozen=True)
class CompletenessReport:
    """The whole reconciliation: every grid point's result, the files still to pull and the boxes asked; it is
    written as completeness.json and sets the exit code."""

    grid: GridConfig
    points: tuple[PointResult, ...]
    pull_list: tuple[PullItem, ...]
    boxes: tuple[BoxListing, ...] = ()

    @property
    def exit_code(self) -> int:
        """0 when every point is complete; 1 otherwise (a hole, a pull still to do, or a box not asked)."""
        return 0 if all(p.state == "complete" for p in self.points) else 1

    def counts(self) -> dict[str, int]:
        tally = Counter(p.state for p in self.points)
        return {"points": len(self.points), **{state: tally.get(state, 0) for state in STATES}}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "exit_code": self.exit_code,
            "grid": {"dims": {name: list(values) for name, values in self.grid.dims}, "capsule": self.grid.capsule,
                     "test_id": self.grid.test_id, "split": self.grid.split},
            "summary": self.counts(),
            "points": [p.to_dict() for p in self.points],
            "pull_list": [{"path": i.path, "run": i.run_id, "remote": i.remote, "bytes": i.bytes, "sha256": i.sha256,
                           "points": list(i.points)} for i in self.pull_list],
            "boxes": [{"run": b.run_id, "remote_root": b.remote_root, "reachable": b.reachable, "detail": b.detail}
                      for b in self.boxes],
        }

    def to_json(self) -> str:
        """completeness.json: stable key order, LF, a trailing newline, no clock (same inputs, same bytes)."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"


# --- which files each point needs ----------------------------------------------------------------------------

def capsule_file(point: GridPoint, rel: str, check: str, *, hashed: bool = False) -> Artifact:
    return Artifact(check, f"runs/{point.run_id}/{point.cell}/{rel}", point.run_id, f"{point.cell}/{rel}", hashed)


def checkpoint_artifact(point: GridPoint) -> Artifact:
    return capsule_file(point, CHECKPOINT, "CKPT", hashed=True)


def artifacts(points: Sequence[GridPoint], evidence: ProjectEvidence,
              selections: Mapping[str, tuple[str, ...] | None]) -> list[Artifact]:
    """Every file the checks of `points` look for, each once: what the service must locate. `selections`
    are the selection files `selection_paths` named, as read."""
    found: dict[str, Artifact] = {}
    for point in points:
        capsule = evidence.capsule(point.capsule)
        wanted = [checkpoint_artifact(point), capsule_file(point, f"test/{point.test_id}/metrics.json", "SPLIT"),
                  capsule_file(point, "run.json", "INPUTS")]
        wanted += [Artifact("INPUTS", str(r["artifact"]), hashed=True) for r in _fit_records(evidence, capsule)]
        vis = _vis_block(capsule, point.test_id)
        ids = selections.get(vis["path"]) if vis is not None and isinstance(vis.get("path"), str) else None
        wanted += [capsule_file(point, rel, "VISUALS") for rel in _vis_files(capsule, point.test_id, ids)]
        for artifact in wanted:
            found.setdefault(artifact.local, artifact)
    return list(found.values())


def selection_paths(points: Sequence[GridPoint], evidence: ProjectEvidence) -> list[str]:
    """The selection files (selections/<id>.json) the points' declared visuals name, for the service to read."""
    paths = []
    for point in points:
        vis = _vis_block(evidence.capsule(point.capsule), point.test_id)
        if vis is not None and isinstance(vis.get("path"), str):
            paths.append(vis["path"])
    return list(dict.fromkeys(paths))


def _vis_block(capsule: Capsule | None, test_id: str) -> Mapping[str, Any] | None:
    tests = (capsule.run_record or {}).get("tests") if capsule is not None else None
    for entry in tests if isinstance(tests, list) else []:
        if isinstance(entry, Mapping) and entry.get("test_id") == test_id and isinstance(entry.get("vis"), Mapping):
            return entry["vis"]
    return None


def _vis_files(capsule: Capsule | None, test_id: str, ids: Sequence[str] | None) -> list[str]:
    """test/<t>/vis/<condition>/<role>/<id>.png for every declared condition, role and selection id."""
    vis = _vis_block(capsule, test_id)
    if vis is None or ids is None or _vis_count(vis, ids) > MAX_VISUALS:
        return []
    conditions, roles = _names(vis.get("conditions")), _names(vis.get("roles"))
    return [f"test/{test_id}/vis/{c}/{r}/{i}.png" for c in conditions for r in roles for i in ids]


def _vis_count(vis: Mapping[str, Any], ids: Sequence[str]) -> int:
    return len(_names(vis.get("conditions"))) * len(_names(vis.get("roles"))) * len(ids)


def _names(raw: Any) -> list[str]:
    """Condition and role names as run.json (written on the box) lists them: only safe names make a path."""
    return [str(x) for x in raw if isinstance(x, str | int) and SAFE_ID.match(str(x))] if isinstance(raw, list) else []


def _fit_records(evidence: ProjectEvidence, capsule: Capsule | None) -> list[Mapping[str, Any]]:
    manifest = _split_manifest(evidence, capsule)
    return [r for r in manifest.fit_records if isinstance(r.get("artifact"), str)] if manifest is not None else []


def _split_manifest(evidence: ProjectEvidence, capsule: Capsule | None) -> Any:
    named = capsule.prov("data", "split_manifest") if capsule is not None else None
    return next((s for s in evidence.splits if s.path == named), None) if isinstance(named, str) else None


# --- where an artifact is ------------------------------------------------------------------------------------

def locate(artifact: Artifact, inventory: Inventory) -> Answer:
    """`here`, or remote_only / missing / unknown with the reason."""
    if artifact.local in inventory.local:
        return Answer(HERE)
    box = inventory.boxes.get(artifact.run_id or "") if artifact.remote else None
    if box is None or box.remote_root is None:
        whose = f"run {artifact.run_id} has no box in rgt.toml" if artifact.run_id else "it is a project file"
        return Answer(MISSING, f"{artifact.local} is not here ({whose})")
    if not box.reachable:
        return Answer(UNKNOWN, f"{artifact.local} is not here and the box did not answer ({box.detail})")
    if artifact.remote in box.files:
        return Answer(REMOTE_ONLY, f"{artifact.local} is only on the box ({box.remote_root}/{artifact.remote})")
    return Answer(MISSING, f"{artifact.local} is neither here nor on the box")


def checkpoint_answer(point: GridPoint, inventory: Inventory) -> Answer:
    """CKPT: here with the sha256 PULL_MANIFEST.json seals, else where it is."""
    artifact = checkpoint_artifact(point)
    where = locate(artifact, inventory)
    if where.state != HERE:
        return where
    sealed = inventory.sealed.get(point.run_id, {}).get(artifact.remote or "")
    here = inventory.local.get(artifact.local)
    if sealed is None:
        return Answer(MISMATCH, f"{artifact.local} is here but runs/{point.run_id}/PULL_MANIFEST.json does not "
                                "seal it: not a verified copy")
    if here != sealed:
        return Answer(MISMATCH, f"{artifact.local} differs from the sha256 PULL_MANIFEST.json seals "
                                f"({(here or '?')[:12]} here, {sealed[:12]} sealed)")
    return Answer(OK)


# --- the checks ----------------------------------------------------------------------------------------------

def split_answer(point: GridPoint, claimed: str, evidence: ProjectEvidence, inventory: Inventory) -> Answer:
    artifact = capsule_file(point, f"test/{point.test_id}/metrics.json", "SPLIT")
    where = locate(artifact, inventory)
    if where.state != HERE:
        return where
    capsule = evidence.capsule(point.capsule)
    test = capsule.tests.get(point.test_id) if capsule is not None else None
    if test is None or test.metrics is None:
        return Answer(MISMATCH, f"{artifact.local} is here but does not parse as a JSON object")
    if test.split is None:
        return Answer(MISMATCH, f"{artifact.local} has no split field: the number's split is not stated")
    if test.split != claimed:
        return Answer(MISMATCH, f"{artifact.local} says split {test.split!r}; the grid claims {claimed!r}")
    return Answer(OK)


def inputs_answer(point: GridPoint, evidence: ProjectEvidence, inventory: Inventory) -> Answer:
    """INPUTS: run.json here, naming a split manifest that is here, unchanged, with all its members."""
    where = locate(capsule_file(point, "run.json", "INPUTS"), inventory)
    if where.state != HERE:
        return where
    capsule = evidence.capsule(point.capsule)
    named = capsule.prov("data", "split_manifest") if capsule is not None else None
    if not isinstance(named, str) or not named:
        return Answer(MISMATCH, f"runs/{point.capsule}/run.json names no split manifest "
                                "(provenance.data.split_manifest)")
    manifest = _split_manifest(evidence, capsule)
    if manifest is None:
        return Answer(MISSING, f"{named} (named by runs/{point.capsule}/run.json) is not here")
    stated = capsule.prov("data", "split_manifest_sha256") if capsule is not None else None
    if isinstance(stated, str) and stated != manifest.sha256:
        return Answer(MISMATCH, f"{named} changed since the run (run.json: {stated[:12]}, "
                                f"here: {manifest.sha256[:12]})")
    listed = [m for m in manifest.members if m.path]
    gone = [m.path for m in listed if manifest.disk_sha256.get(m.path or "") is None]
    changed = [m.path for m in listed if m.path not in gone and m.sha256 and manifest.disk_sha256.get(m.path or "")
               != m.sha256]
    fitted = [_fitted(r, inventory) for r in manifest.fit_records if isinstance(r.get("artifact"), str)]
    if gone:
        return Answer(MISSING, f"{len(gone)} of {len(listed)} member(s) of {named} are not here (first: {gone[0]})")
    if changed:
        return Answer(MISMATCH, f"{len(changed)} member(s) of {named} differ from their sha256 (first: {changed[0]})")
    bad = [f for f in fitted if f.state != OK]
    return worst(bad) if bad else Answer(OK)


def _fitted(record: Mapping[str, Any], inventory: Inventory) -> Answer:
    path = str(record["artifact"])
    if path not in inventory.local:
        return Answer(MISSING, f"fitted artifact {path} is not here")
    stated = record.get("sha256")
    if isinstance(stated, str) and inventory.local[path] != stated:
        return Answer(MISMATCH, f"fitted artifact {path} differs from the sha256 the split manifest records")
    return Answer(OK)


def visuals_answer(point: GridPoint, evidence: ProjectEvidence, inventory: Inventory) -> Answer:
    """VISUALS: n/a unless a figure draws the point; then its source rows and the declared visuals."""
    drawn_by = [f for f in inventory.figures if (point.capsule, point.test_id) in f.draws
                or (point.capsule, None) in f.draws]
    if not drawn_by:
        return Answer(NOT_APPLICABLE)
    answers = []
    for figure in drawn_by:
        if figure.source_capsules is None:
            answers.append(Answer(MISSING, f"figures/{figure.figure_id}/source.csv is not here ({figure.detail})"))
        elif point.capsule not in figure.source_capsules:
            answers.append(Answer(MISSING, f"figures/{figure.figure_id}/source.csv has no row for {point.capsule}"))
    capsule = evidence.capsule(point.capsule)
    vis = _vis_block(capsule, point.test_id)
    if vis is not None:
        selection = vis.get("path")
        ids = inventory.selections.get(selection) if isinstance(selection, str) else None
        if ids is None:
            answers.append(Answer(MISSING, f"the selection {selection!r} run.json names for the visuals is not here"))
        elif _vis_count(vis, ids) > MAX_VISUALS:
            answers.append(Answer(MISMATCH, f"run.json declares {_vis_count(vis, ids)} visuals for test "
                                            f"{point.test_id} (conditions × roles × ids), more than {MAX_VISUALS}: "
                                            "not counted"))
        else:
            files = [capsule_file(point, rel, "VISUALS") for rel in _vis_files(capsule, point.test_id, ids)]
            answers += _coverage(files, inventory)
    return worst(answers) if answers else Answer(OK)


def _coverage(files: Sequence[Artifact], inventory: Inventory) -> list[Answer]:
    """One answer per kind of gap, counted: 3 of 15 visuals only on the box."""
    located = [locate(f, inventory) for f in files]
    answers = []
    for state in (MISSING, UNKNOWN, REMOTE_ONLY):
        hit = [f.local for f, where in zip(files, located, strict=True) if where.state == state]
        if hit:
            answers.append(Answer(state, f"{len(hit)} of {len(files)} visual(s) {COVERAGE_WORDS[state]} "
                                         f"(first: {hit[0]})"))
    return answers


def worst(answers: Iterable[Answer]) -> Answer:
    return max(answers, key=lambda a: RANK[a.state])


def uniform_answers(points: Sequence[GridPoint], evidence: ProjectEvidence, inventory: Inventory,
                    splits: Mapping[str, Answer]) -> dict[str, Answer]:
    """UNIFORM per point: the outputs the most common among the points of its test have, and a metrics.json
    indexed by the checkpoint it came from. A point without its metrics.json here answers as SPLIT located it."""
    shapes = {p.capsule + "|" + p.test_id: _shape(evidence.capsule(p.capsule), p.test_id) for p in points}
    by_test: dict[str, Counter[tuple[Any, ...]]] = {}
    for point in points:
        shape = shapes[point.capsule + "|" + point.test_id]
        if shape is not None:
            by_test.setdefault(point.test_id, Counter())[shape] += 1
    usual = {test_id: seen.most_common(1)[0][0] for test_id, seen in by_test.items()}
    answers = {}
    for point in points:
        key = point.capsule + "|" + point.test_id
        shape = shapes[key]
        if shape is None:
            located = splits[key]
            answers[key] = located if located.state in (MISSING, REMOTE_ONLY, UNKNOWN) else Answer(
                MISMATCH, "metrics.json is here but unreadable: its outputs cannot be compared")
            continue
        answers[key] = _differs(point, shape, usual[point.test_id]) or _indexed(point, evidence, inventory)
    return answers


def _shape(capsule: Capsule | None, test_id: str) -> tuple[Any, ...] | None:
    """What a unit outputs: its metric names, its per-item columns and its declared visual roster."""
    test = capsule.tests.get(test_id) if capsule is not None else None
    if test is None or test.metrics is None:
        return None
    blocks = test.metrics.get("metrics")
    metrics = tuple(sorted(blocks)) if isinstance(blocks, Mapping) else ()
    columns = tuple(sorted(str(c) for c in test.results.columns)) if test.results is not None else ()
    vis = _vis_block(capsule, test_id) or {}
    return metrics, columns, tuple(_names(vis.get("conditions"))), tuple(_names(vis.get("roles")))


def _differs(point: GridPoint, shape: tuple[Any, ...], usual: tuple[Any, ...]) -> Answer | None:
    words = ("metrics", "per-item columns", "visual conditions", "visual roles")
    for word, mine, theirs in zip(words, shape, usual, strict=True):
        if mine != theirs:
            return Answer(MISMATCH, f"{point.capsule} test {point.test_id} has {word} {list(mine)} where the other "
                                    f"points of the test have {list(theirs)}")
    return None


def _indexed(point: GridPoint, evidence: ProjectEvidence, inventory: Inventory) -> Answer:
    """metrics.json names checkpoint_sha256, and it is best.pth's (here, sealed, or as the box's manifest says)."""
    capsule = evidence.capsule(point.capsule)
    test = capsule.tests.get(point.test_id) if capsule is not None else None
    named = (test.metrics or {}).get("checkpoint_sha256") if test is not None else None
    if not isinstance(named, str) or not named:
        return Answer(MISMATCH, f"runs/{point.capsule}/test/{point.test_id}/metrics.json names no checkpoint_sha256")
    known = _checkpoint_sha(point, inventory)
    if known is not None and named.removeprefix("sha256:") != known:
        return Answer(MISMATCH, f"metrics.json was computed from checkpoint {named[:12]}, best.pth is {known[:12]}")
    return Answer(OK)


def _checkpoint_sha(point: GridPoint, inventory: Inventory) -> str | None:
    artifact = checkpoint_artifact(point)
    sealed = inventory.sealed.get(point.run_id, {}).get(artifact.remote or "")
    box = inventory.boxes.get(point.run_id)
    remote = box.files.get(artifact.remote or "") if box is not None else None
    return inventory.local.get(artifact.local) or sealed or (remote.sha256 if remote is not None else None)


# --- the answer ----------------------------------------------------------------------------------------------

def assess(grid: GridConfig, evidence: ProjectEvidence, inventory: Inventory,
           points: Sequence[GridPoint] | None = None) -> CompletenessReport:
    """Every point's five checks, its state, and the pull list of every remote-only file they need."""
    chosen = tuple(points if points is not None else grid.points)
    splits = {p.capsule + "|" + p.test_id: split_answer(p, grid.split, evidence, inventory) for p in chosen}
    uniform = uniform_answers(chosen, evidence, inventory, splits)
    results = []
    for point in chosen:
        key = point.capsule + "|" + point.test_id
        checks = {"CKPT": checkpoint_answer(point, inventory), "SPLIT": splits[key],
                  "INPUTS": inputs_answer(point, evidence, inventory),
                  "VISUALS": visuals_answer(point, evidence, inventory), "UNIFORM": uniform[key]}
        results.append(PointResult(point, point_state(checks.values()), checks))
    selections = {path: ids for path, ids in inventory.selections.items()}
    pulls = pull_list(chosen, artifacts(chosen, evidence, selections), inventory)
    boxes = tuple(inventory.boxes[run] for run in sorted(inventory.boxes))
    return CompletenessReport(grid, tuple(results), pulls, boxes)


def point_state(answers: Iterable[Answer]) -> str:
    """complete (all ok or n/a), pull (only remote-only gaps), unknown (a box did not answer), or incomplete."""
    rank = max((RANK[a.state] for a in answers), default=0)
    return {0: "complete", 1: "pull", 2: "unknown"}.get(rank, "incomplete")


def pull_list(points: Sequence[GridPoint], needed: Sequence[Artifact], inventory: Inventory) -> tuple[PullItem, ...]:
    """Every needed file that is only on a box, once, with the points whose capsule holds it."""
    items = []
    for artifact in needed:
        if locate(artifact, inventory).state != REMOTE_ONLY or artifact.run_id is None or artifact.remote is None:
            continue
        box = inventory.boxes[artifact.run_id]
        cell = artifact.remote.split("/", 1)[0]
        labels = tuple(p.label for p in points if p.run_id == artifact.run_id and p.cell == cell)
        found = box.files[artifact.remote]
        items.append(PullItem(artifact.local, artifact.run_id, f"{box.remote_root}/{artifact.remote}", found.bytes,
                              found.sha256, labels))
    return tuple(sorted(items, key=lambda item: item.path))
