"""The reconcile test vectors of the DELIVER spec (docs/deliver.md §6), as data: the pure algorithm's tests
(tests/audits/catalogue/test_reconcile.py) and the `rgt reconcile` verb's (tests/deliver/test_reconcile_verb.py)
run the same vectors, one through `reconcile()`, the other through the real CLI and reconcile.json."""

from __future__ import annotations

from typing import Any

import pytest


def row(metric: str, value: Any, **extra: Any) -> dict[str, Any]:
    return {"exp_id": "e", "test_id": "t", "cells": ["e/seed0"], "metric": metric, "value": value, **extra}


def claim(claim_id: str, *rows: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": claim_id, "statement": "s", "aliases": [], "evidence": list(rows), **extra}


def evidence(*claims: dict[str, Any]) -> dict[str, Any]:
    return {"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "t", "claims": list(claims)}


PSNR = evidence(claim("C1", row("psnr", 31.42)))
PSNR_PRECISE = evidence(claim("C1", row("psnr", 31.4238, precision=2)))
TWO_SETS = evidence(claim("C-set5", row("psnr_set5", 31.42)), claim("C-set14", row("psnr_set14", 28.10)))
ACC_PERCENT = evidence(claim("C-acc", row("acc", 0.9123, display_scale=100)))
ACC_PLAIN = evidence(claim("C-acc", row("acc", 0.9123)))
PARAMS = evidence(claim("C-params", row("params", 1250000)))
WITH_LPIPS = evidence(claim("C1", row("psnr", 31.42)), claim("C-lpips", row("lpips", 0.081)))
AMBIGUOUS = [("ambiguous_anchor", ("C-set5", "C-set14"))]


def expect(drifts: list[Any] | None = None, warnings: list[Any] | None = None, infos: list[Any] | None = None,
           missing: list[str] | None = None, covered: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"drifts": drifts or [], "warnings": warnings or [], "infos": infos or [], "missing": missing or [],
            "covered": covered or {}}


VECTORS = [
    pytest.param(PSNR, "paper.txt", "PSNR 31.50 dB",
                 expect(drifts=[("paper.txt", 1, 31.5, ("C1",))], missing=["C1"]), id="31.42 vs 31.50: drift"),
    pytest.param(PSNR, "paper.txt", "PSNR 31.42 ± 0.08, n=100 (Table 2)",
                 expect(covered={"C1": ["paper.txt:1"]}), id="31.42 with ± and n: ok"),
    pytest.param(PSNR_PRECISE, "paper.txt", "PSNR 31.42",
                 expect(covered={"C1": ["paper.txt:1"]}), id="31.4238 p2 as 31.42: ok"),
    pytest.param(PSNR_PRECISE, "paper.txt", "PSNR 31.4",
                 expect(drifts=[("paper.txt", 1, 31.4, ("C1",))], missing=["C1"]),
                 id="31.4238 p2 as 31.4: coarser than the precision, drift (issue 26)"),
    pytest.param(PSNR_PRECISE, "paper.txt", "PSNR 31.43",
                 expect(drifts=[("paper.txt", 1, 31.43, ("C1",))], missing=["C1"]), id="31.4238 p2 as 31.43: drift"),
    pytest.param(TWO_SETS, "paper.txt", "PSNR 28.10 on Set14",
                 expect(warnings=AMBIGUOUS, missing=["C-set5"], covered={"C-set14": ["paper.txt:1"]}),
                 id="shared generic anchor, fits set14: ok + ambiguous"),
    pytest.param(TWO_SETS, "paper.txt", "PSNR 29.00",
                 expect(drifts=[("paper.txt", 1, 29.0, ("C-set14", "C-set5"))], warnings=AMBIGUOUS,
                        missing=["C-set5", "C-set14"]), id="shared generic anchor, fits neither: drift lists both"),
    pytest.param(ACC_PERCENT, "paper.txt", "accuracy 91.23%",
                 expect(covered={"C-acc": ["paper.txt:1"]}), id="acc ×100 as 91.23%: ok"),
    pytest.param(ACC_PLAIN, "paper.txt", "accuracy 91.23%",
                 expect(drifts=[("paper.txt", 1, 91.23, ("C-acc",))], missing=["C-acc"]),
                 id="acc without display_scale as 91.23%: drift"),
    pytest.param(PSNR, "paper.txt", "PSNR-31.42", expect(covered={"C1": ["paper.txt:1"]}), id="PSNR-31.42: ok"),
    pytest.param(PSNR, "paper.tex", r"PSNR of $31.42\,$dB % old: 30.1",
                 expect(covered={"C1": ["paper.tex:1"]}), id="tex math, thin space, comment: ok"),
    pytest.param(PARAMS, "paper.txt", "params: 1,250,000",
                 expect(covered={"C-params": ["paper.txt:1"]}), id="thousands commas: ok"),
    pytest.param(PARAMS, "paper.tex", r"params: $1\,250\,000$",
                 expect(covered={"C-params": ["paper.tex:1"]}), id="LaTeX thin-space thousands: ok"),
    pytest.param(PARAMS, "paper.txt", "params: 1\u2009250\u202f000",
                 expect(covered={"C-params": ["paper.txt:1"]}), id="U+2009/U+202F thousands: ok"),
    pytest.param(PARAMS, "paper.tex", r"params: $1\,2500\,000$",
                 expect(drifts=[("paper.tex", 1, 1.0, ("C-params",))], missing=["C-params"]),
                 id="a thin space before four digits separates numbers: drift"),
    pytest.param(WITH_LPIPS, "paper.txt", "PSNR 31.42",
                 expect(missing=["C-lpips"], covered={"C1": ["paper.txt:1"]}), id="lpips absent: missing_from_docs"),
]
