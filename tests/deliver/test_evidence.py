"""`rgt build evidence` through the real CLI on real capsule files (docs/deliver.md §2): every generated field
with the exact number the files give, the user's fields kept in their order, a rebuild that changes nothing
but generated_at, a changed source that changes the value and its macro, a row whose cell has no
metrics.json, and each bad input refused with one line and nothing written."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import trim_mean

from remote_gpu_trainer.cli import main
from support.capsules import write_capsule
from support.claims_project import CELLS, PSNR, RUN, claim, files_project, read_evidence, stage_capsule, unpulled

EPOCH_1, EPOCH_2 = "1780000000", "1780000100"  # SOURCE_DATE_EPOCH: generated_at 2026-05-28T20:26:40Z, …20:28:20Z


def project(root: Path, claims: list[dict[str, Any]], values: dict[str, float] | None = None) -> Path:
    return files_project(root, claims, values)


def build(root: Path, capsys: pytest.CaptureFixture[str], what: str = "evidence",
          *extra: str) -> tuple[int, str, str]:
    code = main(["build", what, str(root), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(autouse=True)
def fixed_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH_1)


def test_every_generated_field_is_the_exact_number_the_metrics_files_give(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, [claim()])
    code, out, err = build(root, capsys)
    assert (code, err) == (0, "")
    document = read_evidence(root)
    values = [PSNR[c] for c in CELLS]
    row = document["claims"][0]["evidence"][0]
    assert row["value"] == math.fsum(values) / 3
    assert row["variance"] == {"type": "std_over_seeds", "value": statistics.stdev(values)}
    assert row["variance"]["value"] != 0.08  # full precision, never rounded to what is shown
    assert (row["direction"], row["split"], row["n"], row["seeds"]) == ("higher_is_better", "test", 5, 3)
    assert row["sources"] == [{"path": f"runs/{RUN}/{c}/test/set5/metrics.json",
                               "sha256": sha(root / "runs" / RUN / c / "test" / "set5" / "metrics.json")}
                              for c in CELLS]
    assert document["generated_at"] == "2026-05-28T20:26:40Z"
    assert list(document) == ["schema", "project", "generated_at", "claims"]
    assert list(document["claims"][0]) == ["id", "statement", "paper_anchor", "repo_implementation", "aliases",
                                           "tried", "disclosure", "findings", "state", "evidence"]
    assert list(row) == ["exp_id", "test_id", "metric", "aggregate", "cells", "aliases", "precision",
                         "display_scale", "figures", "tables", "value", "direction", "split", "n", "seeds",
                         "variance", "sources", "disclosures"]
    assert document["claims"][0]["state"] == "planned"  # nothing pulled or verified by rgt here
    assert row["disclosures"]["D8"] == f"unverified evidence: {unpulled()}"
    assert f"C1-main-psnr  planned  (not evaluated: not pulled by rgt: {unpulled(kind='')})" in out
    assert f"31.42 dB ↑ (test, n=5 items, 3 seeds, mean ± std 0.08; unverified evidence: {unpulled()})" in out


def test_iqm_and_single_aggregates_and_the_registry_direction(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    values = {"seed0": 30.0, "seed1": 31.0, "seed2": 35.0}
    root = project(tmp_path, [claim("C1", aggregate="iqm_over_seeds"),
                              claim("C2", cells=[f"{RUN}/seed2"], aggregate="single")], values)
    write_capsule(root, "r2", "seed0", metrics={"lpips": 0.081}, items=[{"lpips": 0.081}], directions={"lpips": ""})
    document = json.loads((root / "EVIDENCE.json").read_text())
    document["claims"].append({"id": "C3", "evidence": [{"test_id": "main", "metric": "lpips", "cells": ["r2/seed0"]}]})
    (root / "EVIDENCE.json").write_text(json.dumps(document))
    assert build(root, capsys)[0] == 0
    iqm, single, lpips = (c["evidence"][0] for c in read_evidence(root)["claims"])
    assert iqm["value"] == float(trim_mean([30.0, 31.0, 35.0], 0.25)) and iqm["seeds"] == 3
    assert single["value"] == 35.0 and single["variance"] == {"type": "none", "value": None}
    assert (lpips["direction"], lpips["value"]) == ("lower_is_better", 0.081)  # metrics.json says none: registry


def test_building_twice_changes_nothing_but_generated_at(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, [claim(), claim("C2", cells=[f"{RUN}/seed0"])])
    assert build(root, capsys, "macros")[0] == 0
    first, macros = (root / "EVIDENCE.json").read_bytes(), (root / "tables/macros/final.tex").read_bytes()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH_2)
    assert build(root, capsys, "macros")[0] == 0
    second = (root / "EVIDENCE.json").read_bytes()
    assert second != first
    assert second == first.replace(b"2026-05-28T20:26:40Z", b"2026-05-28T20:28:20Z")
    assert (root / "tables/macros/final.tex").read_bytes() == macros


def test_changing_one_source_changes_the_value_its_hash_and_the_macro(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, [claim()])
    assert build(root, capsys, "macros")[0] == 0
    assert "\\newcommand{\\ClaimCOneMainPsnr}{31.42}\n" in (root / "tables/macros/final.tex").read_text()
    stage_capsule(root, RUN, "seed1", 31.57, seed=1)  # seed1 re-evaluated: 31.42 -> 31.57
    assert build(root, capsys, "macros")[0] == 0
    row = read_evidence(root)["claims"][0]["evidence"][0]
    assert row["value"] == math.fsum([31.34, 31.57, 31.50]) / 3
    assert row["sources"][1]["sha256"] == sha(root / "runs" / RUN / "seed1" / "test" / "set5" / "metrics.json")
    assert "\\newcommand{\\ClaimCOneMainPsnr}{31.47}\n" in (root / "tables/macros/final.tex").read_text()


def test_a_row_whose_cell_has_no_metrics_is_planned_with_no_value(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, [claim(cells=[f"{RUN}/seed0", f"{RUN}/seed1", f"{RUN}/seed7"])])
    assert build(root, capsys)[0] == 0
    written = read_evidence(root)["claims"][0]
    assert written["state"] == "planned"
    assert written["evidence"][0]["value"] is None and written["evidence"][0]["variance"] is None
    assert written["disclosure"] == "not regenerable: no psnr in test/set5/metrics.json of r1/seed7; " \
                                    f"unverified evidence: {unpulled(('seed0', 'seed1'))}"


@pytest.mark.parametrize(("claims", "message"), [
    ([{"statement": "no id", "evidence": []}], 'EVIDENCE.json: claims[0]: key id: missing (every claim needs a '
                                               'stable id, e.g. "C1-main-psnr")'),
    ([claim(cells=["r1/seed0/../x"])], "EVIDENCE.json: claim C1-main-psnr evidence[0]: key cells: 'r1/seed0/../x' is "
                                       "not a capsule <run>/<cell>"),
    ([claim(aggregate="median_over_seeds")],
     "EVIDENCE.json: claim C1-main-psnr evidence[0]: key aggregate: 'median_over_seeds' is not one of "
     "mean_over_seeds, iqm_over_seeds, single"),
    ([claim(), claim()], "EVIDENCE.json: claim C1-main-psnr: key id: used by two claims (claims[1] repeats it)"),
    ([claim(precision=-1)], "EVIDENCE.json: claim C1-main-psnr evidence[0]: key precision: must be a whole number "
                            "of decimals, 0 to 15"),
])
def test_bad_user_fields_are_one_line_exit_2_and_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 claims: list[dict[str, Any]], message: str) -> None:
    root = project(tmp_path, claims)
    before = (root / "EVIDENCE.json").read_bytes()
    code, out, err = build(root, capsys, "macros")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"rgt: {message}"]
    assert (root / "EVIDENCE.json").read_bytes() == before
    assert not (root / "tables").exists()


def test_missing_or_malformed_evidence_json_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, [claim()])
    (root / "EVIDENCE.json").write_text('{"schema": "remote-gpu-trainer/EVIDENCE/v1", "claims": [], "claims": []}')
    code, _, err = build(root, capsys)
    assert code == 2 and "EVIDENCE.json: malformed JSON: duplicate key 'claims'" in err
    (root / "EVIDENCE.json").unlink()
    code, _, err = build(root, capsys)
    assert code == 2 and "no EVIDENCE.json in" in err and not (root / "EVIDENCE.json").exists()


def test_json_format_lists_each_claim_with_its_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = project(tmp_path, [claim()])
    code, out, _ = build(root, capsys, "macros", "--format", "json")
    document = json.loads(out)
    assert code == 0 and document["schema"] == "rgt-build-evidence/v1"
    assert (document["evidence"], document["macros"]) == ("EVIDENCE.json", "tables/macros/final.tex")
    (built,) = document["claims"]
    assert (built["id"], built["state"], built["findings"]) == ("C1-main-psnr", "planned", [])
    said = f"unverified evidence: {unpulled()}"  # written into runs/ here, never pulled
    assert built["rows"] == [{"subject": "claim:C1-main-psnr", "macro": "\\ClaimCOneMainPsnr",
                              "value": math.fsum(PSNR.values()) / 3,
                              "inline": f"31.42 dB ↑ (test, n=5 items, 3 seeds, mean ± std 0.08; {said})",
                              "disclosure": said}]
