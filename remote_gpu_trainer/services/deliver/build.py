"""DELIVER as the dashboard and `rgt build` see it (docs/deliver.md §9): the Deliver view built from the
project's files, and `build_all`, which builds everything in its one order.

The view reads only the file contracts of docs/deliver.md: EVIDENCE.json (claims, their ladder state and
disclosures as `rgt build evidence` wrote them), `figures/<id>/figure.json` and `tables/<id>/table.json` (their
QA and the sha256 of every input and output at the last build) and `reconcile.json` (the last drift). A
figure or table is *current* when every input and every output still hashes to what its JSON recorded;
anything else says which file changed and asks for a rebuild. Nothing here writes; a file that cannot be read
becomes one line in `problems`, never an exception, because the panel must draw whatever the project holds.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.deliver.inputs import read_input
from remote_gpu_trainer.deliver.outputs import linked_outputs, linked_refusal, output_ids
from remote_gpu_trainer.deliver.provenance import code_state
from remote_gpu_trainer.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ConfigError, RgtError
from remote_gpu_trainer.fsutil import file_kind, lstat_or_none
from remote_gpu_trainer.services.deliver.claim_views import (
    EVIDENCE_FILE,
    ProjectJson,
    claims_of,
    list_of,
    strings_of,
    text_of,
)
from remote_gpu_trainer.services.deliver.sources import SourceJudge, Unchecked, amend_with
from remote_gpu_trainer.services.evidence import store
from remote_gpu_trainer.views import BuildStep, ClaimView, DeliverRow, DeliverView, DriftView, OutputView

if TYPE_CHECKING:
    from remote_gpu_trainer.config.project import ProjectConfig
    from remote_gpu_trainer.services.deliver.claims import BuildOutcome as ClaimsOutcome
    from remote_gpu_trainer.state.db import StateDB

PASSING = ("pass", "disclosed")
RECONCILE_FILE = "reconcile.json"
HASH_CACHE_MAX = 20_000


def deliver_view(root: Path) -> DeliverView:
    """The Deliver panel's view of the project at `root`: claims, figures, tables and the last reconcile."""
    read = ProjectJson(root)
    claims = claims_of(read.json(EVIDENCE_FILE), read)
    figures = tuple(_outputs(read, "figure"))
    tables = tuple(_outputs(read, "table"))
    drifts, reconcile_line = _reconcile(read)
    rows = _rows(claims, figures, tables, drifts)
    current = sum(1 for output in (*figures, *tables) if output.status == "current")
    caption = f"{len(claims)} claim(s) · {len(figures)} figure(s) · {len(tables)} table(s) · {current} current"
    return DeliverView(claims, figures, tables, drifts, reconcile_line, tuple(read.problems), rows, caption)


# -- figures and tables -------------------------------------------------------------------------------------
def _outputs(read: ProjectJson, kind: str) -> Iterable[OutputView]:
    read.problems.extend(linked_refusal(kind, rel) for rel in linked_outputs(read.root, kind))
    read.problems.extend(line for _, line in odd_documents(read.root, kind))
    for ident in output_ids(read.root, kind):
        document = read.json(f"{kind}s/{ident}/{kind}.json")
        if isinstance(document, dict):
            yield output_view(read.root, kind, ident, document)
        elif document is not None:
            read.problems.append(f"{kind}s/{ident}/{kind}.json: not a JSON object")


