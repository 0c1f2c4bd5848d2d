"""VERIFY section F (smoke-hidden failures) on real capsule files and probe answers."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from remote_gpu_trainer.audits.catalogue.model import CheckResult, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.audits.catalogue.smoke import CHECKS, grad_coverage_stats, loss_names, parity_stats
from support.capsules import classification_items, load, write_capsule


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    return CHECKS[check](project, {**specs()[check].params, **overrides})


def with_probes(project: ProjectEvidence, check: str, answers: dict[str, dict[str, Any]]) -> ProjectEvidence:
    return dataclasses.replace(project, probes={(check, subject): a for subject, a in answers.items()})


def curve(losses: list[float], *, every: int = 10) -> list[dict[str, Any]]:
    return [{"step": every * (i + 1), "epoch": 1 + i // 10, "loss": value, "lr": 0.001} for i, value in
            enumerate(losses)]


# -- V24 -------------------------------------------------------------------------------------------------------
def test_loss_names_from_the_ways_configs_spell_them() -> None:
    assert loss_names({"loss": "CrossEntropyLoss"}) == ("ce",)
    assert loss_names({"train": {"criterion": {"_target_": "torch.nn.BCEWithLogitsLoss"}}}) == ("bce_logits",)
    assert loss_names({"loss": {"name": "ce+dice"}}) == ("ce", "dice")
    assert loss_names({"loss": "my_custom"}) == ("?",)
    assert loss_names(None) == ()


def test_v24_negative_bounded_loss_is_error_and_huge_negative_is_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path / "err", "r", "seed0", config={"loss": "bce"}, train=curve([0.7, 0.3, -0.02, 0.1]))
    (finding,) = run("V24", load(tmp_path / "err")).findings
    assert finding.severity == "error" and "bounded loss is negative" in finding.message
    assert finding.values["loss.min"] == -0.02 and finding.values["loss.step"] == 30
    write_capsule(tmp_path / "crit", "r", "seed0", config={"loss": "Dice"}, train=curve([0.7, -5000.0]))
    (finding,) = run("V24", load(tmp_path / "crit")).findings
    assert finding.severity == "critical" and "invalid loss math" in finding.message


def test_v24_clean_bounded_loss_passes_and_unbounded_or_unknown_loss_skips(tmp_path: Path) -> None:
    write_capsule(tmp_path / "ok", "r", "seed0", config={"loss": "mse"}, train=curve([0.7, 0.3, 0.0, 1e-8]))
    res = run("V24", load(tmp_path / "ok"))
    assert res.status == "pass" and res.subjects == ("capsule:r/seed0",)
    write_capsule(tmp_path / "nll", "r", "seed0", config={"loss": "gaussian_nll"}, train=curve([-3.0]))
    res = run("V24", load(tmp_path / "nll"))
    assert res.status == "skipped" and "no bounded loss type" in res.note


def test_v24_garbage_loss_values_are_ignored_not_raised(tmp_path: Path) -> None:
    rows = curve([0.5, 0.4]) + [{"step": 40, "epoch": 1, "loss": "nan", "lr": 0.1},
                                {"step": 50, "epoch": 1, "loss": "oops", "lr": 0.1}]
    write_capsule(tmp_path, "r", "seed0", config={"loss": "ce"}, train=rows)
    assert run("V24", load(tmp_path)).status == "pass"


# -- V25 -------------------------------------------------------------------------------------------------------
def test_v25_loss_stuck_at_ln_c_is_not_learning(tmp_path: Path) -> None:
    chance = math.log(10)
    losses = [chance * (1 + 0.001 * ((-1) ** i)) for i in range(100)]
    write_capsule(tmp_path, "r", "seed0", config={"loss": "ce", "model": {"num_classes": 10}}, train=curve(losses))
    (finding,) = run("V25", load(tmp_path)).findings
    assert finding.severity == "error" and "not learning" in finding.message and "overfit-one-batch" in finding.message
    assert finding.values["chance"] == chance


def test_v25_learning_run_passes_and_short_run_skips(tmp_path: Path) -> None:
    losses = [math.log(10) * math.exp(-i / 20) for i in range(100)]
    write_capsule(tmp_path / "ok", "r", "seed0", config={"loss": "ce", "num_classes": 10}, train=curve(losses))
    assert run("V25", load(tmp_path / "ok")).status == "pass"
    write_capsule(tmp_path / "short", "r", "seed0", config={"loss": "ce", "num_classes": 10},
                  train=curve([math.log(10)] * 20))
    res = run("V25", load(tmp_path / "short"))
    assert res.status == "skipped" and "not past 500 steps" in res.note


def test_v25_classes_from_the_targets_and_infonce_from_the_batch(tmp_path: Path) -> None:
    write_capsule(tmp_path / "t", "r", "seed0", config={"criterion": "cross_entropy"},
                  train=curve([math.log(4)] * 100), metrics={"acc": 0.25}, items=classification_items(8, correct=2,
                                                                                                      classes=4))
    assert run("V25", load(tmp_path / "t")).findings[0].values["chance"] == math.log(4)
    write_capsule(tmp_path / "nce", "r", "seed0", config={"loss": "InfoNCE"}, train=curve([math.log(16)] * 100))
    assert run("V25", load(tmp_path / "nce")).findings[0].values["chance"] == math.log(16)  # per_device_batch 16


# -- V26 -------------------------------------------------------------------------------------------------------
def test_v26_byte_identical_metrics_with_different_provenance_are_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path, "old", "seed0", metrics={"acc": 0.8941})
    write_capsule(tmp_path, "new", "seed0", metrics={"acc": 0.8941})
    res = run("V26", load(tmp_path))
    assert sorted((f.subject, f.severity) for f in res.findings) == [
        ("capsule:new/seed0", "critical"), ("capsule:old/seed0", "critical")]
    assert "byte-identical to old/seed0 (main)" in next(f for f in res.findings if f.subject.endswith("new/seed0")
                                                        ).message


def test_v26_equal_provenance_replicates_and_different_metrics_pass(tmp_path: Path) -> None:
    same = {"provenance": {"provenance_hash": "sha256:" + "1" * 64}}
    write_capsule(tmp_path / "rep", "r", "seed0", metrics={"acc": 0.8941}, record=same)
    write_capsule(tmp_path / "rep", "r", "seed1", metrics={"acc": 0.8941}, record=same)
    assert run("V26", load(tmp_path / "rep")).status == "pass"
    write_capsule(tmp_path / "diff", "a", "seed0", metrics={"acc": 0.8941})
    write_capsule(tmp_path / "diff", "b", "seed0", metrics={"acc": 0.8902})
    res = run("V26", load(tmp_path / "diff"))
    assert res.status == "pass" and len(res.subjects) == 2


def test_v26_metrics_of_a_different_checkpoint_are_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, metrics_extra={"checkpoint_sha256": "cd" * 32})
    (finding,) = run("V26", load(tmp_path)).findings
    assert finding.severity == "critical" and "evaluated a different checkpoint" in finding.message


def test_v26_checkpoint_beyond_training_or_older_than_the_run_is_critical(tmp_path: Path) -> None:
    checkpoints = {"best": {"path": "best.pth", "sha256": "ab" * 32, "epoch": 12}}
    folder = write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, record={"checkpoints": checkpoints})
    (finding,) = run("V26", load(tmp_path)).findings
    assert "epoch 12 > training.epochs 10" in finding.message
    checkpoints["best"]["epoch"] = 10
    folder = write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, record={"checkpoints": checkpoints})
    (folder / "best.pth").write_bytes(b"weights")
    assert run("V26", load(tmp_path)).status == "pass"  # written now, after created_at
    old = 1_600_000_000  # 2020, before the run's created_at in 2026
    os.utime(folder / "best.pth", (old, old))
    (finding,) = run("V26", load(tmp_path)).findings
    assert finding.severity == "critical" and "written before the run started" in finding.message


# -- V27 -------------------------------------------------------------------------------------------------------
def test_parity_stats_catch_a_channel_swap() -> None:
    rng = np.random.default_rng(0)
    image = rng.normal(size=(8, 3, 4, 4)) + np.array([0.0, 1.0, 2.0])[None, :, None, None]
    same = parity_stats(image, image.copy())
    assert same["shape_equal"] and same["allclose"] and len(same["train_mean"]) == 3
    swapped = parity_stats(image, image[:, ::-1])
    assert swapped["shape_equal"] and not swapped["allclose"]
    assert not parity_stats(image, image[:, :2])["shape_equal"]


def test_v27_mismatched_paths_train_mode_and_untracked_bn_are_errors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    image = rng.normal(size=(8, 3, 4, 4)) + np.array([0.0, 1.0, 2.0])[None, :, None, None]
    write_capsule(tmp_path, "r", "seed0")
    write_capsule(tmp_path, "r", "seed1")
    bad = {**parity_stats(image, image[:, ::-1]), "model_training_in_eval": True, "bn_untracked": ["bn1"]}
    good = {**parity_stats(image, image), "model_training_in_eval": False, "bn_untracked": []}
    res = run("V27", with_probes(load(tmp_path), "V27", {"capsule:r/seed0": bad, "capsule:r/seed1": good}))
    (finding,) = res.findings
    assert finding.subject == "capsule:r/seed0" and finding.severity == "error"
    assert "train/eval input mismatch" in finding.message and "model.training is True" in finding.message
    assert "bn1" in finding.message and set(finding.values["mean_shift"]) == {"0", "2"}
    assert res.passed_subjects == ("capsule:r/seed1",)
    assert run("V27", load(tmp_path)).note == "probe not run: rgt probe r V27"


# -- V28 -------------------------------------------------------------------------------------------------------
def test_grad_coverage_stats_from_numpy_grads() -> None:
    grads: dict[str, np.ndarray | None] = {"a": np.ones(3), "b": np.zeros(3), "c": None, "d": np.array([np.nan])}
    stats = grad_coverage_stats(grads, {"a", "b", "c"})
    assert stats == {"trainable": 4, "covered": 1, "dead": ["b", "c", "d"], "not_in_optimizer": ["d"]}


def test_v28_src_example_64_of_64_healthy_vs_7_of_64_broken(tmp_path: Path) -> None:
    write_capsule(tmp_path, "healthy", "seed0")
    write_capsule(tmp_path, "broken", "seed0")
    dead = [f"layer{i}.weight" for i in range(57)]
    project = with_probes(load(tmp_path), "V28", {
        "capsule:healthy/seed0": {"trainable": 64, "covered": 64, "dead": [], "not_in_optimizer": []},
        "capsule:broken/seed0": {"trainable": 64, "covered": 7, "dead": dead, "not_in_optimizer": []},
    })
    res = run("V28", project)
    (finding,) = res.findings
    assert finding.subject == "capsule:broken/seed0" and finding.severity == "error"
    assert "7/64" in finding.message and "layer0.weight" in finding.message
    assert res.passed_subjects == ("capsule:healthy/seed0",)


def test_v28_expect_frozen_and_optimizer_coverage(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    answer = {"trainable": 10, "covered": 8, "dead": ["backbone.0.w", "backbone.1.w"], "not_in_optimizer": ["head.b"]}
    project = with_probes(load(tmp_path), "V28", {"capsule:r/seed0": answer})
    (finding,) = run("V28", project, expect_frozen=["backbone.*"]).findings
    assert "optimizer param groups miss 1 trainable parameter: head.b" == finding.message
    assert run("V28", dataclasses.replace(project, probes={("V28", "capsule:r/seed0"): {"trainable": "x"}})
               ).status == "skipped"


def test_v27_an_answer_without_any_parity_field_is_not_judged(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0")
    project = with_probes(load(tmp_path), "V27", {"capsule:r/seed0": {"train_mean": [1, "x"], "bn_untracked": "bn"}})
    assert run("V27", project).status == "skipped"
