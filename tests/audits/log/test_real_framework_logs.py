"""Console output captured from the real frameworks (the README of tests/fixtures/logs/captured/: transformers 5.25,
pytorch-lightning 2.6.6, torch 2.13 CPU), read by the real line splitter, parser and detector
(docs/log-signatures.md §1, §4): every number at its own line's position, the failure rows they must raise, and
no false critical when torchrun stops the ranks that did not fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.audits.log.detector import LogDetector
from remote_gpu_trainer.audits.log.lines import LineSplitter
from remote_gpu_trainer.audits.log.metrics import MetricParser
from remote_gpu_trainer.audits.log.samples import Hit, Sample
from remote_gpu_trainer.audits.log.signatures import load_catalogue

CAPTURED = Path(__file__).parents[2] / "fixtures" / "logs" / "captured"
CATALOGUE = load_catalogue()
HF5_LOSSES = [0.6936, 0.6908, 0.6927, 0.6919, 0.6908, 0.6928]  # hf5_trainer.log's dicts, in order


def lines_of(name: str) -> list[str]:
    splitter = LineSplitter()
    return [line.text for line in splitter.feed((CAPTURED / name).read_bytes()) + splitter.flush()]


def parsed(name: str, **config: int) -> list[Sample]:
    """Every line through one parser, as the log monitor feeds it (each `\\r` frame a line)."""
    parser = MetricParser(**config)
    return [sample for line in lines_of(name) for sample in parser.feed(line, 0.0)]


def detected(name: str) -> list[Hit]:
    detector = LogDetector(CATALOGUE)
    return detector.feed_lines(lines_of(name), 1, 0.0) + detector.flush(0.0)


def series(samples: list[Sample], key: str) -> list[tuple[int | None, float | None, float]]:
    return [(s.step, s.epoch, s.value) for s in samples if s.key == key]


# -- Hugging Face Trainer 5: dict lines beside a tqdm bar (§4.5) ---------------------------------------------------


def test_hf5_dicts_are_at_their_own_epoch_never_at_the_bars_step() -> None:
    samples = parsed("hf5_trainer.log")
    assert series(samples, "loss") == [(None, e, v) for e, v in zip([0.5, 1, 1.5, 2, 2.5, 3], HF5_LOSSES, strict=True)]
    assert {s.step for s in samples if s.source == "hf"} == {None}  # lr, grad_norm and the summary too
    bar = [s.step for s in samples if s.source == "tqdm" and s.key == "throughput"]
    assert bar == [2, 3, 4, 6, 8, 10, 12]  # every frame of the bar still gives the run's step, as its own samples


def test_hf5_epoch_gives_the_step_only_where_that_is_exact() -> None:
    exact = parsed("hf5_trainer.log", epochs=3)  # 12 bar steps / 3 epochs = 4 a epoch
    assert [(s.step, s.approx_step) for s in exact if s.key == "loss"] == [(n, True) for n in (2, 4, 6, 8, 10, 12)]
    assert [s.step for s in parsed("hf5_trainer.log", epochs=5) if s.key == "loss"] == [None] * 6  # 12/5: no
    counted = MetricParser()
    counted.feed("Epoch 1/3", 0.0)  # a planned epoch count the log states
    counted.feed(" 17%|█▋        | 2/12 [00:00<00:03,  2.89it/s]", 0.0)
    assert [s.step for s in counted.feed("{'loss': '0.6936', 'epoch': '0.5'}", 0.0)] == [2]


@pytest.mark.parametrize(("epoch", "per_epoch", "step"), [
    ("'2.188'", 16, 35),  # 35/16 = 2.1875, printed with HF 5's 4 significant digits
    ("'2.188'", 2000, None),  # 4374.5 to 4377: three whole steps print as 2.188, so none is taken
    ("'0.3333'", 3, 1),
    ("0.4", 250, 100),  # HF 4 printed the float itself: exact
    ("0.33", 3, None),  # an epoch rounded to 2 decimals: 0.99 is no whole step
])
def test_a_printed_epoch_names_one_whole_step_or_none(epoch: str, per_epoch: int, step: int | None) -> None:
    parser = MetricParser(steps_per_epoch=per_epoch)
    assert [s.step for s in parser.feed(f"{{'loss': '0.5', 'epoch': {epoch}}}", 0.0)] == [step]


def test_hf_dict_with_its_own_step_keeps_it() -> None:
    parser = MetricParser()
    parser.feed(" 17%|█▋        | 2/12 [00:00<00:03,  2.89it/s]", 0.0)
    assert [(s.step, s.approx_step) for s in parser.feed("{'loss': '0.69', 'step': 7, 'epoch': '1.75'}", 0.0)] == [
        (7, False)]


def test_key_value_lines_keep_their_own_step() -> None:
    samples = parsed("torchrun_rank_dies.log")
    assert series(samples, "loss") == [(0, None, 9.458571), (1, None, 7.286173), (2, None, 5.643746),
                                       (3, None, 4.396853)]
    parser = MetricParser()
    parser.feed(" 40%|████      | 200/500 [01:08<01:42,  2.92it/s]", 0.0)
    assert [s.step for s in parser.feed("val_loss=0.41 val_acc=0.85", 0.0)] == [None, None]  # not the bar's 200


# -- Lightning's default rich bar (§4.4) -------------------------------------------------------------------------


def test_lightning_rich_bar_in_a_file_gives_the_loss_at_the_bars_step() -> None:
    """A file gets the bar once, when fit ends, with its metrics wrapped at 80 columns: both halves count."""
    samples = parsed("lightning_rich_file.log")
    assert series(samples, "loss") == [(24, 2.0, 2.098)]
    assert series(samples, "val/loss") == [(24, 2.0, 3.114)]  # the wrapped half, at the same bar's step
    assert {s.approx_step for s in samples if s.key in ("loss", "val/loss")} == {True}


def test_lightning_rich_bar_on_a_terminal_gives_a_loss_per_frame() -> None:
    samples = parsed("lightning_rich_tty.log")
    loss = series(samples, "loss")
    steps = [step for step, _, _ in loss]
    assert steps == sorted(steps) and set(steps) == set(range(1, 25))  # every batch's frame, each at its step
    assert loss[-1] == (24, 2.0, 2.098) and loss[0] == (1, 0.0, 5.325)
    # the sanity check's on the bar's own line, then each epoch's on the wrapped line: read once each
    assert series(samples, "val/loss") == [(0, 0.0, 9.024), (8, 1.0, 7.409), (16, 2.0, 5.574), (24, 2.0, 3.114)]


# -- failure rows ------------------------------------------------------------------------------------------------


def test_nan_grad_norm_under_hf_nan_filter_is_a_signature() -> None:
    """HF's logging_nan_inf_filter=True logs the loss as '0' while the grad norm is 'nan': S95 fires, S08 cannot."""
    hits = detected("hf5_nan_grad.log")
    assert {h.signature for h in hits} == {"S95"}
    first = hits[0]
    assert first.severity == "error" and "'grad_norm': 'nan'" in first.evidence and "'epoch': '1'" in first.evidence
    assert CATALOGUE["S95"].fix


