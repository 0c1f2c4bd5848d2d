"""Metric parsing from logs (docs/log-signatures.md §4) and the step counter built on it (§3.3).

Fixtures in tests/fixtures/logs/ reproduce what common trainers print, carriage-return redraws and ANSI
codes included. Expected series are written out by hand from reading each fixture: a parser change that
moves a number, a step or a source shows up as a diff here.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.log import metrics as m
from remote_gpu_trainer.audits.log.lines import strip_ansi
from remote_gpu_trainer.audits.log.metrics import (
    KV,
    PROGRESS,
    RICH,
    TQDM,
    MetricParser,
    canonical_key,
    parse_csv,
    parse_trainer_state,
)
from remote_gpu_trainer.audits.log.progress import TrainingProgress
from remote_gpu_trainer.audits.log.samples import Sample

LOGS = Path(__file__).parents[2] / "fixtures" / "logs"

Row = tuple[int | None, str, object, str]


def norm(value: float) -> object:
    """nan != nan, so non-finite values are compared by name."""
    return value if math.isfinite(value) else repr(value)


def rows(samples: list[Sample]) -> list[Row]:
    return [(s.step, s.key, norm(s.value), s.source) for s in samples]


def feed_text(parser: MetricParser, text: str, t: float = 0.0) -> list[Sample]:
    """The pipeline's split (§4.1): on \\r and \\n, each segment one line."""
    out: list[Sample] = []
    for line in re.split(r"[\r\n]", text):
        out.extend(parser.feed(line, t))
    return out


def parse_log(name: str, **config: int) -> list[Sample]:
    return feed_text(MetricParser(**config), (LOGS / name).read_text(encoding="utf-8"))


def one_line(line: str, **config: int) -> list[Row]:
    return rows(MetricParser(**config).feed(line, 0.0))


# §4.3-§4.5: the spec's own example lines, at the regex level and through the parser

SPEC_KV_5 = "step=1200 loss=0.4312 lr=3.0e-04 grad_norm=1.93 it/s=5.41"
SPEC_KV_3 = "epoch: 3 | train_loss: 0.512 | val_acc: 0.873"
LIGHTNING_TQDM = "Epoch 3:  45%|████▌     | 450/1000 [01:23<01:40,  5.41it/s, loss=0.123, v_num=0]"
FIRST_FRAME = "  0%|          | 0/1000 [00:00<?, ?it/s]"
SLOW_FRAME = " 12%|█▏        | 6/50 [00:11<01:21,  1.85s/it]"
RICH_BAR = "Epoch 3/99 ━━━━━━━━━━ 450/1000 0:01:23 • 0:01:40 5.41it/s v_num: 0 train_loss: 0.123"
HF_TRAIN = "{'loss': 0.4512, 'grad_norm': 1.9345, 'learning_rate': 4.9e-05, 'epoch': 0.05}"
HF_EVAL = "{'eval_loss': 0.39, 'eval_accuracy': 0.874, 'epoch': 1.0}"


def test_kv_regex_pair_counts_from_the_spec() -> None:
    assert KV.findall(SPEC_KV_5) == [("step", "1200"), ("loss", "0.4312"), ("lr", "3.0e-04"),
                                     ("grad_norm", "1.93"), ("it/s", "5.41")]
    assert KV.findall(SPEC_KV_3) == [("epoch", "3"), ("train_loss", "0.512"), ("val_acc", "0.873")]
    assert KV.findall("time=12:30:01") == []
    assert KV.findall("saved /data/runs/exp1/ckpt/epoch=3-step=1200.ckpt") == []
    assert KV.findall("  Num examples = 8,000") == []  # a thousands separator is not a value


@pytest.mark.parametrize("line, unit, cur, total", [
    ("Epoch 3/100", "Epoch", "3", "100"),
    ("Epoch [3/100]", "Epoch", "3", "100"),
    ("epoch 3 of 100", "epoch", "3", "100"),
    ("iter: 1200/50000", "iter", "1200", "50000"),
    ("epoch=1 step=12/600 loss=0.512 lr=0.001", "step", "12", "600"),  # extension: `key=N/M`
])
def test_progress_regex_reads_the_spec_forms(line: str, unit: str, cur: str, total: str) -> None:
    found = PROGRESS.search(line)
    assert found is not None and found.group("unit", "cur", "total") == (unit, cur, total)


def test_progress_finds_every_counter_on_a_line() -> None:
    assert [x.group("unit", "cur", "total") for x in PROGRESS.finditer("Epoch 3/100 step 12/600")] == [
        ("Epoch", "3", "100"), ("step", "12", "600")]


def test_bar_regexes_match_the_spec_examples() -> None:
    lightning = TQDM.search(LIGHTNING_TQDM)
    assert lightning is not None
    assert lightning.group("desc", "n", "total", "rate", "unit", "postfix") == (
        "Epoch 3", "450", "1000", "5.41", "it/s", "loss=0.123, v_num=0")
    first = TQDM.search(FIRST_FRAME)
    assert first is not None and first.group("n", "total", "rate", "unit") == ("0", "1000", "?", "it/s")
    slow = TQDM.search(SLOW_FRAME)
    assert slow is not None and slow.group("rate", "unit") == ("1.85", "s/it")
    rich = RICH.match(RICH_BAR)
    assert rich is not None
    assert rich.group("epoch", "max_epoch", "n", "total", "rate", "unit") == ("3", "99", "450", "1000", "5.41", "it/s")


