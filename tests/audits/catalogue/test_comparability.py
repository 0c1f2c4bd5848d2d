"""VERIFY section A (docs/verify.md §2): V01 one_variable_diff, V02 budget_parity, V03 trajectory_shape, on real
capsule files written into tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.comparability import (
    CHECKS,
    capsule_pairs,
    capsule_view,
    differing,
    flatten,
    same_value,
)
from remote_gpu_trainer.audits.catalogue.load import Declarations
from remote_gpu_trainer.audits.catalogue.model import CheckResult, Comparison, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.runner import specs
from support.capsules import load, write_capsule, write_evidence


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    params = {**specs()[check].params, **overrides}
    return CHECKS[check](project, params)


def cfg(lr: float = 0.001, width: int = 64, seed: int = 0, **extra: Any) -> dict[str, Any]:
    return {"model": {"width": width}, "lr": lr, "seed": seed, "epochs": 10, **extra}


def pair(root: Path, run_cfg: dict[str, Any], ctrl_cfg: dict[str, Any], *, vary: tuple[str, ...] = ("lr",),
         seeds: tuple[int, ...] = (0,), run_record: dict[str, Any] | None = None,
         ctrl_record: dict[str, Any] | None = None) -> ProjectEvidence:
    for seed in seeds:
        write_capsule(root, "ours", f"seed{seed}", seed=seed, config={**run_cfg, "seed": seed}, metrics={"acc": 0.9},
                      record=run_record)
        write_capsule(root, "base", f"seed{seed}", seed=seed, config={**ctrl_cfg, "seed": seed}, metrics={"acc": 0.8},
                      record=ctrl_record)
    return load(root, Declarations(comparisons=(Comparison("ours", "base", vary=vary),)))


# -- V01 ------------------------------------------------------------------------------------------------------
def test_v01_passes_when_only_the_declared_variable_differs(tmp_path: Path) -> None:
    res = run("V01", pair(tmp_path, cfg(lr=0.01), cfg(lr=0.001), seeds=(0, 1)))
    assert res.status == "pass"
    assert res.subjects == ("pair:ours~base",)


def test_v01_warns_on_a_confound_and_names_both_values(tmp_path: Path) -> None:
    project = pair(tmp_path, cfg(lr=0.01, width=128), cfg(lr=0.001, width=64))
    res = run("V01", project)
    (finding,) = res.findings
    assert finding.severity == "warn"
    assert finding.subject == "pair:ours~base"
    assert "confounded: also differs in model.width (run=128, control=64)" in finding.message
    assert "run one-axis intermediates before attributing the win" in finding.message  # 2 keys differ
    assert finding.disclosure == "confounded: also differs in model.width"
    assert finding.values["extra"] == ["model.width"]
    assert finding.integrity_class == "negligence"
    paths = {ref.path for ref in finding.evidence}
    assert {"runs/ours/seed0/run.json", "runs/ours/seed0/config.yaml", "runs/base/seed0/config.yaml"} <= paths
    capsule = project.capsule("ours/seed0")
    assert capsule is not None
    assert all(ref.sha256 in {c.run_record_sha256 for c in project.capsules} | {c.config_sha256 for c in
                                                                                 project.capsules}
               for ref in finding.evidence)


def test_v01_one_differing_key_does_not_ask_for_intermediates(tmp_path: Path) -> None:
    (finding,) = run("V01", pair(tmp_path, cfg(lr=0.001, width=128), cfg(lr=0.001), vary=("lr",))).findings
    assert finding.severity == "error"  # lr, the declared variable, is unchanged
    assert finding.values["extra"] == ["model.width"] and finding.values["unchanged"] == ["lr"]
    assert "intermediates" not in finding.message


def test_v01_provenance_keys_count(tmp_path: Path) -> None:
    gpu = {"provenance": {"hardware": {"gpu": "A100", "count": 0, "torch": "2.13.0+cpu"}}}
    (finding,) = run("V01", pair(tmp_path, cfg(lr=0.01), cfg(lr=0.001), run_record=gpu)).findings
    assert finding.severity == "warn"
    assert finding.values["extra"] == ["_prov.gpu"]
    assert finding.values["differs"]["_prov.gpu"] == {"run": "A100", "control": "cpu"}


def test_v01_error_when_data_or_split_differs(tmp_path: Path) -> None:
    data = {"provenance": {"data": {"dataset": "synthetic", "split_manifest": "splits/other.json",
                                    "split_manifest_sha256": "88" * 32, "data_sha256": "7c" * 32}}}
    (finding,) = run("V01", pair(tmp_path, cfg(lr=0.01), cfg(lr=0.001), run_record=data)).findings
    assert finding.severity == "error"
    assert finding.values["critical"] == ["_prov.split_manifest_sha256"]
    assert "touches data, split or eval protocol" in finding.message


def test_v01_error_when_an_eval_protocol_key_differs(tmp_path: Path) -> None:
    (finding,) = run("V01", pair(tmp_path, cfg(lr=0.01, eval={"tta": True}), cfg(lr=0.001, eval={"tta": False}))
                     ).findings
    assert finding.severity == "error"
    assert finding.values["critical"] == ["eval.tta"]


def test_v01_error_when_the_declared_variable_is_unchanged(tmp_path: Path) -> None:
    (finding,) = run("V01", pair(tmp_path, cfg(lr=0.001), cfg(lr=0.001))).findings
    assert finding.severity == "error"
    assert finding.message == "declared variable unchanged: lr"
    assert finding.values["unchanged"] == ["lr"]
    assert finding.integrity_class == "bug"


def test_v01_ignores_volatile_keys_and_compares_numbers_by_value(tmp_path: Path) -> None:
    run_cfg = cfg(lr=0.01, run_name="a", output_dir="/x", wandb={"project": "p"}, tags=["x", "y"],
                  data={"path": "/d1", "max_len": 1}, notes="n1", created_timestamp=1)
    ctrl_cfg = cfg(lr=0.001, run_name="b", output_dir="/y", wandb={"project": "q"}, tags=["z"],
                   data={"path": "/d2", "max_len": 1.0}, notes="n2", created_timestamp=2)
    assert run("V01", pair(tmp_path, run_cfg, ctrl_cfg)).status == "pass"


def test_flatten_lists_missing_and_null() -> None:
    assert flatten({"a": {"b": [1, {"c": 2}]}, "e": {}, "n": None}) == {"a.b.0": 1, "a.b.1.c": 2, "e": {},
                                                                        "n": None}
    assert same_value(1, 1.0) and not same_value(True, 1) and not same_value("1", 1)
    diff = differing({"a": None, "b": 1}, {"b": 1.0}, ())
    assert list(diff) == ["a"]  # missing is not null; 1 == 1.0


def test_v01_derived_effective_batch_and_total_steps(tmp_path: Path) -> None:
    same = {"training": {"world_size": 1, "per_device_batch": 32, "grad_accum": 1, "epochs": 10, "steps": 1000}}
    project = pair(tmp_path, cfg(lr=0.01), cfg(lr=0.001), ctrl_record=same)  # 16 × 1 × 1 vs 32 × 1 × 1
    (finding,) = run("V01", project).findings
    assert finding.values["extra"] == ["_derived.effective_batch"]
    capsule = project.capsule("ours/seed0")
    assert capsule is not None
    view = capsule_view(capsule)
    assert view["_derived.effective_batch"] == 16 and view["_derived.total_steps"] == 1000
    assert view["_prov.code_commit"].startswith("e4f5") and view["_prov.dirty_diff_sha256"] is None


def test_v01_equal_effective_batch_from_different_factors_passes(tmp_path: Path) -> None:
    other = {"training": {"world_size": 2, "per_device_batch": 8, "grad_accum": 1, "epochs": 10, "steps": 1000}}
    assert run("V01", pair(tmp_path, cfg(lr=0.01), cfg(lr=0.001), ctrl_record=other)).status == "pass"


def test_capsules_pair_by_seed_else_first_of_each(tmp_path: Path) -> None:
    for seed in (0, 1):
        write_capsule(tmp_path, "ours", f"s{seed}", seed=seed)
    write_capsule(tmp_path, "base", "s1", seed=1)
    write_capsule(tmp_path, "other", "x", seed=7)
    project = load(tmp_path)
    assert [(r.key, c.key) for r, c in capsule_pairs(project.run_capsules("ours"), project.run_capsules("base"))] \
        == [("ours/s1", "base/s1")]
    assert [(r.key, c.key) for r, c in capsule_pairs(project.run_capsules("ours"), project.run_capsules("other"))] \
        == [("ours/s0", "other/x")]


def test_v01_skips_without_comparisons_or_inputs(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0")
    assert run("V01", load(tmp_path)).status == "skipped"
    missing = run("V01", load(tmp_path, Declarations(comparisons=(Comparison("ours", "ghost", vary=("lr",)),))))
    assert missing.status == "skipped"
    assert "runs/ghost/ has no capsule" in missing.note


def test_v01_malformed_config_is_a_skip_with_the_path(tmp_path: Path) -> None:
    pair(tmp_path, cfg(lr=0.01), cfg(lr=0.001))
    (tmp_path / "runs/base/seed0/config.yaml").write_text("model: [unclosed\n", encoding="utf-8")
    res = run("V01", load(tmp_path, Declarations(comparisons=(Comparison("ours", "base", vary=("lr",)),))))
    assert res.status == "skipped"
    assert "runs/base/seed0/config.yaml missing or unreadable" in res.note


# -- V02 ------------------------------------------------------------------------------------------------------
def table_claim(cells: list[str], **row: Any) -> dict[str, Any]:
    return {"id": "C1", "evidence": [{"exp_id": "ours", "test_id": "main", "metric": "acc", "cells": cells,
                                      "tables": ["tab2"], **row}]}


def test_v02_warns_on_unequal_epochs_in_one_table(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0", config=cfg(lr=0.01) | {"epochs": 100}, metrics={"acc": 0.9})
    write_capsule(tmp_path, "base", "seed0", config=cfg(lr=0.01) | {"epochs": 50}, metrics={"acc": 0.8})
    write_evidence(tmp_path, [table_claim(["ours/seed0", "base/seed0"])])
    res = run("V02", load(tmp_path))
    (finding,) = res.findings
    assert finding.subject == "table:tab2"
    assert finding.severity == "warn"
    assert finding.message == "unequal budget: epochs differs (base=50; ours=100)"
    assert finding.values["unequal"] == {"epochs": {"base": ["50"], "ours": ["100"]}}
    assert finding.integrity_class == "qrp_tell"
    assert finding.claims == ("C1",)


def test_v02_clean_table_with_the_declared_axis_passes(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0", config=cfg(width=128), metrics={"acc": 0.9})
    write_capsule(tmp_path, "base", "seed0", config=cfg(width=64), metrics={"acc": 0.8})
    write_evidence(tmp_path, [table_claim(["ours/seed0", "base/seed0"])])
    res = run("V02", load(tmp_path, Declarations(comparisons=(Comparison("ours", "base", vary=("model",)),))))
    assert res.status == "pass" and res.subjects == ("table:tab2",)


def test_v02_rescue_knob_in_exactly_one_cell(tmp_path: Path) -> None:
    for run_id in ("a", "b", "c"):
        extra = {"grad_clip": 1.0} if run_id == "c" else {"grad_clip": 0.0}
        write_capsule(tmp_path, run_id, "seed0", config=cfg() | extra, metrics={"acc": 0.8})
    write_evidence(tmp_path, [table_claim(["a/seed0", "b/seed0", "c/seed0"])])
    (finding,) = run("V02", load(tmp_path)).findings
    assert finding.severity == "warn"
    assert finding.message == "special treatment of c: grad_clip"
    assert finding.values["special"] == {"grad_clip": "c"}


def test_v02_falls_back_to_declared_comparisons_and_uses_run_record_epochs(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0", config=cfg(lr=0.01), metrics={"acc": 0.9},
                  record={"training": {"world_size": 1, "per_device_batch": 16, "grad_accum": 1, "epochs": 20,
                                       "steps": 2000}})
    write_capsule(tmp_path, "base", "seed0", config=cfg(lr=0.001), metrics={"acc": 0.8})
    (finding,) = run("V02", load(tmp_path, Declarations(comparisons=(Comparison("ours", "base", vary=("lr",)),))
                     )).findings
    assert finding.subject == "pair:ours~base"
    assert set(finding.values["unequal"]) == {"_derived.total_steps", "_run.epochs"}


def test_v02_published_baseline_below_tolerance_is_cite_only(tmp_path: Path) -> None:
    write_capsule(tmp_path, "base", "seed0", metrics={"acc": 0.48})
    write_capsule(tmp_path, "near", "seed0", metrics={"acc": 0.497})
    write_evidence(tmp_path, [{"id": "B1", "evidence": [
        {"test_id": "main", "metric": "acc", "cells": ["base/seed0"], "published": 0.50},
        {"test_id": "main", "metric": "acc", "cells": ["near/seed0"], "published": 0.50}]}])
    res = run("V02", load(tmp_path))
    assert res.subjects == ("claim:B1#0", "claim:B1#1")
    (finding,) = res.findings
    assert finding.subject == "claim:B1#0"
    assert finding.severity == "warn"
    assert finding.values["cite_only"] is True and finding.values["reproduced"] == 0.48
    assert "cite-only" in finding.message


def test_v02_skips_without_tables_comparisons_or_published_values(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0", metrics={"acc": 0.9})
    res = run("V02", load(tmp_path))
    assert res.status == "skipped" and "no table/figure inputs" in res.note


# -- V03 ------------------------------------------------------------------------------------------------------
def curve(values: list[float | None], grad: list[float] | None = None, column: str = "val/acc") -> list[dict]:
    rows = []
    for i, value in enumerate(values):
        rows.append({"step": 100 * (i + 1), "epoch": i + 1, "loss": 1.0, "lr": 0.001,
                     "grad_norm": grad[i] if grad else 1.0, column: "" if value is None else value})
    return rows


def compared(root: Path, run_curve: list[dict], ctrl_curve: list[dict], metric: str | None = "acc") -> CheckResult:
    write_capsule(root, "ours", "seed0", train=run_curve, metrics={"acc": 0.9})
    write_capsule(root, "base", "seed0", train=ctrl_curve, metrics={"acc": 0.8})
    return run("V03", load(root, Declarations(comparisons=(Comparison("ours", "base", vary=("lr",), metric=metric),))))


RISING = [0.5 + 0.03 * i for i in range(10)]


def test_v03_early_peak_then_decline_warns(tmp_path: Path) -> None:
    res = compared(tmp_path, curve([0.5, 0.9, 0.7, 0.6, 0.6, 0.55, 0.55, 0.5, 0.5, 0.5]), curve(RISING))
    (finding,) = res.findings
    assert finding.subject == "capsule:ours/seed0"
    assert finding.severity == "warn"
    assert finding.message.startswith("early peak then decline: reproduce before reporting")
    assert finding.values["best_epoch"] == 2 and finding.values["last_epoch"] == 10
    assert abs(finding.values["gap"] - 1.0) < 1e-9
    assert set(res.subjects) == {"capsule:ours/seed0", "capsule:base/seed0"}


def test_v03_late_small_decline_is_not_an_early_peak(tmp_path: Path) -> None:
    late = RISING[:8] + [RISING[7] - 0.001, RISING[7] - 0.002]
    res = compared(tmp_path, curve(late), curve([v - 0.1 for v in RISING]))
    assert [f.severity for f in res.findings] == ["info"]


def test_v03_never_better_than_epoch_one_with_grad_spikes_is_an_error(tmp_path: Path) -> None:
    grad = [1.0] * 9 + [80.0]
    res = compared(tmp_path, curve([0.9, 0.5, 0.52, 0.5, 0.51, 0.5, 0.5, 0.5, 0.5, 0.5], grad), curve(RISING))
    (finding,) = res.findings
    assert finding.severity == "error"
    assert finding.message.startswith("training instability — rerun the identical config")
    assert finding.values["spike_ratio"] >= 10


def test_v03_clean_pair_gets_info_with_the_shape_class(tmp_path: Path) -> None:
    res = compared(tmp_path, curve([v + 0.05 for v in RISING]), curve(RISING))
    (finding,) = res.findings
    assert finding.subject == "pair:ours~base"
    assert finding.severity == "info"
    assert finding.values["shape"] == "better plateau, equal slope"
    assert "consistent with a real effect" in finding.message


def test_v03_lower_is_better_curve_is_oriented(tmp_path: Path) -> None:
    loss = [1.0, 0.3, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    res = compared(tmp_path, curve(loss, column="val/loss"), curve([1.0 - 0.05 * i for i in range(10)],
                                                                   column="val/loss"), metric="loss")
    (finding,) = res.findings
    assert finding.severity == "warn" and finding.values["column"] == "val/loss"
    assert finding.values["best_epoch"] == 2


def test_v03_empty_cells_are_skipped_and_missing_column_is_named(tmp_path: Path) -> None:
    gaps: list[float | None] = [None, 0.5, None, 0.6, None, 0.7, None, 0.8, None, 0.9]
    res = compared(tmp_path, curve(gaps), curve(RISING, column="val/f1"))
    assert res.subjects == ("capsule:ours/seed0",)
    assert "runs/base/seed0/train.csv has no val/acc column" in res.note


def test_v03_skips_without_train_logs(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0", metrics={"acc": 0.9})
    (tmp_path / "runs/ours/seed0/train.csv").unlink()
    res = run("V03", load(tmp_path))
    assert res.status == "skipped" and "runs/ours/seed0/train.csv missing or unreadable" in res.note


@pytest.mark.parametrize("n", [1, 2, 19, 20, 21, 300])
@pytest.mark.parametrize("window", [1, 2, 7, 20])
def test_rolling_median_is_pandas_rolling_median_with_min_periods_one(n: int, window: int) -> None:
    import numpy as np
    import pandas as pd

    from remote_gpu_trainer.audits.catalogue.comparability import rolling_median

    values = np.random.default_rng(n * 31 + window).lognormal(size=n)
    expected = pd.Series(values).rolling(window, min_periods=1).median().to_numpy()
    assert np.array_equal(rolling_median(values, window), expected)
