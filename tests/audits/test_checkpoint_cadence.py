"""Young/Daly checkpoint cadence and the preemption refinement (docs/remote-ops.md §10), pure."""

from __future__ import annotations

import math

from remote_gpu_trainer.audits.checkpoint_cadence import (
    cadence,
    iterations_per_checkpoint,
    write_time_from_file,
    write_time_from_lines,
    young_daly,
)
from remote_gpu_trainer.audits.liveness import Liveness
from remote_gpu_trainer.audits.preemption import is_preempted, provider_words, refine


def test_the_spec_example_c_30_s_mu_3_h_gives_805_s_and_400_iterations_at_2_s() -> None:
    w = young_daly(3 * 3600, 30)
    assert w == math.sqrt(648_000) and round(w) == 805
    assert iterations_per_checkpoint(w, 2.0) == 400  # 402.5 rounded down to two significant digits
    assert [iterations_per_checkpoint(x, 1.0) for x in (99.9, 100.0, 12_345.0, 0.2)] == [99, 100, 12_000, 1]


def test_cadence_takes_the_log_before_the_file_times_and_floors_c_at_one_second() -> None:
    found = cadence(mtbp_s=10_800, mtbp_source="profile runpod [preemption]", log_write_s=30.0, file_write_s=4.0,
                    s_per_iteration=2.0)
    assert found is not None
    assert (found.write_s, found.write_source, found.iterations, found.stale_after_s) == (30.0, "log", 400, 2 * w30())
    from_files = cadence(mtbp_s=10_800, mtbp_source="x", log_write_s=None, file_write_s=0.01)
    assert from_files is not None and (from_files.write_s, from_files.write_source) == (1.0, "file times")
    assert from_files.iterations is None
    assert cadence(mtbp_s=None, mtbp_source="", log_write_s=30.0, file_write_s=None) is None
    assert cadence(mtbp_s=10_800, mtbp_source="x", log_write_s=None, file_write_s=None) is None


def w30() -> float:
    return math.sqrt(2 * 10_800 * 30)


def test_save_times_are_read_from_checkpoint_lines_only() -> None:
    lines = ["Saved checkpoint to /w/epoch_3.pt in 31.2s", "checkpoint written (took 12 s)",
             "ckpt save time: 30.1s", "epoch 3 loss 0.5 in 10s", "step=10 loss=0.3 took 2s",
             "Saving model checkpoint to outputs/checkpoint-500 took 1.5 min", "saved ckpt in 250ms"]
    assert [write_time_from_lines([line]) for line in lines] == [31.2, 12.0, 30.1, None, None, 90.0, 0.25]
    assert write_time_from_lines(lines) == 30.1  # the median of the five stated
    assert write_time_from_file(1000.0, 1030.5) == 30.5
    assert write_time_from_file(0.0, 1030.5) is None and write_time_from_file(1031.0, 1030.5) is None


def test_preempted_from_slurm_provider_words_or_exit_143_on_an_interruptible_box() -> None:
    dead143 = Liveness("dead", "exit 143 (SIGTERM: stopped or preempted)")
    assert refine(dead143, exit_code=143, interruptible=True) == Liveness(
        "dead", "preempted: exit 143 (SIGTERM) on an interruptible box")
    assert refine(dead143, exit_code=143, interruptible=False) == dead143
    assert refine(Liveness("dead", "exit 137"), exit_code=137, interruptible=True).detail == "exit 137"
    unreachable = Liveness("unknown", "unreachable: timeout")
    words = provider_words({"raw_state": "exited", "api": {"status_msg": "Instance outbid, paused", "x": 3}})
    assert words == ("exited", "Instance outbid, paused")
    assert refine(unreachable, words=words) == Liveness(
        "unknown", "preempted: the provider says 'Instance outbid, paused'")
    assert refine(Liveness("running", "log updated 3s ago"), words=["PREEMPTED"]).state == "running"
    assert refine(Liveness("finished", "exit 0"), exit_code=143, interruptible=True).detail == "exit 0"
    slurm = Liveness("dead", "preempted")
    assert is_preempted(slurm) and refine(slurm, words=["interrupted"]) == slurm
    assert not is_preempted(dead143)
