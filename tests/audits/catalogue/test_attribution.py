"""Which runs a finding is about (audits/catalogue/attribution.py, docs/verify.md §3.1): every subject kind the
catalogue can write is placed, by the one rule, on real evidence."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.catalogue import attribution
from remote_gpu_trainer.audits.catalogue import runner as catalogue
from remote_gpu_trainer.audits.catalogue.attribution import EVERY_RUN, PLACERS, RunContext, run_status, runs_of
from remote_gpu_trainer.audits.catalogue.load import Declarations
from remote_gpu_trainer.audits.catalogue.model import Comparison
from support.capsules import classification_items, load, write_capsule, write_evidence, write_split

CATALOGUE = Path(attribution.__file__).parent


def written_kinds() -> set[str]:
    """Every subject kind the catalogue's code can write: the f-strings that build a subject (`f"split:{...}"`)
    and the bare subject `"project"`."""
    kinds = set()
    for path in sorted(CATALOGUE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        kinds |= set(re.findall(r'f"([a-z_]+):\{', text))
        if re.search(r'(?:Finding\([^)]*|finish\([^)]*|merge\([^)]*)"project"', text):
            kinds.add("project")
    return kinds


def test_every_subject_kind_the_catalogue_can_write_is_placed() -> None:
    kinds = written_kinds()
    assert kinds >= {"capsule", "claim", "doc", "file", "number", "pair", "run", "split", "project"}, kinds
    assert kinds <= set(PLACERS), f"subject kinds the rule does not place: {sorted(kinds - set(PLACERS))}"
    ctx = RunContext(runs=("a", "b"))
    for kind in kinds:
        assert runs_of(f"{kind}:a/x", ctx) or kind == "split", kind  # placed somewhere; a split no run used: none


def test_a_kind_the_rule_does_not_know_is_every_runs() -> None:
    assert runs_of("figure:fig-1", RunContext()) == {EVERY_RUN}
    assert runs_of("no-colon-at-all", RunContext()) == {EVERY_RUN}


def two_runs(root: Path) -> None:
    """r1 trained on splits/main.json (by its sha256), r2 on splits/other.json (by file name only: that
    manifest was rebuilt since), r3 is declared and not pulled; main leaks an item from train into test."""
    main = write_split(root, "main", {"train": [("a", b"same"), ("b", b"b")], "test": [("c", b"same")]})
    write_split(root, "other", {"train": [("d", b"d")], "test": [("e", b"e")]}, folder="data2")
    for run, record in (("r1", {"split_manifest": "splits/main.json",
                                "split_manifest_sha256": hashlib.sha256(main.read_bytes()).hexdigest()}),
                        ("r2", {"split_manifest": "other.json", "split_manifest_sha256": "99" * 32})):
        for seed in (0, 1):
            write_capsule(root, run, f"seed{seed}", seed=seed, metrics={"acc": 0.8},
                          items=classification_items(10, correct=8), record={"provenance": {"data": record}})
    write_evidence(root, [{"id": "C1", "metric": "acc", "evidence": [
        {"cells": ["r2/seed0", "r2/seed1"], "metric": "acc", "test_id": "main"}]}])


def declared() -> Declarations:
    return Declarations(rosters={"r1": ("seed0", "seed1"), "r2": ("seed0", "seed1"), "r3": ("seed0",)},
                        comparisons=(Comparison(run="r2", control="r1", vary=("lr",)),))


def test_each_kind_on_real_evidence(tmp_path: Path) -> None:
    two_runs(tmp_path)
    project = load(tmp_path, declared())
    ctx = attribution.context(project)
    assert ctx.runs == ("r1", "r2", "r3") and list(ctx.waiting) == ["r3"]
    assert runs_of("split:main", ctx) == {"r1", "r3"}  # r1 by its sha256; r3 unknown until pulled
    assert runs_of("split:other", ctx) == {"r2", "r3"}  # r2 by file name: no manifest has its sha256
    assert runs_of("file:splits/main.json", ctx) == {"r1", "r3"}
    assert runs_of("claim:C1", ctx) == runs_of("claim:C1#0", ctx) == {"r2"}
    assert runs_of("capsule:r1/seed0", ctx) == runs_of("number:r1/main/acc", ctx) == runs_of("run:r1", ctx) == {"r1"}
    assert runs_of("pair:r2~r1", ctx) == runs_of("pair:r2/seed0~r1/seed0", ctx) == {"r1", "r2"}
    assert runs_of("file:runs/r2/PULL_MANIFEST.json", ctx) == {"r2"}
    for subject in ("file:EVIDENCE.json", "doc:paper.md:7", "doc:paper.md", "project", "claim:nowhere"):
        assert runs_of(subject, ctx) == {EVERY_RUN}, subject


def test_every_subject_the_catalogue_judged_here_is_placed(tmp_path: Path) -> None:
    two_runs(tmp_path)
    project = load(tmp_path, declared())
    ctx = attribution.context(project)
    results = catalogue.run_all(project)
    subjects = {s for r in results for s in r.subjects} | {f.subject for r in results for f in r.findings}
    kinds = {s.partition(":")[0] for s in subjects}
    assert kinds >= {"capsule", "split", "claim", "file", "pair"}, kinds
    assert kinds <= set(PLACERS), kinds
    assert all(runs_of(s, ctx) for s in subjects), [s for s in subjects if not runs_of(s, ctx)]
    leak = next(f for r in results if r.check == "V14" for f in r.findings)
    assert leak.subject == "split:main" and runs_of(leak.subject, ctx) == {"r1", "r3"}


def test_a_capsule_that_names_no_split_leaves_its_run_under_every_split(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("a", b"a")], "test": [("c", b"c")]})
    write_capsule(tmp_path, "r1", "seed0", record={"provenance": {"data": {"split_manifest": None,
                                                                           "split_manifest_sha256": None}}})
    assert runs_of("split:main", attribution.context(load(tmp_path))) == {"r1"}


def test_an_unpulled_runs_cells_leave_the_numbers_and_the_check_says_not_run(tmp_path: Path) -> None:
    write_evidence(tmp_path, [{"id": "C1", "metric": "acc", "evidence": [
        {"cells": ["r1/seed0", "r1/seed1"], "metric": "acc", "test_id": "main"}]}])
    project = load(tmp_path, Declarations(rosters={"r1": ("seed0", "seed1")}))
    assert [n.subject for n in project.numbers] == ["claim:C1"]
    ctx = attribution.context(project)
    kept, lost = attribution.without_waiting(project, ctx)
    assert kept.numbers == () and lost == 1
    v04 = next(r for r in catalogue.run_all(project) if r.check == "V04")
    assert v04.status == "not_run" and v04.findings == ()
    assert v04.note.startswith("not run: r1 not pulled yet (rgt pull r1, then rgt verify r1)"), v04.note


@pytest.mark.parametrize(("status", "judged", "fired", "run", "expected"), [
    ("findings", ("a", "b"), 1, "a", "findings"),
    ("findings", ("a", "b"), 0, "b", "pass"),  # the check found something about a, judged b and found nothing
    ("findings", ("a",), 0, "b", "skipped"),  # it judged only a: nothing of b
    ("pass", (EVERY_RUN,), 0, "b", "pass"),  # a project-wide subject passed
    ("pass", (EVERY_RUN,), 0, "w", "not_run"),  # w has no data yet: a project-wide pass says nothing of it
    ("pass", ("w",), 0, "w", "pass"),  # a split w may have trained on was judged clean
    ("skipped", (), 0, "w", "not_run"),
    ("skipped", (), 0, "a", "skipped"),
    ("not_run", (), 0, "a", "not_run"),
])
def test_a_checks_answer_for_one_run(status: str, judged: tuple[str, ...], fired: int, run: str,
                                     expected: str) -> None:
    waiting = {"w": "w not pulled yet (rgt pull w, then rgt verify w)"}
    got, note = run_status(status, "note", judged, fired, run, waiting)
    assert got == expected
    assert ("not pulled yet" in note) == (expected == "not_run" and run == "w")
