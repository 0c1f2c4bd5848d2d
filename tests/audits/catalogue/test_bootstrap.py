"""The shared percentile bootstrap (audits/catalogue/bootstrap.py, docs/verify.md §2): its resamples are the rows
of one seeded index matrix, its means those of the resampled items, and V07's comparisons resampled together get
the CI each would get alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from remote_gpu_trainer.audits.catalogue.bootstrap import mean_ci, mean_cis, resampled_means
from remote_gpu_trainer.audits.catalogue.load import Declarations
from remote_gpu_trainer.audits.catalogue.model import Comparison
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.audits.catalogue.statistics import CHECKS
from support.capsules import classification_items, load, write_capsule


def reference_means(x: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """The stream docs/verify.md §2 states, drawn whole: row b of integers(0, n, (resamples, n), int32)."""
    index = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)), dtype=np.int32)
    return x[index].mean(axis=1)


@pytest.mark.parametrize("n", [1, 7, 999, 1000, 5000])
def test_resampled_means_are_the_means_of_the_seeded_index_rows(n: int) -> None:
    x = np.random.default_rng(n).normal(size=n)
    ours = resampled_means(x, 1000, np.random.default_rng(3))
    np.testing.assert_allclose(ours, reference_means(x, 1000, 3), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("n", "resamples"), [(1000, 10_000), (1000, 1_537), (333, 4_001)])
def test_rows_drawn_ahead_in_chunks_are_the_rows_of_one_whole_draw(n: int, resamples: int) -> None:
    """The audit's size (10,000 resamples of 1,000 items: 20 chunks drawn by the helper thread) and chunks
    ending part-way through a block or on an odd row."""
    x = np.random.default_rng(n).normal(size=n)
    ours = resampled_means(x, resamples, np.random.default_rng(0))
    np.testing.assert_allclose(ours, reference_means(x, resamples, 0), rtol=0, atol=1e-12)


def test_whole_number_values_resample_exactly_and_a_constant_sample_is_its_own_ci() -> None:
    x = np.array([-1.0, 0.0, 1.0, 1.0, 0.0, -1.0, 0.0, 1.0])
    assert np.array_equal(resampled_means(x, 2000, np.random.default_rng(0)), reference_means(x, 2000, 0))
    assert mean_ci(np.full(37, 0.3), 500, 0) == (0.3, 0.3)


def test_samples_resampled_together_get_the_ci_each_gets_alone() -> None:
    rng = np.random.default_rng(7)
    samples = [rng.normal(0.1, 1, 300), rng.normal(0, 1, 300), rng.normal(0, 1, 120), rng.normal(1, 2, 300)]
    together = mean_cis(samples, 4000, 11)
    for sample, ci in zip(samples, together, strict=True):
        assert ci == pytest.approx(mean_ci(sample, 4000, 11), abs=1e-12)
        assert ci == pytest.approx(tuple(np.percentile(reference_means(sample, 4000, 11), [2.5, 97.5])), abs=1e-12)


def test_wilcoxon_of_samples_tested_together_is_the_p_of_each_alone() -> None:
    """V07's Wilcoxon p (paired_items.wilcoxon_ps): samples of one length over 50 share one scipy call; the p
    of each is bit for bit scipy's on the sample alone, short samples (exact or permutation test, chosen by
    their own ties) and all-zero ones (p 1) included."""
    import warnings

    from scipy.stats import wilcoxon

    from remote_gpu_trainer.audits.catalogue.paired_items import wilcoxon_ps

    rng = np.random.default_rng(3)
    samples = [np.round(rng.normal(0.05 * i, 1, 300), 1) for i in range(5)] + [
        rng.integers(-1, 2, 300).astype(float), np.zeros(300), rng.normal(0, 1, 40), np.array([1.0, -1.0, 2.0, 2.0]),
        np.round(rng.normal(0.2, 1, 120), 2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = [float(wilcoxon(s).pvalue) if np.any(s != 0) else 1.0 for s in samples]
    assert wilcoxon_ps(samples) == alone


def test_v07_judges_several_comparisons_of_one_item_count_as_it_judges_each_alone(tmp_path: Path) -> None:
    arms = {"base": 100, "tie": 100, "near": 101, "clear": 160}
    for run_id, correct in arms.items():
        for seed in range(2):
            write_capsule(tmp_path, run_id, f"seed{seed}", seed=seed, metrics={"acc": correct / 200},
                          items=classification_items(200, correct=correct - seed))
    params = specs()["V07"].params
    pairs = [Comparison(run_id, "base") for run_id in ("tie", "near", "clear")]
    together = CHECKS["V07"](load(tmp_path, Declarations(comparisons=tuple(pairs))), params)
    alone = {p.subject: CHECKS["V07"](load(tmp_path, Declarations(comparisons=(p,))), params) for p in pairs}
    assert together.subjects == ("pair:tie~base", "pair:near~base", "pair:clear~base")
    flagged = {f.subject: f for f in together.findings}
    assert set(flagged) == {"pair:tie~base", "pair:near~base"}  # a tie and a small gain inside noise; 60 clear
    assert flagged["pair:tie~base"].values["main/acc"]["ci95"] == [0.0, 0.0]
    for subject, result in alone.items():
        assert [f.values for f in result.findings] == [f.values for f in together.findings if f.subject == subject]
