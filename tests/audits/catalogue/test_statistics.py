"""VERIFY section B (docs/verify.md §2): V04 seed_count … V09 multiple_comparisons, on real capsule files written
into tmp_path, with the catalogue's numeric test vectors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.load import Declarations
from remote_gpu_trainer.audits.catalogue.model import CheckResult, Comparison, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.numbers import iqm
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.audits.catalogue.statistics import (
    CHECKS,
    SINGLE_SEED,
    bootstrap_mean_ci,
    draw_deltas,
    iqm_bootstrap_ci,
    mde,
)
from support.capsules import classification_items, load, write_capsule, write_evidence

COMPARE = Declarations(comparisons=(Comparison("ours", "base", vary=("lr",)),))


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    return CHECKS[check](project, {**specs()[check].params, **overrides})


def seeds(root: Path, run_id: str, values: list[float], *, metric: str = "acc", first_seed: int = 0,
          **kwargs: Any) -> None:
    for i, value in enumerate(values):
        write_capsule(root, run_id, f"seed{first_seed + i}", seed=first_seed + i, metrics={metric: value}, **kwargs)


def test_every_section_b_check_is_in_the_catalogue_under_its_name() -> None:
    assert set(CHECKS) == {"V04", "V05", "V06", "V07", "V08", "V09"}
    assert all(specs()[cid].section == "statistics" for cid in CHECKS)


# -- V04 ------------------------------------------------------------------------------------------------------
def test_iqm_test_vector_and_bootstrap_ci() -> None:
    assert iqm([1, 2, 3, 4, 100]) == 3.0
    lo, hi = iqm_bootstrap_ci([1, 2, 3, 4, 100], 10000, 0)
    assert 1.0 <= lo <= 3.0 <= hi <= 100.0
    assert iqm_bootstrap_ci([1, 2, 3, 4, 100], 10000, 0) == (lo, hi)  # seeded: the same CI every audit


def test_v04_single_seed_is_info_with_the_disclosure(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.9])
    write_evidence(tmp_path, [{"id": "C2", "evidence": [{"test_id": "main", "metric": "acc",
                                                        "cells": ["ours/seed0"]}]}])
    (finding,) = run("V04", load(tmp_path)).findings
    assert finding.subject == "claim:C2" and finding.claims == ("C2",)
    assert finding.severity == "info"
    assert finding.message == "1 seed < 3 (regime default)"
    assert finding.disclosure == SINGLE_SEED
    assert SINGLE_SEED.startswith("single seed — no variance band")
    assert finding.values["seeds"] == 1 and finding.values["required"] == 3
    assert finding.evidence[0].path == "runs/ours/seed0/test/main/metrics.json"
    assert finding.evidence[0].sha256 is not None
    assert finding.integrity_class == "qrp_tell"


def test_v04_below_minimum_warns(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91])
    (finding,) = run("V04", load(tmp_path)).findings
    assert finding.subject == "number:ours/main/acc"
    assert finding.severity == "warn"
    assert finding.message == "2 seeds < 3 (regime default)"
    assert finding.disclosure == "2 seeds < 3 (regime default)"


def test_v04_three_quiet_seeds_pass(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92])
    res = run("V04", load(tmp_path))
    assert res.status == "pass" and res.subjects == ("number:ours/main/acc",)


def test_v04_high_cv_suggests_the_high_variance_regime(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.5, 0.7, 0.9])  # CV = 0.2 / 0.7 = 28.6 %
    (finding,) = run("V04", load(tmp_path)).findings
    assert finding.severity == "info"
    assert finding.message.startswith("seed CV 28.6% > 5%: high_variance regime suggested")
    assert finding.values["suggested_regime"] == "high_variance"
    assert math.isclose(finding.values["cv"], 0.2 / 0.7)


def test_v04_rl_task_needs_five_seeds_and_reports_iqm(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [100.0, 102.0, 101.0], record={"task": "rl"})
    (finding,) = run("V04", load(tmp_path)).findings
    assert finding.severity == "warn"
    assert finding.message == "3 seeds < 5 (regime high_variance)"
    assert finding.values["iqm"] == 101.0
    lo, hi = finding.values["ci95"]
    assert 100.0 <= lo <= 101.0 <= hi <= 102.0


def test_v04_nan_metric_is_not_a_seed(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92])
    write_evidence(tmp_path, [claim_row()])
    path = tmp_path / "runs/ours/seed2/test/main/metrics.json"
    path.write_text(path.read_text().replace("0.92", "NaN"))
    (finding,) = run("V04", load(tmp_path)).findings
    assert finding.message == "2 seeds < 3 (regime default)"
    assert finding.values["unusable"] == ["ours/seed2"]


def test_v04_no_finite_value_at_all_is_a_warning_naming_the_cells(tmp_path: Path) -> None:
    write_capsule(tmp_path, "ours", "seed0", metrics={"acc": 0.9})
    write_evidence(tmp_path, [{"id": "C1", "evidence": [{"test_id": "main", "metric": "acc",
                                                        "cells": ["ours/seed0", "ours/seed9"]}]}])
    path = tmp_path / "runs/ours/seed0/test/main/metrics.json"
    path.write_text(path.read_text().replace('"value": 0.9', '"value": null'))
    (finding,) = run("V04", load(tmp_path)).findings
    assert finding.severity == "warn" and finding.integrity_class == "bug"
    assert finding.message == "no seed has a finite acc on main (cells: ours/seed0, ours/seed9)"


def test_v04_skips_without_numbers(tmp_path: Path) -> None:
    assert run("V04", load(tmp_path)).status == "skipped"


# -- V05 ------------------------------------------------------------------------------------------------------
def claim_row(**row: Any) -> dict[str, Any]:
    """A claim stating a number (V05 judges only rows with a value: an unbuilt row states nothing yet)."""
    return {"id": "C1", "evidence": [{"test_id": "main", "metric": "acc", "cells": ["ours/seed0", "ours/seed1",
                                                                                   "ours/seed2"], "value": 0.91,
                                      **row}]}


def test_v05_missing_variance_warns(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92])
    write_evidence(tmp_path, [claim_row(n=500, seeds=3)])
    (finding,) = run("V05", load(tmp_path)).findings
    assert finding.severity == "warn" and finding.integrity_class == "qrp_tell"
    assert finding.message == "missing variance.type"
    assert finding.values["missing"] == ["variance.type"]
    assert "EVIDENCE.json" in {ref.path for ref in finding.evidence}


def test_v05_complete_row_passes_and_unknown_type_warns(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92])
    write_evidence(tmp_path, [claim_row(n=500, seeds=3, precision=2, variance={"type": "std_over_seeds",
                                                                               "value": 0.01})])
    assert run("V05", load(tmp_path)).status == "pass"
    write_evidence(tmp_path, [claim_row(n=500, seeds=3, variance={"type": "sem", "value": 0.01})])
    (finding,) = run("V05", load(tmp_path)).findings
    assert finding.severity == "warn" and finding.message.startswith("variance.type 'sem' is not one of")


def test_v05_false_precision_on_few_items(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92], n=40)
    write_evidence(tmp_path, [claim_row(n=40, seeds=3, precision=3, variance={"type": "std_over_seeds"})])
    (finding,) = run("V05", load(tmp_path)).findings
    assert finding.severity == "info"
    assert finding.message.startswith("false precision; print n")
    assert finding.values["n"] == 40 and finding.values["precision"] == 3


def test_v05_skips_without_claims(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.9])
    res = run("V05", load(tmp_path))
    assert res.status == "skipped" and "EVIDENCE.json" in res.note


def test_v05_does_not_judge_a_row_not_yet_built(tmp_path: Path) -> None:
    """A claim the user wrote whose value `rgt build evidence` has not filled states no number yet: nothing to
    warn about (the demo's fresh claims raised two V05 warnings before its first build)."""
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92])
    write_evidence(tmp_path, [{"id": "C1", "evidence": [{"test_id": "main", "metric": "acc",
                                                         "cells": ["ours/seed0", "ours/seed1", "ours/seed2"]}]}])
    res = run("V05", load(tmp_path))
    assert res.status == "skipped" and "rgt build evidence" in res.note
    write_evidence(tmp_path, [claim_row()])
    assert [f.message for f in run("V05", load(tmp_path)).findings] == ["missing n, seeds, variance.type"]


