"""The meter replays state timelines; totals are computed by hand in each test.

Rates come from the spec text (docs/providers.md), written out here rather than read from the code under test,
so a wrong TOML figure or a wrong rule in the meter fails the test. Storage prices per month turn into hourly ones
over 730 h (8760 / 12), as the providers bill them.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest

from remote_gpu_trainer.audits.meter import (
    KNOWN_STATES,
    BilledItem,
    BillingModel,
    Held,
    Interval,
    MeterReading,
    Rates,
    accrue,
    billing_model,
    fill_gap,
    first_rates,
    price_drift,
    reported_since,
    silent_intervals,
)
from remote_gpu_trainer.profiles import load_profile
from remote_gpu_trainer.providers.base import INSTANCE_STATES
from remote_gpu_trainer.state.billing import Snapshot
from support.helpers import FIXED_NOW

PRICE, STORAGE = 0.89, 0.02
GB, GIB = 1_000_000_000, 1 << 30
MONTH_H = 730.0


def snap(minutes: float, state: str) -> Snapshot:
    return Snapshot(FIXED_NOW + timedelta(minutes=minutes), "box", "sim", "sim-box", state, PRICE, "profile",
                    STORAGE)


def at(hours: float) -> datetime:
    return FIXED_NOW + timedelta(hours=hours)


def shot(hours: float, state: str, price: float | None = None, source: str = "api",
         storage: float | None = None, provider: str = "cloud") -> Snapshot:
    return Snapshot(at(hours), "box", provider, "id-1", state, price, source, storage)


def cycle(price: float | None, source: str, stopped_storage: float | None = None,
          provider: str = "cloud") -> list[Snapshot]:
    """running 0–2 h → stopped 2–5 h → running 5–6 h → terminated at 6 h (3 h of compute, 3 h stopped)."""
    return [shot(0, "running", price, source, provider=provider),
            shot(2, "stopped", None, source, stopped_storage, provider),
            shot(5, "running", price, source, provider=provider),
            shot(6, "terminated", None, source, provider=provider)]


def close(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=1e-12, abs_tol=1e-12)


def assert_exact(reading: MeterReading) -> None:
    assert reading.estimate is False and reading.unknown_price is False and reading.gaps == ()


# -- the legacy call (teardown.py, session.py) -----------------------------------------------------------


def test_running_stopped_running_terminated() -> None:
    timeline = [snap(0, "running"), snap(60, "stopped"), snap(180, "running"), snap(210, "terminated")]
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=600))
    expected = 1.0 * PRICE + 2.0 * STORAGE + 0.5 * PRICE  # nothing after terminate
    assert abs(reading.total - expected) < 1e-9
    assert reading.burn_per_hour == 0.0
    assert reading.estimate is False


def test_burn_continues_until_now_and_since_finished() -> None:
    timeline = [snap(0, "running")]
    finished = FIXED_NOW + timedelta(minutes=30)
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=90), finished_at=finished)
    assert abs(reading.total - 1.5 * PRICE) < 1e-9
    assert abs(reading.since_finished - 1.0 * PRICE) < 1e-9
    assert reading.burn_per_hour == PRICE


def test_unknown_keeps_the_last_known_rate_as_an_estimate() -> None:
    timeline = [snap(0, "stopped"), snap(60, "unknown")]
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=120))
    assert abs(reading.total - 2.0 * STORAGE) < 1e-9
    assert reading.estimate is True
    assert reading.burn_per_hour == STORAGE


def test_snapshots_out_of_order_are_replayed_by_time() -> None:
    timeline = [snap(60, "stopped"), snap(0, "running")]
    reading = accrue(timeline, FIXED_NOW + timedelta(minutes=120))
    assert close(reading.total, 1.0 * PRICE + 1.0 * STORAGE)


# -- one timeline per shipped profile --------------------------------------------------------------------


def test_runpod_volume_bills_2x_while_stopped_and_the_network_volume_until_deleted() -> None:
    # §3: volume disk $0.20/GB/mo while stopped, gone with terminate; network volume $0.07/GB/mo standard,
    # hourly in every state, survives terminate until deleted (here at 8 h).
    model = billing_model(load_profile("runpod"), [Held("volume", 50 * GB),
                                                    Held("network-volume", 100 * GB, until=at(8))])
    reading = accrue(cycle(0.79, "api"), at(10), model=model)
    compute = 3.0 * 0.79
    storage = 3.0 * (50 * 0.20 / MONTH_H)
    residuals = 8.0 * (100 * 0.07 / MONTH_H)
    assert close(reading.breakdown.compute, compute)
    assert close(reading.breakdown.storage, storage)
    assert close(reading.breakdown.residuals, residuals)
    assert close(reading.total, compute + storage + residuals)
    assert reading.burn_per_hour == 0.0  # terminated, and the volume was deleted at 8 h
    assert reading.currency == "USD"
    assert_exact(reading)


def test_vastai_disk_bills_while_stopped_and_the_local_volume_after_destroy() -> None:
    # §4: the instance disk bills while stopped at a host price (the API reported $0.012/h); a Local Volume
    # bills until deleted (the user's rate $0.005/h), here never deleted: it still burns after destroy.
    model = billing_model(load_profile("vastai"), [Held("local-volume", per_hour=0.005)])
    reading = accrue(cycle(0.35, "api", stopped_storage=0.012), at(10), model=model)
    assert close(reading.total, 3.0 * 0.35 + 3.0 * 0.012 + 10.0 * 0.005)
    assert close(reading.burn_per_hour, 0.005)
    assert_exact(reading)


def test_vastai_host_priced_disk_without_a_price_is_flagged_not_zero() -> None:
    reading = accrue(cycle(0.35, "api"), at(10), model=billing_model(load_profile("vastai")))
    assert close(reading.total, 3.0 * 0.35)  # a lower bound: the stopped disk's price is unknown
    assert reading.unknown_price is True
    assert any("lower bound" in line for line in reading.notes())


def test_lambda_has_no_stop_an_alert_keeps_billing_and_nfs_bills_until_deleted() -> None:
    # §5: no stop exists; an in-OS shutdown shows "Alert" (mapped to unknown) and still bills; NFS is
    # $0.20/GiB/mo until deleted (here at 7 h), over Lambda's 720-hour month (its billing page's example).
    # 129 cents/h = $1.29/h.
    model = billing_model(load_profile("lambda"), [Held("nfs", 100 * GIB, until=at(7))])
    timeline = [shot(0, "running", 1.29), shot(2, "unknown"), shot(5, "running", 1.29), shot(6, "terminated")]
    reading = accrue(timeline, at(10), model=model)
    assert close(reading.total, 6.0 * 1.29 + 7.0 * (100 * 0.20 / 720.0))
    assert reading.estimate is True  # the Alert stretch was billed at the last known rate
    assert reading.burn_per_hour == 0.0


def test_paperspace_storage_ip_and_snapshots_outlive_the_machine() -> None:
    # §6: no API price (the user's $0.51/h); block storage bills while stopped (the user's $7/mo) and dies with
    # destroy; the static IP bills $0.0045/h until released (8 h); a snapshot made at 6 h bills $0.29/GB/mo.
    held = [Held("block", per_hour=7.0 / MONTH_H), Held("static-ip", per_hour=0.0045, until=at(8)),
            Held("snapshots", 20 * GB, since=at(6))]
    model = billing_model(load_profile("paperspace"), held)
    reading = accrue(cycle(0.51, "user"), at(10), model=model)
    expected = 3.0 * 0.51 + 3.0 * (7.0 / MONTH_H) + 8.0 * 0.0045 + 4.0 * (20 * 0.29 / MONTH_H)
    assert close(reading.total, expected)
    assert close(reading.burn_per_hour, 20 * 0.29 / MONTH_H)
    assert_exact(reading)


def test_autodl_data_disk_small_fee_while_shut_down() -> None:
    # §2: console only, the user's rate 1.88 CNY/h; the data disk bills "a small fee" while shut down (the
    # user's 0.01 CNY/h) and goes with release.
    model = billing_model(load_profile("autodl"), [Held("data-disk", per_hour=0.01)])
    reading = accrue(cycle(1.88, "user"), at(10), model=model)
    assert close(reading.total, 3.0 * 1.88 + 3.0 * 0.01)
    assert reading.currency == "CNY"
    assert_exact(reading)


def test_autodl_without_a_data_disk_rate_is_a_flagged_lower_bound() -> None:
    reading = accrue(cycle(1.88, "user"), at(10), model=billing_model(load_profile("autodl")))
    assert close(reading.total, 3.0 * 1.88)
    assert reading.unknown_price is True


def test_sim_uses_the_profile_demo_prices_when_snapshots_carry_none() -> None:
    # docs/architecture.md §4: the sim box bills a stated demo price: $0.89/h compute, $0.02/h storage while stopped.
    reading = accrue(cycle(None, "profile", provider="sim"), at(10), model=billing_model(load_profile("sim")))
    assert close(reading.total, 3.0 * 0.89 + 3.0 * 0.02)
    assert_exact(reading)


def test_ssh_box_bills_the_users_rates() -> None:
    # §8: no control plane; the user's $0.50/h, and the disk of a stopped box at the user's $0.004/h.
    model = billing_model(load_profile("ssh"), [Held("disk", per_hour=0.004)])
    reading = accrue(cycle(0.50, "user"), at(10), model=model)
    assert close(reading.total, 3.0 * 0.50 + 3.0 * 0.004)
    assert_exact(reading)


def test_gpushare_shutdown_is_free_but_hy_nas_bills_throughout() -> None:
    # §7: a shut-down Gpushare box bills nothing of its own (/ and /hy-tmp are not billed); /hy-nas bills in
    # every state and survives release (the user's 0.02 CNY/h), here never deleted.
    model = billing_model(load_profile("gpushare"), [Held("hy-nas", per_hour=0.02)])
    assert model.stopped_storage_per_hour == 0.0
    reading = accrue(cycle(2.5, "user"), at(10), model=model)
    assert close(reading.total, 3.0 * 2.5 + 10.0 * 0.02)
    assert close(reading.burn_per_hour, 0.02)
    assert_exact(reading)


def test_lanrui_data_disk_bills_hourly_until_destroyed() -> None:
    # §7: LanRui's 数据盘 bills hourly while stopped until destroyed with it (the user's 0.03 CNY/h).
    model = billing_model(load_profile("lanrui"), [Held("datadisk", per_hour=0.03)])
    reading = accrue(cycle(3.2, "user"), at(10), model=model)
    assert close(reading.total, 3.0 * 3.2 + 3.0 * 0.03)


def test_local_workstation_has_no_meter_and_no_flag() -> None:
    reading = accrue(cycle(None, "none"), at(10), model=billing_model(load_profile("local")))
    assert reading.total == 0.0 and reading.burn_per_hour == 0.0
    assert_exact(reading)


def test_held_names_must_exist_in_the_profile() -> None:
    with pytest.raises(ValueError, match="'nvme'"):
        billing_model(load_profile("runpod"), [Held("nvme", 10 * GB)])


# -- bad input: unknown prices and states ----------------------------------------------------------------


@pytest.mark.parametrize("price", [None, float("nan"), -1.0, float("inf")])
def test_unknown_price_is_flagged_never_a_crash(price: float | None) -> None:
    reading = accrue([shot(0, "running", price)], at(2), model=billing_model(load_profile("runpod")))
    assert reading.total == 0.0 and reading.burn_per_hour == 0.0
    assert reading.unknown_price is True


def test_unknown_residual_price_is_flagged() -> None:
    model = billing_model(load_profile("vastai"), [Held("local-volume")])  # present, no size, no rate
    reading = accrue([shot(0, "running", 0.35), shot(1, "terminated")], at(2), model=model)
    assert close(reading.total, 1.0 * 0.35)
    assert reading.unknown_price is True


def test_unmapped_provider_word_is_unknown_never_terminated() -> None:
    # A raw provider word that slipped through bills like `unknown`: the last known rate, as an estimate.
    reading = accrue([shot(0, "running", 0.79), shot(1, "Alert")], at(3))
    assert close(reading.total, 3.0 * 0.79)
    assert reading.estimate is True
    assert reading.burn_per_hour == 0.79


def test_unknown_state_keeps_the_last_known_storage_and_residuals() -> None:
    model = billing_model(load_profile("runpod"), [Held("volume", 50 * GB), Held("network-volume", 10 * GB)])
    reading = accrue([shot(0, "stopped"), shot(1, "unknown")], at(3), model=model)
    volume, network = 50 * 0.20 / MONTH_H, 10 * 0.07 / MONTH_H
    assert close(reading.total, 3.0 * volume + 3.0 * network)
    assert close(reading.burn_per_hour, volume + network)
    assert reading.estimate is True and reading.unknown_price is False


def test_first_snapshot_unknown_is_an_estimate_and_an_unknown_price() -> None:
    reading = accrue([shot(0, "unknown")], at(1))
    assert reading.total == 0.0
    assert reading.estimate is True and reading.unknown_price is True


def test_first_snapshot_in_a_word_rgt_does_not_map_bills_the_listed_price_as_an_estimate() -> None:
    # vast.ai `frozen` ($1.002 listed; its docs: GPU charges apply), Lambda `unhealthy` ($10.32): never $0/h
    for price in (1.0020740740740741, 10.32):
        reading = accrue([shot(0, "unknown", price)], at(2))
        assert close(reading.total, 2.0 * price) and reading.burn_per_hour == price
        assert reading.estimate is True and reading.unknown_price is False


def test_history_wins_over_the_listed_price_of_an_unknown_state() -> None:
    # a box seen stopped (storage only) then in an unmapped word keeps its last known rate
    model = billing_model(load_profile("runpod"), [Held("volume", 50 * GB)])
    reading = accrue([shot(0, "stopped"), shot(1, "unknown", 0.74)], at(2), model=model)
    assert close(reading.burn_per_hour, 50 * 0.20 / MONTH_H) and reading.estimate is True


def test_first_rates_is_the_rule_for_one_look() -> None:
    model = billing_model(load_profile("runpod"), [Held("volume", 50 * GB)])
    assert first_rates(model, shot(0, "running", 0.74)) == (Rates(0.74, 0.0), False)
    rates, estimate = first_rates(model, shot(0, "stopped", 0.74))
    assert close(rates.total, 50 * 0.20 / MONTH_H) and rates.compute == 0.0 and estimate is False
    assert first_rates(model, shot(0, "unknown", 0.74)) == (Rates(0.74, 0.0), True)
    assert first_rates(model, shot(0, "unknown")) == (Rates(unknown=True), True)
    assert first_rates(model, shot(0, "terminated", 0.74)) == (Rates(), False)


# -- drift -----------------------------------------------------------------------------------------------


def test_drift_flagged_above_threshold_and_not_below() -> None:
    model = BillingModel(quoted_per_hour=0.79)
    far = accrue([shot(0, "running", 0.89, "api")], at(1), model=model)
    assert far.drift is not None
    assert (far.drift.quoted, far.drift.api) == (0.79, 0.89) and close(far.drift.ratio, 0.89 / 0.79)
    assert close(far.total, 0.89)  # the API price is what bills
    near = accrue([shot(0, "running", 0.80, "api")], at(1), model=model)  # +1.3 %
    assert near.drift is None
    assert price_drift(1.00, 1.05) is None  # exactly 5 % is not "more than"
    assert price_drift(1.00, 1.06) is not None
    assert price_drift(1.00, 0.90) is not None  # cheaper counts too
    assert price_drift(None, 1.0) is None and price_drift(0.0, 1.0) is None and price_drift(1.0, None) is None


def test_drift_uses_the_latest_api_price_only() -> None:
    model = BillingModel(quoted_per_hour=0.79)
    timeline = [shot(0, "running", 0.89, "api"), shot(1, "running", 0.79, "user")]
    reading = accrue(timeline, at(2), model=model)
    assert reading.drift is not None and reading.drift.api == 0.89  # a user figure is not an API price


# -- gaps: rgt was closed --------------------------------------------------------------------------------


STOPPED_DISK = 0.01


def replay_gap(last: Snapshot, seen: Snapshot, since: datetime | None) -> MeterReading:
    """What the session does on start-up: fill the gap, add its snapshots, persist the estimate interval."""
    fill = fill_gap(last, seen, since)
    gaps = [fill.estimate] if fill.estimate else []
    return accrue([last, *fill.snapshots, seen], seen.at, model=BillingModel(), gaps=gaps)


def test_gap_filled_exactly_from_a_reported_stop_time() -> None:
    last, seen = shot(0, "running", 0.79), shot(5, "stopped", storage=STOPPED_DISK)
    reading = replay_gap(last, seen, reported_since("stopped", seen.at, ended_at=at(2)))
    assert close(reading.total, 2.0 * 0.79 + 3.0 * STOPPED_DISK)
    assert_exact(reading)


def test_gap_without_provider_times_is_an_upper_bound_estimate() -> None:
    last, seen = shot(0, "running", 0.79), shot(5, "stopped", storage=STOPPED_DISK)
    reading = replay_gap(last, seen, None)
    assert close(reading.total, 5.0 * 0.79)  # may have been stopped at any time: the higher rate throughout
    assert reading.estimate is True
    assert reading.gaps == (Interval(at(0), at(5)),)
    assert any("not watching" in line for line in reading.notes())


def test_gap_stopped_then_started_without_uptime_is_not_billed_as_stopped() -> None:
    # The last known rate would be a lower bound here: the box may have been started right after rgt closed.
    reading = replay_gap(shot(0, "stopped", storage=STOPPED_DISK), shot(5, "running", 0.79), None)
    assert close(reading.total, 5.0 * 0.79)
    assert reading.estimate is True


def test_gap_filled_from_uptime_after_a_start() -> None:
    last, seen = shot(0, "stopped", storage=STOPPED_DISK), shot(5, "running", 0.79)
    since = reported_since("running", seen.at, uptime_s=2 * 3600)
    assert since == at(3)
    reading = replay_gap(last, seen, since)
    assert close(reading.total, 3.0 * STOPPED_DISK + 2.0 * 0.79)
    assert_exact(reading)


def test_uptime_covering_the_gap_means_it_ran_throughout() -> None:
    last, seen = shot(0, "running", 0.79), shot(5, "running", 0.79)
    reading = replay_gap(last, seen, reported_since("running", seen.at, uptime_s=6 * 3600))
    assert close(reading.total, 5.0 * 0.79)
    assert_exact(reading)


def test_restart_inside_the_gap_leaves_the_part_before_it_an_estimate() -> None:
    last, seen = shot(0, "running", 0.79), shot(5, "running", 0.79)
    fill = fill_gap(last, seen, reported_since("running", seen.at, uptime_s=3600))
    assert fill.estimate == Interval(at(0), at(4))  # it went down at some unknown time before 4 h
    reading = replay_gap(last, seen, at(4))
    assert close(reading.total, 5.0 * 0.79)
    assert reading.gaps == (Interval(at(0), at(4)),)


def test_gap_ending_terminated_with_a_stamp_is_exact() -> None:
    last, seen = shot(0, "running", 0.79), shot(5, "terminated")
    reading = replay_gap(last, seen, reported_since("terminated", seen.at, ended_at=at(1)))
    assert close(reading.total, 1.0 * 0.79)
    assert_exact(reading)


def test_gap_after_terminate_needs_no_explaining() -> None:
    fill = fill_gap(shot(0, "terminated"), shot(5, "terminated"), None)
    assert fill == fill_gap(shot(0, "terminated"), shot(5, "terminated"), at(3)) and fill.estimate is None


def test_gap_with_an_unknown_provider_answer_stays_an_estimate() -> None:
    fill = fill_gap(shot(0, "running", 0.79), shot(5, "unknown"), at(1))
    assert fill.snapshots == () and fill.estimate == Interval(at(0), at(5))


def test_reported_since_prefers_a_start_stamp_and_ignores_bad_uptime() -> None:
    assert reported_since("running", at(5), uptime_s=3600, started_at=at(1)) == at(1)
    assert reported_since("running", at(5), uptime_s=float("nan")) is None
    assert reported_since("stopped", at(5), uptime_s=3600) is None
    assert reported_since("unknown", at(5), ended_at=at(1)) is None


def test_silent_intervals_from_meter_sample_times() -> None:
    watched = [at(0), at(0.01), at(0.02), at(3), at(3.01)]
    assert silent_intervals(watched, max_silence_s=300) == [Interval(at(0.02), at(3))]
    assert silent_intervals([], 300) == []


# -- residuals, since finished, projection ---------------------------------------------------------------


def test_residual_volume_bills_after_terminate_until_deleted() -> None:
    volume = 100 * 0.07 / MONTH_H  # RunPod network volume, 100 GB standard
    timeline = [shot(0, "running", 0.79), shot(1, "terminated")]
    before = accrue(timeline, at(3), model=billing_model(load_profile("runpod"), [Held("network-volume", 100 * GB)]))
    assert close(before.total, 1.0 * 0.79 + 3.0 * volume)
    assert close(before.burn_per_hour, volume)  # terminated, yet still burning
    deleted = billing_model(load_profile("runpod"), [Held("network-volume", 100 * GB, until=at(4))])
    after = accrue(timeline, at(6), model=deleted)
    assert close(after.total, 1.0 * 0.79 + 4.0 * volume)
    assert after.burn_per_hour == 0.0


def test_explicit_items_bill_on_their_own_clock() -> None:
    model = BillingModel(items=(BilledItem("ip", 0.0045, start=at(-2), end=at(1)),))
    reading = accrue([shot(0, "running", 1.0)], at(2), model=model)
    assert close(reading.breakdown.residuals, 3.0 * 0.0045)
    assert close(reading.total, 2.0 * 1.0 + 3.0 * 0.0045)


def test_since_finished_and_projected_cost_to_finish() -> None:
    volume = 10 * 0.07 / MONTH_H
    model = billing_model(load_profile("runpod"), [Held("network-volume", 10 * GB)])
    reading = accrue([shot(0, "running", 0.79)], at(3), finished_at=at(1), model=model)
    assert close(reading.since_finished, 2.0 * 0.79 + 2.0 * volume)
    assert close(reading.burn_per_hour, 0.79 + volume)
    projected = reading.projected_to_finish(1800)
    assert projected is not None and close(projected, 0.5 * (0.79 + volume))
    assert reading.projected_to_finish(None) is None
    assert reading.projected_to_finish(-5) is None


def test_since_finished_straddles_a_state_change() -> None:
    reading = accrue([shot(0, "running", 0.79), shot(2, "stopped", storage=0.01)], at(4), finished_at=at(1))
    assert close(reading.since_finished, 1.0 * 0.79 + 2.0 * 0.01)


def test_known_states_are_the_provider_states_but_unknown() -> None:
    assert KNOWN_STATES == set(INSTANCE_STATES) - {"unknown"}
