"""PULL_MANIFEST.json and PULL_VERIFIED.json: strict, pure parsing (docs/gate.md §2 and §6).

Pure: these functions take bytes and return values and problems; they open no file and write no state.
Every rule is applied and every problem collected, because a user repairing a manifest wants the whole list.
A manifest is refused on anything unexpected (unknown keys, a bool where an int belongs, a path that could
leave the local root): this file is what lets `rgt` enable an irreversible action.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

from remote_gpu_trainer.config.project import SAFE_NAME
from remote_gpu_trainer.remote.build_manifest import CONTROL, name_problem
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.toml_table import key_problems

MANIFEST_SCHEMA = "remote-gpu-trainer/PULL/v1"
MARKER_SCHEMA = "remote-gpu-trainer/VERIFIED/v1"
UPSTREAM_MARKER_SCHEMA = "remote-gpu-trainer/PULL-VERIFIED/v1"
MANIFEST_NAME = "PULL_MANIFEST.json"
MARKER_NAME = "PULL_VERIFIED.json"
CHECKPOINT_FORMATS = ("torch-zip", "torch-legacy", "safetensors")

_MANIFEST_KEYS = {"schema", "run_id", "created_at_utc", "top_level_dirs", "files", "totals"}
# written only when the result root holds links, and only when some cell did not finish (docs/gate.md §2)
_OPTIONAL_MANIFEST_KEYS = {"links", "cells"}
CELL_STATES = ("failed", "never_started")
_FILE_KEYS = {"path", "bytes", "sha256"}
_LINK_KEYS = {"path", "target", "inside"}
_TOTALS_KEYS = {"files", "bytes"}
_MARKER_KEYS = {
    "schema", "run_id", "manifest_sha256", "verified_at_utc", "verifier_version", "files", "bytes",
    "checkpoints",
}
_CHECKPOINT_KEYS = {"path", "sha256", "format", "tensors", "elements", "state_key"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CONTROL = CONTROL
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Problem:
    """One structured finding `{code, path, detail}`; codes are listed in docs/gate.md §5."""

    code: str
    path: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        """One line for a user: what and where."""
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.detail} ({self.code})"


@dataclass(frozen=True)
class ManifestFile:
    """One file PULL_MANIFEST.json lists: its path under the result root, its size and its sha256, which the pulled
    bytes must match."""

    path: str
    bytes: int
    sha256: str

    @property
    def cell(self) -> str:
        return self.path.split("/", 1)[0]


@dataclass(frozen=True)
class ManifestLink:
    """A link inside a cell, recorded as itself (never followed, never copied): its target as the box reads it
    and `inside`, where the box resolved it to relative to the result root, or None when it leads out."""

    path: str
    target: str
    inside: str | None

    @property
    def cell(self) -> str:
        return self.path.split("/", 1)[0]


@dataclass(frozen=True)
class CellOutcome:
    """A cell that did not finish, as the box's job wrapper recorded it: `failed` with its non-zero exit code,
    or `never_started` (the run ended before the wrapper reached it). Its files are listed as they are; its
    required files are not demanded, and VERIFY leaves it out of seeds and means, saying so."""

    cell: str
    state: str
    exit_code: int | None = None

    def words(self) -> str:
        return f"failed (exit {self.exit_code})" if self.state == "failed" else "never started"


@dataclass(frozen=True)
class Adoption:
    """A manifest this project adopted instead of building it (docs/gate.md §2.1): one that the public
    remote-gpu-trainer skill's `scripts/build_pull_manifest.py` wrote on the box. `sha256` is the identity of
    its exact bytes, as recorded when rgt read them from the box and checked them against the box's tree;
    `run_id` is the run id those bytes name (the skill takes any text). The skill's differences from rgt's
    own builder are accepted only for these bytes."""

    sha256: str
    run_id: str


@dataclass(frozen=True)
class Manifest:
    """PULL_MANIFEST.json as parsed and checked: its files, links and unfinished cells, and the sha256 of its exact
    bytes, which identifies it."""

    run_id: str  # rgt's run id; for an adopted manifest, the run it was adopted for
    created_at_utc: str
    files: tuple[ManifestFile, ...]  # sorted by path as a string, whatever order the bytes list them in
    top_level_dirs: tuple[str, ...]
    sha256: str  # of the exact bytes: the manifest's identity
    links: tuple[ManifestLink, ...] = ()
    cells: tuple[CellOutcome, ...] = ()  # the cells that did not finish, by cell
    adopted_run_id: str | None = None  # the run id an adopted manifest's bytes name (§2.1); None for rgt's own

    def finished(self, roster: Sequence[str]) -> list[str]:
        """The roster's cells that finished: the ones whose required files are demanded."""
        unfinished = {outcome.cell for outcome in self.cells}
        return [cell for cell in roster if cell not in unfinished]

    @property
    def links_out(self) -> tuple[ManifestLink, ...]:
        """The links whose target is outside the result root: not results, and destroyed with the box."""
        return tuple(link for link in self.links if link.inside is None)

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.files)

    def by_path(self) -> dict[str, ManifestFile]:
        return {entry.path: entry for entry in self.files}


