"""Reconcile (the algorithm under VERIFY V31, docs/verify.md §2): every test vector of the DELIVER reconcile spec
(§10), then the reading rules one by one, exit codes, reconcile.json, and reading documents from disk."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.reconcile.claims import scalar_claims
from remote_gpu_trainer.audits.catalogue.reconcile.compare import consistent, reconcile
from remote_gpu_trainer.audits.catalogue.reconcile.files import read_documents
from remote_gpu_trainer.audits.catalogue.reconcile.model import Document, DocumentProblem, ReconcileReport
from remote_gpu_trainer.audits.catalogue.reconcile.text import preprocess
from support.reconcile_vectors import (
    PSNR,
    PSNR_PRECISE,
    VECTORS,
    claim,
    evidence,
    expect,
    row,
)

MD = ".md"  # Markdown documents are named through this, so no line of this file looks like a doc citation


def one(doc: str, text: str, ev: dict[str, Any], **options: Any) -> ReconcileReport:
    return reconcile(ev, [Document(doc, text)], **options)


def outcome(report: ReconcileReport) -> dict[str, Any]:
    """Everything a vector decides, in a form a test compares exactly."""
    return {
        "drifts": [(d.doc, d.line, d.reported, d.claim_ids) for d in report.drifts],
        "warnings": [(w.kind, w.claim_ids) for w in report.warnings],
        "infos": [(i.kind, i.claim_ids) for i in report.infos],
        "missing": [m.claim_id for m in report.missing_from_docs],
        "covered": {k: list(v) for k, v in report.coverage.items() if v},
    }


@pytest.mark.parametrize(("ev", "doc", "text", "expected"), VECTORS)
def test_spec_vectors(ev: dict[str, Any], doc: str, text: str, expected: dict[str, Any]) -> None:
    assert outcome(one(doc, text, ev)) == expected


def test_a_stale_and_a_correctly_rounded_number_report_exactly_the_stale_one() -> None:
    text = ("We reach PSNR 31.42 dB on Set5.\n"
            "\n"
            "Compared with the baseline, our PSNR 31.38 dB is higher.\n")
    report = one("paper.txt", text, PSNR_PRECISE)
    assert [(d.line, d.col, d.reported, d.reported_text, d.expected, d.authoritative, d.claim_ids)
            for d in report.drifts] == [(3, 38, 31.38, "31.38", "31.42", 31.4238, ("C1",))]
    assert report.drifts[0].context == "Compared with the baseline, our PSNR 31.38 dB is higher."
    assert report.coverage["C1"] == ("paper.txt:1",)
    assert report.exit_code == 1


def test_missing_claim_with_a_paper_anchor_is_a_warning_and_without_one_info() -> None:
    ev = evidence(claim("C1", row("psnr", 31.42), paper_anchor="Sec 4.2"), claim("C2", row("ssim", 0.9)))
    report = one("paper.txt", "nothing here", ev)
    assert [(m.claim_id, m.severity, m.paper_anchor) for m in report.missing_from_docs] == [
        ("C1", "warn", "Sec 4.2"), ("C2", "info", None)]


@pytest.mark.parametrize(("target", "written", "ok"), [
    ("0.125", "0.12", True), ("0.125", "0.13", True), ("0.125", "0.11", False), ("0.125", "0.14", False),
    ("2.675", "2.67", True), ("2.675", "2.68", True), ("2.675", "2.7", True), ("2.675", "2.66", False),
    ("31.4238", "31", True), ("31.4238", "32", False), ("1250000", "1.25e6", True), ("1250000", "1.3e6", True),
    ("1250000", "1.4e6", False),
])
def test_a_half_way_target_reads_as_either_neighbour_and_nothing_further(target: str, written: str, ok: bool) -> None:
    value = Decimal(written)
    decimals = -value.as_tuple().exponent  # type: ignore[operator]
    assert consistent(value, decimals, Decimal(target)) is ok


def test_exact_mode_wants_the_full_value() -> None:
    ev = PSNR_PRECISE
    assert outcome(one("p.txt", "PSNR 31.42", ev, mode="exact"))["drifts"] == [("p.txt", 1, 31.42, ("C1",))]
    assert one("p.txt", "PSNR 31.4238", ev, mode="exact").drifts == ()
    with pytest.raises(ValueError, match="not one of"):
        one("p.txt", "PSNR 31.42", ev, mode="loose")


def test_markdown_marks_are_dropped_and_the_column_is_the_source_one() -> None:
    line = "| **PSNR** | `31.50` |"
    report = one(f"README{MD}", line, PSNR)
    assert [(d.line, d.col, d.reported) for d in report.drifts] == [(1, line.index("31.50") + 1, 31.5)]


@pytest.mark.parametrize(("doc", "line", "seen"), [
    ("a.tex", r"PSNR of $31.42\,$dB % old: 30.1", "PSNR of 31.42 dB "),
    ("a.tex", r"accuracy 91.23\% on~test", "accuracy 91.23% on test"),
    ("a.tex", r"PSNR $31.42 \pm 0.08$", "PSNR 31.42 ± 0.08"),
    ("a.tex", r"done.\\% PSNR 30.10", "done.\\\\"),
    (f"a{MD}", "**PSNR** `31.42`", "PSNR 31.42"),
    ("a.txt", "**PSNR** $31.42$ % x", "**PSNR** $31.42$ % x"),
    ("a.tex", r"$1\,250\,000$ and $12\,3456$, $31.42\,$dB", "1,250,000 and 12 3456, 31.42 dB"),
    (f"a{MD}", "n = **1\u202f250** and 0.123\u2009456\u20097", "n = 1,250 and 0.123,456\u20097"),
    ("a.txt", "1\u2009000\u2009000 params, not 1\u20091000", "1,000,000 params, not 1\u20091000"),
])
def test_preprocess_per_format(doc: str, line: str, seen: str) -> None:
    assert preprocess(doc, line)[0] == seen


def test_a_number_with_thin_space_groups_is_one_number_at_its_source_column() -> None:
    line = r"Params~of the model: $1\,250\,001$."
    report = one("paper.tex", line, evidence(claim("C-params", row("params", 1250000))))
    assert [(d.col, d.reported, d.reported_text, d.expected) for d in report.drifts] == [
        (line.index("1\\,") + 1, 1250001.0, "1,250,001", "1250000")]


def test_a_number_in_a_tex_comment_is_not_read_but_the_same_text_in_plain_text_is() -> None:
    text = "% PSNR 30.10 in the old draft\nPSNR \\ClaimCOneMainPsnr\n"
    assert outcome(one("paper.tex", text, PSNR))["drifts"] == []
    assert outcome(one("paper.txt", text, PSNR))["drifts"] == [("paper.txt", 1, 30.1, ("C1",))]


def test_a_name_with_digits_after_the_anchor_is_skipped() -> None:
    report = one("p.txt", "PSNR on Set5 (v2 split): 31.42 dB", PSNR)
    assert report.drifts == () and report.coverage["C1"] == ("p.txt:1",)


def test_an_anchor_inside_a_word_is_not_an_anchor_but_a_word_starting_with_it_is() -> None:
    ev = evidence(claim("C1", row("acc", 0.5)))
    assert one("p.txt", "Baccarat 0.91", ev).drifts == ()
    assert outcome(one("p.txt", "Accuracy: 0.91", ev))["drifts"] == [("p.txt", 1, 0.91, ("C1",))]


def test_an_anchor_without_a_number_in_its_window_is_info() -> None:
    report = one("p.txt", "We report PSNR and, much later in a long sentence that goes on and on and on, 31.50.", PSNR)
    assert report.drifts == ()
    assert [(i.kind, i.anchor, i.line, i.col) for i in report.infos] == [("anchor_without_number", "psnr", 1, 11)]


def test_the_window_is_60_characters_after_the_anchor_unless_configured() -> None:
    """A number must start within the window; one that starts inside it is read whole, never cut at its edge."""
    outside = "PSNR" + " " * 60 + "31.50"
    assert outcome(one("p.txt", outside, PSNR))["drifts"] == []
    assert outcome(one("p.txt", outside, PSNR, window=61))["drifts"] == [("p.txt", 1, 31.5, ("C1",))]
    edge = "PSNR" + " " * 59 + "31.42"
    assert one("p.txt", edge, PSNR).coverage["C1"] == ("p.txt:1",)


def test_a_longer_alias_wins_over_the_generic_anchor_inside_it() -> None:
    ev = evidence(claim("C-set5", row("psnr_set5", 31.42)),
                  claim("C-set14", row("psnr_set14", 28.10, aliases=["PSNR on Set14"])))
    report = one("p.txt", "PSNR on Set14 28.10\nPSNR 31.42", ev)
    assert outcome(report) == expect(covered={"C-set14": ["p.txt:1"], "C-set5": ["p.txt:2"]})


def test_digits_inside_an_alias_are_not_its_number() -> None:
    ev = evidence(claim("C1", row("top1", 0.7612, aliases=["Top-1 accuracy"], display_scale=100, precision=1)))
    report = one("p.txt", "top-1 accuracy of 76.1%", ev)
    assert report.drifts == () and report.coverage["C1"] == ("p.txt:1",)


def test_claim_aliases_replace_the_generic_anchor() -> None:
    ev = evidence(claim("C1", row("psnr", 31.42), aliases=["Peak SNR"]))
    report = one("p.txt", "PSNR 20.00\npeak snr 31.42", ev)
    assert report.drifts == () and report.coverage["C1"] == ("p.txt:2",)


def test_several_rows_of_one_claim_are_numbered_and_non_numeric_rows_skipped() -> None:
    ev = evidence(claim("C1", row("psnr", 31.42), row("ssim", "n/a"), row("lpips", True), row("fid", None),
                        row("mae", "nan"), row("rmse", "0.25")))
    assert [(c.id, c.metric, c.target) for c in scalar_claims(ev)] == [
        ("C1#0", "psnr", Decimal("31.42")), ("C1#5", "rmse", Decimal("0.25"))]


def test_a_value_beyond_a_double_once_scaled_is_skipped_with_a_warning_naming_its_row() -> None:
    """1e308 × display_scale 100 has no float: it was a crash (decimal.InvalidOperation) at the first drift."""
    ev = evidence(claim("C1", row("psnr", 31.42)),
                  claim("C2", row("acc", 1e308, display_scale=100), row("acc", 0.9, display_scale=100)))
    report = one("p.txt", "PSNR 31.50 and acc 95", ev)
    assert [c.id for c in report.claims] == ["C1", "C2#1"]
    assert [(d.claim_ids, d.expected, d.reported) for d in report.drifts] == [
        (("C1",), "31.42", 31.5), (("C2#1",), "90", 95.0)]
    assert json.loads(report.to_json())["warnings"] == [
        {"kind": "value_out_of_range", "claim_ids": ["C2#0"],
         "detail": "value 1e+308 × display_scale 100 is beyond a double: skipped as non-numeric, not reconciled"}]
    assert report.exit_code == 1


def test_lines_are_numbered_as_an_editor_does_split_on_newline_only() -> None:
    """U+2028, U+2029, form feed, NEL and \\x1c-\\x1e are characters of a line, not breaks; CRLF is one break."""
    text = "a\u2028b\u2029c\x0cd\x85e\x1cf\x1dg\x1eh PSNR 31.50\r\nPSNR 31.60\r\n\nPSNR 31.70"
    report = one("p.txt", text, PSNR)
    assert [(d.line, d.col, d.reported_text, d.context) for d in report.drifts] == [
        (1, 22, "31.50", "a\u2028b\u2029c\x0cd\x85e\x1cf\x1dg\x1eh PSNR 31.50"), (2, 6, "31.60", "PSNR 31.60"),
        (4, 6, "31.70", "PSNR 31.70")]


def test_exit_codes() -> None:
    assert one("p.txt", "PSNR 31.42", PSNR).exit_code == 0
    assert one("p.txt", "PSNR 31.50", PSNR).exit_code == 1
    assert one("p.txt", "PSNR 31.42", evidence(claim("C1", row("psnr", "n/a")))).exit_code == 2
    unreadable = reconcile(PSNR, [Document("p.txt", "PSNR 31.50")],
                           problems=[DocumentProblem("gone.txt", "no such file")])
    assert unreadable.exit_code == 2


def test_reconcile_json_holds_the_spec_keys() -> None:
    report = one("paper.txt", "PSNR 31.50\nPSNR of about 31.4\nPSNR and more", PSNR_PRECISE)
    body = json.loads(report.to_json())
    assert report.to_json().endswith("}\n")
    assert {"drifts", "warnings", "infos", "missing_from_docs", "coverage"} <= set(body)
    assert body["exit_code"] == 1 and body["coverage"] == {"C1": ["paper.txt:2"]}
    assert body["drifts"] == [{"doc": "paper.txt", "line": 1, "col": 6, "claim_ids": ["C1"], "metric": "psnr",
                               "authoritative": 31.4238, "expected": "31.42", "reported": 31.5,
                               "reported_text": "31.50", "decimals": 2, "context": "PSNR 31.50",
                               "reason": "inconsistent", "precision": None}]
    assert body["coarse_quotes"] == [
        {"doc": "paper.txt", "line": 2, "col": 15, "claim_ids": ["C1"], "metric": "psnr", "authoritative": 31.4238,
         "expected": "31.42", "reported": 31.4, "reported_text": "31.4", "decimals": 1, "precision": 2,
         "marker": "about", "context": "PSNR of about 31.4"}]
    assert body["infos"] == [
        {"kind": "anchor_without_number", "claim_ids": ["C1"], "anchor": "psnr", "doc": "paper.txt", "line": 3,
         "col": 1}]


# --- reading documents from disk ----------------------------------------------------------------------------

def test_read_documents_reads_paths_and_globs_once_each(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.tex").write_text("PSNR 31.42\n", encoding="utf-8")
    (tmp_path / "docs" / "a.tex").write_text("PSNR 31.50\n", encoding="utf-8")
    (tmp_path / "CITATION.cff").write_bytes("\ufefftitle: x\n".encode())
    docs, problems = read_documents(tmp_path, ["docs/*.tex", "docs/a.tex", "CITATION.cff"])
    assert problems == []
    assert [d.path for d in docs] == ["docs/a.tex", "docs/b.tex", "CITATION.cff"]
    assert docs[2].text == "title: x\n" and docs[0].sha256 is not None
    assert outcome(reconcile(PSNR, docs))["drifts"] == [("docs/a.tex", 1, 31.5, ("C1",))]


def test_read_documents_refuses_paths_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("PSNR 31.50\n", encoding="utf-8")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    docs, problems = read_documents(root, ["../outside.txt", str(tmp_path / "outside.txt"), "link.txt",
                                           "sub/../../outside.txt"])
    assert docs == []
    assert [p.message for p in problems] == ["outside the project root; refused"] * 4


def test_read_documents_reports_unreadable_inputs_as_problems(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes(b"PSNR 31.42 \xe9t\xe9\n")
    (tmp_path / "folder").mkdir()
    docs, problems = read_documents(tmp_path, ["missing.txt", "latin1.txt", "folder", "*.csv", ""])
    assert docs == []
    assert [(p.path, p.message.split(" (")[0]) for p in problems] == [
        ("missing.txt", "no such file"), ("latin1.txt", "not UTF-8 text"), ("folder", "is a folder, not a document"),
        ("*.csv", "matches no file"), ("", "not a path")]
    assert reconcile(PSNR, docs, problems=problems).exit_code == 2


def test_globs_pass_over_rgt_s_own_files_and_a_literal_one_is_refused(tmp_path: Path) -> None:
    own = ["EVIDENCE.json", "reconcile.json", "completeness.json", "runs/r1/seed0/notes.md", ".rgt/state.md",
           "figures/acc/figure.json", "figures/acc/source.csv", "tables/tab/table.json", "tables/tab/source.csv",
           ".rgt-tmp-EVIDENCE.json.77", "figures/acc/.rgt-build-x/notes.md"]
    documents = ["paper.md", "docs/EVIDENCE.json", "figures/acc/caption.md", "figures/source.csv"]
    for rel in own + documents:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("PSNR 31.42\n", encoding="utf-8")
    docs, problems = read_documents(tmp_path, ["**/*", "EVIDENCE.json", "runs/r1/seed0/notes.md", "*.json"])
    assert [d.path for d in docs] == sorted(documents)
    assert [(p.path, p.message) for p in problems] == [
        ("EVIDENCE.json", "rgt's own file, never a document; refused"),
        ("runs/r1/seed0/notes.md", "rgt's own file, never a document; refused"),
        ("*.json", "matches no document, only rgt's own files")]