# -- V06 ------------------------------------------------------------------------------------------------------
def test_mde_test_vectors() -> None:
    t, floor = mde(3.42, 3, 3)
    assert round(t, 3) == 2.776 and round(floor, 2) == 7.75
    t5, floor5 = mde(3.42, 5, 5)
    assert round(t5, 3) == 2.306 and round(floor5, 2) == 4.99


def test_v06_delta_below_mde_is_underpowered(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [50.0, 53.42, 46.58], metric="psnr")  # sd 3.42
    seeds(tmp_path, "base", [48.0, 48.5, 47.5], metric="psnr")
    (finding,) = run("V06", load(tmp_path, COMPARE)).findings
    assert finding.subject == "pair:ours~base" and finding.severity == "warn"
    assert finding.message.startswith("underpowered — not evidence of no difference: main/psnr |Δ| = 2 < MDE 7.75")
    values = finding.values["main/psnr"]
    assert math.isclose(values["sd"], 3.42) and round(values["mde"], 2) == 7.75 and values["n_run"] == 3


def test_v06_large_delta_passes(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [60.0, 60.5, 59.5], metric="psnr")
    seeds(tmp_path, "base", [48.0, 48.5, 47.5], metric="psnr")
    res = run("V06", load(tmp_path, COMPARE))
    assert res.status == "pass" and res.subjects == ("pair:ours~base",)