def test_spec_lines_through_the_parser() -> None:
    assert one_line(SPEC_KV_5) == [(1200, "loss", 0.4312, "kv"), (1200, "lr", 3.0e-04, "kv"),
                                   (1200, "grad_norm", 1.93, "kv"), (1200, "throughput", 5.41, "kv")]
    epoch_line = MetricParser().feed(SPEC_KV_3, 0.0)
    assert rows(epoch_line) == [(None, "loss", 0.512, "kv"), (None, "val/acc", 0.873, "kv")]
    assert {s.epoch for s in epoch_line} == {3.0}
    assert one_line("time=12:30:01") == []
    assert one_line("2024-05-01 12:30:01 | INFO | saved /data/runs/exp1/ckpt/epoch=3-step=1200.ckpt") == []
    assert one_line(LIGHTNING_TQDM) == [(3450, "throughput", 5.41, "tqdm"), (3450, "loss", 0.123, "tqdm")]
    assert one_line(FIRST_FRAME) == [(0, "step", 0.0, "tqdm"), (0, "total_steps", 1000.0, "tqdm")]
    assert one_line(SLOW_FRAME)[0] == (6, "throughput", 1 / 1.85, "tqdm")
    assert one_line(RICH_BAR) == [(3450, "throughput", 5.41, "rich"), (3450, "loss", 0.123, "rich"),
                                  (3450, "total_steps", 100_000.0, "rich")]  # Epoch 3/99: 100 epochs × 1000
    assert one_line(HF_TRAIN) == [(None, "loss", 0.4512, "hf"), (None, "grad_norm", 1.9345, "hf"),
                                  (None, "lr", 4.9e-05, "hf")]
    assert one_line(HF_EVAL) == [(None, "val/loss", 0.39, "hf"), (None, "val/accuracy", 0.874, "hf")]


def test_position_only_lines_emit_step_and_epoch() -> None:
    both = MetricParser().feed("Epoch 3/100 step 12/600", 0.0)
    assert rows(both) == [(12, "step", 12.0, "kv"), (12, "epoch", 3.0, "kv"), (12, "total_steps", 600.0, "kv")]
    assert one_line("Epoch [3/100]") == [(None, "epoch", 3.0, "kv")]
    assert one_line("epoch 3 of 100") == [(None, "epoch", 3.0, "kv")]
    assert one_line("iter: 1200/50000") == [(1200, "step", 1200.0, "kv"), (1200, "total_steps", 50000.0, "kv")]


def test_demo_trainer_lines() -> None:
    parser = MetricParser()
    train = parser.feed("epoch=1 step=12/600 loss=0.512 lr=0.001", 5.0)
    assert rows(train) == [(12, "loss", 0.512, "kv"), (12, "lr", 0.001, "kv"), (12, "total_steps", 600.0, "kv")]
    assert {(s.epoch, s.t) for s in train} == {(1.0, 5.0)}
    assert parser.total_steps == 600 and parser.step == 12
    assert rows(parser.feed("epoch=1 step=600/600 val_loss=0.40", 6.0)) == [(600, "val/loss", 0.40, "kv")]


def test_banner_and_config_lines_are_not_metrics() -> None:
    for line in ("TPU available: False, using: 0 TPU cores", "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]",
                 "cell=seed0 seed=0 epochs=5 steps_per_epoch=40", "Trainable params: 11.2 M"):
        assert one_line(line) == [], line


# §4.2 canonical keys (assets/metrics.toml)

@pytest.mark.parametrize("raw, canonical", [
    *[(k, "step") for k in ("step", "global_step", "iter", "iteration", "it", "trainer/global_step", "Step")],
    *[(k, "epoch") for k in ("epoch", "ep", "Epoch")],
    *[(k, "loss") for k in ("loss", "train_loss", "train/loss", "loss_step", "train_loss_step", "training_loss",
                            "tr_loss", "Loss")],
    *[(k, "lr") for k in ("lr", "learning_rate", "lr-AdamW", "lr-SGD", "lr_0", "lr/group0")],
    *[(k, "grad_norm") for k in ("grad_norm", "gnorm", "grad-norm", "total_norm")],
    *[(k, "throughput") for k in ("it/s", "s/it", "samples/s", "train_samples_per_second", "tokens/s", "tok/s",
                                  "img/s")],
    *[(k, None) for k in ("v_num", "eta", "elapsed", "pid", "rank", "V_NUM", "local_rank")],
    ("val_loss", "val/loss"), ("val/acc", "val/acc"), ("valid_loss", "val/loss"), ("validation_loss", "val/loss"),
    ("eval_loss", "val/loss"), ("eval/accuracy", "val/accuracy"), ("VAL_ACC", "val/acc"),
    ("lr-AdamW-momentum", "lr-adamw-momentum"), ("train_loss_epoch", "train_loss_epoch"), ("Top1", "top1"),
    ("val_", "val_"),
])
def test_canonical_key_table(raw: str, canonical: str | None) -> None:
    assert canonical_key(raw) == canonical


