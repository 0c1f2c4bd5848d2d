"""VERIFY section E (representation collapse) on real files: saved outputs as .npy, per-item results as CSV,
and probe answers as the probe program stores them."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remote_gpu_trainer.audits.catalogue.collapse import (
    CHECKS,
    input_spread_stats,
    output_cosine_stats,
    recompute,
)
from remote_gpu_trainer.audits.catalogue.model import CheckResult, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.runner import specs
from support.capsules import classification_items, load, write_capsule


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    return CHECKS[check](project, {**specs()[check].params, **overrides})


def with_probes(project: ProjectEvidence, check: str, answers: dict[str, dict[str, Any]]) -> ProjectEvidence:
    return dataclasses.replace(project, probes={(check, subject): a for subject, a in answers.items()})


def save_outputs(root: Path, run_id: str, array: np.ndarray, *, config: dict[str, Any] | None = None,
                 name: str = "outputs.npy") -> Path:
    folder = write_capsule(root, run_id, "seed0", config=config, metrics={"acc": 0.5},
                           items=classification_items(20, correct=10))
    path = folder / "test" / "main" / name
    np.save(path, array)
    return path


# -- V20 -------------------------------------------------------------------------------------------------------
def test_cosine_stats_of_collapsed_healthy_and_all_zero_outputs() -> None:
    rng = np.random.default_rng(0)
    c, spread = output_cosine_stats(np.ones((32, 64)) + 0.001 * rng.normal(size=(32, 64)))
    assert c > 0.999 and spread < 0.002
    c, spread = output_cosine_stats(rng.normal(size=(32, 64)))
    assert abs(c) < 0.05 and spread > 1
    assert output_cosine_stats(np.zeros((4, 2, 3))) == (1.0, 0.0)  # identical zero outputs are identical
    with pytest.raises(ValueError):
        output_cosine_stats(np.ones((1, 3)))


def test_v20_saved_collapsed_outputs_are_critical(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    save_outputs(tmp_path, "r", np.ones((32, 64)) + 0.001 * rng.normal(size=(32, 64)))
    res = run("V20", load(tmp_path))
    assert res.status == "findings" and res.kind == "probe"
    (finding,) = res.findings
    assert finding.severity == "critical" and finding.subject == "capsule:r/seed0"
    assert "outputs identical across inputs" in finding.message
    assert finding.values["batch"] == 32 and finding.values["mean_cosine"] > 0.999
    assert finding.evidence[0].path == "runs/r/seed0/test/main/outputs.npy"


def test_v20_near_parallel_outputs_warn_and_healthy_outputs_pass(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    save_outputs(tmp_path / "a", "r", np.ones((32, 64)) + 0.2 * rng.normal(size=(32, 64)), name="embeddings.npy")
    (finding,) = run("V20", load(tmp_path / "a")).findings
    assert finding.severity == "warn" and 0.95 <= finding.values["mean_cosine"] < 0.98
    save_outputs(tmp_path / "b", "r", rng.normal(size=(32, 64)))
    res = run("V20", load(tmp_path / "b"))
    assert res.status == "pass" and res.subjects == ("capsule:r/seed0",)


def test_v20_probe_answers_reference_values(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    write_capsule(tmp_path, "r", "seed1")
    project = with_probes(load(tmp_path), "V20", {
        "capsule:r/seed0": {"batch": 32, "mean_cosine": 0.997, "spread": 0.004},  # src: collapsed
        "capsule:r/seed1": {"batch": 32, "mean_cosine": 0.80, "spread": 0.31},  # src: after the fix
    })
    res = run("V20", project)
    assert [(f.subject, f.severity) for f in res.findings] == [("capsule:r/seed0", "critical")]
    assert res.passed_subjects == ("capsule:r/seed1",)


def test_v20_skips_without_probe_or_outputs_and_on_small_or_unreadable_batches(tmp_path: Path) -> None:
    write_capsule(tmp_path / "none", "r", "seed0")
    res = run("V20", load(tmp_path / "none"))
    assert res.status == "skipped" and res.note == "probe not run: rgt probe r V20"
    save_outputs(tmp_path / "small", "r", np.ones((8, 4)))
    res = run("V20", load(tmp_path / "small"))
    assert res.status == "skipped" and "8 inputs < 16" in res.note
    path = save_outputs(tmp_path / "bad", "r", np.ones((20, 4)))
    np.save(path, np.array([{"a": 1}] * 20, dtype=object), allow_pickle=True)  # a pickle: never loaded
    res = run("V20", load(tmp_path / "bad"))
    assert res.status == "skipped" and "not judged" in res.note
    path.write_bytes(b"not numpy")
    assert run("V20", load(tmp_path / "bad")).status == "skipped"
    nan = np.ones((20, 4))
    nan[3, 1] = np.nan
    np.save(path, nan)
    assert "non-finite" in run("V20", load(tmp_path / "bad")).note


# -- V21 -------------------------------------------------------------------------------------------------------
def conditioned(n: int, real_correct: int, shuffled_correct: int) -> list[dict[str, Any]]:
    real = [dict(row, condition="real") for row in classification_items(n, correct=real_correct)]
    shuffled = [dict(row, condition="shuffled", item_id=f"item{n - 1 - i:04d}")  # right on other items than real
                for i, row in enumerate(classification_items(n, correct=shuffled_correct))]
    return real + shuffled


def test_v21_real_equal_to_shuffled_bit_for_bit_is_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.126}, items=conditioned(500, 63, 63))
    res = run("V21", load(tmp_path))
    (finding,) = res.findings
    assert finding.severity == "critical" and "bit-for-bit" in finding.message and "0.126" in finding.message
    assert finding.values["main/acc.real"] == finding.values["main/acc.shuffled"] == 0.126


def test_v21_healthy_real_far_above_shuffled_passes(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, items=conditioned(200, 180, 20))
    res = run("V21", load(tmp_path))
    assert res.status == "pass" and res.subjects == ("capsule:r/seed0",)


def test_v21_overlapping_ci_and_both_at_chance_are_errors(tmp_path: Path) -> None:
    write_capsule(tmp_path / "ci", "r", "seed0", metrics={"acc": 0.55}, items=conditioned(100, 55, 50))
    (finding,) = run("V21", load(tmp_path / "ci"), resamples=2000).findings
    assert finding.severity == "error" and "contains 0" in finding.message
    low, high = finding.values["main/acc.ci95"]
    assert low < 0 < high
    write_capsule(tmp_path / "chance", "r", "seed0", metrics={"acc": 0.103}, items=conditioned(1000, 103, 160))
    assert run("V21", load(tmp_path / "chance"), resamples=200).status == "pass"  # only real is at chance
    write_capsule(tmp_path / "both", "r", "seed0", metrics={"acc": 0.103}, items=conditioned(1000, 103, 98))
    (finding,) = run("V21", load(tmp_path / "both"), resamples=200).findings
    assert "both at chance (0.1)" in finding.message


def test_v21_skips_without_conditions_and_survives_bad_columns(tmp_path: Path) -> None:
    write_capsule(tmp_path / "plain", "r", "seed0", metrics={"acc": 0.5}, items=classification_items(10, correct=5))
    assert run("V21", load(tmp_path / "plain")).status == "skipped"
    rows = conditioned(20, 10, 10)
    for row in rows[:3]:
        row["acc"] = "oops"
    write_capsule(tmp_path / "bad", "r", "seed0", metrics={"acc": 0.5}, items=rows)
    res = run("V21", load(tmp_path / "bad"))
    assert res.status in ("pass", "findings") and res.subjects == ("capsule:r/seed0",)


# -- V22 -------------------------------------------------------------------------------------------------------
def test_input_spread_stats_reproduce_the_src_example() -> None:
    x = 0.5 + 0.0047 * np.random.default_rng(3).normal(size=(64, 128))
    c, r = input_spread_stats(x)
    assert c > 0.99 and r == pytest.approx(0.0094, rel=0.05)


def test_v22_offset_dominated_inputs_warn_and_healthy_inputs_pass(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    write_capsule(tmp_path, "r", "seed1")
    project = with_probes(load(tmp_path), "V22", {
        "capsule:r/seed0": {"batch": 64, "mean_cosine": 0.9999, "spread_ratio": 0.009},
        "capsule:r/seed1": {"batch": 64, "mean_cosine": 0.12, "spread_ratio": 0.9},
    })
    res = run("V22", project)
    (finding,) = res.findings
    assert finding.subject == "capsule:r/seed0" and finding.severity == "warn"
    assert "sample-invariant offset" in finding.message
    assert "capsule:r/seed1" in res.passed_subjects
    assert run("V22", load(tmp_path)).note == "probe not run: rgt probe r V22"


def test_v22_low_input_cosine_with_collapsed_output_places_the_collapse_inside_the_model(tmp_path: Path) -> None:
    save_outputs(tmp_path, "r", np.ones((32, 8)))
    project = with_probes(load(tmp_path), "V22", {"capsule:r/seed0": {"mean_cosine": 0.1, "spread_ratio": 0.7}})
    (finding,) = run("V22", project).findings
    assert finding.severity == "info" and "inside the model" in finding.message


def test_v22_same_collapse_in_two_architectures_is_upstream(tmp_path: Path) -> None:
    save_outputs(tmp_path, "cnn", np.ones((32, 8)), config={"model": {"arch": "resnet18"}})
    save_outputs(tmp_path, "vit", np.ones((32, 8)), config={"model": {"arch": "vit_b16"}})
    res = run("V22", load(tmp_path))
    (finding,) = res.findings
    assert finding.subject == "project" and finding.severity == "warn"
    assert "upstream of the architecture" in finding.message and finding.values["runs"] == ["cnn", "vit"]


def test_v22_same_architecture_twice_is_not_upstream(tmp_path: Path) -> None:
    save_outputs(tmp_path, "a", np.ones((32, 8)), config={"model": {"arch": "resnet18"}})
    save_outputs(tmp_path, "b", np.ones((32, 8)), config={"model": {"arch": "resnet18"}})
    assert run("V22", load(tmp_path)).status == "skipped"


# -- V23 -------------------------------------------------------------------------------------------------------
def items_with_preds(preds: list[int], targets: list[int]) -> list[dict[str, Any]]:
    return [{"target": t, "pred": p, "acc": float(t == p)} for t, p in zip(targets, preds, strict=True)]


def test_v23_one_predicted_class_is_critical(tmp_path: Path) -> None:
    targets = [i % 10 for i in range(100)]
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.1}, items=items_with_preds([3] * 100, targets))
    (finding,) = run("V23", load(tmp_path)).findings
    assert finding.severity == "critical" and "every item predicted as class 3" in finding.message


def test_v23_dominant_class_warns_and_diverse_predictions_pass(tmp_path: Path) -> None:
    targets = [i % 10 for i in range(100)]
    preds = [0] * 96 + [1, 2, 3, 4]
    write_capsule(tmp_path / "dom", "r", "seed0", metrics={"acc": 0.1}, items=items_with_preds(preds, targets))
    (finding,) = run("V23", load(tmp_path / "dom")).findings
    assert finding.severity == "warn" and finding.values["main.top_share"] == 0.96
    write_capsule(tmp_path / "ok", "r", "seed0", metrics={"acc": 0.8}, items=classification_items(100, correct=80))
    res = run("V23", load(tmp_path / "ok"))
    assert res.status == "pass" and res.subjects == ("capsule:r/seed0",)


def test_v23_imbalanced_targets_and_regression_outputs_stay_quiet(tmp_path: Path) -> None:
    preds = [0] * 97 + [1] * 3
    targets = [0] * 96 + [1] * 4  # the majority class really is 96 %
    write_capsule(tmp_path / "imb", "r", "seed0", metrics={"acc": 0.97}, items=items_with_preds(preds, targets))
    assert run("V23", load(tmp_path / "imb")).status == "pass"
    rows = [{"target": 0.5 * i, "pred": 0.5 * i + 0.01, "mse": 1e-4} for i in range(20)]
    write_capsule(tmp_path / "reg", "r", "seed0", metrics={"mse": 1e-4}, items=rows)
    assert run("V23", load(tmp_path / "reg")).status == "skipped"


# -- the recomputation V21 and V29 share ---------------------------------------------------------------------
def test_recompute_pooled_functions_on_known_values() -> None:
    import pandas as pd

    rows = pd.DataFrame({"target": [0, 1, 1, 0, 2], "pred": [0, 1, 0, 0, 2], "score": [0.1, 0.9, 0.4, 0.3, 0.8],
                         "prob_0": [0.7, 0.1, 0.5, 0.6, 0.1], "prob_1": [0.2, 0.8, 0.3, 0.3, 0.2],
                         "prob_2": [0.1, 0.1, 0.2, 0.1, 0.7]})
    assert recompute("acc", {"aggregate": "pooled:accuracy"}, rows) == (0.8, "")
    assert recompute("top2", {"aggregate": "pooled:topk"}, rows) == (1.0, "")
    # f1 per class: 0 -> 0.8, 1 -> 2/3, 2 -> 1
    assert recompute("f1", {"aggregate": "pooled:f1_macro"}, rows)[0] == pytest.approx((0.8 + 2 / 3 + 1) / 3)
    assert recompute("miou", {"aggregate": "pooled:miou_pooled"}, rows)[0] == pytest.approx((2 / 3 + 0.5 + 1) / 3)
    reg = pd.DataFrame({"target": [1.0, 2.0, 4.0], "pred": [1.0, 3.0, 2.0]})
    assert recompute("mae", {"aggregate": "pooled:mae"}, reg)[0] == pytest.approx(1.0)
    assert recompute("rmse", {"aggregate": "pooled:rmse"}, reg)[0] == pytest.approx(math.sqrt(5 / 3))
    binary = pd.DataFrame({"target": [0, 0, 1, 1], "score": [0.1, 0.4, 0.35, 0.8]})
    assert recompute("auroc", {"aggregate": "pooled:auroc"}, binary)[0] == pytest.approx(0.75)
    seg = pd.DataFrame({"tp_0": [5, 5], "fp_0": [1, 0], "fn_0": [0, 1], "tp_1": [2, 0], "fp_1": [0, 2], "fn_1": [2, 0]})
    assert recompute("miou", {"aggregate": "pooled:miou_pooled"}, seg)[0] == pytest.approx((10 / 12 + 2 / 6) / 2)
    assert recompute("x", {"aggregate": "custom"}, rows)[0] is None
    assert recompute("acc", {"aggregate": "mean", "column": "nope"}, rows) == (
        None, "column 'nope' missing from the results")


def test_v21_conditions_without_metrics_judge_nothing(tmp_path: Path) -> None:
    folder = write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.5}, items=conditioned(10, 5, 5))
    (folder / "test" / "main" / "metrics.json").write_text("{broken", encoding="utf-8")
    res = run("V21", load(tmp_path))
    assert res.status == "skipped" and "no metrics" in res.note


@pytest.mark.parametrize("values", [[3.0, 1.5, 3.0, -0.0, 2.0], [3, 1, 3, 0], ["3", "b", "3"], [True, False, True],
                                    [True, 1, 1.0, "1", 2.5]])
def test_labels_of_a_column_are_the_label_of_each_value(values: list[object]) -> None:
    from collections import Counter

    import pandas as pd

    from remote_gpu_trainer.audits.catalogue.class_labels import label, label_counts, labels

    series = pd.Series(values)
    assert labels(series) == [label(v) for v in series.tolist()]
    assert list(label_counts(series).items()) == list(Counter(label(v) for v in series.tolist()).items())


def test_split_rows_keep_the_reported_split_and_a_table_of_one_split_whole(tmp_path: Path) -> None:
    from remote_gpu_trainer.audits.catalogue.collapse import split_rows

    rows = [{**row, "split": "val" if i % 4 == 0 else "test"}
            for i, row in enumerate(classification_items(40, correct=20))]
    write_capsule(tmp_path / "mixed", "r", "seed0", metrics={"acc": 0.5}, items=rows)
    (test,) = load(tmp_path / "mixed").capsules[0].tests.values()
    kept = split_rows(test)
    assert kept is not None and len(kept) == 30 and set(kept["split"]) == {"test"}
    write_capsule(tmp_path / "one", "r", "seed0", metrics={"acc": 0.5}, items=classification_items(40, correct=20))
    (test,) = load(tmp_path / "one").capsules[0].tests.values()
    assert split_rows(test) is test.results