def test_v06_skips_single_seed_arms_and_missing_comparisons(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [60.0], metric="psnr")
    seeds(tmp_path, "base", [48.0, 48.5], metric="psnr")
    res = run("V06", load(tmp_path, COMPARE))
    assert res.status == "skipped" and "needs ≥ 2 seeds per arm (run 1, control 2)" in res.note
    assert run("V06", load(tmp_path)).status == "skipped"


# -- V07 ------------------------------------------------------------------------------------------------------
def items_arm(root: Path, run_id: str, correct: int, *, n: int = 200, cells: int = 1,
              rename: bool = False) -> None:
    for seed in range(cells):
        rows = classification_items(n, correct=correct)
        if rename:
            rows = [{**row, "item_id": f"other{i:04d}"} for i, row in enumerate(rows)]
        write_capsule(root, run_id, f"seed{seed}", seed=seed, metrics={"acc": correct / n}, items=rows)


def test_v07_per_item_delta_inside_sampling_noise_warns(tmp_path: Path) -> None:
    items_arm(tmp_path, "ours", 100)
    items_arm(tmp_path, "base", 98)
    (finding,) = run("V07", load(tmp_path, COMPARE)).findings
    assert finding.severity == "warn" and finding.subject == "pair:ours~base"
    assert finding.message.startswith("inside sampling noise: main/acc mean per-item Δ = +0.01")
    values = finding.values["main/acc"]
    assert values["method"] == "items" and values["n"] == 200 and values["bold_allowed"] is False
    lo, hi = values["ci95"]
    assert lo <= 0 <= hi
    assert {ref.path for ref in finding.evidence} == {"runs/ours/seed0/test/main/results.csv",
                                                      "runs/base/seed0/test/main/results.csv"}


