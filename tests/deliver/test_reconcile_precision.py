"""Issue 26 item 12: `rgt reconcile` no longer accepts a number that says less than the evidence.

A quote that rounds correctly but has fewer decimals than the claim's precision (declared, else the two decimals
the build shows) is a drift (`reason: coarser_than_precision`), unless the sentence marks it approximate
between the anchor and the number (about, ~, ≈, roughly, …): then it is a coarse quote, listed in
reconcile.json `coarse_quotes` and printed as `COARSE`, and the exit code stays 0. Everything runs through the
real CLI entry point (`rgt reconcile`) on files in a temporary project, and reads back the reconcile.json the
verb wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main

#: the public skill whose reconcile test vectors R1-R5 are restated below (facts only: inputs and verdicts)
SKILL = ("github.com/Hanyuyuan6/remote-gpu-trainer, scripts/test_reconcile.py (testing scripts/reconcile.py), "
         "commit 892e5674ccf3cc36ed81715c4ebc4da0be2ecfa7")


def _evidence(*rows: tuple[str, str, Any, dict[str, Any]]) -> dict[str, Any]:
    """EVIDENCE.json with one claim per (claim id, metric, value, extra row keys)."""
    return {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "precision",
            "claims": [{"id": cid, "statement": "s", "evidence": [{"metric": metric, "value": value, **extra}]}
                       for cid, metric, value, extra in rows]}


def _reconcile(root: Path, docs: dict[str, str], ev: dict[str, Any], capsys: pytest.CaptureFixture[str],
               *args: str) -> tuple[int, str, dict[str, Any]]:
    root.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(json.dumps(name) for name in docs)
    (root / "rgt.toml").write_text(f'[project]\nname = "p"\n\n[deliver]\ndocs = [{listed}]\n', encoding="utf-8")
    for name, text in docs.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "EVIDENCE.json").write_text(json.dumps(ev), encoding="utf-8")
    capsys.readouterr()
    code = main(["reconcile", str(root), *args])
    out, _ = capsys.readouterr()
    return code, out, json.loads((root / "reconcile.json").read_text(encoding="utf-8"))


ACC = _evidence(("C-acc", "test_accuracy", 0.9701, {}))
PSNR = _evidence(("C1", "psnr_set5", 31.42, {}))


@pytest.mark.parametrize(("ev", "text", "reported", "expected"), [
    pytest.param(ACC, "We reach a test accuracy of 1 on the held-out set.", 1.0, "0.97", id="accuracy 1 for 0.9701"),
    pytest.param(PSNR, "Our PSNR 31 dB on Set5.", 31.0, "31.42", id="PSNR 31 for 31.42"),
    pytest.param(PSNR, "Our PSNR 31.4 dB on Set5.", 31.4, "31.42", id="PSNR 31.4 for 31.42"),
])
def test_a_quote_coarser_than_the_claim_is_a_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    ev: dict[str, Any], text: str, reported: float,
                                                    expected: str) -> None:
    """The three quotes of issue 26 item 12: each rounds to the value at its own decimals (so rgt's rounding
    mode passed them, exit 0) but says less than the two decimals the evidence is shown with; the skill's
    exact comparison flags all three."""
    code, out, body = _reconcile(tmp_path / "p", {"paper.md": text + "\n"}, ev, capsys)
    assert code == body["exit_code"] == 1
    [drift] = body["drifts"]
    assert (drift["reported"], drift["expected"], drift["reason"], drift["precision"]) == (
        reported, expected, "coarser_than_precision", 2)
    assert body["coarse_quotes"] == [] and body["coverage"] == {ev["claims"][0]["id"]: []}
    assert "coarser than the claim's precision (2 decimal(s))" in out
    assert out.splitlines()[-1] == "wrote reconcile.json: 1 drift(s)"


@pytest.mark.parametrize(("doc", "text", "marker"), [
    ("paper.md", "Our PSNR is about 31 dB on Set5.", "about"),
    ("paper.md", "Our PSNR ~31 dB on Set5.", "~"),
    ("paper.md", "Our PSNR ≈ 31.4 dB on Set5.", "≈"),
    ("paper.md", "Our PSNR of roughly 31 dB on Set5.", "roughly"),
    ("paper.md", "Our PSNR reaches Approximately 31.4 dB.", "Approximately"),
    ("paper.tex", r"Our PSNR $\approx 31.4$\,dB on Set5.", r"\approx"),
])
def test_a_coarse_quote_marked_approximate_is_reported_not_failed(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str], doc: str,
                                                                   text: str, marker: str) -> None:
    code, out, body = _reconcile(tmp_path / "p", {doc: text + "\n"}, PSNR, capsys)
    assert code == body["exit_code"] == 0 and body["drifts"] == []
    [quote] = body["coarse_quotes"]
    assert (quote["doc"], quote["line"], quote["claim_ids"], quote["expected"], quote["precision"],
            quote["marker"]) == (doc, 1, ["C1"], "31.42", 2, marker)
    assert body["coverage"] == {"C1": [f"{doc}:1"]}
    [line] = [line for line in out.splitlines() if line.startswith("COARSE ")]
    assert f"reads {marker} {quote['reported_text']} where EVIDENCE.json has 31.42" in line
    assert out.splitlines()[-1] == "wrote reconcile.json: no drift, 1 coarse quote(s) marked approximate"
    code, out, _ = _reconcile(tmp_path / "p", {doc: text + "\n"}, PSNR, capsys, "--format", "json")
    assert code == 0 and json.loads(out)["coarse_quotes"] == [quote]


def test_a_mark_elsewhere_in_the_line_does_not_excuse_a_coarse_quote(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, body = _reconcile(tmp_path / "p", {"paper.md": "About the model: PSNR 31 on Set5.\n"}, PSNR, capsys)
    assert code == 1 and [d["reason"] for d in body["drifts"]] == ["coarser_than_precision"]


@pytest.mark.parametrize(("value", "extra", "text", "drifts"), [
    (31.4238, {"precision": 1}, "PSNR 31.4", 0),   # the declared precision is one decimal: 31.4 says it all
    (31.4238, {"precision": 3}, "PSNR 31.42", 1),  # three declared: two decimals are coarse
    (31.4238, {"precision": 0}, "PSNR 31", 0),
    (0.5, {}, "PSNR 0.5", 0),                     # the value itself, with fewer decimals than two
    (31.0, {}, "PSNR 31", 0),
    (31.42, {}, "PSNR 31.420", 0),                # more decimals than the precision, still the value
    (0.9123, {"display_scale": 100, "precision": 1}, "PSNR 91.2%", 0),
    (0.9123, {"display_scale": 100}, "PSNR 91%", 1),
])
def test_the_precision_is_the_declared_one_else_the_displayed_two_decimals(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], value: float, extra: dict[str, Any], text: str,
        drifts: int) -> None:
    ev = _evidence(("C1", "psnr", value, extra))
    code, _, body = _reconcile(tmp_path / "p", {"paper.txt": text + "\n"}, ev, capsys)
    assert (code, len(body["drifts"])) == ((1, 1) if drifts else (0, 0))


def test_the_undeclared_precision_is_the_one_the_build_shows() -> None:
    from remote_gpu_trainer.audits.catalogue.reconcile.compare import DISPLAY_PRECISION
    from remote_gpu_trainer.deliver.disclosure import DEFAULT_PRECISION

    assert DISPLAY_PRECISION == DEFAULT_PRECISION


# --- the skill's own vectors (R1-R5) --------------------------------------------------------------------------

def _skill_evidence() -> dict[str, Any]:
    """R1-R4's claims map: one claim whose scalar is nested under evidence[] (psnr_set5 = 31.42)."""
    return {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "drift-test", "claims": [{
        "id": "C1", "statement": "Our method's PSNR on Set5.", "paper_anchor": "Table 2, row 1",
        "evidence": [{"exp_id": "baseline", "run": "selected", "metric": "psnr_set5", "value": 31.42,
                      "split": "test"}]}]}


