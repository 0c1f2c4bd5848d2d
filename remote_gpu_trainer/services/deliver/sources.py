"""Whether each evidence file DELIVER reads is evidence rgt checked (docs/deliver.md §1, §2): a number built
from a file that no pull brought, or from a run that is not pull-verified, is disclosed as such, never shown
beside verified numbers as if it were one of them (issue 26 item 7: a hand-written metrics.json went into a
table next to verified rows with nothing said).

A source file `runs/<run>/<path>` with the sha256 of the bytes a build read is

- **not pulled by rgt** when no pull of rgt brought those bytes: no manifest of the run recorded in the state
  database (a folder written by hand, a run never launched), `runs/<run>/PULL_MANIFEST.json` absent or not the
  manifest recorded, the path not listed in it, or listed with another sha256 (changed since the pull). A claim
  built on it stays `planned` (deliver/ladder.py);
- **pulled, not verified** when the run is not pull-verified by the teardown gate's evidence conditions
  (`unverified_run`, the ladder's own rule for `pull_verified`);
- verified otherwise.

The report and the Deliver panel load this module (services/deliver/build.py), so the gate's machinery is imported
only when a run is judged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME
from remote_gpu_trainer.fsutil import read_regular
from remote_gpu_trainer.strict_json import loads_strict

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import ProjectConfig
    from remote_gpu_trainer.state.db import StateDB


@dataclass(frozen=True)
class Unchecked:
    """A source file that is not verified evidence, and why."""

    path: str
    run: str
    pulled: bool  # False: these bytes are not what a pull of rgt brought; True: they are, the run is not verified
    why: str

    @property
    def kind(self) -> str:
        return "pulled, not verified" if self.pulled else "not pulled by rgt"


@dataclass
class SourceJudge:
    """Judges the source files of one build; each run's manifest and verification are looked up once, because
    a table or a set of claims names the same run in many files."""

    project: ProjectConfig
    db: StateDB
    _manifests: dict[str, tuple[Mapping[str, str] | None, str]] = field(default_factory=dict, init=False, repr=False)
    _verified: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)

    def judge(self, path: str, sha256: Any) -> Unchecked | None:
        """None when `path` with these bytes is verified evidence; else what it is not."""
        parts = path.split("/", 2)
        if len(parts) < 3 or parts[0] != "runs" or not parts[1] or not parts[2]:
            return Unchecked(path, "", False, "not a file of a run (runs/<run>/)")
        run, rest = parts[1], parts[2]
        why = self._not_pulled(run, rest, sha256)
        if why is not None:
            return Unchecked(path, run, False, why)
        why = self.not_verified(run)
        return None if why is None else Unchecked(path, run, True, why)

    def judge_all(self, sources: Iterable[tuple[str, Any]]) -> list[Unchecked]:
        return [found for path, sha in sources if (found := self.judge(path, sha)) is not None]

    def _not_pulled(self, run: str, rest: str, sha256: Any) -> str | None:
        """Why `runs/<run>/<rest>` with this sha256 is not a file the run's recorded pull brought."""
        if run not in self._manifests:
            self._manifests[run] = self._pulled_files(run)
        listed, why = self._manifests[run]
        if listed is None:
            return why
        if rest not in listed:
            return f"not in run {run}'s pull manifest"
        if listed[rest] != sha256:
            return f"changed since run {run} was pulled (sha256 differs from its manifest)"
        return None

    def not_verified(self, run: str) -> str | None:
        """Why the run is not pull-verified (`unverified_run`), asked once per run and build."""
        if run not in self._verified:
            self._verified[run] = unverified_run(self.project, self.db, run)
        return self._verified[run]

    def _pulled_files(self, run: str) -> tuple[Mapping[str, str] | None, str]:
        """path -> sha256 of every file the run's recorded pull brought, or None and why there is none. The
        manifest is trusted only as the bytes whose sha256 the state database recorded when rgt checked it."""
        recorded = self.db.recorded_manifest(run)
        if recorded is None:
            return None, f"no pull of run {run} is recorded"
        try:
            data = read_regular(self.project.root / "runs" / run / MANIFEST_NAME)
        except OSError as exc:  # unreadable (mode 000): judged, never a crash of the whole build
            return None, f"runs/{run}/{MANIFEST_NAME} cannot be read ({exc.strerror})"
        if data is None:
            return None, f"run {run} has no {MANIFEST_NAME}: rgt pull {run}"
        if hashlib.sha256(data).hexdigest() != recorded:
            return None, f"runs/{run}/{MANIFEST_NAME} is not the manifest rgt recorded for the run"
        try:
            body = loads_strict(data)
        except (ValueError, UnicodeDecodeError):
            return None, f"runs/{run}/{MANIFEST_NAME} does not parse"
        files = body.get("files") if isinstance(body, dict) else None
        return {entry["path"]: entry["sha256"] for entry in files if isinstance(entry, dict)
                and isinstance(entry.get("path"), str) and isinstance(entry.get("sha256"), str)} \
            if isinstance(files, list) else {}, ""


