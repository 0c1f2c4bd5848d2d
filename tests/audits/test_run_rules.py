"""Watcher rules S58–S93 (docs/log-signatures.md §2, §3): a realistic match and a near miss for every row, the
§3.1 liveness examples, the §3.2 numbers, the §3.4 table, severity escalations, and bad input."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import overload

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote_gpu_trainer.audits.gpu_health import GpuSample
from remote_gpu_trainer.audits.liveness import Liveness, LivenessLook, classify
from remote_gpu_trainer.audits.log.samples import Hit, Sample, severity_rank
from remote_gpu_trainer.audits.rules import (
    RULES,
    ClaimedSave,
    ComputeApp,
    ComputeSnapshot,
    DiskUsage,
    FinalMetric,
    GpuReading,
    LossPoint,
    MemorySample,
    RunSignals,
    WatchedFile,
    derive_t_log,
    effective_liveness,
    evaluate,
    is_spike,
    replay_loss,
    robust_stats,
    signals_from_look,
    spike_z,
)

NOW = 1_700_000_000.0
MIN = 60.0
T_LOG = 15 * MIN
T_CKPT = 20 * MIN
RUNNING = Liveness("running", "log updated 10s ago")
STEADY = [0.99, 1.01] * 150  # steps 0..299: the first 100 are skipped, W = [0.99, 1.01] × 100


# ---- builders -------------------------------------------------------------------------------------

def series(values: Sequence[float], key: str = "loss", *, start: int = 0, every: int = 1, end: float = NOW,
           dt: float = 1.0, epoch: Callable[[int], float | None] | None = None, unit: str = "",
           steps: bool = True) -> list[Sample]:
    """Samples of one key, the newest at `end`, `dt` seconds and `every` steps apart."""
    n = len(values)
    return [Sample(t=end - (n - 1 - i) * dt, step=start + i * every if steps else None,
                   epoch=epoch(i) if epoch else None, key=key, value=v, source="kv", unit=unit)
            for i, v in enumerate(values)]


def gpu(index: int = 0, util: float | None = 0.0, mem: float | None = 0.0, temp: float | None = 50.0,
        power: float | None = 100.0, limit: float | None = 700.0, clock: float | None = 1980.0,
        max_clock: float | None = 1980.0, throttle: int | None = 0) -> GpuSample:
    return GpuSample(index=index, pci_bus_id=f"00000000:{index + 0x18:02X}:00.0", util_pct=util, memory_used_mib=mem,
                     memory_total_mib=81559.0, temperature_c=temp, power_w=power, power_limit_w=limit,
                     sm_clock_mhz=clock, max_sm_clock_mhz=max_clock, throttle_reasons=throttle)


def readings(n: int, *, end: float = NOW, period: float = 15.0, index: int = 0, **kw: float | int | None
             ) -> list[GpuReading]:
    return [GpuReading(end - (n - 1 - i) * period, gpu(index, **kw)) for i in range(n)]  # type: ignore[arg-type]


def snapshots(n: int, apps: tuple[ComputeApp, ...] = (), *, end: float = NOW, period: float = 15.0
              ) -> list[ComputeSnapshot]:
    return [ComputeSnapshot(end - (n - 1 - i) * period, apps) for i in range(n)]


def memory(n: int) -> list[MemorySample]:
    """n cgroup samples 15 s apart at 31 of 32 GiB (97 %), the newest now."""
    return [MemorySample(NOW - 15 * (n - 1 - k), 31 * 2**30, 32 * 2**30) for k in range(n)]


def frozen_step(step: int, since: float) -> list[Sample]:
    """A step counter that reached `step` at `since` and has not moved."""
    return series([0.7, 0.6], start=step - 10, every=10, end=since, dt=30.0)


def advancing_step(step: int) -> list[Sample]:
    return series([0.7, 0.6], start=step - 10, every=10, end=NOW - 30, dt=30.0)


def probe_signals(**probe: object) -> RunSignals:
    return signals_from_look(LivenessLook(now=NOW, **probe), t_log=T_LOG, t_ckpt=T_CKPT)  # type: ignore[arg-type]


def alive(**kw: object) -> RunSignals:
    return RunSignals(now=NOW, t_log=T_LOG, t_ckpt=T_CKPT, liveness=RUNNING, **kw)  # type: ignore[arg-type]


def rows(hits: Sequence[Hit]) -> list[str]:
    return [h.signature for h in hits]


# ---- scenarios: (matching, near miss) for every row --------------------------------------------------

def _s59() -> tuple[RunSignals, RunSignals]:
    gone = probe_signals(pid_state="gone", log_mtime=NOW - 5 * MIN, started_at=NOW - 3600)
    return replace(gone, boot_id_changed=True), probe_signals(pid_state="gone", exit_code=1, started_at=NOW - 3600)


def _s60() -> tuple[RunSignals, RunSignals]:
    tail = ("Epoch 10/10 loss=0.2310", "Training completed", "== rgt: cell seed0 exited 0")
    ended = {"pid_state": "gone", "exit_code": 0, "log_mtime": NOW - 60}
    return (replace(probe_signals(done=False, **ended), log_tail=tail),
            replace(probe_signals(done=True, **ended), log_tail=tail))


def _s61() -> tuple[RunSignals, RunSignals]:
    silent = probe_signals(pid_state="alive", log_mtime=NOW - 40 * MIN, newest_ckpt_mtime=NOW - 40 * MIN,
                           started_at=NOW - 3 * 3600)
    return replace(silent, gpu_samples=readings(20, util=0.0)), replace(silent, gpu_samples=readings(20, util=95.0))


def _s62() -> tuple[RunSignals, RunSignals]:
    quiet = probe_signals(pid_state="alive", log_mtime=NOW - 40 * MIN, newest_ckpt_mtime=NOW - MIN,
                          started_at=NOW - 3 * 3600)
    chatty = probe_signals(pid_state="alive", log_mtime=NOW - 2 * MIN, newest_ckpt_mtime=NOW - MIN,
                           started_at=NOW - 3 * 3600)
    return quiet, chatty


def _s65() -> tuple[RunSignals, RunSignals]:
    before = series([0.5] * 11, start=4900, every=10, end=NOW - 700, dt=10.0)
    restarted = series([2.3, 2.2, 2.1], start=0, every=10, end=NOW, dt=10.0)
    resumed = series([0.5, 0.49, 0.48], start=5000, every=10, end=NOW, dt=10.0)
    return (RunSignals(now=NOW, samples=before + restarted, relaunch_at=NOW - 600, relaunch_step_before=5000),
            RunSignals(now=NOW, samples=before + resumed, relaunch_at=NOW - 600, relaunch_step_before=5000))


def _s75() -> tuple[RunSignals, RunSignals]:
    def grads(peak: float) -> list[Sample]:
        values = [1.0] * 300
        for i in (60, 110, 160, 210, 260):
            values[i] = peak
        return series(values, "grad_norm", epoch=lambda i: i / 150)
    return RunSignals(now=NOW, samples=grads(15.0)), RunSignals(now=NOW, samples=grads(5.0))


def _s80() -> tuple[RunSignals, RunSignals]:
    def epochs(val: Sequence[float]) -> list[Sample]:
        out = []
        for e, (train, v) in enumerate(zip((0.80, 0.85, 0.90), val, strict=True), 1):
            out += [Sample(NOW - (4 - e) * 600, e * 100, float(e), "train_acc", train, "json"),
                    Sample(NOW - (4 - e) * 600, e * 100, float(e), "val/acc", v, "json")]
        return out
    return (RunSignals(now=NOW, samples=epochs((0.80, 0.85, 0.90))),
            RunSignals(now=NOW, samples=epochs((0.80, 0.85, 0.900001))))


def _s82() -> tuple[RunSignals, RunSignals]:
    falling = series([2.0] * 100, every=10, end=NOW - 1000, dt=10.0) + series([1.0] * 100, start=1000, every=10)
    evals = [Sample(t, step, epoch, key, 0.0, "json") for t, step, epoch in ((NOW - 1000, 1000, 1.0), (NOW, 1990, 2.0))
             for key in ("val/map", "val/acc")]
    flat = series([1.5] * 200, every=10)
    return RunSignals(now=NOW, samples=falling + evals), RunSignals(now=NOW, samples=flat + evals)


def _s85() -> tuple[RunSignals, RunSignals]:
    normal = series([10.0] * 60, "throughput", end=NOW - 13 * 30, dt=30.0, unit="it/s")
    return (alive(samples=normal + series([4.0] * 13, "throughput", dt=30.0, start=60, unit="it/s")),
            alive(samples=normal + series([4.0] * 8, "throughput", dt=30.0, start=60, unit="it/s")))


def _s88() -> tuple[RunSignals, RunSignals]:
    frozen = frozen_step(1200, NOW - 20 * MIN)
    busy = readings(20, index=0, util=98.0) + readings(20, index=1, util=97.0)
    uneven = readings(20, index=0, util=98.0) + readings(20, index=1, util=60.0)
    return alive(samples=frozen, gpu_samples=busy), alive(samples=frozen, gpu_samples=uneven)


CASES: dict[str, tuple[RunSignals, RunSignals]] = {
    "S58": (RunSignals(now=NOW, exit_code=137, log_tail=("step=1200 loss=0.41", "Killed")),
            RunSignals(now=NOW, exit_code=137, log_tail=(
                "Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
                "RuntimeError: DataLoader worker (pid 4711) is killed by signal: Killed."))),
    "S59": _s59(),
    "S60": _s60(),
    "S61": _s61(),
    "S62": _s62(),
    "S63": (RunSignals(now=NOW, watched_files=[WatchedFile("train.py", NOW - 600, NOW - 1200)]),
            RunSignals(now=NOW, watched_files=[WatchedFile("train.py", NOW - 1260, NOW - 1200)])),
    "S64": (RunSignals(now=NOW, claimed_saves=[ClaimedSave("/workspace/out/best.pth", exists=True, size=0)]),
            RunSignals(now=NOW, claimed_saves=[ClaimedSave("/workspace/out/best.pth", exists=True, size=48_213_004,
                                                           source_size=48_213_004, load_ok=True)])),
    "S65": _s65(),
    "S66": (RunSignals(now=NOW, cgroup_memory=memory(6)),
            RunSignals(now=NOW, cgroup_memory=[MemorySample(NOW - 60, 24 * 2**30, 32 * 2**30), *memory(4)])),
    "S67": (RunSignals(now=NOW, oom_kill_delta=1), RunSignals(now=NOW, oom_kill_delta=0)),
    "S68": (RunSignals(now=NOW, disks=[DiskUsage("/workspace", bytes_used_pct=96.0, inodes_used_pct=40.0)]),
            RunSignals(now=NOW, disks=[DiskUsage("/workspace", bytes_used_pct=90.0, inodes_used_pct=50.0,
                                                 free_bytes=100 * 2**30, projected_ckpt_bytes=10 * 2**30)])),
    "S69": (RunSignals(now=NOW, cpu_quota=4.0, threads=32, gpu_samples=readings(20, util=10.0)),
            RunSignals(now=NOW, cpu_quota=4.0, threads=32, gpu_samples=readings(20, util=60.0))),
    "S70": (RunSignals(now=NOW, samples=series([0.52, 0.51, math.nan])),
            RunSignals(now=NOW, samples=series([0.52, 0.51, 0.50]))),
    "S71": (RunSignals(now=NOW, samples=series(STEADY + [1.5])),
            RunSignals(now=NOW, samples=series(STEADY + [1.05]))),
    "S72": (RunSignals(now=NOW, samples=series(STEADY + [6.0] * 20)),
            RunSignals(now=NOW, samples=series(STEADY + [6.0] * 19 + [1.0]))),
    "S73": (RunSignals(now=NOW, loss_kind="ce", samples=series([0.4, 0.1, -0.3])),
            RunSignals(now=NOW, loss_kind="ce", samples=series([0.4, 0.1, 0.003]))),
    "S74": (RunSignals(now=NOW, loss_kind="ce", num_classes=10, planned_steps=5000,
                       samples=series([2.30] * 101, every=10)),
            RunSignals(now=NOW, loss_kind="ce", num_classes=10, planned_steps=5000,
                       samples=series([2.25] * 101, every=10))),
    "S75": _s75(),
    "S76": (RunSignals(now=NOW, max_grad_norm=1.0, samples=series([1.5] * 190 + [0.5] * 10, "grad_norm")),
            RunSignals(now=NOW, max_grad_norm=1.0, samples=series([1.5] * 170 + [0.5] * 30, "grad_norm"))),
    "S77": (RunSignals(now=NOW, samples=series([0.0] * 100, "grad_norm", start=900)
                       + series([2.3026] * 100, start=900)),
            RunSignals(now=NOW, samples=series([0.5] + [0.0] * 99, "grad_norm", start=900)
                       + series([2.3026] * 100, start=900))),
    "S78": (RunSignals(now=NOW, samples=series([65536.0, 1024.0, 8.0, 0.5], "loss_scale", every=10)),
            RunSignals(now=NOW, samples=series([65536.0] * 4, "loss_scale", every=10))),
    "S79": (RunSignals(now=NOW, schedule_configured=True, warmup_steps=500, planned_steps=10_000,
                       samples=series([3e-4] * 4, "lr", start=1000, every=10)),
            RunSignals(now=NOW, schedule_configured=True, warmup_steps=500, planned_steps=10_000,
                       samples=series([3.0e-4, 2.99e-4, 2.98e-4, 2.97e-4], "lr", start=1000, every=10))),
    "S80": _s80(),
    "S81": (RunSignals(now=NOW, samples=[Sample(NOW, 500, 1.0, "val/unique_pred_count", 1.0, "json")]),
            RunSignals(now=NOW, samples=[Sample(NOW, 500, 1.0, "val/unique_pred_count", 7.0, "json"),
                                         Sample(NOW, 500, 1.0, "val/output_cosine", 0.41, "json")])),
    "S82": _s82(),
    "S83": (RunSignals(now=NOW, warmup_steps=100, samples=series([0.0, 0.005, -0.003, 0.001, 0.0], "rewards/margins",
                                                                 start=200, every=10)
                       + series([0.5, 0.52, 0.48, 0.5, 0.5], "rewards/accuracies", start=200, every=10)),
            RunSignals(now=NOW, warmup_steps=100, samples=series([0.3, 0.35, 0.4, 0.42, 0.45], "rewards/margins",
                                                                 start=200, every=10)
                       + series([0.6, 0.62, 0.66, 0.7, 0.71], "rewards/accuracies", start=200, every=10))),
    "S84": (RunSignals(now=NOW, final_metrics=[FinalMetric("seed1", "test", "acc", "0.8731")],
                       other_run_final_metrics=[FinalMetric("seed0", "test", "acc", "0.8731")]),
            RunSignals(now=NOW, final_metrics=[FinalMetric("seed1", "test", "acc", "0.8731")],
                       other_run_final_metrics=[FinalMetric("seed0", "val", "acc", "0.8731")])),
    "S85": _s85(),
    "S86": (alive(samples=advancing_step(5000), gpu_samples=readings(80, util=0.0)),
            alive(samples=advancing_step(5000), gpu_samples=readings(80, util=60.0))),
    "S87": (alive(samples=frozen_step(1200, NOW - 40 * MIN), gpu_samples=readings(20, util=0.0)),
            alive(samples=frozen_step(1200, NOW - 10 * MIN), gpu_samples=readings(20, util=0.0))),
    "S88": _s88(),
    "S89": (RunSignals(now=NOW, gpu_samples=readings(9, util=95.0, clock=900.0, power=300.0)),
            RunSignals(now=NOW, gpu_samples=readings(9, util=95.0, clock=1900.0, power=600.0))),
    "S90": (RunSignals(now=NOW, gpu_samples=readings(4, util=99.0, temp=88.0, throttle=0x40)),
            RunSignals(now=NOW, gpu_samples=readings(4, util=99.0, temp=70.0, throttle=0x4))),
    "S91": (RunSignals(now=NOW, gpu_samples=readings(15, mem=5000.0), compute_apps=snapshots(15)),
            RunSignals(now=NOW, gpu_samples=readings(15, mem=5000.0),
                       compute_apps=snapshots(15, (ComputeApp(4242, 0, 4900.0),)))),
    "S92": (alive(started_at=NOW - 300, trainer_pids=(4242,), gpu_samples=readings(4, mem=0.0),
                  compute_apps=snapshots(4)),
            alive(started_at=NOW - 300, trainer_pids=(4242,), gpu_samples=readings(4, util=97.0, mem=30_000.0),
                  compute_apps=snapshots(4, (ComputeApp(4242, 0, 29_000.0),)))),
    "S93": (alive(started_at=NOW - 600, declared_gpus=4, trainer_pids=(10, 11, 12, 13),
                  compute_apps=snapshots(1, tuple(ComputeApp(pid, 0, 9000.0) for pid in (10, 11, 12, 13)))),
            alive(started_at=NOW - 600, declared_gpus=4, trainer_pids=(10, 11, 12, 13),
                  compute_apps=snapshots(1, tuple(ComputeApp(10 + i, i, 9000.0) for i in range(4))))),
    # W = 805 s (C 30 s, μ 3 h): a checkpoint 1611 s old is past 2 × W; 1609 s is not
    "S94": (alive(newest_ckpt_mtime=NOW - 1611, ckpt_interval_s=805.0),
            alive(newest_ckpt_mtime=NOW - 1609, ckpt_interval_s=805.0)),
}


def test_every_rule_row_has_a_rule_and_a_case() -> None:
    expected = {f"S{n}" for n in range(58, 95)}
    assert len(expected) == 37
    assert set(CASES) == set(RULES) == expected


@pytest.mark.parametrize("row", sorted(CASES))
def test_row_fires_on_its_scenario_and_not_on_the_near_miss(row: str) -> None:
    match, near = CASES[row]
    hits = RULES[row](match)
    assert rows(hits) == [row]
    assert severity_rank(hits[0].severity) >= 0
    assert any(ch.isdigit() for ch in hits[0].evidence), hits[0].evidence  # the numbers that fired it
    assert hits[0].t == NOW
    assert RULES[row](near) == []
    assert row in rows(evaluate(match)) and row not in rows(evaluate(near))


# ---- §3.1 liveness (T_log 15 min, T_ckpt 20 min) ---------------------------------------------------

PROCESS_ROWS = ("S59", "S60", "S61", "S62")


def test_exit_0_with_best_pth_is_finished() -> None:
    probe = LivenessLook(now=NOW, pid_state="gone", exit_code=0, done=True, log_mtime=NOW - 60)
    s = signals_from_look(probe, t_log=T_LOG, t_ckpt=T_CKPT)
    assert s.liveness == classify(probe, True, T_LOG, T_CKPT) == Liveness("finished", "exit 0, artifacts present")
    assert evaluate(s, only=PROCESS_ROWS) == []


def test_exit_0_training_completed_without_best_pth_is_dead_incomplete() -> None:
    s = CASES["S60"][0]
    assert s.liveness is not None and s.liveness.state == "dead" and s.liveness.detail.startswith("incomplete")
    hits = evaluate(s, only=PROCESS_ROWS)
    assert rows(hits) == ["S60"] and hits[0].detail == "incomplete"
    assert hits[0].evidence.startswith("exit 0 but required artifacts are missing")


def test_completion_line_without_exit_code_is_incomplete_too() -> None:
    s = replace(probe_signals(pid_state="gone", log_mtime=NOW - 60), artifacts_present=False,
                missing_artifacts=("best.pth",), log_tail=("Training completed", "== rgt: cell seed0 exited 0"))
    hits = evaluate(s, only=PROCESS_ROWS)
    assert rows(hits) == ["S59", "S60"]  # the wrapper left no exit code, and the words promise what is missing
    assert "'Training completed'" in hits[1].evidence and "best.pth" in hits[1].evidence


def test_alive_with_log_and_checkpoint_40_min_old_and_idle_gpu_is_stalled() -> None:
    s = CASES["S61"][0]
    assert s.liveness is not None and s.liveness.state == "stalled"
    hits = evaluate(s, only=PROCESS_ROWS)
    assert rows(hits) == ["S61"] and hits[0].severity == "warn"
    assert hits[0].evidence == ("alive but no progress for 40m (T_log 15m), newest checkpoint 40m old, "
                                "GPU util median 0%")


def test_alive_with_log_40_min_old_and_checkpoint_1_min_old_is_running_quiet() -> None:
    s = CASES["S62"][0]
    assert s.liveness is not None and (s.liveness.state, s.liveness.detail.split(":")[0]) == ("running", "quiet")
    hits = evaluate(s, only=PROCESS_ROWS)
    assert rows(hits) == ["S62"] and hits[0].severity == "info"
    assert hits[0].evidence == "no log line for 40m (T_log 15m) while newest checkpoint 60s old"


def test_classify_ignores_the_gpu_and_the_step_so_the_rules_refine_it() -> None:
    """§3.1 needs a GPU util median < 5 % and no step advance for `stalled`; classify sees neither."""
    busy = CASES["S61"][1]
    assert busy.liveness is not None and busy.liveness.state == "stalled"  # classify's word
    assert effective_liveness(busy) == Liveness("running", "quiet: log silent but GPU util median 95%")
    stepping = replace(CASES["S61"][0], samples=advancing_step(9000))
    refined = effective_liveness(stepping)
    assert refined is not None and refined.state == "running"
    assert rows(evaluate(stepping, only=PROCESS_ROWS)) == ["S62"]  # a structured file shows the step moving


def test_dead_without_exit_code_names_the_cause() -> None:
    gone = probe_signals(pid_state="gone", started_at=NOW - 3600)
    assert RULES["S59"](replace(gone, boot_id_changed=True))[0].detail == "reboot"
    assert RULES["S59"](replace(gone, oom_kill_delta=2))[0].detail == "oom"
    assert RULES["S59"](gone)[0].detail == "killed"
    assert RULES["S59"](gone)[0].severity == "critical"


def test_a_job_that_died_with_a_traceback_on_a_full_disk_is_not_a_crash_without_one() -> None:
    """Measured with HF Trainer on a 700 KiB tmpfs: torch.save failed (S31), the traceback is in the log, and the
    wrapper could not write the exit code on the full disk. S59 said "killed", a false critical."""
    full = [DiskUsage("/workspace", bytes_used_pct=100.0, inodes_used_pct=1.0)]
    gone = replace(probe_signals(pid_state="gone", started_at=NOW - 3600), disks=full)
    assert RULES["S59"](gone)[0].detail == "disk"
    assert "the wrapper could not write its exit code there" in RULES["S59"](gone)[0].evidence
    traced = replace(gone, log_tail=("Traceback (most recent call last):", '  File "train.py", line 37',
                                     "RuntimeError: basic_ios::clear: iostream error"))
    assert RULES["S59"](traced) == []


# ---- §3.2 spike and divergence ---------------------------------------------------------------------

def test_spike_numbers_of_the_spec() -> None:
    window = [0.99, 1.01] * 100
    m, sigma = robust_stats(window)
    assert m == pytest.approx(1.0) and round(sigma, 4) == 0.0148
    assert round(spike_z(window, 1.5), 1) == 33.7 and is_spike(window, 1.5)
    assert round(spike_z(window, 1.3), 1) == 20.2 and is_spike(window, 1.3)
    assert round(spike_z(window, 1.05), 1) == 3.4 and not is_spike(window, 1.05)


def test_spike_rule_reports_the_spec_numbers() -> None:
    hits = RULES["S71"](CASES["S71"][0])
    assert hits[0].evidence == "loss 1.50 at step 300 is 33.7σ above the median 1.00 of the last 200 samples"
    assert "20.2σ" in RULES["S71"](RunSignals(now=NOW, samples=series(STEADY + [1.3])))[0].evidence


def test_first_100_steps_and_warmup_are_skipped() -> None:
    early = series([0.99, 1.01] * 40 + [1.5])  # the spike lands at step 80
    assert RULES["S71"](RunSignals(now=NOW, samples=early)) == []
    warm = RunSignals(now=NOW, warmup_steps=300, samples=series(STEADY + [1.5]))
    assert RULES["S71"](warm) == []  # only 1 sample past the warmup: W is not active


def test_rule_waits_for_50_samples_in_the_window() -> None:
    assert RULES["S71"](RunSignals(now=NOW, samples=series([0.99, 1.01] * 74 + [1.5]))) == []  # 48 past step 100
    assert rows(RULES["S71"](RunSignals(now=NOW, samples=series([0.99, 1.01] * 76 + [1.5])))) == ["S71"]


def test_spike_samples_do_not_enter_the_window() -> None:
    points = [LossPoint(300 + i, NOW + i, 1.5) for i in range(150)]
    spikes, divergences = replay_loss([0.99, 1.01] * 100, points)
    assert len(spikes) == 150 and divergences == []  # had they entered W, its median would have moved to 1.5


def test_transient_spike_is_annotated_and_grad_norm_context_attached() -> None:
    grads = series([1.0] * 20 + [1.0] * 15 + [4.0] * 5, "grad_norm", start=261)
    s = RunSignals(now=NOW, samples=series(STEADY + [1.5] + [1.0] * 10) + grads)
    hit = RULES["S71"](s)[0]
    assert hit.detail.startswith("transient; grad-norm rose")
    flat = RunSignals(now=NOW, samples=series(STEADY + [1.5]) + series([1.0] * 30, "grad_norm", start=270))
    assert "a bad batch" in RULES["S71"](flat)[0].detail


def test_divergence_on_20_consecutive_samples_above_5m() -> None:
    hit = RULES["S72"](CASES["S72"][0])[0]
    assert hit.severity == "error"
    assert hit.evidence == ("20 consecutive losses above 5 × the median 1.00 (from step 300 to step 319, "
                            "latest 6.00)")


def test_divergence_on_10x_the_first_window_median() -> None:
    s = RunSignals(now=NOW, samples=series(STEADY + [12.0] * 300))
    hit = RULES["S72"](s)[0]
    assert hit.evidence == "loss 12.00 at step 599 is 12.0 × the first-window median 1.00 (≥ 10 ×)"
    assert RULES["S72"](RunSignals(now=NOW, samples=series(STEADY + [9.0] * 300))) == []


def test_since_limits_event_rows_to_new_samples() -> None:
    s = RunSignals(now=NOW, samples=series(STEADY + [1.5] + [1.0] * 100))
    assert RULES["S71"](s) == []  # the spike is older than the default look-back of 50 samples
    assert rows(RULES["S71"](replace(s, since=NOW - 150))) == ["S71"]
    assert RULES["S71"](replace(s, since=NOW - 50)) == []
    nan = RunSignals(now=NOW, samples=series([0.5] * 10 + [math.inf] + [0.5] * 100))
    assert RULES["S70"](nan) == [] and rows(RULES["S70"](replace(nan, since=NOW - 200))) == ["S70"]


# ---- §3.4 GPU utilisation table --------------------------------------------------------------------

def test_idle_gpu_with_advancing_step_is_s86_info_then_warn_after_15_min() -> None:
    short = alive(samples=advancing_step(5000), gpu_samples=readings(40, util=0.0))  # 10 min idle
    long = CASES["S86"][0]  # 20 min idle
    assert [(h.signature, h.severity) for h in evaluate(short, only=("S86", "S87", "S88", "S93"))] == [("S86", "info")]
    assert [(h.signature, h.severity) for h in evaluate(long, only=("S86", "S87", "S88", "S93"))] == [("S86", "warn")]


def test_idle_gpu_with_frozen_step_is_s87_warn_then_critical_at_3_t_log() -> None:
    warn = CASES["S87"][0]  # frozen 40 min
    critical = alive(samples=frozen_step(1200, NOW - 46 * MIN), gpu_samples=readings(20, util=0.0))
    assert [(h.signature, h.severity) for h in evaluate(warn, only=("S86", "S87", "S88"))] == [("S87", "warn")]
    assert [(h.signature, h.severity) for h in evaluate(critical, only=("S86", "S87", "S88"))] == [("S87", "critical")]
    assert "step frozen at 1200 for 46m" in RULES["S87"](critical)[0].evidence


def test_busy_gpus_with_frozen_step_are_s88_critical() -> None:
    hits = evaluate(CASES["S88"][0], only=("S86", "S87", "S88", "S93"))
    assert [(h.signature, h.severity) for h in hits] == [("S88", "critical")]
    young = alive(samples=frozen_step(1200, NOW - 10 * MIN), gpu_samples=CASES["S88"][0].gpu_samples)
    assert RULES["S88"](young) == []  # frozen for less than T_log


def test_one_of_n_gpus_idle_is_s93() -> None:
    gpus = readings(20, index=0, util=97.0) + readings(20, index=1, util=0.0)
    s = alive(declared_gpus=2, run_gpus=(0, 1), gpu_samples=gpus, samples=advancing_step(100))
    hits = evaluate(s, only=("S86", "S87", "S88", "S93"))
    assert rows(hits) == ["S93"] and hits[0].evidence == "GPU(s) 1 idle while 1 of 2 work"


def test_idle_means_90_percent_of_the_window_at_most_5_percent() -> None:
    gpus = readings(20, util=5.0)
    for k in (3, 11):  # 18 of 20 idle: exactly 90 %
        gpus[k] = GpuReading(gpus[k].t, gpu(util=80.0))
    assert rows(RULES["S87"](alive(samples=frozen_step(10, NOW - 40 * MIN), gpu_samples=gpus))) == ["S87"]
    gpus[15] = GpuReading(gpus[15].t, gpu(util=80.0))  # 17 of 20
    assert RULES["S87"](alive(samples=frozen_step(10, NOW - 40 * MIN), gpu_samples=gpus)) == []
    assert RULES["S87"](alive(samples=frozen_step(10, NOW - 40 * MIN), gpu_samples=readings(19, util=0.0))) == []


def test_bare_gpu_samples_are_spaced_by_the_cadence() -> None:
    """The log monitor passes nvidia-smi samples without times: they are taken every 15 s, the newest now."""
    bare = tuple(gpu(util=0.0) for _ in range(80))
    s = alive(samples=advancing_step(5000), gpu_samples=bare)
    assert [(h.signature, h.severity) for h in RULES["S86"](s)] == [("S86", "warn")]
    assert "for 20m" in RULES["S86"](s)[0].evidence


# ---- escalations -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "row", "severity"), [
    (137, "S04", "critical"), (-9, "S04", "critical"), (139, "S22", "error"), (-11, "S22", "error"),
    (143, "S47", "critical"), (-15, "S47", "critical")])
def test_s58_takes_the_mapped_rows_severity(code: int, row: str, severity: str) -> None:
    hits = RULES["S58"](RunSignals(now=NOW, exit_code=code, log_tail=("step=10 loss=0.5",)))
    assert [(h.signature, h.severity, h.detail) for h in hits] == [("S58", severity, row)]


def test_s58_ignores_a_sigterm_the_app_sent_and_ordinary_exits() -> None:
    assert RULES["S58"](RunSignals(now=NOW, exit_code=143, signal_sent_by_app=True)) == []
    assert RULES["S58"](RunSignals(now=NOW, exit_code=1)) == []
    assert RULES["S58"](RunSignals(now=NOW, exit_code=0)) == []


def test_s61_is_critical_at_3_t_log() -> None:
    s = probe_signals(pid_state="alive", log_mtime=NOW - 46 * MIN, newest_ckpt_mtime=NOW - 46 * MIN,
                      started_at=NOW - 3 * 3600)
    hits = RULES["S61"](replace(s, gpu_samples=readings(20, util=0.0)))
    assert hits[0].severity == "critical"


def test_s68_is_critical_at_99_percent_and_reads_inodes_and_projection() -> None:
    crit = RULES["S68"](RunSignals(now=NOW, disks=[DiskUsage("/data", bytes_used_pct=60.0, inodes_used_pct=99.2)]))
    assert crit[0].severity == "critical" and "inodes 99% used on /data" in crit[0].evidence
    proj = RULES["S68"](RunSignals(now=NOW, disks=[DiskUsage("/out", bytes_used_pct=70.0, free_bytes=5 * 2**30,
                                                             projected_ckpt_bytes=12 * 2**30)]))
    assert proj[0].severity == "warn" and "12.0 GiB" in proj[0].evidence


def test_s73_is_critical_below_minus_1e3_and_needs_a_bounded_loss() -> None:
    crit = RULES["S73"](RunSignals(now=NOW, loss_kind="mse", samples=series([0.4, -1500.0])))
    assert crit[0].severity == "critical"
    assert RULES["S73"](RunSignals(now=NOW, loss_kind="elbo", samples=series([0.4, -1500.0]))) == []
    assert RULES["S73"](RunSignals(now=NOW, samples=series([0.4, -0.3]))) == []  # kind unknown


def test_s78_counts_skipped_steps_in_the_last_100() -> None:
    steps = series([65536.0], "loss_scale", start=1000)
    many = RunSignals(now=NOW, samples=steps, overflow_steps=tuple(range(950, 1001, 4)))  # 13 in (900, 1000]
    assert RULES["S78"](many)[0].evidence == "13 skipped steps within the last 100 steps (overflow lines)"
    old = RunSignals(now=NOW, samples=steps, overflow_steps=tuple(range(700, 851, 10)))
    assert RULES["S78"](old) == []


def test_s65_sees_a_second_run_appended_to_the_same_log() -> None:
    s = RunSignals(now=NOW, samples=series([0.5] * 50, start=4000) + series([2.3] * 5, start=0))
    assert RULES["S65"](s)[0].evidence == "step of 'loss' fell from 4049 to 0: a second run appended to this log?"


def test_s63_allows_for_clock_resolution_only() -> None:
    edited = RunSignals(now=NOW, watched_files=[WatchedFile("queue.sh", NOW - 1195, NOW - 1200)])
    assert RULES["S63"](edited)[0].evidence == "queue.sh modified 5s after its process started"
    same_second = RunSignals(now=NOW, watched_files=[WatchedFile("queue.sh", NOW - 1199.5, NOW - 1200)])
    assert RULES["S63"](same_second) == []


# ---- bad input -------------------------------------------------------------------------------------

def test_nothing_known_fires_nothing() -> None:
    assert evaluate(RunSignals()) == []
    assert evaluate(RunSignals(now=NOW, liveness=RUNNING)) == []
    assert evaluate(RunSignals(now=NOW, liveness=Liveness("unknown", "unreachable: timeout"))) == []


def test_all_nan_loss_is_only_s70() -> None:
    s = alive(samples=series([math.nan] * 400), loss_kind="ce", num_classes=10, planned_steps=100)
    assert rows(evaluate(s)) == ["S70"]


def test_empty_and_unknown_fields_never_raise() -> None:
    weird = RunSignals(
        now=NOW, liveness=Liveness("dead", ""), samples=series([math.nan, math.inf, -math.inf], steps=False),
        gpu_samples=[GpuReading(NOW, gpu(util=None, mem=None, temp=None, power=None, limit=None, clock=None,
                                         max_clock=None, throttle=None))] * 30,
        compute_apps=[ComputeSnapshot(NOW)], cgroup_memory=[MemorySample(NOW, 10, None)],
        disks=[DiskUsage("/")], claimed_saves=[ClaimedSave("x")], declared_gpus=0, trainer_pids=(1,),
        started_at=NOW, loss_kind="ce", num_classes=0, batch_size=0, max_grad_norm=0.0, schedule_configured=True)
    hits = evaluate(weird)
    assert set(rows(hits)) <= {"S59", "S70"}


def test_unknown_row_in_only_is_refused() -> None:
    with pytest.raises(ValueError, match="S99"):
        evaluate(RunSignals(), only=("S58", "S99"))


_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, -1.0, 1e-9]))
_samples = st.builds(Sample, t=st.floats(0, 2e9), step=st.one_of(st.none(), st.integers(-5, 10**6)),
                     epoch=st.one_of(st.none(), st.floats(-1, 10)),
                     key=st.sampled_from(["loss", "grad_norm", "lr", "loss_scale", "throughput", "val/acc", "acc",
                                          "val/map", "rewards/margins", "rewards/accuracies", "reward", "kl",
                                          "unique_pred_count", "val/output_cosine"]),
                     value=_values, source=st.just("kv"), approx_step=st.booleans())


@settings(max_examples=60, deadline=None)
@given(samples=st.lists(_samples, max_size=300), exit_code=st.one_of(st.none(), st.integers(-20, 300)),
       state=st.sampled_from(["running", "stalled", "dead", "finished", "unknown"]))
def test_random_series_never_raise(samples: list[Sample], exit_code: int | None, state: str) -> None:
    s = RunSignals(now=NOW, samples=samples, exit_code=exit_code, liveness=Liveness(state, ""), loss_kind="ce",
                   num_classes=10, max_grad_norm=1.0, schedule_configured=True, declared_gpus=2,
                   gpu_samples=readings(25, util=3.0), started_at=NOW - 600)
    for hit in evaluate(s):
        assert hit.signature in RULES and severity_rank(hit.severity) >= 0


# ---- efficiency and input shapes -------------------------------------------------------------------

class CountingSeq(Sequence[Sample]):
    """A series that counts how many of its items the rules touched."""

    def __init__(self, items: list[Sample]) -> None:
        self.items = items
        self.touched = 0

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, i: int) -> Sample: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Sample]: ...
    def __getitem__(self, i: int | slice) -> Sample | Sequence[Sample]:
        self.touched += 1
        return self.items[i]

    def __iter__(self) -> Iterator[Sample]:
        for item in self.items:
            self.touched += 1
            yield item


def test_metric_rows_read_only_the_tail_of_a_long_series() -> None:
    n = 100_000
    loss = CountingSeq(series([0.99, 1.01] * (n // 2), dt=0.1, epoch=lambda i: i / 10_000))
    grad = CountingSeq(series([1.0] * n, "grad_norm", dt=0.1, epoch=lambda i: i / 10_000))
    s = alive(series={"loss": loss, "grad_norm": grad}, max_grad_norm=2.0, loss_kind="ce", num_classes=10)
    assert evaluate(s) == []
    assert loss.touched < 5_000 and grad.touched < 40_000  # S75 reads epochs 1–2 only: 30k of 100k


def test_flat_samples_and_per_key_series_give_the_same_hits() -> None:
    flat = CASES["S77"][0]
    grouped = replace(flat, samples=(), series={"grad_norm": flat.of("grad_norm"), "loss": flat.of("loss")})
    assert evaluate(flat) == evaluate(grouped) != []


def test_derive_t_log() -> None:
    assert derive_t_log([]) == T_LOG
    assert derive_t_log([NOW + 10 * i for i in range(100)]) == T_LOG
    assert derive_t_log([NOW + 600 * i for i in range(100)]) == 1800.0


def test_s94_names_the_age_and_the_limit_and_stays_silent_without_w_or_when_dead() -> None:
    match = CASES["S94"][0]
    assert RULES["S94"](match)[0].evidence == ("newest checkpoint 1611 s old, over 2 × W = 1610 s (Young/Daly W "
                                               "805 s): a preemption now loses that much work")
    assert RULES["S94"](replace(match, ckpt_interval_s=None)) == []
    assert RULES["S94"](replace(match, newest_ckpt_mtime=None)) == []
    assert RULES["S94"](replace(match, liveness=Liveness("dead", "exit 1"))) == []