def test_throughput_units_and_inversion() -> None:
    assert one_line("step=5 loss=1 s/it=2.5") == [(5, "loss", 1.0, "kv"), (5, "throughput", 0.4, "kv")]
    units = [s.unit for s in MetricParser().feed("step=5 loss=1 tok/s=900 img/s=30 samples/s=12 it/s=3", 0.0)]
    assert units == ["", "tokens/s", "img/s", "samples/s", "it/s"]
    assert one_line("step=5 loss=1 s/it=0")[1] == (5, "throughput", "inf", "kv")


# fixtures: the exact series

def test_hf_trainer_log() -> None:
    t = "tqdm"
    expected: list[Row] = [
        (0, "step", 0.0, t), (0, "total_steps", 500.0, t),
        (1, "throughput", 2.69, t), (50, "throughput", 2.91, t), (100, "throughput", 2.91, t),
        (None, "loss", 0.6931, "hf"), (None, "grad_norm", 3.8712, "hf"), (None, "lr", 4e-05, "hf"),
        (150, "throughput", 2.92, t), (200, "throughput", 2.92, t),
        (None, "loss", 0.5217, "hf"), (None, "grad_norm", 2.9135, "hf"), (None, "lr", 3e-05, "hf"),
        (250, "throughput", 2.92, t),
        (None, "val/loss", 0.4102, "hf"), (None, "val/accuracy", 0.8525, "hf"), (None, "val/runtime", 2.2671, "hf"),
        (None, "val/samples_per_second", 225.84, "hf"), (None, "val/steps_per_second", 14.115, "hf"),
        (300, "throughput", 2.91, t),
        (None, "loss", 0.3689, "hf"), (None, "grad_norm", 4.4721, "hf"), (None, "lr", 2e-05, "hf"),
        (400, "throughput", 2.91, t),
        (None, "loss", 0.3012, "hf"), (None, "grad_norm", 2.1544, "hf"), (None, "lr", 1e-05, "hf"),
        (500, "throughput", 2.91, t),
        (None, "loss", 0.2811, "hf"), (None, "grad_norm", 1.9345, "hf"), (None, "lr", 0.0, "hf"),
        (None, "val/loss", 0.3901, "hf"), (None, "val/accuracy", 0.874, "hf"), (None, "val/runtime", 2.2412, "hf"),
        (None, "val/samples_per_second", 228.45, "hf"), (None, "val/steps_per_second", 14.278, "hf"),
        (None, "summary/train_runtime", 174.5012, "hf"), (None, "summary/train_samples_per_second", 45.845, "hf"),
        (None, "summary/train_steps_per_second", 2.865, "hf"), (None, "summary/train_loss", 0.4309, "hf"),
        (None, "summary/epoch", 2.0, "hf"),
    ]
    samples = parse_log("hf_trainer.log")
    assert rows(samples) == expected  # a dict line states no step: never the bar's (docs/log-signatures.md §4.5)
    assert {s.unit for s in samples if s.key == "throughput"} == {"it/s"}
    assert [s.epoch for s in samples if s.key == "loss"] == [0.4, 0.8, 1.2, 1.6, 2.0]
    assert not any(s.approx_step for s in samples)


def test_hf_summary_never_enters_the_loss_series() -> None:
    samples = parse_log("hf_trainer.log")
    assert [s.value for s in samples if s.key == "loss"] == [0.6931, 0.5217, 0.3689, 0.3012, 0.2811]
    assert [s.value for s in samples if s.key == "summary/train_loss"] == [0.4309]
    state = parse_trainer_state((LOGS / "trainer_state.json").read_text(), 0.0)
    assert 0.4309 not in [s.value for s in state if s.key == "loss"]


def test_hf_dict_steps_from_steps_per_epoch_or_logging_steps() -> None:
    by_epoch = [s for s in parse_log("hf_trainer.log", steps_per_epoch=250) if s.source == "hf"]
    assert [(s.step, s.approx_step) for s in by_epoch if s.key == "loss"] == [
        (100, True), (200, True), (300, True), (400, True), (500, True)]
    assert [s.step for s in by_epoch if s.key == "val/loss"] == [250, 500]
    by_index = [s for s in parse_log("hf_trainer.log", logging_steps=100) if s.source == "hf"]
    assert [(s.step, s.approx_step) for s in by_index if s.key == "loss"] == [
        (100, False), (200, False), (300, False), (400, False), (500, False)]
    assert [s.step for s in by_index if s.key == "val/loss"] == [None, None]  # an eval line has no index