@dataclass(frozen=True)
class MarkerCheckpoint:
    """One checkpoint a verification load-checked, as PULL_VERIFIED.json records it: its hash, format, counts and
    state key."""

    path: str
    sha256: str
    format: str
    tensors: int
    elements: int
    state_key: str


@dataclass(frozen=True)
class Marker:
    """PULL_VERIFIED.json as parsed: which manifest was verified, when and by which rgt, and the checkpoints it
    load-checked. The gate takes it as evidence only with the verification record behind it."""

    run_id: str
    manifest_sha256: str
    verified_at: datetime
    verifier_version: str
    files: int
    bytes: int
    checkpoints: tuple[MarkerCheckpoint, ...]


def canonical_json(obj: Any) -> bytes:
    """The serialization of §2, shared by the builder, the marker and the tests."""
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer; Python's bool is an int, and `true` is never a byte count."""
    return isinstance(value, int) and not isinstance(value, bool)


def path_problems(path: Any) -> list[str]:
    """Why `path` is not a relative POSIX path of >= 2 components that stays inside the local root (empty when
    it is). Each component obeys the builder's own rule (remote/build_manifest.name_problem: the names tools
    write, `=`, spaces, leading dots and non-ASCII included, are fine); the first, the cell, is an rgt id."""
    if not isinstance(path, str):
        return ["path must be a string"]
    reasons: list[str] = []
    if not path:
        return ["path is empty"]
    if path.startswith(("/", "\\")):
        reasons.append("absolute path")
    if _CONTROL.search(path):
        reasons.append("control character in path")
    parts = path.split("/")
    if any(part == ".." for part in parts):
        reasons.append("'..' component")
    if any(part == "." for part in parts):
        reasons.append("'.' component")
    if any(part == "" for part in parts) and not path.startswith("/"):
        reasons.append("empty component")
    if len(parts) < 2:
        reasons.append("fewer than 2 components (files live inside a cell folder)")
    if not reasons:
        unfit = [why for part in parts if (why := name_problem(part)) is not None]
        if unfit:
            reasons.append(unfit[0])
        elif not SAFE_NAME.match(parts[0]):
            reasons.append(f"cell {escape_control(parts[0])!r} is not a safe name")
    return reasons


def parse_iso_utc(text: Any) -> datetime | None:
    """An ISO-8601 timestamp that says `+00:00` explicitly, or None."""
    if not isinstance(text, str) or not text.endswith("+00:00"):
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    offset = moment.utcoffset()
    if offset is None or offset.total_seconds() != 0:
        return None
    return moment.astimezone(UTC)


