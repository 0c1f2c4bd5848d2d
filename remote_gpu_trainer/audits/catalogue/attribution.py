"""Which runs a VERIFY finding is about: one rule for every subject kind (docs/verify.md §3.1).

A finding belongs to the runs whose numbers it affects. `rgt audit RUN`, the report's block for a run, that
run's checklist in the TUI and `--strict` all ask `runs_of`, so a leak in the split a run trained on is that
run's finding wherever it is shown, and a sibling run's planted bug is never another run's.

- `capsule:RUN/CELL`, `number:RUN/TEST/METRIC`, `run:RUN`: that run; `pair:A~B`: both sides' runs.
- `split:ID`: every run whose capsules trained on that split manifest (run.json's `split_manifest_sha256`, or its
  file name when no manifest here has those bytes), every declared run with no capsule here yet, and every run
  with a capsule that names no manifest that is here: what those trained on is unknown, and unknown is never
  "not affected".
- `claim:ID` (and `claim:ID#N`): the runs of the claim's evidence cells; a claim whose cells name no run
  affects every run.
- `file:runs/RUN/...`: that run; `file:` of a split manifest: as that split; any other file: every run.
- `doc:`, `project` and a kind this table does not know: every run (`EVERY_RUN`).

Also here: which declared runs have no data yet (`waiting`), so a check with nothing to judge says "not run:
not pulled yet" instead of reading the absence as a result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from remote_gpu_trainer.audits.catalogue.model import Number, ProjectEvidence

EVERY_RUN = "*"


@dataclass(frozen=True)
class RunContext:
    """What placing a subject needs from the evidence, gathered once per audit."""

    runs: tuple[str, ...] = ()  # every run the project declares or has capsules of
    waiting: Mapping[str, str] = field(default_factory=dict)  # declared run -> why it has no data yet
    split_users: Mapping[str, frozenset[str]] = field(default_factory=dict)  # split set id -> runs that used it
    split_files: Mapping[str, str] = field(default_factory=dict)  # project-relative manifest path -> split set id
    claim_runs: Mapping[str, frozenset[str]] = field(default_factory=dict)  # claim id -> runs of its cells


def context(project: ProjectEvidence) -> RunContext:
    with_capsules = {c.run_id for c in project.capsules}
    runs = tuple(sorted(set(project.declared_runs) | with_capsules))
    waiting = {run: f"{run} not pulled yet (rgt pull {run}, then rgt verify {run})"
               for run in project.declared_runs if run not in with_capsules}  # the reason, in words
    users: dict[str, set[str]] = {m.split_set_id: set() for m in project.splits}
    unknown = {run for run in project.declared_runs if run not in with_capsules}
    for capsule in project.capsules:
        used = _manifests_used(capsule.prov("data", "split_manifest_sha256"), capsule.prov("data", "split_manifest"),
                               project)
        if used is None:
            unknown.add(capsule.run_id)  # its run.json does not say what it trained on: any split may be it
        for split_set_id in used or ():
            users[split_set_id].add(capsule.run_id)
    claims: dict[str, set[str]] = {}
    for number in project.numbers:
        if number.claim is not None:
            claims.setdefault(number.claim, set()).update(cell.split("/")[0] for cell in number.cells)
    return RunContext(runs=runs, waiting=waiting,
                      split_users={k: frozenset(v | unknown) for k, v in users.items()},
                      split_files={m.path: m.split_set_id for m in project.splits},
                      claim_runs={k: frozenset(v) for k, v in claims.items()})


def _manifests_used(sha: object, name: object, project: ProjectEvidence) -> set[str] | None:
    """The split sets a capsule trained on: the manifest with the sha256 its run.json records (the bytes are the
    truth), else the ones with the file name it records (a manifest rebuilt since has other bytes, and the same
    members as far as anyone can tell here); None when it records neither, or names nothing that is here."""
    if isinstance(sha, str) and sha:
        exact = {m.split_set_id for m in project.splits
                 if m.sha256.removeprefix("sha256:") == sha.removeprefix("sha256:")}
        if exact:
            return exact
    if isinstance(name, str) and name:
        named = {m.split_set_id for m in project.splits if PurePosixPath(m.path).name == PurePosixPath(name).name}
        if named:
            return named
    return None


Placer = Callable[[str, RunContext], frozenset[str]]


def _first_segment(rest: str, ctx: RunContext) -> frozenset[str]:
    return frozenset({rest.split("/")[0]})


def _pair(rest: str, ctx: RunContext) -> frozenset[str]:
    return frozenset(side.split("/")[0] for side in rest.split("~"))


def _split(rest: str, ctx: RunContext) -> frozenset[str]:
    users = ctx.split_users.get(rest)
    return users if users is not None else frozenset({EVERY_RUN})  # a split the loader never saw: unknown


def _claim(rest: str, ctx: RunContext) -> frozenset[str]:
    runs = ctx.claim_runs.get(rest.split("#")[0])
    return runs if runs else frozenset({EVERY_RUN})


def _file(rest: str, ctx: RunContext) -> frozenset[str]:
    parts = PurePosixPath(rest).parts
    if len(parts) >= 3 and parts[0] == "runs":
        return frozenset({parts[1]})
    if rest in ctx.split_files:
        return _split(ctx.split_files[rest], ctx)
    return frozenset({EVERY_RUN})


def _everywhere(rest: str, ctx: RunContext) -> frozenset[str]:
    return frozenset({EVERY_RUN})


PLACERS: dict[str, Placer] = {
    "capsule": _first_segment, "number": _first_segment, "run": _first_segment, "pair": _pair,
    "split": _split, "claim": _claim, "file": _file, "doc": _everywhere, "project": _everywhere,
}


def runs_of(subject: str, ctx: RunContext) -> frozenset[str]:
    """The runs `subject` is attributed to (`EVERY_RUN` among them when it is project-wide). Never empty for a
    kind this table does not know; empty only for a split no run trained on, which affects no run's numbers."""
    kind, _, rest = subject.partition(":")
    placer = PLACERS.get(kind)
    return placer(rest, ctx) if placer is not None else frozenset({EVERY_RUN})