def test_hf_dict_never_takes_another_lines_step() -> None:
    parser = MetricParser(logging_steps=50)
    assert rows(parser.feed(HF_TRAIN, 0.0))[0] == (50, "loss", 0.4512, "hf")
    assert rows(parser.feed(HF_EVAL, 0.0))[0] == (None, "val/loss", 0.39, "hf")  # eval lines do not count
    assert rows(parser.feed(HF_TRAIN, 0.0))[0] == (100, "loss", 0.4512, "hf")
    no_config = MetricParser()
    no_config.feed("step=7 loss=1.0", 0.0)
    assert rows(no_config.feed(HF_TRAIN, 0.0))[0] == (None, "loss", 0.4512, "hf")  # not step 7


def test_hf_dict_glued_to_a_bar_frame_is_read_as_the_dict() -> None:
    parser = MetricParser()
    parser.feed(" 19%|█▉        | 99/500 [00:34<02:17,  2.91it/s]", 0.0)
    glued = " 20%|██        | 100/500 [00:34<02:17,  2.91it/s]{'loss': 0.6931, 'epoch': 0.4}"
    assert rows(parser.feed(glued, 0.0)) == [(None, "loss", 0.6931, "hf")]


def test_lightning_tqdm_log() -> None:
    t = "tqdm"
    expected: list[Row] = [
        (0, "step", 0.0, t), (0, "epoch", 0.0, t),
        (100, "throughput", 5.41, t), (100, "loss", 1.23, t),
        (1000, "throughput", 5.39, t), (1000, "loss", 0.412, t),
        (1000, "throughput", 5.38, t), (1000, "loss", 0.412, t), (1000, "val/loss", 0.398, t),
        (1000, "val/acc", 0.871, t), (1000, "train_loss_epoch", 0.655, t),
        (1000, "loss", 0.412, t), (1000, "val/loss", 0.398, t), (1000, "val/acc", 0.871, t),
        (1000, "train_loss_epoch", 0.655, t),
        (1450, "throughput", 5.41, t), (1450, "loss", 0.123, t),
        (2000, "throughput", 5.43, t), (2000, "loss", "nan", t),
    ]
    samples = parse_log("lightning_tqdm.log")
    assert rows(samples) == expected
    assert all(s.approx_step for s in samples)
    assert [s.epoch for s in samples if s.key == "throughput"] == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_lightning_rich_log() -> None:
    r = "rich"
    expected: list[Row] = [
        (0, "throughput", 0.0, r), (0, "total_steps", 3000.0, r),
        (100, "throughput", 5.41, r), (100, "loss", 1.23, r),
        (1000, "throughput", 5.39, r), (1000, "loss", 0.412, r),
        (1000, "throughput", 5.38, r), (1000, "loss", 0.412, r), (1000, "val/loss", 0.398, r),
        (1000, "val/acc", 0.871, r),
        (1450, "throughput", 5.41, r), (1450, "loss", 0.123, r),
        (2005, "throughput", 1 / 1.85, r), (2005, "loss", 0.301, r),
    ]
    samples = parse_log("lightning_rich.log")
    assert rows(samples) == expected
    assert all(s.approx_step for s in samples)
    assert [s.epoch for s in samples if s.key == "loss"] == [0.0, 0.0, 0.0, 1.0, 2.0]


def test_tqdm_plain_log_per_epoch_bars_continue_the_count() -> None:
    t = "tqdm"
    expected: list[Row] = [
        (0, "step", 0.0, t), (0, "total_steps", 50.0, t),
        (1, "throughput", 1 / 1.85, t), (2, "throughput", 1 / 1.84, t), (25, "throughput", 1 / 1.85, t),
        (50, "throughput", 1 / 1.85, t),
        (None, "loss", 0.734, "kv"),
        (51, "throughput", 1 / 1.87, t), (51, "total_steps", "nan", t),  # the run total is no longer known
        (90, "throughput", 1 / 1.86, t), (100, "throughput", 1 / 1.86, t),
        (None, "loss", 0.5121, "kv"),
    ]
    samples = parse_log("tqdm_plain.log")
    assert rows(samples) == expected
    assert [s.approx_step for s in samples if s.source == t] == [False] * 6 + [True] * 4
    assert [s.epoch for s in samples if s.source == "kv"] == [1.0, 2.0]


def test_kv_log() -> None:
    k = "kv"
    expected: list[Row] = [
        (100, "loss", 2.3012, k), (100, "lr", 3.0e-04, k), (100, "grad_norm", 4.12, k), (100, "throughput", 5.38, k),
        (200, "loss", 1.8731, k), (200, "lr", 3.0e-04, k), (200, "grad_norm", 3.05, k), (200, "throughput", 5.40, k),
        (1200, "loss", 0.4312, k), (1200, "lr", 3.0e-04, k), (1200, "grad_norm", 1.93, k),
        (1200, "throughput", 5.41, k),
        (None, "loss", 0.512, k), (None, "val/acc", 0.873, k),
        (1250, "loss", 0.498, k), (1250, "throughput", 1 / 0.19, k), (1250, "total_steps", 60000.0, k),
        (1300, "loss", 0.4201, k), (1300, "lr", 2.9e-04, k),
        (1350, "loss", 0.4105, k), (1350, "lr", 2.9e-04, k), (1350, "throughput", 41873.2, k),
        (1350, "throughput", 20.4, k),
    ]
    samples = parse_log("kv.log")
    assert rows(samples) == expected
    assert [s.unit for s in samples if s.key == "throughput"] == ["it/s"] * 4 + ["tokens/s", "samples/s"]
    assert [s.epoch for s in samples if s.key == "loss"] == [None, None, None, 3.0, 4.0, None, None]


