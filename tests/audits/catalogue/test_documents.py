"""VERIFY V31 reconcile (docs/verify.md §2, section G) over real documents and EVIDENCE.json in tmp_path, run
through the catalogue so the check's registration and its params in assets/catalogue.toml are what is tested."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.model import CheckResult
from remote_gpu_trainer.audits.catalogue.runner import functions, run_check, specs
from support.capsules import load, write_evidence, write_json

MD = ".md"  # Markdown documents are named through this, so no line of this file looks like a doc citation
PAPER = (
    "\\section{Results}\n"
    "Our model reaches a PSNR of $31.42\\,$dB on Set5. % was 30.10\n"
    "The baseline is far behind; our PSNR 31.38 dB is the best.\n"
    "Accuracy is 91.2\\%.\n"
)
CLAIMS = [
    {"id": "C1-main-psnr", "paper_anchor": "Sec 4.2", "aliases": [],
     "evidence": [{"metric": "psnr", "value": 31.4238, "precision": 2, "display_scale": 1}]},
    {"id": "C2-acc", "aliases": [],
     "evidence": [{"metric": "acc", "value": 0.9123, "precision": 1, "display_scale": 100}]},
]


def v31(root: Path, **params: Any) -> CheckResult:
    return run_check(load(root), specs()["V31"], {"reconcile": params})


def project(root: Path, docs: dict[str, str], claims: list[dict[str, Any]] | None = None,
            strings: Any = None) -> Path:
    path = write_evidence(root, claims if claims is not None else CLAIMS)
    if strings is not None:
        body = json.loads(path.read_text(encoding="utf-8"))
        write_json(path, {**body, "strings": strings})
    for name, text in docs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_v31_is_registered_with_its_params() -> None:
    assert "V31" in functions()
    assert specs()["V31"].params == {"docs": [], "window": 60, "mode": "rounding"}


def test_without_documents_v31_is_skipped(tmp_path: Path) -> None:
    outcome = v31(project(tmp_path, {}))
    assert (outcome.status, outcome.note) == (
        "skipped", "no documents configured ([deliver] docs or [verify.reconcile] docs in rgt.toml)")


def test_a_stale_number_is_an_error_on_its_line(tmp_path: Path) -> None:
    outcome = v31(project(tmp_path, {"paper/main.tex": PAPER}), docs=["paper/*.tex"])
    assert outcome.status == "findings"
    assert [(f.subject, f.severity) for f in outcome.findings] == [("doc:paper/main.tex:3", "error")]
    finding = outcome.findings[0]
    assert finding.claims == ("C1-main-psnr",)
    assert finding.disclosure == "cross-document drift: paper/main.tex:3"
    assert finding.values["drifts"][0]["reported"] == 31.38
    assert finding.values["drifts"][0]["expected"] == "31.42"
    assert "paper/main.tex:3 reads 31.38 where EVIDENCE.json has psnr = 31.42" in finding.message
    assert {ref.path for ref in finding.evidence} == {"EVIDENCE.json", "paper/main.tex"}
    assert {"doc:paper/main.tex:2", "doc:paper/main.tex:3", "claim:C1-main-psnr", "claim:C2-acc"} <= set(
        outcome.subjects)


def test_a_matching_document_passes(tmp_path: Path) -> None:
    fixed = PAPER.replace("31.38", "31.42")
    outcome = v31(project(tmp_path, {"paper.tex": fixed}), docs=["paper.tex"])
    assert (outcome.status, outcome.findings) == ("pass", ())
    assert "doc:paper.tex:3" in outcome.passed_subjects


def test_a_claim_in_no_document_is_info(tmp_path: Path) -> None:
    claims = [*CLAIMS, {"id": "C3-lpips", "paper_anchor": "Table 2",
                        "evidence": [{"metric": "lpips", "value": 0.081, "precision": 3}]}]
    outcome = v31(project(tmp_path, {"paper.tex": PAPER.replace("31.38", "31.42")}, claims), docs=["paper.tex"])
    assert [(f.subject, f.severity, f.claims) for f in outcome.findings] == [("claim:C3-lpips", "info",
                                                                              ("C3-lpips",))]


def test_a_shared_generic_anchor_is_a_warning(tmp_path: Path) -> None:
    claims = [{"id": "C-set5", "evidence": [{"metric": "psnr_set5", "value": 31.42}]},
              {"id": "C-set14", "evidence": [{"metric": "psnr_set14", "value": 28.10}]}]
    outcome = v31(project(tmp_path, {"paper.txt": "PSNR 31.42 on Set5\nPSNR 28.10 on Set14\n"}, claims),
                  docs=["paper.txt"])
    assert [(f.subject, f.severity, f.claims) for f in outcome.findings] == [
        ("claim:C-set5", "warn", ("C-set5", "C-set14"))]


def test_a_value_beyond_a_double_once_scaled_is_a_warning_on_its_claim(tmp_path: Path) -> None:
    claims = [*CLAIMS, {"id": "C3-huge", "evidence": [{"metric": "fid", "value": 1e308, "display_scale": 100}]}]
    outcome = v31(project(tmp_path, {"paper.tex": PAPER.replace("31.38", "31.42")}, claims), docs=["paper.tex"])
    assert [(f.subject, f.severity, f.message, f.claims) for f in outcome.findings] == [
        ("claim:C3-huge", "warn", "C3-huge: value 1e+308 × display_scale 100 is beyond a double: skipped as "
                                  "non-numeric, not reconciled", ("C3-huge",))]


def test_an_unreadable_or_outside_document_is_a_warning(tmp_path: Path) -> None:
    outcome = v31(project(tmp_path, {"paper.tex": PAPER.replace("31.38", "31.42")}),
                  docs=["paper.tex", "missing.tex", "../elsewhere.tex"])
    assert [(f.subject, f.severity, f.message) for f in outcome.findings] == [
        ("doc:missing.tex", "warn", "missing.tex: no such file; not reconciled"),
        ("doc:../elsewhere.tex", "warn", "../elsewhere.tex: outside the project root; refused; not reconciled")]


def test_a_fifo_among_the_documents_is_a_warning_and_the_others_are_still_reconciled(tmp_path: Path) -> None:
    root = project(tmp_path, {"paper.tex": PAPER})
    os.mkfifo(root / "pipe.tex")
    found: list[CheckResult] = []
    worker = threading.Thread(target=lambda: found.append(v31(root, docs=["pipe.tex", "paper.tex"])), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():  # it waits for a writer: be one, so the thread ends, and fail
        os.close(os.open(root / "pipe.tex", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("V31 waited on a FIFO named in its docs")
    assert [(f.subject, f.severity, f.message) for f in found[0].findings] == [
        ("doc:paper.tex:3", "error", "paper.tex:3 reads 31.38 where EVIDENCE.json has psnr = 31.42 (C1-main-psnr: "
                                     "31.4238)"),
        ("doc:pipe.tex", "warn", "pipe.tex: not a regular file (a FIFO): refused unread; not reconciled")]


def test_finding_lines_are_the_editor_s_lines(tmp_path: Path) -> None:
    """A form feed or U+2028 inside a line does not start a new one, for drifts, deprecated names and the lines
    V31 judged alike."""
    text = "\x0cPSNR 31.50 \u2028 by SRNet\r\nPSNR 31.42 \u2029 by SR-Net\n"
    outcome = v31(project(tmp_path, {"paper.txt": text}, strings={"method": {"value": "SR-Net",
                                                                             "deprecated": ["SRNet"]}}),
                  docs=["paper.txt"])
    assert [(f.subject, f.severity, f.message) for f in outcome.findings] == [
        ("doc:paper.txt:1", "error", "paper.txt:1 reads 31.50 where EVIDENCE.json has psnr = 31.42 (C1-main-psnr: "
                                     "31.4238); paper.txt:1 uses the deprecated method 'SRNet' (now 'SR-Net')"),
        ("claim:C2-acc", "info", "C2-acc (acc = 91.23) is quoted consistently in no configured document")]
    assert [s for s in outcome.subjects if s.startswith("doc:")] == ["doc:paper.txt:1", "doc:paper.txt:2"]


def test_a_deprecated_name_is_a_warning_and_the_current_one_is_not(tmp_path: Path) -> None:
    strings = {"method": {"value": "SR-Net v2", "deprecated": ["SRNet"]}, "authors": ["A. Smith", "B. Jones"]}
    text = ("# SR-Net v2\n"
            "SRNet-like models (SRNet) were the old name.\n"
            "A. Smith and B. Jones\n"
            "SRNets are not SRNet.\n")
    outcome = v31(project(tmp_path, {f"README{MD}": text}, claims=[], strings=strings), docs=[f"README{MD}"])
    assert [(f.subject, f.severity) for f in outcome.findings] == [
        (f"doc:README{MD}:2", "warn"), (f"doc:README{MD}:4", "warn")]
    assert outcome.findings[0].message == (f"README{MD}:2 uses the deprecated method 'SRNet' (now 'SR-Net v2')")


def test_a_declared_string_no_document_spells_is_a_warning(tmp_path: Path) -> None:
    strings = [{"name": "version", "value": "1.2.0"}, "Set5"]
    outcome = v31(project(tmp_path, {"paper.tex": PAPER.replace("31.38", "31.42")}, strings=strings),
                  docs=["paper.tex"])
    assert [(f.subject, f.severity, f.message) for f in outcome.findings] == [
        ("project", "warn", "not spelled verbatim in any document: version '1.2.0'")]


def test_findings_on_one_line_are_one_record_at_the_higher_severity(tmp_path: Path) -> None:
    strings = {"method": {"value": "SR-Net", "deprecated": ["SRNet"]}}
    text = "SR-Net.\nSRNet reaches PSNR 31.38 dB.\nAccuracy 91.2%.\nPSNR 31.42\n"
    outcome = v31(project(tmp_path, {"paper.txt": text}, strings=strings), docs=["paper.txt"])
    assert [(f.subject, f.severity) for f in outcome.findings] == [("doc:paper.txt:2", "error")]
    merged = outcome.findings[0]
    assert merged.disclosure == "cross-document drift: paper.txt:2"
    assert len(merged.values["issues"]) == 2 and "deprecated method 'SRNet'" in merged.message


def test_when_no_document_could_be_read_only_that_is_reported(tmp_path: Path) -> None:
    outcome = v31(project(tmp_path, {}), docs=["paper.tex"])
    assert [(f.subject, f.severity) for f in outcome.findings] == [("doc:paper.tex", "warn")]
    assert outcome.subjects == ("doc:paper.tex",)


def test_bad_params_skip_with_the_reason(tmp_path: Path) -> None:
    root = project(tmp_path, {"paper.tex": PAPER})
    assert v31(root, docs=["paper.tex"], mode="loose").note == "reconcile mode 'loose' is not one of rounding, exact"
    assert v31(root, docs=["paper.tex"], window="wide").note.startswith("window must be a positive number")
    assert v31(root, docs=["paper.tex"], mode="exact").findings[0].subject == "doc:paper.tex:2"