def test_skill_r1_a_changed_value_is_one_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """R1 of the skill's reconcile vectors (source: see SKILL): a paper stating PSNR 31.50 against the
    authoritative 31.42 yields exactly one drift, naming psnr_set5, 31.42, 31.50 and the paper."""
    text = "In this paper the PSNR on Set5 comes out at 31.50, better than before.\n"
    code, _, body = _reconcile(tmp_path / "p", {"paper.md": text}, _skill_evidence(), capsys)
    assert code == 1
    assert [(d["doc"], d["metric"], d["authoritative"], d["reported"]) for d in body["drifts"]] == [
        ("paper.md", "psnr_set5", 31.42, 31.5)]
    assert SKILL.endswith("892e5674ccf3cc36ed81715c4ebc4da0be2ecfa7")


def test_skill_r2_the_exact_value_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """R2 of the skill's vectors (source: see SKILL): a README quoting 31.42 has no drift."""
    text = "Set5 result: PSNR 31.42 (claim C1 of EVIDENCE.json).\n"
    code, _, body = _reconcile(tmp_path / "p", {"README.md": text}, _skill_evidence(), capsys)
    assert (code, body["drifts"], body["coverage"]) == (0, [], {"C1": ["README.md:1"]})


def test_skill_r3_only_the_wrong_document_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """R3 of the skill's vectors (source: see SKILL): a clean README and a paper with 31.50 together give one
    drift, in the paper."""
    docs = {"README.md": "PSNR 31.42 on Set5.\n", "paper.md": "PSNR 31.50 on Set5.\n"}
    code, _, body = _reconcile(tmp_path / "p", docs, _skill_evidence(), capsys)
    assert code == 1 and [d["doc"] for d in body["drifts"]] == ["paper.md"]


def test_skill_r4_spread_count_and_table_number_are_not_the_value(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """R4 of the skill's vectors (source: see SKILL): after the anchor only the first standalone number is the
    value; the ± spread, the sample count and the table number in the same sentence are not drifts."""
    text = "PSNR 31.42 ± 0.08, n=100 (Table 2).\n"
    code, _, body = _reconcile(tmp_path / "p", {"paper.md": text}, _skill_evidence(), capsys)
    assert (code, body["drifts"], body["coarse_quotes"]) == (0, [], [])


def test_skill_r5_aliases_tell_two_psnr_claims_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """R5 of the skill's vectors (source: see SKILL): claims with aliases PSNR/Set5 (31.42) and PSNR/Set14
    (28.10) quoted in one line are both clean; aliases replace the shared generic anchor."""
    ev = {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "drift-test", "claims": [
        {"id": "C1", "aliases": ["PSNR/Set5"], "evidence": [{"metric": "psnr_set5", "value": 31.42}]},
        {"id": "C2", "aliases": ["PSNR/Set14"], "evidence": [{"metric": "psnr_set14", "value": 28.10}]}]}
    code, _, body = _reconcile(tmp_path / "p", {"paper.md": "PSNR/Set5 31.42; PSNR/Set14 28.10.\n"}, ev, capsys)
    assert (code, body["drifts"], body["warnings"]) == (0, [], [])
    assert body["coverage"] == {"C1": ["paper.md:1"], "C2": ["paper.md:1"]}
