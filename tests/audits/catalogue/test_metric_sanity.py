"""VERIFY section C, metric sanity (V10–V13), on small real capsules written to disk (docs/verify.md §2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.load import Declarations
from remote_gpu_trainer.audits.catalogue.metric_sanity import CHECKS
from remote_gpu_trainer.audits.catalogue.model import CheckResult, MetricRule, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.runner import specs
from support.capsules import classification_items, load, write_capsule, write_evidence, write_json


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    params = dict(specs()[check].params)
    params.update(overrides)
    return CHECKS[check](project, params)


def claim(cid: str, cells: list[str], metric: str, **row: Any) -> dict[str, Any]:
    return {"id": cid, "evidence": [{"cells": cells, "test_id": "main", "metric": metric, **row}]}


def test_every_check_of_the_section_is_here_under_its_catalogue_name(tmp_path: Path) -> None:
    assert sorted(CHECKS) == sorted(cid for cid, spec in specs().items() if spec.section == "metric_sanity")
    project = load(tmp_path)
    assert {cid: run(cid, project).name for cid in CHECKS} == {cid: specs()[cid].name for cid in CHECKS}


# -- V10 ----------------------------------------------------------------------------------------------------------
def test_v10_known_metrics_with_agreeing_directions_pass(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9, "loss": 0.3},
                  directions={"loss": "lower_is_better"}, items=classification_items(10, correct=9))
    outcome = run("V10", load(tmp_path))
    assert outcome.status == "pass"
    assert outcome.subjects == ("capsule:r/seed0",)


def test_v10_unknown_metric_is_an_error_until_declared(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"wibble": 0.5}, items=classification_items(10, correct=5),
                  train=[{"step": 1, "epoch": 1, "loss": 1.0, "val/wobble": 0.2}])
    outcome = run("V10", load(tmp_path))
    [finding] = outcome.findings
    assert finding.severity == "error"
    assert finding.subject == "capsule:r/seed0"
    assert finding.values["unknown"] == ["val/wobble (in train.csv)", "wibble (in metrics.json)"]
    assert "declare it once in rgt.toml [metrics]" in finding.message
    assert {ref.path for ref in finding.evidence} == {"runs/r/seed0/test/main/metrics.json", "runs/r/seed0/train.csv"}
    assert all(ref.sha256 for ref in finding.evidence)

    declared = Declarations(metrics={"wibble": MetricRule("wibble", "max"), "wobble": MetricRule("wobble", "min")})
    assert run("V10", load(tmp_path, declared)).status == "pass"


def test_v10_direction_written_against_the_registry_is_an_error(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"psnr": 30.0, "ssim": 0.9}, directions={"psnr": "lower_is_better"},
                  items=[{"psnr": 30.0, "ssim": 0.9}])
    [finding] = run("V10", load(tmp_path)).findings
    assert finding.severity == "error"
    assert finding.values["disagree"] == ["psnr written lower_is_better, registry higher_is_better"]


def test_v10_evidence_number_on_a_monitor_metric_warns_and_a_wrong_direction_errs(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9, "grad_norm": 1.2},
                  items=[{"acc": 0.9, "grad_norm": 1.2}])
    write_evidence(tmp_path, [claim("C1", ["r/seed0"], "grad_norm"),
                              claim("C2", ["r/seed0"], "acc", direction="lower_is_better"),
                              claim("C3", ["r/seed0"], "acc", direction="higher_is_better")])
    outcome = run("V10", load(tmp_path))
    by_subject = {f.subject: f for f in outcome.findings}
    assert by_subject["claim:C1"].severity == "warn"
    assert by_subject["claim:C1"].message == "grad_norm is a monitor metric, not an objective"
    assert by_subject["claim:C2"].severity == "error"
    assert "claim:C3" not in by_subject and "claim:C3" in outcome.passed_subjects
    assert by_subject["claim:C1"].evidence[0].path == "EVIDENCE.json"
    assert "capsule:r/seed0" in outcome.passed_subjects


def test_v10_skips_an_empty_project(tmp_path: Path) -> None:
    outcome = run("V10", load(tmp_path))
    assert outcome.status == "skipped" and "metrics.json" in outcome.note


# -- V11 ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("correct", "flagged"), [(103, True), (300, False)])
def test_v11_ten_way_accuracy_near_one_tenth_is_at_chance(tmp_path: Path, correct: int, flagged: bool) -> None:
    items = classification_items(1000, correct=correct, classes=10)
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": correct / 1000}, items=items)
    outcome = run("V11", load(tmp_path))
    assert outcome.subjects == ("number:r/main/acc",)
    if not flagged:
        assert outcome.status == "pass"
        return
    [finding] = outcome.findings
    assert finding.severity == "error"
    assert finding.message.startswith("metric at chance: carries no signal")
    assert finding.values["floor"] == pytest.approx(0.1)
    assert finding.values["chance"] == "majority"
    assert finding.values["se"] == pytest.approx((0.1 * 0.9 / 1000) ** 0.5)
    assert finding.values["tolerance"] == pytest.approx(2 * (0.1 * 0.9 / 1000) ** 0.5)
    assert finding.values["n"] == 1000


def test_v11_majority_floor_follows_an_unbalanced_target(tmp_path: Path) -> None:
    items = [{"target": 0 if i < 80 else 1, "pred": 0, "acc": float(i < 80)} for i in range(100)]
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.8}, items=items)
    [finding] = run("V11", load(tmp_path)).findings
    assert finding.values["floor"] == pytest.approx(0.8)


def test_v11_top_k_floor_is_k_over_classes_from_the_config(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", config={"model": {"num_classes": 10}}, metrics={"top5": 0.51},
                  items=[{"top5": 0.51}] * 400)
    [finding] = run("V11", load(tmp_path)).findings
    assert finding.values["floor"] == pytest.approx(0.5) and finding.values["chance"] == "top_k"


def test_v11_auroc_at_one_half_and_mse_at_target_variance_are_flagged(tmp_path: Path) -> None:
    targets = [float(i % 4) for i in range(40)]  # variance 1.25
    write_capsule(tmp_path, "r", "seed0", metrics={"auroc": 0.505, "mse": 1.26, "mae": 0.2},
                  items=[{"target": t, "auroc": 0.5, "mse": 1.26, "mae": 0.2} for t in targets])
    outcome = run("V11", load(tmp_path))
    flagged = {f.subject: f.values["floor"] for f in outcome.findings}
    assert flagged == {"number:r/main/auroc": pytest.approx(0.5), "number:r/main/mse": pytest.approx(1.25)}
    assert "number:r/main/mae" in outcome.passed_subjects


def test_v11_a_metric_without_a_computable_floor_is_not_judged(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"psnr": 10.0}, items=[{"psnr": 10.0}])
    outcome = run("V11", load(tmp_path))
    assert outcome.status == "skipped"
    assert "number:r/main/psnr: the mean-image PSNR needs the images" in outcome.note


def test_v11_claim_numbers_carry_their_claim(tmp_path: Path) -> None:
    for seed in range(3):
        write_capsule(tmp_path, "r", f"seed{seed}", seed=seed, metrics={"acc": 0.1},
                      items=classification_items(200, correct=20))
    write_evidence(tmp_path, [claim("C1", ["r/seed0", "r/seed1", "r/seed2"], "acc")])
    [finding] = run("V11", load(tmp_path)).findings
    assert finding.subject == "claim:C1" and finding.claims == ("C1",)
    assert len([ref for ref in finding.evidence if ref.path.endswith("metrics.json")]) == 3


# -- V12 ----------------------------------------------------------------------------------------------------------
def test_v12_a_val_split_number_warns_and_its_test_twin_passes(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, items=classification_items(10, correct=9),
                  split="val")
    write_capsule(tmp_path, "t", "seed0", metrics={"acc": 0.9}, items=classification_items(10, correct=9))
    write_evidence(tmp_path, [claim("C1", ["r/seed0"], "acc"), claim("C2", ["t/seed0"], "acc")])
    outcome = run("V12", load(tmp_path))
    [finding] = outcome.findings
    assert (finding.subject, finding.severity, finding.disclosure) == ("claim:C1", "warn", "val-split number")
    assert "claim:C2" in outcome.passed_subjects


def _shuffled_control(tmp_path: Path, shuffled_correct: int) -> None:
    real = classification_items(100, correct=95)
    shuffled = classification_items(100, correct=shuffled_correct)
    items = [{**row, "item_id": f"r{i}", "condition": "real"} for i, row in enumerate(real)]
    items += [{**row, "item_id": f"s{i}", "condition": "shuffled"} for i, row in enumerate(shuffled)]
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.95}, items=items, split="val")


def test_v12_shuffled_val_control_far_below_chance_warns(tmp_path: Path) -> None:
    _shuffled_control(tmp_path, shuffled_correct=3)  # 0.03 vs chance 0.10, SE 0.03 over 100 items
    [finding] = run("V12", load(tmp_path)).findings
    assert finding.subject == "capsule:r/seed0" and finding.severity == "warn"
    assert finding.message.startswith("val baseline optimistic artifact; re-run on test")
    assert finding.values["shuffled"] == pytest.approx(0.03) and finding.values["floor"] == pytest.approx(0.1)


def test_v12_shuffled_val_control_at_chance_is_quiet(tmp_path: Path) -> None:
    _shuffled_control(tmp_path, shuffled_correct=9)
    outcome = run("V12", load(tmp_path))
    assert outcome.status == "pass" and outcome.subjects == ("capsule:r/seed0",)


def test_v12_skips_without_claims_or_val_controls(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, items=classification_items(10, correct=9))
    assert run("V12", load(tmp_path)).status == "skipped"


# -- V13 ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "why"), [
    ({"metrics": {"acc": 0.0}}, "n == 0"),
    ({"metrics": {}, "n": 10}, "empty metrics"),
    ({"metrics": {"acc": 0.5}, "n": 10, "metrics_extra": {"scored": 0}}, "0 scored"),
])
def test_v13_a_metric_that_did_not_apply_is_an_error(tmp_path: Path, kwargs: dict[str, Any], why: str) -> None:
    write_capsule(tmp_path, "r", "seed0", **kwargs)
    [finding] = run("V13", load(tmp_path)).findings
    assert finding.severity == "error"
    assert finding.message == f"metric did not apply: test main has {why} (never report it as a gap of 0)"


def test_v13_declared_not_applicable_and_a_scored_test_pass(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={}, metrics_extra={"metric_applicability": "not_applicable"})
    write_capsule(tmp_path, "t", "seed0", metrics={"acc": 0.5}, items=classification_items(10, correct=5))
    outcome = run("V13", load(tmp_path))
    assert outcome.status == "pass" and outcome.subjects == ("capsule:t/seed0",)


def test_v13_all_zero_task_metrics_while_loss_fell_is_no_predictions(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"map": 0.0, "acc": 0.0, "latency": 3.0},
                  items=[{"map": 0.0, "acc": 0.0, "latency": 3.0}] * 5)
    [finding] = run("V13", load(tmp_path)).findings
    assert finding.message.startswith("no predictions emitted: check decode, class offset, score floor")
    assert finding.values["main.all_zero"] == ["acc", "map"]


def test_v13_all_zero_while_loss_rose_or_one_metric_nonzero_is_quiet(tmp_path: Path) -> None:
    rising = [{"step": s, "epoch": s, "loss": 0.1 * s} for s in range(1, 5)]
    write_capsule(tmp_path, "r", "seed0", metrics={"map": 0.0}, items=[{"map": 0.0}] * 5, train=rising)
    write_capsule(tmp_path, "t", "seed0", metrics={"map": 0.0, "acc": 0.2}, items=[{"map": 0.0, "acc": 0.2}] * 5)
    assert run("V13", load(tmp_path)).status == "pass"


def test_v13_merges_two_empty_tests_into_one_finding_for_the_capsule(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.0})
    write_capsule(tmp_path, "r", "seed0", metrics={}, n=4, test_id="other")
    [finding] = run("V13", load(tmp_path)).findings
    assert finding.values == {"main.empty": "n == 0", "other.empty": "empty metrics"}


def test_v13_malformed_metrics_json_is_skipped_not_raised(tmp_path: Path) -> None:
    folder = write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.5}, items=classification_items(4, correct=2))
    (folder / "test" / "main" / "metrics.json").write_text("{not json", encoding="utf-8")
    outcome = run("V13", load(tmp_path))
    assert outcome.status == "skipped"
    write_json(folder / "test" / "main" / "metrics.json", ["a", "list"])
    assert run("V13", load(tmp_path)).status == "skipped"