def test_nan_loss_kv_log_keeps_non_finite_values() -> None:
    k = "kv"
    expected: list[Row] = [
        (1, "loss", 1.023311, k), (1, "lr", 0.00299949, k), (1, "total_steps", 120.0, k),
        (2, "loss", 0.981207, k), (2, "lr", 0.00299795, k),
        (40, "loss", 0.402113, k), (40, "lr", 0.00225, k),
        (40, "val/loss", 0.412345, k),
        (None, "val/loss", 0.412345, k),
        (57, "loss", 0.523871, k), (57, "lr", 0.00171157, k),
        (58, "loss", "nan", k), (58, "lr", 0.00168118, k),
        (59, "loss", "nan", k), (59, "lr", 0.00165079, k),
        (60, "loss", "inf", k), (60, "lr", 0.0016204, k),
    ]
    samples = parse_log("nan_loss_kv.log")
    assert rows(samples) == expected
    assert [s.step for s in samples if s.key == "loss" and not math.isfinite(s.value)] == [58, 59, 60]


def test_jsonl_log() -> None:
    j = "json"
    expected: list[Row] = [
        (50, "loss", 2.4012, j), (50, "lr", 0.0003, j), (50, "grad_norm", 5.21, j), (50, "throughput", 41250.5, j),
        (100, "loss", 1.9876, j), (100, "lr", 0.0003, j), (100, "grad_norm", 3.87, j),
        (100, "throughput", 41873.2, j),
        (100, "val/loss", 1.8123, j), (100, "val/acc", 0.6412, j),
        (150, "loss", "nan", j), (150, "lr", 0.0003, j), (150, "grad_norm", "inf", j), (150, "throughput", 40911.0, j),
        (200, "loss", 1.7012, j), (200, "train/tokens", 819200.0, j), (200, "lr", 0.0003, j),
    ]
    samples = parse_log("jsonl.log")
    assert rows(samples) == expected
    assert [s.epoch for s in samples if s.key == "lr"] == [0.1, 0.2, 0.3, None]


def test_train_csv_merged_by_step() -> None:
    c = "csv"
    expected: list[Row] = [
        (100, "loss", 2.301, c), (100, "lr", 0.0003, c),
        (200, "loss", 1.874, c), (200, "lr", 0.0003, c),
        (250, "loss", 1.702, c), (250, "val/loss", 1.655, c), (250, "val/acc", 0.512, c), (250, "lr", 0.0003, c),
        (300, "loss", 1.512, c), (300, "lr", 0.00029, c),
        (400, "loss", "nan", c), (400, "lr", 0.00027, c),
        (500, "loss", "inf", c), (500, "val/loss", "nan", c), (500, "val/acc", 0.498, c), (500, "lr", 0.00025, c),
    ]
    samples = parse_csv((LOGS / "train.csv").read_text(), 7.0)
    assert rows(samples) == expected
    assert {s.t for s in samples} == {7.0}
    assert [s.epoch for s in samples if s.key == "lr"] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


def test_lightning_metrics_csv_merged_by_step() -> None:
    c = "csv"
    expected: list[Row] = [
        (49, "lr", 0.001, c), (49, "loss", 2.2104, c),
        (99, "lr", 0.001, c), (99, "loss", 1.9312, c), (99, "train_loss_epoch", 2.0533, c),
        (99, "val/acc", 0.4117, c), (99, "val/loss", 1.8821, c),
        (149, "loss", 1.6125, c),
    ]
    samples = parse_csv((LOGS / "lightning_metrics.csv").read_text(), 0.0, source="csv")
    assert rows(samples) == expected
    assert [s.epoch for s in samples if s.key == "loss"] == [0.0, 0.0, 1.0]


def test_csv_edge_cases() -> None:
    assert parse_csv("", 0.0) == []
    assert parse_csv("1,2,3\n4,5,6\n", 0.0) == []  # no header
    assert parse_csv("step,loss\n", 0.0) == []
    no_step = parse_csv("epoch,loss\n0,1.5\n0,\n1,1.25\n", 0.0, source="train.csv")
    assert rows(no_step) == [(None, "loss", 1.5, "train.csv"), (None, "epoch", 0.0, "train.csv"),
                             (None, "loss", 1.25, "train.csv")]
    ragged = parse_csv("step,loss\n1,0.5,extra\n2\n3,abc\n4,0.25", 0.0)
    assert rows(ragged) == [(1, "loss", 0.5, "csv"), (2, "step", 2.0, "csv"), (3, "step", 3.0, "csv"),
                            (4, "loss", 0.25, "csv")]