def test_v07_clear_per_item_win_passes(tmp_path: Path) -> None:
    items_arm(tmp_path, "ours", 190)
    items_arm(tmp_path, "base", 100)
    res = run("V07", load(tmp_path, COMPARE))
    assert res.status == "pass" and res.subjects == ("pair:ours~base",)


def test_v07_item_sets_differ_is_an_error(tmp_path: Path) -> None:
    items_arm(tmp_path, "ours", 190)
    items_arm(tmp_path, "base", 100, rename=True)
    (finding,) = run("V07", load(tmp_path, COMPARE)).findings
    assert finding.severity == "error" and finding.integrity_class == "bug"
    assert finding.message == "item sets differ on main/acc: run 200 items, control 200, 0 shared"


def test_v07_lower_is_better_flips_the_sign(tmp_path: Path) -> None:
    for run_id, err in (("ours", 0.10), ("base", 0.30)):
        rows = [{"item_id": f"i{i}", "mae": err + 0.001 * (i % 7)} for i in range(100)]
        write_capsule(tmp_path, run_id, "seed0", metrics={"mae": err}, items=rows,
                      directions={"mae": "lower_is_better"})
    res = run("V07", load(tmp_path, COMPARE), resamples=2000)
    assert res.status == "pass"  # ours has the lower error on every item: the CI of the improvement is > 0
    import numpy as np

    lo, hi = bootstrap_mean_ci(np.full(100, 0.2), 1000, 0)
    assert lo == hi == pytest.approx(0.2)


def test_v07_lower_is_better_noise_reports_positive_improvement(tmp_path: Path) -> None:
    noise = [0.05 * ((i * 37) % 11 - 5) / 5 - 0.002 for i in range(100)]  # ours a little lower on average
    for run_id, shift in (("ours", noise), ("base", [0.0] * 100)):
        rows = [{"item_id": f"i{i}", "mae": 0.2 + shift[i]} for i in range(100)]
        write_capsule(tmp_path, run_id, "seed0", metrics={"mae": 0.2}, items=rows,
                      directions={"mae": "lower_is_better"})
    (finding,) = run("V07", load(tmp_path, COMPARE), resamples=2000).findings
    values = finding.values["main/mae"]
    assert values["delta"] == pytest.approx(-sum(noise) / 100)  # improvement = base − ours for an error
    assert values["delta"] > 0 and finding.severity == "warn"


def test_v07_nan_per_item_values_are_dropped_and_counted(tmp_path: Path) -> None:
    items_arm(tmp_path, "ours", 100)
    rows = classification_items(200, correct=98)
    rows[5]["acc"] = float("nan")
    write_capsule(tmp_path, "base", "seed0", metrics={"acc": 0.49}, items=rows)
    (finding,) = run("V07", load(tmp_path, COMPARE)).findings
    assert finding.values["main/acc"]["dropped"] == 1 and finding.values["main/acc"]["n"] == 199


def test_v07_seeds_paired_when_seed_ids_match(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.80, 0.82, 0.81])
    seeds(tmp_path, "base", [0.79, 0.83, 0.80])
    (finding,) = run("V07", load(tmp_path, COMPARE)).findings
    values = finding.values["main/acc"]
    assert values["method"] == "paired t-test" and values["bands_overlap"] is True
    assert finding.severity == "warn" and "inside seed noise: main/acc" in finding.message


def test_v07_seeds_welch_when_seed_ids_differ_and_clear_win_passes(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.90, 0.91, 0.92])
    seeds(tmp_path, "base", [0.70, 0.71, 0.72], first_seed=10)
    res = run("V07", load(tmp_path, COMPARE))
    assert res.status == "pass"
    seeds(tmp_path, "base", [0.89, 0.92, 0.90], first_seed=10)
    (finding,) = run("V07", load(tmp_path, COMPARE)).findings
    assert finding.values["main/acc"]["method"] == "Welch t-test"