def _load_object(data: bytes, name: str) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys, an object at the top."""
    try:
        obj = loads_strict(data)
    except UnicodeDecodeError:
        return None, [Problem("schema", name, "not UTF-8")]
    except ValueError as exc:
        return None, [Problem("schema", name, f"not valid JSON: {exc}")]
    if not isinstance(obj, dict):
        return None, [Problem("schema", name, "top level is not a JSON object")]
    return obj, []


def _key_problems(obj: dict[str, Any], allowed: set[str], where: str) -> list[Problem]:
    """Exactly `allowed`: each stray or missing key is a schema problem at `where` (toml_table.key_problems)."""
    return [Problem("schema", where, detail) for detail in key_problems(obj, allowed, required=allowed)]


def parse_manifest(data: bytes, *, roster: Sequence[str], run_id: str,
                   adopted: Adoption | None = None) -> tuple[Manifest | None, list[Problem]]:
    """Apply every §2 rule, plus `top_level_dirs == roster` and `run_id` equal to the run record's.

    The Manifest comes back whenever every file entry is well formed (safe path, int bytes, hex hash,
    unique), even if run id, roster or totals are wrong, so verification can still report per-file
    status; the manifest is acceptable only when the problem list is empty.

    `adopted` is the adoption this project recorded for the run (§2.1). When these bytes are the adopted
    ones (same sha256), the adoption step applies the skill's two differences, and nothing else changes:
    `run_id` is the adopted text (any text without control characters) instead of rgt's run id, and the files
    may be listed in the skill's order (by path parts). The Manifest comes back normalised to rgt's model:
    rgt's run id, files sorted by path, `adopted_run_id` naming what the bytes say.
    """
    obj, problems = _load_object(data, MANIFEST_NAME)
    if obj is None:
        return None, problems
    adopting = adopted is not None and adopted.sha256 == sha256_bytes(data)
    problems += _key_problems({k: v for k, v in obj.items() if k not in _OPTIONAL_MANIFEST_KEYS}, _MANIFEST_KEYS,
                              MANIFEST_NAME)
    if obj.get("schema") != MANIFEST_SCHEMA:
        problems.append(Problem("schema", MANIFEST_NAME, f"schema must be {MANIFEST_SCHEMA!r}"))
    manifest_run_id = obj.get("run_id")
    if adopting:
        assert adopted is not None
        problems += _adoption_problems(obj, adopted)
        manifest_run_id = run_id
    elif not isinstance(manifest_run_id, str) or not manifest_run_id.strip() \
            or not SAFE_NAME.match(manifest_run_id):
        problems.append(Problem("run_id", MANIFEST_NAME, "run_id must be a safe name"))
        manifest_run_id = ""
    elif manifest_run_id != run_id:
        problems.append(Problem("run_id", MANIFEST_NAME,
                                f"manifest is for run {manifest_run_id!r}, not {run_id!r}"))
    created = obj.get("created_at_utc")
    if parse_iso_utc(created) is None:
        problems.append(Problem("schema", MANIFEST_NAME, "created_at_utc must be ISO-8601 UTC with +00:00"))
    files, file_problems, files_ok = _parse_files(obj.get("files"), skill_order=adopting)
    problems += file_problems
    links, link_problems = _parse_links(obj["links"], {entry.path for entry in files}) if "links" in obj else ([], [])
    problems += link_problems
    files_ok = files_ok and not link_problems
    outcomes, cell_problems = _parse_cells(obj["cells"], roster) if "cells" in obj else ([], [])
    problems += cell_problems
    tops, top_problems = _parse_top_level_dirs(obj.get("top_level_dirs"), files, roster,
                                               {outcome.cell for outcome in outcomes})
    problems += top_problems
    problems += _totals_problems(obj.get("totals"), files)
    if not files_ok:
        return None, problems
    manifest = Manifest(
        run_id=manifest_run_id, created_at_utc=created if isinstance(created, str) else "",
        files=tuple(sorted(files, key=lambda entry: entry.path)), top_level_dirs=tuple(tops),
        sha256=sha256_bytes(data), links=tuple(links), cells=tuple(outcomes),
        adopted_run_id=adopted.run_id if adopting and adopted is not None else None,
    )
    return manifest, problems


def adoptable(data: bytes, *, roster: Sequence[str], run_id: str) -> tuple[Adoption | None, list[Problem]]:
    """The adoption step's verdict on manifest bytes read from the box (docs/gate.md §2.1): the Adoption to
    record when they pass every §2 rule as the skill writes them (its run id, its order), else the problems.
    The same parser decides, so adopting relaxes nothing else."""
    obj, problems = _load_object(data, MANIFEST_NAME)
    if obj is None:
        return None, problems
    named = obj.get("run_id")
    candidate = Adoption(sha256=sha256_bytes(data), run_id=named if isinstance(named, str) else "")
    manifest, problems = parse_manifest(data, roster=roster, run_id=run_id, adopted=candidate)
    if manifest is None or problems:
        return None, problems or [Problem("schema", MANIFEST_NAME, "unreadable")]
    return candidate, []


def _adoption_problems(obj: dict[str, Any], adopted: Adoption) -> list[Problem]:
    """What the adoption step demands of the adopted bytes: the skill's form (the v1 keys only: it writes
    neither links nor cells, and refuses links) and a run id that is printable text, the one recorded."""
    problems = [Problem("schema", MANIFEST_NAME, f"an adopted manifest holds the v1 keys only, not {key!r}")
                for key in sorted(_OPTIONAL_MANIFEST_KEYS & set(obj))]
    named = obj.get("run_id")
    if not isinstance(named, str) or not named.strip():
        problems.append(Problem("run_id", MANIFEST_NAME, "run_id must be non-empty text"))
    elif _CONTROL.search(named) or _SURROGATE.search(named):
        problems.append(Problem("run_id", MANIFEST_NAME,
                                f"run_id {escape_control(named)!r} holds a control character"))
    elif named != adopted.run_id:
        problems.append(Problem("run_id", MANIFEST_NAME, f"run_id {escape_control(named)!r} is not the adopted "
                                                         f"{escape_control(adopted.run_id)!r}"))
    return problems


def _parse_cells(raw: Any, roster: Sequence[str]) -> tuple[list[CellOutcome], list[Problem]]:
    """`cells`: a non-empty object of roster cell -> `{state: failed, exit_code: <non-zero int>}` or
    `{state: never_started, exit_code: null}`, keys sorted as written by the builder."""
    if not isinstance(raw, dict) or not raw:
        return [], [Problem("schema", MANIFEST_NAME, "cells must be a non-empty object when present")]
    outcomes: list[CellOutcome] = []
    problems: list[Problem] = []
    for cell, entry in raw.items():
        where = f"cells.{escape_control(str(cell))}"
        if cell not in roster:
            problems.append(Problem("schema", where, "is not a roster cell"))
            continue
        if not isinstance(entry, dict) or set(entry) != {"state", "exit_code"}:
            problems.append(Problem("schema", where, "must be {state, exit_code}"))
            continue
        state, code = entry["state"], entry["exit_code"]
        failed = state == "failed" and is_int(code) and code != 0
        if not (failed or (state == "never_started" and code is None)):
            problems.append(Problem("schema", where, "state must be failed with a non-zero exit_code, or "
                                                     "never_started with a null exit_code"))
            continue
        outcomes.append(CellOutcome(cell, state, code if failed else None))
    return sorted(outcomes, key=lambda outcome: outcome.cell), problems


def _parse_links(raw: Any, file_paths: set[str]) -> tuple[list[ManifestLink], list[Problem]]:
    """`links`: a non-empty list sorted by path, each `{path, target, inside}`; a path obeys the files' rule and
    is neither a file's path nor listed twice; the target is text without control characters; `inside` is null
    or a relative path inside the root. The box says where a link leads: that only decides what the teardown
    plan names, since a link is never followed or re-created here."""
    if not isinstance(raw, list) or not raw:
        return [], [Problem("schema", MANIFEST_NAME, "links must be a non-empty list when present")]
    problems: list[Problem] = []
    links: list[ManifestLink] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        where = f"links[{index}]"
        if not isinstance(entry, dict):
            problems.append(Problem("schema", where, "link entry must be an object"))
            continue
        found = _key_problems(entry, _LINK_KEYS, where)
        path, target, inside = entry.get("path"), entry.get("target"), entry.get("inside")
        label = escape_control(path) if isinstance(path, str) else where
        found += [Problem("path_unsafe", label, reason) for reason in path_problems(path)]
        if not isinstance(target, str) or not target or _CONTROL.search(target):
            found.append(Problem("link_unsafe", label, "target must be text without control characters"))
        if inside is not None and (not isinstance(inside, str) or _inside_problems(inside)):
            found.append(Problem("link_unsafe", label, "inside must be null or a relative path inside the root"))
        if isinstance(path, str) and (path in file_paths or path in seen):
            found.append(Problem("duplicate_path", label, "path listed twice (as a file or a link)"))
        if found or not isinstance(path, str) or not isinstance(target, str):
            problems += found
            continue
        seen.add(path)
        links.append(ManifestLink(path=path, target=target, inside=inside if isinstance(inside, str) else None))
    if [link.path for link in links] != sorted(link.path for link in links):
        problems.append(Problem("schema", MANIFEST_NAME, "links must be sorted by path"))
    return links, problems


def _inside_problems(inside: str) -> list[str]:
    """A root-relative path: at least one part, each one a name the manifest accepts (a cell is one too)."""
    if inside.startswith("/"):
        return ["absolute"]
    return [why for part in inside.split("/") if (why := name_problem(part)) is not None]


def _parse_files(raw: Any, *, skill_order: bool = False) -> tuple[list[ManifestFile], list[Problem], bool]:
    """Entries, problems, and whether every entry was well formed. Sorted by path means as strings, or, with
    `skill_order` (an adopted manifest, §2.1), by path parts, as the skill's pathlib sort lists them
    (`cell/a/x` before `cell/a-b/y`, where a string sort puts `-` before `/`)."""
    if not isinstance(raw, list) or not raw:
        return [], [Problem("schema", MANIFEST_NAME, "files must be a non-empty list")], False
    problems: list[Problem] = []
    files: list[ManifestFile] = []
    seen: set[str] = set()
    ok = True
    for index, entry in enumerate(raw):
        parsed, entry_problems = _parse_file_entry(entry, f"files[{index}]")
        if parsed is not None and parsed.path in seen:
            entry_problems.append(Problem("duplicate_path", parsed.path, "path listed twice"))
        if parsed is None or entry_problems:
            problems += entry_problems
            ok = False
            continue
        seen.add(parsed.path)
        files.append(parsed)
    paths = [entry.get("path") for entry in raw if isinstance(entry, dict)]
    if all(isinstance(p, str) for p in paths) and paths != sorted(str(p) for p in paths) and not (
            skill_order and paths == sorted((str(p) for p in paths), key=lambda p: p.split("/"))):
        problems.append(Problem("schema", MANIFEST_NAME, "files must be sorted by path"))
    return files, problems, ok


def _parse_file_entry(entry: Any, where: str) -> tuple[ManifestFile | None, list[Problem]]:
    """One `{path, bytes, sha256}`; problems name the path when it is printable, else the index."""
    if not isinstance(entry, dict):
        return None, [Problem("schema", where, "file entry must be an object")]
    problems = _key_problems(entry, _FILE_KEYS, where)
    path, size, digest = entry.get("path"), entry.get("bytes"), entry.get("sha256")
    if not isinstance(path, str):
        return None, problems + [Problem("schema", where, "path must be a string")]
    label = escape_control(path)  # a hostile box's control characters or lone surrogates never reach a terminal
    problems += [Problem("path_unsafe", label, reason) for reason in path_problems(path)]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        problems.append(Problem("schema", label, "bytes must be an integer >= 0 (not a boolean)"))
        size = -1
    if not isinstance(digest, str) or not _SHA256.match(digest):
        problems.append(Problem("schema", label, "sha256 must be 64 lowercase hex digits"))
        digest = ""
    if problems:
        return None, problems
    return ManifestFile(path=path, bytes=size, sha256=digest), []


def _parse_top_level_dirs(raw: Any, files: list[ManifestFile], roster: Sequence[str],
                          unfinished: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], list[Problem]]:
    """Every cell that holds files is a top-level dir; a failed or never-started cell may hold none."""
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        return [], [Problem("schema", MANIFEST_NAME, "top_level_dirs must be a list of strings")]
    problems: list[Problem] = []
    if raw != sorted(set(raw)):
        problems.append(Problem("schema", MANIFEST_NAME, "top_level_dirs must be sorted and unique"))
    firsts = {entry.cell for entry in files}
    if files and not firsts <= set(raw) or files and set(raw) - firsts - unfinished:
        problems.append(Problem("schema", MANIFEST_NAME,
                                "top_level_dirs differs from the first components of files[].path: "
                                + _difference(firsts, raw)))
    if set(raw) != set(roster):
        problems.append(Problem("roster_mismatch", MANIFEST_NAME,
                                "top_level_dirs differs from the run's roster: " + _difference(roster, raw)))
    return list(raw), problems


def _difference(expected: Iterable[str], actual: Iterable[str]) -> str:
    expected_set, actual_set = set(expected), set(actual)
    parts = []
    if expected_set - actual_set:
        parts.append("missing " + ", ".join(sorted(expected_set - actual_set)))
    if actual_set - expected_set:
        parts.append("unexpected " + ", ".join(sorted(actual_set - expected_set)))
    return "; ".join(parts) or "order differs"


def _totals_problems(raw: Any, files: list[ManifestFile]) -> list[Problem]:
    if not isinstance(raw, dict):
        return [Problem("schema", MANIFEST_NAME, "totals must be an object {files, bytes}")]
    problems = _key_problems(raw, _TOTALS_KEYS, "totals")
    count, size = raw.get("files"), raw.get("bytes")
    if not is_int(count) or not is_int(size):
        problems.append(Problem("schema", "totals", "totals.files and totals.bytes must be integers"))
        return problems
    if count != len(files):
        problems.append(Problem("totals_mismatch", "totals",
                                f"totals.files is {count}, files lists {len(files)}"))
    real = sum(entry.bytes for entry in files)
    if size != real:
        problems.append(Problem("totals_mismatch", "totals", f"totals.bytes is {size}, files sum to {real}"))
    return problems


# -- PULL_VERIFIED.json ------------------------------------------------------------------------------------

def marker_bytes(*, run_id: str, manifest_sha256: str, verified_at: datetime, verifier_version: str,
                 files: int, total_bytes: int, checkpoints: Sequence[MarkerCheckpoint]) -> bytes:
    """The §6 marker. `verified_at_utc` keeps microseconds so a file touched a moment later is later."""
    return canonical_json({
        "schema": MARKER_SCHEMA,
        "run_id": run_id,
        "manifest_sha256": manifest_sha256,
        "verified_at_utc": verified_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "verifier_version": verifier_version,
        "files": files,
        "bytes": total_bytes,
        "checkpoints": [asdict(item) for item in sorted(checkpoints, key=lambda item: item.path)],
    })


def parse_marker(data: bytes) -> tuple[Marker | None, list[str]]:
    """G1: the marker parses, its schema is exact, no unknown keys. Returns reasons when it does not."""
    obj, problems = _load_object(data, MARKER_NAME)
    if obj is None:
        return None, [f"{MARKER_NAME} is unreadable: {problems[0].detail}: run verify"]
    if obj.get("schema") == UPSTREAM_MARKER_SCHEMA:
        return None, [f"{MARKER_NAME} is an upstream-format marker, not evidence: run verify"]
    reasons = [problem.detail for problem in _key_problems(obj, _MARKER_KEYS, MARKER_NAME)]
    if obj.get("schema") != MARKER_SCHEMA:
        reasons.append(f"schema is not {MARKER_SCHEMA!r}")
    run_id, digest, version = obj.get("run_id"), obj.get("manifest_sha256"), obj.get("verifier_version")
    if not isinstance(run_id, str) or not SAFE_NAME.match(run_id):
        reasons.append("run_id must be a safe name")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        reasons.append("manifest_sha256 must be 64 lowercase hex digits")
    if not isinstance(version, str) or not version:
        reasons.append("verifier_version must be a non-empty string")
    verified_at = parse_iso_utc(obj.get("verified_at_utc"))
    if verified_at is None:
        reasons.append("verified_at_utc must be ISO-8601 UTC with +00:00")
    count, size = obj.get("files"), obj.get("bytes")
    if not is_int(count) or not is_int(size) or count < 0 or size < 0:
        reasons.append("files and bytes must be integers >= 0")
    checkpoints, checkpoint_reasons = _parse_marker_checkpoints(obj.get("checkpoints"))
    reasons += checkpoint_reasons
    if reasons:
        return None, [f"{MARKER_NAME} is malformed: {reason}: run verify" for reason in reasons]
    assert isinstance(run_id, str) and isinstance(digest, str) and isinstance(version, str)
    assert verified_at is not None and isinstance(count, int) and isinstance(size, int)
    return Marker(run_id=run_id, manifest_sha256=digest, verified_at=verified_at, verifier_version=version,
                  files=count, bytes=size, checkpoints=checkpoints), []


def _parse_marker_checkpoints(raw: Any) -> tuple[tuple[MarkerCheckpoint, ...], list[str]]:
    if not isinstance(raw, list):
        return (), ["checkpoints must be a list"]
    items: list[MarkerCheckpoint] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != _CHECKPOINT_KEYS:
            return (), [f"checkpoints[{index}] must have exactly the keys {sorted(_CHECKPOINT_KEYS)}"]
        path, digest, fmt, key = entry["path"], entry["sha256"], entry["format"], entry["state_key"]
        tensors, elements = entry["tensors"], entry["elements"]
        if (path_problems(path) or not isinstance(digest, str) or not _SHA256.match(digest)
                or fmt not in CHECKPOINT_FORMATS or not isinstance(key, str)
                or not is_int(tensors) or not is_int(elements)):
            return (), [f"checkpoints[{index}] has a malformed field"]
        items.append(MarkerCheckpoint(path, digest, fmt, tensors, elements, key))
    if [item.path for item in items] != sorted(item.path for item in items):
        return (), ["checkpoints must be sorted by path"]
    return tuple(items), []


def is_checkpoint(path: str, globs: Sequence[str]) -> bool:
    """Whether a manifest path is a checkpoint under the job's `checkpoint_globs` (name or whole path)."""
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(path, pattern) for pattern in globs)


def required_checkpoints(roster: Sequence[str], required: Sequence[str], globs: Sequence[str]) -> list[str]:
    """`<cell>/<file>` for every required file that is a checkpoint, in every roster cell."""
    return sorted(f"{cell}/{name}" for cell in roster for name in required if is_checkpoint(name, globs))