def odd_documents(root: Path, kind: str) -> list[tuple[str, str]]:
    """`(id, line)` for every plain folder under figures/ (tables/) whose figure.json (table.json) is there but
    is no regular file (a FIFO, a socket, a device, a folder, a link to one of those), or whose name is no id
    (its regular file is then passed over too): output_ids passes over both,
    so without this line `rgt build` skipped it in silence and exited 0. Judged by lstat, never opened (opening a
    FIFO waits for a writer)."""
    top = root / f"{kind}s"
    info = lstat_or_none(top)
    if info is None or not stat.S_ISDIR(info.st_mode):
        return []
    listed = set(output_ids(root, kind))
    try:
        names = sorted(e.name for e in os.scandir(top) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    found = []
    for name in names:
        rel = f"{kind}s/{name}/{kind}.json"
        seen = lstat_or_none(root / rel)
        if seen is None or name in listed:
            continue
        if stat.S_ISREG(seen.st_mode):  # a regular file passed over because its folder's name is no id
            found.append((name, f"{kind}s/{name}: not a {kind} id (a letter or digit, then letters, digits, "
                                f"'.', '_' or '-'): its {kind}.json is not built"))
            continue
        found.append((name, f"{rel} is {file_kind(seen.st_mode)}, not a regular file: refused unread (a {kind} "
                            f"is built only from a regular {kind}.json)"))
    return found


def output_view(root: Path, kind: str, ident: str, document: Mapping[str, Any]) -> OutputView:
    """A figure or table folder's QA and currency from its JSON (docs/deliver.md §9)."""
    qa = document.get("qa") if isinstance(document.get("qa"), dict) else None
    outputs = document.get("outputs") if isinstance(document.get("outputs"), list) else None
    if qa is None or not outputs:
        return OutputView(kind, ident, built=False, qa_passed=False, failed_checks=(), stale=())
    checks = qa.get("checks") if isinstance(qa.get("checks"), dict) else {}
    failed = tuple(f"{name} {value}" for name, value in checks.items() if value not in PASSING)
    image = None
    if kind == "figure" and any(isinstance(o, dict) and o.get("path") == "final.png" for o in outputs):
        image = str(root / "figures" / ident / "final.png")
    return OutputView(kind, ident, built=True, qa_passed=qa.get("passed") is True and not failed,
                      failed_checks=failed, stale=tuple(stale_reasons(root, kind, ident, document)),
                      disclosure=text_of(document.get("disclosure")), image=image,
                      open_command=open_command(image) if image else "")


def stale_reasons(root: Path, kind: str, ident: str, document: Mapping[str, Any]) -> Iterable[str]:
    """Why the last build no longer stands: an input or an output (source.csv included) whose bytes differ
    from the sha256 recorded at the build, or that is gone. Empty when the build is current."""
    folder = f"{kind}s/{ident}"
    recorded: list[tuple[str, Any]] = []
    for entry in list_of(document.get("inputs")):
        if isinstance(entry, dict):
            recorded.append((text_of(entry.get("path")), entry.get("sha256")))
    source = document.get("source")
    if isinstance(source, dict):
        recorded.append((f"{folder}/{text_of(source.get('path'))}", source.get("sha256")))
    for entry in list_of(document.get("outputs")):
        if isinstance(entry, dict):
            recorded.append((f"{folder}/{text_of(entry.get('path'))}", entry.get("sha256")))
    for rel, sha in recorded:
        now = file_sha256(root, rel)
        if now is None:
            yield f"{rel or '(no path)'} is missing or not a plain file in the project"
        elif now != sha:
            yield f"{rel} changed since the build"


_HASHES: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(root: Path, rel: str) -> str | None:
    """The sha256 of a project file read through regular files only (deliver/inputs.read_input), or None.

    The panel checks every input and output on each refresh; a file whose inode, size and mtime are
    unchanged is not read again (a changed byte changes the mtime; a copy with a forged mtime is what V33's
    full re-hash is for)."""
    if not rel:
        return None
    try:
        info = os.lstat(root / rel)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    key = (str(root / rel), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    cached = _HASHES.get(key)
    if cached is not None:
        return cached
    try:
        found = read_input(root, rel, "deliver view")
    except ConfigError:
        return None
    if len(_HASHES) >= HASH_CACHE_MAX:
        _HASHES.clear()
    _HASHES[key] = found.sha256
    return found.sha256


def open_command(path: str, platform: str = sys.platform) -> str:
    """The command a user runs to open a figure outside the terminal."""
    opener = "open" if platform == "darwin" else "xdg-open"
    return f"{opener} {shlex.quote(path)}"


# -- reconcile ----------------------------------------------------------------------------------------------
def _reconcile(read: ProjectJson) -> tuple[tuple[DriftView, ...], str]:
    found = read.json(RECONCILE_FILE)
    if found is None:
        return (), "not reconciled yet: r reconciles the documents of rgt.toml [deliver] docs"
    if not isinstance(found, dict):
        read.problems.append(f"{RECONCILE_FILE}: not a JSON object")
        return (), "reconcile.json unreadable: r reconciles again"
    drifts = tuple(_drift(entry) for entry in list_of(found.get("drifts")) if isinstance(entry, dict))
    missing = list_of(found.get("missing_from_docs"))
    words = f"{len(drifts)} drift(s)" if drifts else "no drift"
    return drifts, f"reconciled: {words}, {len(missing)} claim(s) missing from the documents"


def _drift(entry: Mapping[str, Any]) -> DriftView:
    def whole(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def numbertext_of(text: Any, value: Any) -> str:
        if isinstance(text, str) and text:
            return text
        return repr(value) if isinstance(value, int | float) and not isinstance(value, bool) else "?"

    return DriftView(doc=text_of(entry.get("doc")), line=whole(entry.get("line")), col=whole(entry.get("col")),
                     claims=strings_of(entry.get("claim_ids")),
                     metric=text_of(entry.get("metric")),
                     reported=numbertext_of(entry.get("reported_text"), entry.get("reported")),
                     expected=numbertext_of(entry.get("expected"), entry.get("authoritative")),
                     context=text_of(entry.get("context")))


# -- the panel's rows ---------------------------------------------------------------------------------------
def _rows(claims: Iterable[ClaimView], figures: Iterable[OutputView], tables: Iterable[OutputView],
          drifts: Iterable[DriftView]) -> tuple[DeliverRow, ...]:
    rows = []
    for claim in claims:
        first = claim.numbers[0] if claim.numbers else "no evidence rows"
        more = f" (+{len(claim.numbers) - 1} more)" if len(claim.numbers) > 1 else ""
        describe = "\n".join((f"{claim.id}: {claim.statement}", *claim.numbers,
                              *([f"disclosure: {claim.disclosure}"] if claim.disclosure else [])))
        rows.append(DeliverRow(f"claim:{claim.id}", claim.state, f"claim {claim.id}", first + more, describe))
    for output in (*figures, *tables):
        rows.append(DeliverRow(f"{output.kind}:{output.id}", output.status, f"{output.kind} {output.id}",
                               output_detail(output), output_describe(output)))
    for index, drift in enumerate(drifts):
        detail = f"{drift.doc}:{drift.line} {drift.metric} {drift.reported} ≠ {drift.expected}"
        describe = (f"{drift.doc}:{drift.line}:{drift.col}: the document says {drift.reported}, the evidence "
                    f"{drift.expected} ({', '.join(drift.claims)}): {drift.context}")
        rows.append(DeliverRow(f"drift:{index}", "drift", "reconcile", detail, describe))
    return tuple(rows)


def output_detail(output: OutputView) -> str:
    """QA and currency in a few words: `QA passed · current`, `QA failed: G3_clipped fail · stale: rebuild`."""
    if not output.built:
        return "not built: b builds everything"
    qa = "QA passed" if output.qa_passed else "QA failed: " + (", ".join(output.failed_checks) or "not passed")
    return f"{qa} · {'stale: rebuild' if output.stale else 'current'}"


def output_describe(output: OutputView) -> str:
    lines = [f"{output.kind} {output.id}: {output_detail(output)}", *output.stale]
    if output.disclosure:
        lines.append(f"disclosure: {output.disclosure}")
    if output.image:
        lines.append(f"enter opens {output.image}")
    return "\n".join(lines)


# -- actions: reconcile and build everything ----------------------------------------------------------------
def reconcile_now(project: ProjectConfig) -> str:
    """`r` in the Deliver panel: `rgt reconcile` (services/deliver/reconcile.py) and its answer in one line."""
    from remote_gpu_trainer.services.deliver.reconcile import reconcile_project

    report = reconcile_project(project).report
    if not report.drifts:
        return f"reconcile: no drift in {len(report.documents)} document(s)"
    first = report.drifts[0]
    more = f" (+{len(report.drifts) - 1} more)" if len(report.drifts) > 1 else ""
    return (f"reconcile: {len(report.drifts)} drift(s): {first.doc}:{first.line} says {first.reported_text}, "
            f"the evidence {first.expected}{more}")


@dataclass(frozen=True)
class BuildOutcome:
    """Everything `rgt build` built, in order, and its exit code: 2 when an item was refused as bad input (the
    others are still built), else 1 when one was built with a failed QA or its builder failed, else 0."""

    steps: tuple[BuildStep, ...]

    @property
    def exit_code(self) -> int:
        if any(step.status == "bad_input" for step in self.steps):
            return EXIT_USAGE
        return EXIT_OK if all(step.status in ("passed", "skipped") for step in self.steps) else EXIT_FAILED

    @property
    def summary(self) -> str:
        counts = Counter(step.status for step in self.steps)
        words = [f"{counts[status]} {word}" for status, word in BUILD_WORDS if counts[status]]
        return "build: " + (", ".join(words) or "nothing to build")


BUILD_WORDS = (("passed", "passed"), ("qa_failed", "built with failed QA"), ("failed", "failed"),
               ("bad_input", "refused (bad input)"), ("skipped", "skipped"))


def build_all(project: ProjectConfig, db: StateDB, now: datetime,
              progress: Callable[[BuildStep | str], None] | None = None) -> BuildOutcome:
    """`rgt build` and `b`: every figure, then every table, then EVIDENCE.json, then the macros (evidence
    reads the figures' and tables' QA; the macros are the evidence's rows), each reported as it finishes.
    One item that fails never stops the others; nothing to build at all is bad input, and so is a symlink where
    a figure or table folder goes (its own line: skipping it in silence would exit 0 on a build not done)."""
    root = project.root
    figures, tables = output_ids(root, "figure"), output_ids(root, "table")
    linked = {kind: linked_outputs(root, kind) for kind in ("figure", "table")}
    odd = {kind: odd_documents(root, kind) for kind in ("figure", "table")}
    has_evidence = (root / EVIDENCE_FILE).exists() or (root / EVIDENCE_FILE).is_symlink()
    if not figures and not tables and not has_evidence and not any(linked.values()) and not any(odd.values()):
        raise ConfigError(f"rgt build: nothing to build in {root}: no figures/<id>/figure.json, "
                          f"tables/<id>/table.json or {EVIDENCE_FILE} (docs/deliver.md)")
    report = progress or (lambda step: None)
    code = code_state(root)  # one `git status` for every build
    steps: list[BuildStep] = []

    def add(step: BuildStep) -> BuildStep:
        steps.append(step)
        report(step)
        return step

    def run(kind: str, ident: str, build: Callable[[], BuildStep]) -> BuildStep:
        report(f"building {' '.join(filter(None, (kind, ident)))}…")
        return add(_attempt(kind, ident, build))

    watch = _StoreWatch(root, db)
    judge = SourceJudge(project, db)
    for ident in figures:
        run("figure", ident, partial(watch.guarded, "figure", ident,
                                     partial(_figure, project, ident, code, now, judge)))
    for rel in linked["figure"]:
        add(BuildStep("figure", rel.partition("/")[2], "bad_input", linked_refusal("figure", rel)))
    for ident, line in odd["figure"]:
        add(BuildStep("figure", ident, "bad_input", line))
    for ident in tables:
        run("table", ident, partial(_table, project, ident, code, judge))
    for rel in linked["table"]:
        add(BuildStep("table", rel.partition("/")[2], "bad_input", linked_refusal("table", rel)))
    for ident, line in odd["table"]:
        add(BuildStep("table", ident, "bad_input", line))
    if has_evidence:
        built: list[ClaimsOutcome] = []
        run("evidence", "", partial(_evidence, project, db, now, built))
        if built:
            run("macros", "", partial(_macros, root, built[0]))
        else:
            add(BuildStep("macros", "", "failed", "not written: EVIDENCE.json was not built"))
    else:
        add(BuildStep("evidence", "", "skipped", f"no {EVIDENCE_FILE}: no claims to generate"))
        add(BuildStep("macros", "", "skipped", "no claims, no macros"))
    changed = watch.changed()
    if changed:
        add(BuildStep("store", "", "failed", _store_changed(changed, "while the build ran")))
    return BuildOutcome(tuple(steps))


class _StoreWatch:
    """The evidence store `runs/` hashed before the build and after each figure whose folder holds a build.py
    (the user's code, run in rgt's process; services/evidence/store.py), so a build that changes the evidence
    fails naming what changed instead of leaving the gate to close later without a word."""

    def __init__(self, root: Path, db: StateDB) -> None:
        self.root, self.db = root, db
        self.last = store.snapshot(root, db)

    def changed(self) -> list[str]:
        now = store.snapshot(self.root, self.db)
        found, self.last = store.changes(self.last, now), now
        return found

    def guarded(self, kind: str, ident: str, build: Callable[[], BuildStep]) -> BuildStep:
        if not (self.root / f"{kind}s" / ident / "build.py").exists():
            return build()
        step = _attempt(kind, ident, build)  # a build.py that raised may have written first
        changed = self.changed()
        if not changed:
            return step
        return BuildStep(kind, ident, "failed", _store_changed(changed, f"{kind}s/{ident}/build.py changed it"))


def _store_changed(changed: list[str], how: str) -> str:
    runs = sorted({path.split("/")[1] for path in changed if path.count("/") >= 1})
    verify = f"rgt verify {' '.join(runs)} says what changed, and a pull restores it" if runs else \
        "rgt verify says what changed"
    return (f"the evidence store runs/ changed ({how}): {store.summary(changed)}; the pulled copy is no longer "
            f"the verified one and the teardown gate stays closed until it is: {verify}")


def _attempt(kind: str, ident: str, build: Callable[[], BuildStep]) -> BuildStep:
    """One item built, its failure a line: bad input names what and where; a builder's own failure, or a bug
    in one (a dashboard worker must never take the app down), says so."""
    try:
        return build()
    except ConfigError as exc:
        return BuildStep(kind, ident, "bad_input", str(exc))
    except RgtError as exc:
        return BuildStep(kind, ident, "failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - one broken builder is one failed line, never a crashed build
        return BuildStep(kind, ident, "failed", f"internal error in the builder: {type(exc).__name__}: {exc}")


def _figure(project: ProjectConfig, ident: str, code: Mapping[str, Any], now: datetime,
            judge: SourceJudge) -> BuildStep:
    from remote_gpu_trainer.deliver.figures.build import build_figure

    unchecked: list[Unchecked] = []  # the document is written once, with them disclosed
    built = build_figure(project.root, ident, declared=project.audit.metrics, code=code, now=now,
                         amend=amend_with(judge, unchecked))
    return _qa_step("figure", ident, built.passed, built.document, built.deterministic, len(unchecked))


def _table(project: ProjectConfig, ident: str, code: Mapping[str, Any], judge: SourceJudge) -> BuildStep:
    from remote_gpu_trainer.services.deliver.tables import build_table

    unchecked: list[Unchecked] = []
    built = build_table(project, ident, code=code, amend=amend_with(judge, unchecked))
    return _qa_step("table", ident, built.passed, built.document, built.deterministic, len(unchecked))


def _qa_step(kind: str, ident: str, passed: bool, document: Mapping[str, Any], deterministic: bool,
             unchecked: int = 0) -> BuildStep:
    """The build's line from what it wrote into figure.json / table.json `qa` (the file the panel reads), and
    how many of its inputs are not verified evidence (named in its disclosure)."""
    qa = document.get("qa")
    checks = qa.get("checks", {}) if isinstance(qa, Mapping) else {}
    flagged = [f"{name} {result}" for name, result in checks.items() if result not in PASSING]
    if not deterministic:
        flagged.append("two builds differ")
    detail = "QA passed" if passed and not flagged else "QA failed: " + (", ".join(flagged) or "not passed")
    disclosed = [name for name, result in checks.items() if result == "disclosed"]
    if disclosed and passed:
        detail += f" ({', '.join(disclosed)} disclosed)"
    if unchecked:
        detail += f"; {unchecked} input(s) not verified evidence, disclosed"
    return BuildStep(kind, ident, "passed" if passed else "qa_failed", f"{detail} → {kind}s/{ident}/")


def _evidence(project: ProjectConfig, db: StateDB, now: datetime, built: list[ClaimsOutcome]) -> BuildStep:
    """EVIDENCE.json and the macros from the same rows (services/deliver/claims.py), re-audited: the checks that read
    EVIDENCE.json judged the file as it was before, so the disclosures quote the audit of the numbers written."""
    from remote_gpu_trainer.services.deliver.claims import build_evidence

    outcome = build_evidence(project, db, now, with_macros=True, reaudit=True)
    built.append(outcome)
    states = ", ".join(f"{claim.id} {claim.state}" for claim in outcome.claims) or "no claims"
    disclosed = sum(1 for claim in outcome.claims if claim.disclosure)
    again = "" if outcome.reaudited is None else \
        f" (re-audited: {outcome.reaudited[0]} finding(s) fixed, {outcome.reaudited[1]} raised)"
    if outcome.unread:  # written, each number disclosing it; but the claims were not checked against it
        return BuildStep("evidence", "", "qa_failed",
                         f"{states}; {disclosed} with a disclosure{again}; not reconciled, unreadable: "
                         f"{', '.join(outcome.unread)} → {EVIDENCE_FILE}")
    return BuildStep("evidence", "", "passed",
                     f"{states}; {disclosed} with a disclosure{again} → {EVIDENCE_FILE}")


def _macros(root: Path, outcome: ClaimsOutcome) -> BuildStep:
    """Written with the evidence, from the same rows (services/deliver/claims.py); reported on its own line."""
    rows = sum(len(claim.rows) for claim in outcome.claims)
    where = outcome.macros_path.relative_to(root) if outcome.macros_path is not None else "?"
    return BuildStep("macros", "", "passed", f"{rows} macro(s) with their disclosure companions → {where}")