def test_v07_missing_per_item_column_falls_back_to_seeds(tmp_path: Path) -> None:
    for i, value in enumerate([0.80, 0.82, 0.81]):
        write_capsule(tmp_path, "ours", f"seed{i}", seed=i, metrics={"acc": value},
                      items=[{"item_id": "a", "pred": 1}])
        write_capsule(tmp_path, "base", f"seed{i}", seed=i, metrics={"acc": value - 0.001},
                      items=[{"item_id": "a", "pred": 1}])
    (finding,) = run("V07", load(tmp_path, COMPARE)).findings
    assert finding.values["main/acc"]["method"] == "paired t-test"


def test_v07_not_judged_with_one_seed_and_no_items(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [0.9])
    seeds(tmp_path, "base", [0.8])
    res = run("V07", load(tmp_path, COMPARE))
    assert res.status == "skipped" and "results.parquet|csv missing" in res.note


def test_v07_judges_fifty_capsules_of_a_thousand_items(tmp_path: Path) -> None:
    """The size of a real comparison; its speed is measured by benchmarks/bench_audit.py (V07's paired
    bootstrap on 50 capsules of 1,000 items), never timed here."""
    items_arm(tmp_path, "ours", 520, n=1000, cells=25)
    items_arm(tmp_path, "base", 500, n=1000, cells=25)
    res = run("V07", load(tmp_path, COMPARE))
    assert res.status == "pass" and res.subjects == ("pair:ours~base",)  # 20 items better, none worse


# -- V08 ------------------------------------------------------------------------------------------------------
def test_baseline_draw_test_vector() -> None:
    deltas = draw_deltas(49.12, [42.63, 49.30, 47.26])
    assert round(deltas["worst"], 2) == 6.49 and round(deltas["mean"], 2) == 2.72
    assert round(deltas["best"], 2) == -0.18


def test_v08_single_seed_probe_whose_deltas_disagree_warns(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [49.12], metric="psnr")
    seeds(tmp_path, "base", [42.63, 49.30, 47.26], metric="psnr")
    (finding,) = run("V08", load(tmp_path, COMPARE)).findings
    assert finding.severity == "warn"
    assert "Δ +6.49 worst, +2.72 mean, −0.18 best (best draw base/seed1, worst draw base/seed0)" \
        in finding.message
    assert "disagree in sign" in finding.message
    assert finding.values["main/psnr"]["probe"] == "ours/seed0"


def test_v08_agreeing_deltas_are_reported_as_info(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [55.0], metric="psnr")
    seeds(tmp_path, "base", [42.63, 49.30, 47.26], metric="psnr")
    (finding,) = run("V08", load(tmp_path, COMPARE)).findings
    assert finding.severity == "info"
    assert finding.values["main/psnr"]["delta_best"] == pytest.approx(5.70)


def test_v08_single_seed_control_reports_run_minus_control(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [42.63, 49.30, 47.26], metric="psnr")
    seeds(tmp_path, "base", [49.12], metric="psnr")
    (finding,) = run("V08", load(tmp_path, COMPARE)).findings
    values = finding.values["main/psnr"]
    assert values["delta_best"] == pytest.approx(0.18) and values["delta_worst"] == pytest.approx(-6.49)
    assert values["best_draw"] == "ours/seed1" and finding.severity == "warn"


def test_v08_claim_citing_one_draw_warns(tmp_path: Path) -> None:
    seeds(tmp_path, "base", [42.63, 49.30, 47.26], metric="psnr")
    write_evidence(tmp_path, [{"id": "C3", "evidence": [{"test_id": "main", "metric": "psnr",
                                                        "cells": ["base/seed1"]}]}])
    res = run("V08", load(tmp_path))
    (finding,) = res.findings
    assert finding.subject == "claim:C3" and finding.severity == "warn"
    assert finding.message == "claim cites only one draw (base/seed1) of base: 3 seeds exist"