def unverified_run(project: ProjectConfig, db: StateDB, run_id: str) -> str | None:
    """Why the run is not pull-verified, by the teardown gate's evidence conditions (G1–G5 and the binding of
    PULL_VERIFIED.json to the last recorded verification), so the ladder and the gate never disagree about a
    verification; None when it is."""
    from remote_gpu_trainer.audits.gate import evaluate_evidence_only
    from remote_gpu_trainer.run_records import run_config_from_record
    from remote_gpu_trainer.services.bindings import bound_run_config
    from remote_gpu_trainer.services.gate import gather_gate_inputs

    run = bound_run_config(project, db, run_id) if run_id in project.runs else None  # as the gate judges it
    if run is None:
        record = db.last_verification_record(run_id)
        run = run_config_from_record(record.config) if record is not None else None
        if run is None:
            return "not in rgt.toml and never verified"
    decision = evaluate_evidence_only(gather_gate_inputs(project, run, db, "", None))
    return None if decision.open else decision.reasons[0]


def grouped(found: Iterable[Unchecked], *, kind: bool = True) -> list[str]:
    """Each reason once, after the files it holds for (three seeds of one hand-written run are one reason, not
    three): `runs/r1/s0/test/t/metrics.json, runs/r1/s1/test/t/metrics.json (not pulled by rgt: no pull of run
    r1 is recorded)`; without `kind`, only the reason in the parenthesis."""
    paths: dict[tuple[str, str], dict[str, None]] = {}
    for u in found:
        paths.setdefault((u.kind, u.why), {})[u.path] = None
    return [f"{', '.join(files)} ({f'{said}: ' if kind else ''}{why})" for (said, why), files in paths.items()]


def words(found: Iterable[Unchecked]) -> str:
    """The disclosure naming each file: `unverified evidence: runs/fake/s0/test/main/metrics.json (not pulled by
    rgt: no pull of run fake is recorded)`."""
    return "unverified evidence: " + "; ".join(grouped(found))


def disclosed(document: Mapping[str, Any], judge: SourceJudge) -> tuple[dict[str, Any], list[Unchecked]]:
    """A built figure.json / table.json with every input that is not verified evidence disclosed in its
    `disclosure` after the builder's own, and those inputs. The builders in deliver/ read files only and cannot
    ask the state database, so the judgement is handed to them (`amend_with`) and added to the document before
    they write it, once."""
    inputs = document.get("inputs")
    entries = [(str(e.get("path")), e.get("sha256")) for e in inputs if isinstance(e, dict)] \
        if isinstance(inputs, list) else []
    found = judge.judge_all(entries)
    if not found:
        return dict(document), []
    own = document.get("disclosure")
    said = " ".join(filter(None, (own if isinstance(own, str) else None, words(found) + ".")))
    return {**document, "disclosure": said}, found


def amend_with(judge: SourceJudge, found: list[Unchecked]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A builder's `amend`: the document disclosed (`disclosed`), each input it names appended to `found`."""
    def amend(document: dict[str, Any]) -> dict[str, Any]:
        updated, unchecked = disclosed(document, judge)
        found.extend(unchecked)
        return updated

    return amend