def test_trainer_state_json() -> None:
    s = "trainer_state"
    expected: list[Row] = [
        (100, "grad_norm", 3.8712, s), (100, "lr", 4e-05, s), (100, "loss", 0.6931, s),
        (200, "grad_norm", 2.9135, s), (200, "lr", 3e-05, s), (200, "loss", 0.5217, s),
        (250, "val/accuracy", 0.8525, s), (250, "val/loss", 0.4102, s), (250, "val/runtime", 2.2671, s),
        (250, "val/samples_per_second", 225.84, s), (250, "val/steps_per_second", 14.115, s),
        (300, "grad_norm", "nan", s), (300, "lr", 2e-05, s), (300, "loss", 0.3689, s),
        (500, "summary/epoch", 2.0, s), (500, "summary/total_flos", 1324972800000000.0, s),
        (500, "summary/train_loss", 0.4309, s), (500, "summary/train_runtime", 174.5012, s),
        (500, "summary/train_samples_per_second", 45.845, s), (500, "summary/train_steps_per_second", 2.865, s),
    ]
    samples = parse_trainer_state((LOGS / "trainer_state.json").read_text(), 0.0)
    assert rows(samples) == expected
    assert [x.epoch for x in samples if x.key == "lr"] == [0.4, 0.8, 1.2]


def test_json_nesting_and_constants() -> None:
    line = '{"step": 3, "train": {"loss": Infinity, "opt": {"lr": 0.1}}, "flag": true, "items": [1, 2], "x": null}'
    assert one_line(line) == [(3, "loss", "inf", "json"), (3, "train/opt/lr", 0.1, "json")]
    assert one_line('  {"iteration": 9, "eval/acc": -Infinity}') == [(9, "val/acc", "-inf", "json")]
    assert one_line('{"epoch": 2}') == [(None, "epoch", 2.0, "json")]


# redraws and ANSI

def test_redraws_are_deduplicated() -> None:
    parser = MetricParser()
    frame = " 24%|██▍       | 120/500 [00:41<02:10,  2.91it/s]"
    assert rows(parser.feed(frame, 0.0)) == [(120, "throughput", 2.91, "tqdm"), (120, "total_steps", 500.0, "tqdm")]
    assert parser.feed(frame, 1.0) == []
    assert parser.feed(frame.replace("2.91", "2.88"), 2.0) == []  # same (n, total): a redraw
    assert rows(parser.feed(frame.replace("120/500", "121/500"), 3.0)) == [(121, "throughput", 2.91, "tqdm")]
    lightning = MetricParser()
    assert lightning.feed(LIGHTNING_TQDM, 0.0) != []
    assert lightning.feed(LIGHTNING_TQDM, 0.0) == []
    assert rows(lightning.feed(LIGHTNING_TQDM.replace("v_num=0", "v_num=0, val_loss=0.2"), 0.0))[-1] == (
        3450, "val/loss", 0.2, "tqdm")  # same position, new postfix: the validation result counts


def test_side_bars_and_data_bars_give_nothing() -> None:
    parser = MetricParser()
    parser.feed(" 50%|█████     | 250/500 [01:25<01:25,  2.92it/s]", 0.0)
    assert parser.feed(" 50%|█████     | 16/32 [00:01<00:01, 14.20it/s]", 0.0) == []  # HF evaluation bar
    assert parser.feed("Map:  45%|████▌     | 450/1000 [00:01<00:01, 400.00 examples/s]", 0.0) == []
    assert parser.feed("Validation DataLoader 0:  50%|█████     | 5/10 [00:00<00:00, 12.10it/s]", 0.0) == []
    assert parser.step == 250


def test_bar_restarting_before_completion_is_a_regression() -> None:
    parser = MetricParser()
    parser.feed(" 60%|██████    | 300/500 [01:44<01:08,  2.91it/s]", 0.0)
    assert rows(parser.feed(" 50%|█████     | 250/500 [00:02<01:25,  2.92it/s]", 1.0)) == [
        (250, "throughput", 2.92, "tqdm")]


def test_strip_ansi() -> None:  # the line splitter's, which the parser also applies to raw lines
    assert strip_ansi("\x1b[32m████\x1b[0m| 4/10 \x1b[A\x1b[2K\x1b[?25l") == "████| 4/10 "
    coloured = "\x1b[37mEpoch 1/2 \x1b[0m \x1b[38;2;98;6;224m━━━━\x1b[0m 450/1000 0:01:23 • 0:01:40 5.41it/s loss: 1"
    assert one_line(coloured)[0] == (1450, "throughput", 5.41, "rich")


# TrainingProgress

def advance(progress: TrainingProgress, steps: range, seconds_per_step: float, t0: float = 0.0) -> float:
    t = t0
    for step in steps:
        t = t0 + (step - steps.start) * seconds_per_step
        progress.observe_step(step, t)
    return t


def test_eta_from_a_synthetic_timeline() -> None:
    progress = TrainingProgress(total_steps=1000)
    t = advance(progress, range(0, 101), 2.0)
    assert t == 200.0 and progress.current_step == 100
    assert progress.steps_per_second(t) == pytest.approx(0.5)
    assert progress.eta_seconds(t) == pytest.approx(1800.0)
    assert progress.eta_seconds(t + 10) == pytest.approx(1790.0)  # counts down between log lines
    assert progress.frozen_for(t + 10) == pytest.approx(10.0)