def applies_to(runs: frozenset[str] | tuple[str, ...], run_id: str) -> bool:
    return EVERY_RUN in runs or run_id in runs


def without_waiting(project: ProjectEvidence, ctx: RunContext) -> tuple[ProjectEvidence, int]:
    """The evidence with the cells of runs that have no data yet taken out of every number (a number left
    with no cell is dropped): a claim over an unpulled run is "not run yet", never "no seed is finite".
    Returns how many numbers lost cells."""
    if not ctx.waiting:
        return project, 0
    kept: list[Number] = []
    touched = 0
    for number in project.numbers:
        cells = tuple(c for c in number.cells if c.split("/")[0] not in ctx.waiting)
        if len(cells) != len(number.cells):
            touched += 1
        if cells:
            kept.append(number if len(cells) == len(number.cells) else replace(number, cells=cells))
    return replace(project, numbers=tuple(kept)), touched


def run_status(status: str, note: str, judged: frozenset[str] | tuple[str, ...], fired: int, run_id: str,
               waiting: Mapping[str, str]) -> tuple[str, str]:
    """A check's answer for one run, from its answer for the project: `findings` when it found something about
    the run; `pass` when it judged a subject of the run (or a project-wide one) and found nothing there;
    `not_run` while the run has no data yet and nothing of it was judged; `skipped` when it judged only other
    runs' subjects. A project-level skip or not-run stays what it is."""
    if status in ("pass", "findings"):
        if fired:
            return "findings", note
        if run_id in judged:
            return "pass", note
        if run_id in waiting:
            return "not_run", f"not run: {waiting[run_id]}"
        if EVERY_RUN in judged:
            return "pass", note
        return "skipped", f"judged nothing of {run_id}" + (f" ({note})" if note else "")
    if run_id in waiting and status in ("skipped", "not_run"):
        return "not_run", f"not run: {waiting[run_id]}"
    return status, note


def project_not_run(status: str, note: str, project: ProjectEvidence, ctx: RunContext, lost: int) -> tuple[str, str]:
    """A check that skipped for want of data the waiting runs will bring (no run has capsules here yet, or a
    number lost its cells to them) did not run: it says which runs it waits for instead of a skip reason that
    reads as a property of the project."""
    if status != "skipped" or not ctx.waiting or (project.capsules and not lost):
        return status, note
    runs = sorted(ctx.waiting)
    waits = ctx.waiting[runs[0]] if len(runs) == 1 else \
        f"{', '.join(runs)} not pulled yet (rgt pull RUN, then rgt verify RUN)"
    return "not_run", f"not run: {waits}" + (f" · {note}" if note else "")
