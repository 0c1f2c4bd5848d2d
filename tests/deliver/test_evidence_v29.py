"""V29 on EVIDENCE.json's generated fields (docs/verify.md §2, docs/deliver.md §2): a field `rgt build evidence`
wrote and a person then edited is a critical finding naming the field, through the real `rgt audit`; every
recomputable field is judged; a rebuild makes the finding fixed at the next audit."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.integrity import CHECKS
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.cli import main
from support.capsules import load
from support.claims_project import CELLS, PSNR, RUN, claim, stage_capsule

Edit = Callable[[dict[str, Any]], None]


def built(root: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rgt.toml").write_text('[project]\nname = "v29"\n', encoding="utf-8")
    for seed, cell in enumerate(CELLS):
        stage_capsule(root, RUN, cell, PSNR[cell], seed=seed)
    (root / "EVIDENCE.json").write_text(json.dumps({"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "v29",
                                                    "claims": [claim()]}), encoding="utf-8")
    assert main(["build", "evidence", str(root)]) == 0
    capsys.readouterr()
    return root


def edit_row(root: Path, edit: Edit) -> None:
    path = root / "EVIDENCE.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    edit(document["claims"][0]["evidence"][0])
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")


def audit_v29(root: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["audit", str(root), "--check", "V29", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_fresh_build_passes_v29(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = built(tmp_path, capsys)
    answer = audit_v29(root, capsys)
    assert answer["checks"] == [{"id": "V29", "name": "rederive", "kind": "auto", "status": "pass", "note": "",
                                 "findings": 0}]
    result = CHECKS["V29"](load(root), specs()["V29"].params)
    assert "claim:C1-main-psnr" in result.subjects and result.findings == ()


def test_a_hand_edited_value_and_a_hand_edited_n_are_each_critical_through_rgt_audit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = built(tmp_path / "value", capsys)
    edit_row(root, lambda row: row.update(value=31.45))
    (finding,) = audit_v29(root, capsys)["findings"]
    assert (finding["check"], finding["subject"], finding["severity"]) == ("V29", "claim:C1-main-psnr", "critical")
    assert finding["message"] == ("evidence value not generated from artifacts: EVIDENCE says 31.45, the "
                                  "metrics.json files give 31.42")

    root = built(tmp_path / "n", capsys)
    edit_row(root, lambda row: row.update(n=100))
    (finding,) = audit_v29(root, capsys)["findings"]
    assert (finding["subject"], finding["severity"]) == ("claim:C1-main-psnr", "critical")
    assert finding["message"] == ("evidence field n not generated from artifacts: EVIDENCE says 100, the "
                                  "metrics.json files give 5 (rgt build evidence writes it)")


def test_rebuilding_fixes_the_finding_at_the_next_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = built(tmp_path, capsys)
    edit_row(root, lambda row: row.update(seeds=5))
    (finding,) = audit_v29(root, capsys)["findings"]
    assert main(["build", "evidence", str(root)]) == 0
    capsys.readouterr()
    assert audit_v29(root, capsys)["findings"] == []
    assert main(["finding", finding["id"], str(root)]) == 0
    assert "critical · fixed (auto)" in capsys.readouterr().out


def _variance(row: dict[str, Any]) -> None:
    row["variance"]["value"] = 0.05


def _source(row: dict[str, Any]) -> None:
    row["sources"][2]["sha256"] = "0" * 64


@pytest.mark.parametrize(("edit", "field", "said", "derived"), [
    (lambda row: row.update(direction="lower_is_better"), "direction", "'lower_is_better'", "'higher_is_better'"),
    (lambda row: row.update(split="val"), "split", "'val'", "'test'"),
    (lambda row: row.update(seeds=5), "seeds", "5", "3"),
    (_variance, "variance", "{'type': 'std_over_seeds', 'value': 0.05}",
     "{'type': 'std_over_seeds', 'value': 0.08000000000000007}"),
    (_source, "sources[2].sha256", "'" + "0" * 64 + "'", None),
    (lambda row: row.update(value=None), "value", "None", "31.42"),
])
def test_every_recomputable_field_is_judged_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Edit,
                                                      field: str, said: str, derived: str | None) -> None:
    root = built(tmp_path, capsys)
    edit_row(root, edit)
    (finding,) = CHECKS["V29"](load(root), specs()["V29"].params).findings
    assert (finding.subject, finding.severity) == ("claim:C1-main-psnr", "critical")
    assert finding.message.startswith(f"evidence field {field} not generated from artifacts: EVIDENCE says {said}, ")
    if derived is not None:
        assert finding.message.endswith(f"the metrics.json files give {derived} (rgt build evidence writes it)")


def test_a_row_the_build_never_touched_is_judged_on_its_value_only(tmp_path: Path) -> None:
    """A hand-written row without generated fields (an upstream claims map) is not a hand edit of them."""
    for seed, cell in enumerate(CELLS):
        stage_capsule(tmp_path, RUN, cell, PSNR[cell], seed=seed)
    (tmp_path / "EVIDENCE.json").write_text(json.dumps({"claims": [claim()]}), encoding="utf-8")
    result = CHECKS["V29"](load(tmp_path), specs()["V29"].params)
    assert "claim:C1-main-psnr" not in result.subjects and result.findings == ()