def test_eta_from_parsed_lines_learns_the_total() -> None:
    parser, progress = MetricParser(), TrainingProgress()
    for step in range(0, 101):
        progress.observe(parser.feed(f"epoch=1 step={step}/1000 loss=0.5 lr=0.001", 2.0 * step))
    assert progress.total_steps == 1000 and progress.current_step == 100
    assert progress.eta_seconds(200.0) == pytest.approx(1800.0)


def test_eta_unknown_or_done() -> None:
    progress = TrainingProgress()
    assert progress.eta_seconds(0.0) is None and progress.frozen_for(0.0) is None
    assert progress.current_step is None and progress.steps_per_second(0.0) is None
    advance(progress, range(0, 11), 1.0)
    assert progress.eta_seconds(10.0) is None  # no total
    progress.observe_total(10)
    assert progress.eta_seconds(10.0) == 0.0
    assert progress.steps_per_second(10.0 + 2 * 3600) is None  # nothing recent enough to trust


def test_configured_total_wins_and_nan_total_forgets() -> None:
    progress = TrainingProgress(total_steps=800)
    progress.observe([Sample(0.0, 0, None, "total_steps", 500.0, "tqdm")])
    assert progress.total_steps == 800
    parsed = TrainingProgress()
    parsed.observe([Sample(0.0, 0, None, "total_steps", 500.0, "tqdm")])
    assert parsed.total_steps == 500
    parsed.observe([Sample(1.0, 51, None, "total_steps", math.nan, "tqdm", True)])
    assert parsed.total_steps is None


def test_one_poll_chunk_is_one_advance() -> None:
    progress = TrainingProgress()
    for chunk in range(1, 21):  # every 2 s a chunk of 10 steps, all stamped with the poll time
        for step in range(10 * chunk - 9, 10 * chunk + 1):
            progress.observe_step(step, 2.0 * chunk)
    assert progress.seconds_per_step(40.0) == pytest.approx(0.2)


def test_positions_read_in_a_burst_measure_no_interval() -> None:
    """A backlog read over two polls 50 ms apart is 100 steps in 50 ms only by when it was read (§3.3)."""
    progress = TrainingProgress(total_steps=1000)
    for step in range(1, 101):
        progress.observe_step(step, 0.0)
    for step in range(101, 201):
        progress.observe_step(step, 0.05, timed=False)
    assert progress.current_step == 200 and progress.intervals_held == 0 and progress.eta_seconds(0.05) is None
    progress.observe_step(210, 20.05)  # read live: 10 steps in the 20 s since the burst was read
    assert progress.seconds_per_step(20.05) == pytest.approx(2.0)
    assert progress.eta_seconds(20.05) == pytest.approx(790 * 2.0)
    stored = [Sample(float(step), step, None, "loss", 0.5, "kv") for step in range(1, 50)]
    restored = TrainingProgress(total_steps=1000)
    restored.observe(stored, timed=False)  # a restarted rgt's history
    assert restored.current_step == 49 and restored.intervals_held == 0


def test_an_eta_that_ran_out_is_no_estimate() -> None:
    progress = TrainingProgress(total_steps=1000)
    t = advance(progress, range(0, 101), 2.0)
    assert progress.eta_seconds(t + 1799) == pytest.approx(1.0)
    assert progress.eta_seconds(t + 1800) is None and progress.eta_seconds(t + 5000) is None  # never "0 s to go"


def test_regressions_are_recorded() -> None:
    progress = TrainingProgress()
    advance(progress, range(0, 501), 1.0)
    progress.observe_step(10, 600.0)
    assert progress.regressions == ((500, 10),)
    advance(progress, range(11, 21), 1.0, t0=601.0)
    assert progress.regressions == ((500, 10),)  # the new run advancing is not another regression
    assert (progress.current_step, progress.latest_step) == (500, 20)
    assert progress.frozen_for(610.0) == pytest.approx(0.0)  # the new run is moving
    progress.observe_step(5, 700.0)
    assert progress.regressions == ((500, 10), (500, 5))


def test_replayed_history_is_not_a_regression() -> None:
    """log_monitor restores stored series key by key: the second key's old samples are history."""
    progress = TrainingProgress()
    for key in ("loss", "lr"):
        progress.observe([Sample(float(step), step, None, key, 0.5, "kv") for step in range(1, 51)])
    assert progress.regressions == () and progress.current_step == 50


def test_exact_steps_replace_approximate_ones() -> None:
    progress = TrainingProgress()
    progress.observe([Sample(0.0, 3450, 3.0, "loss", 0.1, "tqdm", True)])
    assert progress.current_step == 3450
    progress.observe([Sample(1.0, 120, None, "throughput", 2.0, "tqdm")])
    assert progress.current_step == 120 and progress.regressions == ()
    progress.observe([Sample(2.0, 100, 0.4, "loss", 0.1, "hf", True)])  # HF epoch × steps_per_epoch rounding
    assert progress.current_step == 120 and progress.regressions == ()


