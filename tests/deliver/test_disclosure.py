"""Per-number disclosure D1–D8 (docs/deliver.md §5) on real capsule files, a real state database and the real
CLI: each item produces its text when its source says so, and the inline form matches the spec's two examples
character for character."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.generated import generate_row
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.deliver import disclosure, evidence
from remote_gpu_trainer.deliver.disclosure import FindingNote, RowFacts
from support.capsules import load
from support.claims_project import CELLS, PSNR, RUN, claim, files_project, read_evidence, stage_capsule, unpulled


def build(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`rgt build macros --format json`: the document it printed (EVIDENCE.json is read back separately)."""
    assert main(["build", "macros", str(root), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def and_unverified(text: str, cells: tuple[str, ...] = CELLS) -> str:
    """`text` then the D8 item every number built from files_project's capsules carries: they were written into
    runs/ here, never pulled by rgt (docs/deliver.md §5)."""
    return f"{text}; unverified evidence: {unpulled(cells)}"


def row_of(document: dict[str, Any], claim_index: int = 0) -> dict[str, Any]:
    return document["claims"][claim_index]["rows"][0]


def facts_for(root: Path, **extra: Any) -> RowFacts:
    """RowFacts of the first row, computed from the files as `rgt build evidence` does."""
    found = load(root)
    (spec,) = evidence.validate(found.evidence)[0].rows
    number = next(n for n in found.numbers if n.subject == spec.subject)
    return RowFacts(spec=spec, row=generate_row(found, number), **extra)


# -- the inline form: the spec's two examples ------------------------------------------------------------------
def test_inline_form_of_three_seeds_is_the_spec_example(tmp_path: Path) -> None:
    facts = facts_for(files_project(tmp_path, [claim()]))
    assert disclosure.inline(facts, disclosure.disclose(facts)) == \
        "31.42 dB ↑ (test, n=5 items, 3 seeds, mean ± std 0.08)"


def test_inline_form_of_a_single_seed_with_a_finding_is_the_spec_example(tmp_path: Path) -> None:
    root = files_project(tmp_path, [claim(cells=[f"{RUN}/seed0"])], {**PSNR, "seed0": 30.81})
    facts = facts_for(root, findings=(FindingNote("F-000041", "single seed — no variance band"),))
    assert disclosure.inline(facts, disclosure.disclose(facts)) == \
        "30.81 dB ↑ (test, n=5, single seed — no variance band) [F-000041]"


# -- D2 split, D3 seeds ------------------------------------------------------------------------------------------
def test_d2_a_validation_split_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = row_of(build(files_project(tmp_path, [claim()], split="val"), capsys))
    assert row["disclosure"] == and_unverified("validation-split number")
    assert row["inline"] == "31.42 dB ↑ (val, n=5 items, 3 seeds, mean ± std 0.08; " + \
        and_unverified("validation-split number") + ")"


def test_d3_single_seed_and_too_few_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = files_project(tmp_path, [claim("C1", cells=[f"{RUN}/seed0"]),
                                    claim("C2", cells=[f"{RUN}/seed0", f"{RUN}/seed1"])])
    document = build(root, capsys)
    single, two = row_of(document, 0), row_of(document, 1)
    one, both = ("seed0",), ("seed0", "seed1")
    assert single["disclosure"] == and_unverified("single seed — no variance band", one)
    assert single["inline"] == f"31.34 dB ↑ (test, n=5, {and_unverified('single seed — no variance band', one)})"
    assert two["disclosure"] == and_unverified("2 seeds, no CI", both)
    assert two["inline"] == "31.38 dB ↑ (test, n=5 items, 2 seeds, no CI, mean ± std 0.06; " \
                            f"unverified evidence: {unpulled(both)})"
    assert read_evidence(root)["claims"][0]["disclosure"] == and_unverified("single seed — no variance band", one)


# -- D5 findings ---------------------------------------------------------------------------------------------------
def test_d5_an_acknowledged_findings_disclosure_rides_verbatim(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = files_project(tmp_path, [claim(cells=[f"{RUN}/seed0"])])
    for cell in CELLS[1:]:  # one seed in all (else V08 rightly adds: the claim cites one draw of three)
        shutil.rmtree(root / "runs" / RUN / cell)
    assert main(["audit", str(root), "--check", "V04", "--format", "json"]) == 0
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert (finding["check"], finding["subject"], finding["status"]) == ("V04", "claim:C1-main-psnr", "open")
    typed = "Pilot study: one seed; the 0.3 dB margin is within run-to-run noise (see Appendix B)."
    assert main(["finding", finding["id"], str(root), "--ack", "--note", "budget", "--disclosure", typed]) == 0
    capsys.readouterr()
    row = row_of(build(root, capsys))
    one = ("seed0",)
    assert row["disclosure"] == and_unverified(f"single seed — no variance band; {typed} [{finding['id']}]", one)
    assert row["inline"] == f"31.34 dB ↑ (test, n=5, {and_unverified('single seed — no variance band', one)}) " \
                            f"[{finding['id']}]"
    written = read_evidence(root)["claims"][0]
    assert written["findings"] == [finding["id"]] and typed in written["disclosure"]
    assert ("\\newcommand{\\ClaimCOneMainPsnrDisc}{dB $\\uparrow$ (test, n=5, single seed --- no variance band; "
            "Pilot study: one seed; the 0.3 dB margin is within run-to-run noise (see Appendix B). "
            f"[{finding['id']}]; unverified evidence: runs/r1/seed0/test/set5/metrics.json (not pulled by rgt: no "
            "pull of run r1 is recorded))}\n") in (root / "tables/macros/final.tex").read_text()


# -- D6 drift, D7 figure and table QA, D8 dirty code, D4 unknown direction ----------------------------------------
def test_d6_a_stale_number_in_a_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = {"paper.tex": "PSNR on Set5 31.50 dB for the full model.\n", "notes.txt": "PSNR on Set5: 31.42\n"}
    row = row_of(build(files_project(tmp_path, [claim()], docs=docs), capsys))
    assert row["disclosure"] == and_unverified("cross-document drift: paper.tex:1")


def test_d6_a_drift_that_v31_raised_is_disclosed_once(tmp_path: Path) -> None:
    """After an audit, the drift is both V31's finding (D5) and reconcile's drift (D6): said once, with the id."""
    root = files_project(tmp_path, [claim()])
    finding = FindingNote("F-000004", "cross-document drift: paper.tex:1")
    facts = facts_for(root, findings=(finding,), drifts=("paper.tex:1", "notes.txt:3"))
    assert disclosure.disclose(facts).text == ("cross-document drift: paper.tex:1 [F-000004]; "
                                               "cross-document drift: notes.txt:3")


def test_d7_a_failed_figure_check_and_a_table_never_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = files_project(tmp_path, [claim(figures=["psnr-bars"], tables=["tab2-main"])])
    figure = root / "figures" / "psnr-bars"
    figure.mkdir(parents=True)
    qa = {"passed": False, "checked_at": "2026-06-24T18:41:03Z", "deterministic": True, "human_viewed": False,
          "checks": {"G1_blank": "pass", "G2_glyphs": "pass", "G3_clipped": "fail", "G4_overlap": "pass",
                     "G5_axis": "pass", "G6_data": "disclosed"}, "notes": "y label clipped at 300 dpi"}
    (figure / "figure.json").write_text(json.dumps({"schema": "remote-gpu-trainer/FIGURE/v1", "qa": qa}))
    row = row_of(build(root, capsys))
    assert row["disclosure"] == and_unverified("figure psnr-bars: G3_clipped fail, G6_data disclosed — y label "
                                               "clipped at 300 dpi; table tab2-main: not built (rgt build table "
                                               "tab2-main)")


def test_d7_a_build_whose_two_renders_differed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """qa.deterministic false (the build-twice check of docs/deliver.md §3 found different bytes) is disclosed
    even when every gate check passed."""
    root = files_project(tmp_path, [claim(figures=["psnr-bars"])])
    figure = root / "figures" / "psnr-bars"
    figure.mkdir(parents=True)
    qa = {"passed": True, "deterministic": False, "checks": {"G1_blank": "pass"}, "notes": "final.svg differed"}
    (figure / "figure.json").write_text(json.dumps({"schema": "remote-gpu-trainer/FIGURE/v1", "qa": qa}))
    assert row_of(build(root, capsys))["disclosure"] == and_unverified(
        "figure psnr-bars: not deterministic (two builds gave different bytes) — final.svg differed")


def test_d7_a_figure_folder_linked_out_of_the_project_is_not_read(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "figure.json").write_text(json.dumps({"qa": {"passed": True, "checks": {"G1_blank": "pass"}}}))
    root = files_project(tmp_path / "project", [claim(figures=["psnr-bars"])])
    (root / "figures").mkdir()
    (root / "figures" / "psnr-bars").symlink_to(outside)
    row = row_of(build(root, capsys))
    assert row["disclosure"] == and_unverified("figure psnr-bars: folder outside the project root, not read")


def test_d8_a_dirty_code_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = files_project(tmp_path, [claim()])
    dirty = {"code": {"repo": "local", "commit": "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071", "dirty": True,
                      "dirty_diff_sha256": "5c" * 32}}
    stage_capsule(root, RUN, "seed1", PSNR["seed1"], seed=1, record={"provenance": dirty})
    row = row_of(build(root, capsys))
    assert row["disclosure"] == and_unverified("built from uncommitted code (r1/seed1)")
    stored = read_evidence(root)["claims"][0]["evidence"][0]["disclosures"]  # every item, recorded per number
    assert stored == {"D1": None, "D2": None, "D3": None, "D4": None, "D5": None, "D6": None, "D7": None,
                      "D8": and_unverified("built from uncommitted code (r1/seed1)")}
    assert row["inline"] == ("31.42 dB ↑ (test, n=5 items, 3 seeds, mean ± std 0.08; "
                             f"{and_unverified('built from uncommitted code (r1/seed1)')})")


def test_d4_an_unknown_direction_is_a_question_mark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = files_project(tmp_path, [claim()])
    for cell in CELLS:
        metrics = root / "runs" / RUN / cell / "test" / "set5" / "metrics.json"
        body = json.loads(metrics.read_text())
        body["metrics"] = {"zorb": {**body["metrics"]["psnr"], "direction": None, "column": "psnr"}}
        metrics.write_text(json.dumps(body))
    (root / "EVIDENCE.json").write_text(json.dumps({"schema": "remote-gpu-trainer/EVIDENCE/v1",
                                                    "claims": [claim(metric="zorb")]}))
    row = row_of(build(root, capsys))
    unknown = and_unverified("direction unknown: declare the metric in rgt.toml [metrics]")
    assert row["disclosure"] == unknown
    assert row["inline"] == f"31.42 dB ? (test, n=5 items, 3 seeds, mean ± std 0.08; {unknown})"
