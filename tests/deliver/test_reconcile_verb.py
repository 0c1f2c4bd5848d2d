"""`rgt reconcile` through the real CLI on real files (docs/deliver.md §6): every test vector of the spec, read
back from the reconcile.json the verb wrote; one stale and one correctly rounded number; the exit codes 0/1/2;
a glob that leaves the project through a link; nothing written and no document touched when the answer could
not be complete; [deliver] docs and [verify.reconcile] docs as one list for the verb and V31."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue import documents
from remote_gpu_trainer.audits.catalogue.runner import by_name, params_for
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.config.project import load_project
from support.capsules import load
from support.reconcile_vectors import PSNR, PSNR_PRECISE, VECTORS, claim, evidence, row


def project(root: Path, docs: dict[str, str | bytes], ev: dict[str, Any] | None, *, extra: str = "") -> Path:
    """A project folder with rgt.toml listing `docs` in [deliver] docs, the documents, and EVIDENCE.json."""
    root.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(json.dumps(name) for name in docs)
    (root / "rgt.toml").write_text(f'[project]\nname = "p"\n\n[deliver]\ndocs = [{listed}]\n{extra}',
                                   encoding="utf-8")
    for name, text in docs.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    if ev is not None:
        (root / "EVIDENCE.json").write_text(json.dumps(ev), encoding="utf-8")
    return root


def rgt_reconcile(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["reconcile", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


def written(root: Path) -> dict[str, Any]:
    return json.loads((root / "reconcile.json").read_text(encoding="utf-8"))


def outcome(body: dict[str, Any]) -> dict[str, Any]:
    """reconcile.json in the shape the shared vectors state their expectation (claim ids as tuples)."""
    return {
        "drifts": [(d["doc"], d["line"], d["reported"], tuple(d["claim_ids"])) for d in body["drifts"]],
        "warnings": [(w["kind"], tuple(w["claim_ids"])) for w in body["warnings"]],
        "infos": [(i["kind"], tuple(i["claim_ids"])) for i in body["infos"]],
        "missing": [m["claim_id"] for m in body["missing_from_docs"]],
        "covered": {k: v for k, v in body["coverage"].items() if v},
    }


@pytest.mark.parametrize(("ev", "doc", "text", "expected"), VECTORS)
def test_every_spec_vector_through_the_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str], ev: dict[str, Any],
                                            doc: str, text: str, expected: dict[str, Any]) -> None:
    root = project(tmp_path / "p", {doc: text + "\n"}, ev)
    code, out, _ = rgt_reconcile(root, capsys)
    body = written(root)
    assert outcome(body) == expected
    assert code == body["exit_code"] == (1 if expected["drifts"] else 0)
    assert out.count("DRIFT ") == len(expected["drifts"])
    assert (root / doc).read_text(encoding="utf-8") == text + "\n"  # never edited


def test_one_stale_and_one_rounded_number_report_exactly_the_stale_one(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    paper = "# Results\n\nWe reach PSNR 31.42 dB on Set5.\n\nCompared with the baseline, our PSNR 31.38 dB is higher.\n"
    root = project(tmp_path / "p", {"paper.md": paper}, PSNR_PRECISE)
    code, out, _ = rgt_reconcile(root, capsys)
    assert code == 1
    body = written(root)
    assert body["drifts"] == [{"doc": "paper.md", "line": 5, "col": 38, "claim_ids": ["C1"], "metric": "psnr",
                               "authoritative": 31.4238, "expected": "31.42", "reported": 31.38,
                               "reported_text": "31.38", "decimals": 2,
                               "context": "Compared with the baseline, our PSNR 31.38 dB is higher.",
                               "reason": "inconsistent", "precision": None}]
    assert body["coverage"] == {"C1": ["paper.md:3"]} and body["missing_from_docs"] == []
    assert out.splitlines() == [
        "reconcile: 1 document(s), 1 scalar claim(s), mode rounding",
        "DRIFT paper.md:5:38  C1 psnr: reads 31.38 where EVIDENCE.json has 31.42 (31.4238)",
        "      | Compared with the baseline, our PSNR 31.38 dB is higher.",
        "coverage: 1/1 scalar claim(s) quoted consistently",
        "wrote reconcile.json: 1 drift(s)",
    ]
    assert (root / "paper.md").read_text(encoding="utf-8") == paper


def test_json_format_is_the_written_document_and_exact_mode_comes_from_the_flag_or_rgt_toml(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n"}, PSNR_PRECISE)
    code, out, _ = rgt_reconcile(root, capsys, "--format", "json")
    assert code == 0 and json.loads(out) == written(root) and written(root)["mode"] == "rounding"
    code, out, _ = rgt_reconcile(root, capsys, "--mode", "exact", "--format", "json")
    assert code == 1 and json.loads(out)["mode"] == "exact" and [d["reported"] for d in written(root)["drifts"]] == [
        31.42]
    project(root, {"paper.txt": "PSNR 31.42\n"}, PSNR_PRECISE, extra='mode = "exact"\n')
    code, _, _ = rgt_reconcile(root, capsys)
    assert code == 1 and written(root)["mode"] == "exact"


def test_document_text_is_escaped_on_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.50 \x1b[2J\x07 dB\n"}, PSNR)
    code, out, _ = rgt_reconcile(root, capsys)
    assert code == 1
    assert "\x1b" not in out and "\x07" not in out
    assert "      | PSNR 31.50 \\x1b[2J\\x07 dB" in out.splitlines()


@pytest.mark.parametrize(("docs", "message"), [
    ({"paper.txt": b"PSNR 31.42 \xe9t\xe9\n"}, "paper.txt: not UTF-8 text (invalid continuation byte at byte 11); "
                                             "not reconciled"),
    ({}, "no documents to reconcile"),
])
def test_an_unreadable_document_or_none_configured_is_exit_2_and_nothing_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: dict[str, str | bytes], message: str) -> None:
    root = project(tmp_path / "p", docs, PSNR)
    code, out, err = rgt_reconcile(root, capsys)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (root / "reconcile.json").exists()


def test_a_configured_document_that_is_gone_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n"}, PSNR)
    (root / "paper.txt").unlink()
    code, _, err = rgt_reconcile(root, capsys)
    assert code == 2 and "paper.txt: no such file; not reconciled" in err
    assert not (root / "reconcile.json").exists()


def test_doc_line_is_the_line_an_editor_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.md": "# Results\u2028\x0c\x1c\r\nOur PSNR 31.50 dB.\r\n"}, PSNR)
    code, out, _ = rgt_reconcile(root, capsys)
    assert code == 1
    assert "DRIFT paper.md:2:10  C1 psnr: reads 31.50 where EVIDENCE.json has 31.42 (31.42)" in out.splitlines()
    assert [(d["line"], d["col"]) for d in written(root)["drifts"]] == [(2, 10)]


def test_a_fifo_named_as_a_document_is_refused_unread_not_waited_on(tmp_path: Path) -> None:
    """In its own process, so that the old behaviour (open() waiting for a writer for ever) fails on the timeout
    instead of hanging the suite."""
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n"}, PSNR)
    (root / "rgt.toml").write_text('[project]\nname = "p"\n\n[deliver]\ndocs = ["paper.txt", "pipe.md"]\n',
                                   encoding="utf-8")
    os.mkfifo(root / "pipe.md")
    done = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "reconcile", str(root)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "rgt: pipe.md: not a regular file (a FIFO): refused unread; not reconciled ([deliver] docs in "
        f"{root / 'rgt.toml'})"]
    assert not (root / "reconcile.json").exists()


def test_a_glob_reaching_outside_through_a_link_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.md").write_text("PSNR 31.50\n", encoding="utf-8")
    root = project(tmp_path / "p", {"docs/paper.md": "PSNR 31.42\n"}, PSNR)
    (root / "docs" / "leak.md").symlink_to(outside / "secret.md")
    (root / "linked").symlink_to(outside)
    for pattern in ("docs/*.md", "linked/*.md"):
        (root / "rgt.toml").write_text(f'[project]\nname = "p"\n\n[deliver]\ndocs = ["{pattern}"]\n', encoding="utf-8")
        code, out, err = rgt_reconcile(root, capsys)
        assert code == 2 and out == ""
        leaked = "docs/leak.md" if pattern.startswith("docs") else "linked/secret.md"
        assert f"{leaked}: outside the project root; refused" in err
        assert not (root / "reconcile.json").exists()


def test_a_path_out_of_the_project_in_rgt_toml_is_a_config_error_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"../escape.md": "PSNR 31.42\n"}, PSNR)
    code, _, err = rgt_reconcile(root, capsys)
    assert code == 2
    assert "rgt.toml:5: deliver.docs: '../escape.md' is outside the project" in err


def test_a_literal_path_to_rgt_s_own_file_is_a_config_error_naming_it(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n", "runs/r1/notes.md": "PSNR 31.42\n"}, PSNR)
    (root / "rgt.toml").write_text('[project]\nname = "p"\n\n[deliver]\ndocs = ["paper.txt", "./EVIDENCE.json"]\n',
                                   encoding="utf-8")
    code, out, err = rgt_reconcile(root, capsys)
    assert (code, out) == (2, "")
    assert "rgt.toml:5: deliver.docs: './EVIDENCE.json' is rgt's own file, never a document" in err
    (root / "rgt.toml").write_text('[project]\nname = "p"\n\n[deliver]\ndocs = ["paper.txt"]\n\n'
                                   '[verify.reconcile]\ndocs = ["runs/r1/notes.md"]\n', encoding="utf-8")
    code, out, err = rgt_reconcile(root, capsys)
    assert (code, out) == (2, "")
    assert err == ("rgt: runs/r1/notes.md: rgt's own file, never a document; refused; not reconciled ([deliver] "
                   f"docs in {root / 'rgt.toml'})\n")
    assert not (root / "reconcile.json").exists()


@pytest.mark.parametrize(("ev", "message"), [
    (evidence(claim("C1", row("psnr", "n/a"))), "no evidence row holds a numeric value"),
    (None, "EVIDENCE.json: no such file"),
])
def test_zero_scalar_claims_or_no_evidence_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     ev: dict[str, Any] | None, message: str) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n"}, ev)
    code, _, err = rgt_reconcile(root, capsys)
    assert code == 2 and message in err
    assert not (root / "reconcile.json").exists()


def test_a_value_beyond_a_double_once_scaled_is_a_warning_not_an_internal_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ev = evidence(claim("C1", row("psnr", 31.42)), claim("C2", row("acc", 1e308, display_scale=100)))
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.50, acc 91\n"}, ev)
    code, out, err = rgt_reconcile(root, capsys)
    assert (code, err) == (1, "")
    assert out.splitlines()[3:] == [
        "warning: C2: value 1e+308 × display_scale 100 is beyond a double: skipped as non-numeric, not reconciled",
        "info: C1 (psnr = 31.42) appears in no document", "coverage: 0/1 scalar claim(s) quoted consistently",
        "wrote reconcile.json: 1 drift(s)"]
    assert written(root)["warnings"][0]["claim_ids"] == ["C2"]


def test_numbers_a_double_cannot_hold_are_no_number_and_a_long_one_is_a_drift_not_an_internal_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long = "1." + "0" * 120
    root = project(tmp_path / "p", {"paper.txt": f"PSNR 5e900\nPSNR {long}\nPSNR 2e-1000000000\n"}, PSNR)
    code, out, err = rgt_reconcile(root, capsys)
    assert (code, err) == (1, "")
    body = written(root)
    assert [(d["line"], d["reported"], d["expected"]) for d in body["drifts"]] == [
        (2, 1.0, f"{31.42:.120f}")]
    assert [(i["kind"], i["line"]) for i in body["infos"]] == [("anchor_without_number", 1),
                                                                ("anchor_without_number", 3)]
    assert "Infinity" not in (root / "reconcile.json").read_text(encoding="utf-8")


def test_malformed_evidence_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n"}, None)
    (root / "EVIDENCE.json").write_text('{"claims": [], "claims": []}', encoding="utf-8")
    code, _, err = rgt_reconcile(root, capsys)
    assert code == 2 and "EVIDENCE.json: malformed JSON: duplicate key" in err


def test_deliver_docs_and_verify_reconcile_docs_are_one_list_for_the_verb_and_v31(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stale number in a document only [verify.reconcile] names is found by `rgt reconcile`, and one only
    [deliver] names is found by V31: both read the merged, deduplicated list."""
    root = project(tmp_path / "p", {"paper.md": "PSNR 31.50\n", "notes.txt": "PSNR 31.40\n"}, PSNR,
                   extra='\n[verify.reconcile]\ndocs = ["notes.txt", "paper.md"]\n')
    (root / "rgt.toml").write_text((root / "rgt.toml").read_text().replace('docs = ["paper.md", "notes.txt"]',
                                                                           'docs = ["paper.md"]'), encoding="utf-8")
    config = load_project(root / "rgt.toml")
    assert config.deliver.docs == ("paper.md", "notes.txt")
    spec = by_name("V31")
    assert spec is not None
    assert params_for(spec, config.audit.overrides)["docs"] == ["paper.md", "notes.txt"]
    code, _, _ = rgt_reconcile(root, capsys)
    assert code == 1 and [(d["doc"], d["reported"]) for d in written(root)["drifts"]] == [
        ("paper.md", 31.5), ("notes.txt", 31.4)]
    v31 = documents.check(load(root), params_for(spec, config.audit.overrides))
    assert sorted(f.subject for f in v31.findings if f.severity == "error") == ["doc:notes.txt:1", "doc:paper.md:1"]


def test_a_mode_set_twice_must_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.42\n"}, PSNR,
                   extra='mode = "exact"\n\n[verify.reconcile]\nmode = "rounding"\n')
    code, _, err = rgt_reconcile(root, capsys)
    assert code == 2
    assert "rgt.toml:6: deliver.mode: 'exact' disagrees with [verify.reconcile] mode 'rounding'" in err


def test_the_console_script_in_its_own_process(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"paper.txt": "PSNR 31.50\n"}, PSNR)
    done = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "reconcile"], cwd=root, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 1, done.stderr
    assert "DRIFT paper.txt:1:6  C1 psnr: reads 31.50 where EVIDENCE.json has 31.42 (31.42)" in done.stdout
    assert written(root)["exit_code"] == 1