def test_progress_memory_is_bounded() -> None:
    progress = TrainingProgress()
    for step in range(300_000):
        progress.observe_step(step, float(step))
    assert progress.intervals_held == 200 and progress.current_step == 299_999
    for i in range(300_000):
        progress.observe_step(299_999 if i % 2 else 0, 300_000.0 + i)
    assert len(progress.regressions) == 100


def test_parser_memory_is_bounded() -> None:
    parser = MetricParser()
    m._canon_cached.cache_clear()
    for i in range(30_000):  # far more distinct keys than the cache holds, and keys too long to be names
        parser.feed(f"step={i} loss=0.5 key{i}=1 {'k' * 200}{i}=2", float(i))
    assert m._canon_cached.cache_info().currsize <= 4096
    assert not [name for name, value in vars(parser).items() if isinstance(value, list | dict | set)]


def test_parsed_bars_drive_progress() -> None:
    parser, progress = MetricParser(), TrainingProgress()
    text = (LOGS / "hf_trainer.log").read_text(encoding="utf-8")
    for index, line in enumerate(re.split(r"[\r\n]", text)):
        progress.observe(parser.feed(line, float(index)))
    assert (progress.current_step, progress.total_steps, progress.regressions) == (500, 500, ())


# bad input never raises

def test_garbage_never_raises() -> None:
    rng = random.Random(0)
    garbage = rng.randbytes(300_000).decode("utf-8", errors="replace")
    parser = MetricParser(logging_steps=10, steps_per_epoch=100)
    feed_text(parser, garbage)
    assert isinstance(parse_csv(garbage, 0.0), list)
    assert parse_trainer_state(garbage, 0.0) == []
    for _ in range(2000):  # fragments of real syntax, shuffled
        parts = ["{", "}", "'loss'", ": ", "=", "nan", "1e999", "|", "%|", " 12/", "Epoch ", "•", "\x1b[", ",",
                 "step", "[00:01<00:02, ", "it/s", "]", '"', "0.5", "-", "/"]
        parser.feed("".join(rng.choice(parts) for _ in range(rng.randint(1, 30))), 0.0)


HUGE_LINES = {  # about 10 MB each; built in the test so the ids stay short
    "plain": lambda: "x" * 10_000_000,
    "json_head": lambda: "{" + "a" * 10_000_000,
    "kv": lambda: "step=1 loss=0.5 " * 700_000,
    "tqdm": lambda: " 24%|██▍       | 120/500 [00:41<02:10,  2.91it/s]" * 200_000,
    "colons": lambda: "a:" * 5_000_000 + "%|",
}


@pytest.mark.parametrize("name", sorted(HUGE_LINES))
def test_ten_megabyte_lines(name: str) -> None:
    samples = MetricParser().feed(HUGE_LINES[name](), 0.0)
    assert all(isinstance(s, Sample) for s in samples)
    if name == "kv":  # only the head of the line is read: 4096 chars of 16-char pairs
        assert {(s.step, s.key) for s in samples} == {(1, "loss")} and len(samples) <= 4096 // 16


@pytest.mark.parametrize("line", [
    '{"step": 1, "loss": [1, 2', "{", "{{{{", '{"a": ' * 5000, "[" * 5000, "{" * 3000, '{"loss": 1e999}',
    '{"step": 1' + "0" * 5000 + "}", "{'loss': 0.5", "{'epoch': 1e308}", "{'loss': 'abc', 'epoch': nan}",
    '{"step": -3, "loss": 1}', '{"step": 2.5, "loss": 1}', "Epoch 99999999999999999999/1 step 3/0", "{}", "[1, 2]",
])
def test_malformed_structured_lines(line: str) -> None:
    samples = MetricParser(steps_per_epoch=1000).feed(line, 0.0)
    assert all(isinstance(s, Sample) for s in samples)


def test_malformed_structured_values() -> None:
    assert one_line('{"loss": 1e999}') == [(None, "loss", "inf", "json")]
    assert one_line('{"step": -3, "loss": 1}') == [(None, "loss", 1.0, "json")]  # not a step
    assert one_line('{"step": 2.5, "loss": 1}') == [(None, "loss", 1.0, "json")]
    assert one_line("{'epoch': 1e308, 'loss': 1.0}", steps_per_epoch=1000) == [(None, "loss", 1.0, "hf")]


@pytest.mark.parametrize("text", [
    "", "{}", "[]", "null", '{"log_history": 5}', '{"log_history": [1, "a", null, {"step": "x", "loss": 1}]}',
    '{"log_history": [{"step": 1, "loss": NaN, "nested": {"a": 1}}]', "\x00\x01\x02",
])
def test_malformed_trainer_state(text: str) -> None:
    assert isinstance(parse_trainer_state(text, 0.0), list)


def test_malformed_csv() -> None:
    for text in ("step,loss\n1,\x00\n2,0.5\n", "step,loss\n" + '"' * 10, "\n\n\n", "step,loss\r\n1,0.5\r\n"):
        assert isinstance(parse_csv(text, 0.0), list)
    assert rows(parse_csv("step,loss\r\n1,0.5\r\n", 0.0)) == [(1, "loss", 0.5, "csv")]