def test_v08_skips_when_both_arms_have_several_seeds(tmp_path: Path) -> None:
    seeds(tmp_path, "ours", [1.0, 2.0])
    seeds(tmp_path, "base", [1.0, 2.0])
    res = run("V08", load(tmp_path, COMPARE))
    assert res.status == "skipped" and "single-seed arm" in res.note


# -- V09 ------------------------------------------------------------------------------------------------------
def family(root: Path, count: int, *, tried: int | None = None) -> ProjectEvidence:
    for i in range(count):
        run_id = "ours" if i == 0 else f"ours-lr{i}"
        write_capsule(root, run_id, "seed0", metrics={"acc": 0.8 + 0.001 * i}, record={"exp_id": run_id})
    write_capsule(root, "unrelated", "seed0", metrics={"acc": 0.5})
    claim: dict[str, Any] = {"id": "C1", "evidence": [{"exp_id": "ours", "test_id": "main", "metric": "acc",
                                                      "cells": ["ours/seed0"]}]}
    if tried is not None:
        claim["tried"] = tried
    write_evidence(root, [claim])
    return load(root)


def test_v09_more_than_ten_configurations_warns_with_bonferroni(tmp_path: Path) -> None:
    (finding,) = run("V09", family(tmp_path, 12)).findings
    assert finding.severity == "warn" and finding.subject == "claim:C1"
    assert finding.message == "12 configurations evaluated for this claim: Bonferroni-adjusted α = 0.05/12 = 0.0042"
    assert finding.values["bonferroni_alpha"] == pytest.approx(0.05 / 12)
    assert "unrelated" not in finding.values["seen"]


def test_v09_undisclosed_tries_are_info_and_disclosed_pass(tmp_path: Path) -> None:
    (finding,) = run("V09", family(tmp_path, 3)).findings
    assert finding.severity == "info" and finding.values["configurations"] == 3
    assert "claims[].tried not disclosed" in finding.message
    assert run("V09", family(tmp_path, 3, tried=3)).status == "pass"


def test_v09_one_configuration_passes_and_no_claims_skips(tmp_path: Path) -> None:
    assert run("V09", family(tmp_path, 1)).status == "pass"
    assert run("V09", load(tmp_path / "empty")).status == "skipped"


def test_garbage_inputs_give_findings_or_skips_never_exceptions(tmp_path: Path) -> None:
    from remote_gpu_trainer.audits.catalogue import comparability

    write_capsule(tmp_path, "ours", "seed0", metrics={"acc": 0.9}, items=[{"item_id": "a", "acc": "x"}],
                  train=[{"step": 1, "epoch": "one", "val/acc": "bad", "grad_norm": "nan"}])
    write_capsule(tmp_path, "base", "seed0", metrics={"acc": 0.8}, items=[{"item_id": "a", "acc": 1.0},
                                                                          {"item_id": "a", "acc": 0.0}])
    (tmp_path / "runs/base/seed0/run.json").write_text("{not json", encoding="utf-8")
    write_evidence(tmp_path, [{"id": "C1", "tried": "many", "evidence": [
        {"test_id": "main", "metric": "acc", "cells": ["ours/seed0", "ghost/seed0"], "tables": "tab2",
         "variance": "std", "n": "lots", "precision": None, "published": "high", "value": "0.9"}]}])
    project = load(tmp_path, Declarations(comparisons=(Comparison("ours", "base", vary=("lr",)),)))
    results = {cid: check(project, specs()[cid].params)
               for table in (comparability.CHECKS, CHECKS) for cid, check in table.items()}
    assert all(res.status in {"pass", "findings", "skipped"} for res in results.values())
    assert results["V01"].note == "pair:ours~base: runs/base/seed0/run.json missing or unreadable"
    assert results["V02"].status == "skipped"  # an unreadable run.json is not a different budget
    assert [f.message for f in results["V05"].findings] == ["missing n, seeds, variance.type"]
    assert "item_id is not unique" in results["V07"].note
    assert results["V04"].findings[0].values["unusable"] == ["ghost/seed0"]