@pytest.mark.parametrize("name", ["torchrun_rank_dies.log", "torchrun_rank_dies_no_handler.log"])
def test_torchrun_names_the_rank_that_failed_and_its_sigterm_to_the_others_is_no_external_stop(name: str) -> None:
    hits = detected(name)
    assert "S47" not in {h.signature for h in hits}
    assert not [h for h in hits if h.severity == "critical"]
    root = [h for h in hits if h.signature == "S96"]
    assert len(root) == 1 and root[0].severity == "error"
    assert root[0].evidence.startswith("torchrun root cause: rank 1 (local_rank: 1), exitcode 1 (pid: ")
    assert root[0].evidence.endswith("host localhost") and "(SIGTERM)" in root[0].detail
    assert lines_of(name)[root[0].line_no - 1] == "Root Cause (first observed failure):"
    assert any(h.signature == "S48" and "ValueError: rank 1" in h.evidence for h in hits)  # rank 1's own traceback


def test_a_stop_from_outside_is_still_an_external_stop() -> None:
    """SIGTERM to torchrun's process group (a preemption): the workers' and torchrun's own words are S47."""
    hits = detected("torchrun_preempted.log")
    stops = [h for h in hits if h.signature == "S47"]
    assert len(stops) == 3 and {h.severity for h in stops} == {"critical"}
    assert "got signal: 15" in stops[-1].evidence
    assert "S96" not in {h.signature for h in hits}
