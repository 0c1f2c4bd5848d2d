"""GPU health verdicts (docs/remote-ops.md §5) from recorded nvidia-smi and dmesg outputs in tests/fixtures/gpu/.

The CSV fixtures are in the exact shape of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`
(one line per GPU per sample, ", " separated, [N/A] and [Not Supported] verbatim).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.audits import gpu_health as gh
from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.services.watch.gpu_samples import SAMPLE_VERSION, parse_sample_output

GPU = Path(__file__).parents[1] / "fixtures" / "gpu"
READABLE_CLEAN = gh.KernelLog(readable=True, xid_text=(GPU / "dmesg_clean.txt").read_text())


def text(name: str) -> str:
    return (GPU / name).read_text()


def samples(name: str) -> list[gh.GpuSample]:
    return gh.parse_gpu_samples(text(name))


def inventory(name: str) -> list[gh.GpuInfo]:
    return gh.parse_gpu_inventory(text(name))


def kernel(name: str) -> gh.KernelLog:
    return gh.KernelLog(readable=True, xid_text=text(name))


def by_index(report: gh.HealthReport) -> dict[int, gh.GpuVerdict]:
    return {g.index: g for g in report.gpus}


# ---- parsing --------------------------------------------------------------------------------------

def test_parses_eight_h100_inventory() -> None:
    gpus = inventory("h100x8_inventory.csv")
    assert [g.index for g in gpus] == list(range(8))
    assert {g.name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[0].pci_bus_id == "00000000:18:00.0" and gpus[7].pci_bus_id == "00000000:DB:00.0"
    assert gpus[3].memory_total_mib == 81559 and gpus[3].memory_used_mib == 0
    assert gpus[0].driver_version == "535.129.03" and gpus[0].uuid and gpus[0].uuid.startswith("GPU-")


def test_parses_samples_with_typed_fields() -> None:
    parsed = samples("h100x8_load_samples.csv")
    assert len(parsed) == 40
    first = parsed[0]
    assert first.index == 0 and first.pci_bus_id == "00000000:18:00.0"
    assert first.util_pct == 100 and first.memory_used_mib == 71234 and first.memory_total_mib == 81559
    assert first.temperature_c == 56 and first.power_w == pytest.approx(659.57) and first.power_limit_w == 700
    assert first.sm_clock_mhz == 1980 and first.max_sm_clock_mhz == 1980 and first.throttle_reasons == 0x4
    assert parsed[1].throttle_reasons == 0 and parsed[1].temperature_c == 66


def test_na_and_not_supported_become_none() -> None:
    parsed = samples("a100x2_mig_na_samples.csv")
    gpu1 = [s for s in parsed if s.index == 1][0]
    assert gpu1.util_pct is None and gpu1.power_w is None and gpu1.power_limit_w is None
    assert gpu1.throttle_reasons is None
    assert gpu1.sm_clock_mhz == 1410 and gpu1.temperature_c == 31
    assert gh.csv_value("[N/A]") is None and gh.csv_value(" [Not Supported] ") is None
    assert gh.csv_value("N/A") is None and gh.csv_value("[GPU is lost]") is None


def test_a_line_of_the_wrong_shape_is_refused_with_its_number() -> None:
    csv = text("h100x1_idle_samples.csv") + "No devices were found\n"
    with pytest.raises(gh.GpuParseError, match="sample line 6"):
        gh.parse_gpu_samples(csv)
    with pytest.raises(gh.GpuParseError, match="not a number"):
        gh.parse_gpu_samples("0, 00000000:18:00.0, hot, 0, 81559, 30, 70.0, 700.00, 345, 1980, 0x1\n")


def test_header_lines_and_units_are_tolerated() -> None:
    csv = ("index, pci.bus_id, utilization.gpu [%], memory.used [MiB], memory.total [MiB], temperature.gpu, "
           "power.draw [W], power.limit [W], clocks.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active\n"
           "0, 00000000:18:00.0, 45 %, 1024 MiB, 81559 MiB, 61, 350.12 W, 700.00 W, 1755 MHz, 1980 MHz, 0x0\n")
    (only,) = gh.parse_gpu_samples(csv)
    assert only.util_pct == 45 and only.sm_clock_mhz == 1755 and only.power_w == pytest.approx(350.12)


def test_a_comma_in_a_product_name_stays_in_the_name() -> None:
    (gpu,) = gh.parse_gpu_inventory("0, GPU-1, NVIDIA RTX 6000 Ada, Blackwell, 00000000:01:00.0, 49140, 3, 550.1\n")
    assert gpu.name == "NVIDIA RTX 6000 Ada, Blackwell" and gpu.pci_bus_id == "00000000:01:00.0"


def test_pci_ids_of_nvidia_smi_and_xid_lines_compare_equal() -> None:
    assert gh.pci_key("00000000:18:00.0") == gh.pci_key("PCI:0000:18:00") == (0, 0x18, 0)
    assert gh.pci_key("00000000:00:1E.0") == gh.pci_key("PCI:0000:00:1e")
    assert gh.pci_key("00000000:18:00.0") != gh.pci_key("PCI:0000:9a:00")
    assert gh.pci_key("garbage") is None and gh.pci_key(None) is None


def test_xid_lines_are_parsed_with_code_and_device() -> None:
    events = gh.parse_xid_lines(text("dmesg_xid79_this_gpu.txt"))
    assert [(e.code, e.pci) for e in events] == [(79, (0, 0x9A, 0)), (79, (0, 0x18, 0))]


# ---- verdicts -------------------------------------------------------------------------------------

def test_healthy_idle_eight_h100_pass_and_idle_bit_is_ignored() -> None:
    report = gh.assess_health(samples("h100x8_idle_samples.csv"), READABLE_CLEAN, inventory("h100x8_inventory.csv"))
    assert report.overall == gh.PASS
    assert [g.verdict for g in report.gpus] == [gh.PASS] * 8
    assert all(g.samples == 5 and g.throttle_seen == 0x1 for g in report.gpus)
    assert report.advice == "" and report.summary() == "8 GPU(s) healthy"


def test_healthy_load_passes_with_sw_power_cap_ignored() -> None:
    report = gh.assess_health(samples("h100x8_load_samples.csv"), READABLE_CLEAN, inventory("h100x8_inventory.csv"))
    assert report.overall == gh.PASS
    assert any(g.throttle_seen & 0x4 for g in report.gpus)  # the fixture does contain SW power cap
    gpu0 = report.gpus[0]
    assert gpu0.util_pct == 100 and gpu0.max_sm_clock_mhz == 1980 and gpu0.power_w is not None


def test_hot_and_clock_throttled_gpu_fails_alone() -> None:
    report = gh.assess_health(samples("h100x8_gpu3_hot_throttled.csv"), READABLE_CLEAN,
                              inventory("h100x8_inventory.csv"))
    verdicts = by_index(report)
    assert report.overall == gh.FAIL and report.advice == gh.FAIL_ADVICE
    assert verdicts[3].verdict == gh.FAIL
    assert [f.code for f in verdicts[3].findings] == ["hot_throttled"]
    assert verdicts[3].temperature_c == 88 and verdicts[3].sm_clock_mhz == 1155
    assert all(v.verdict == gh.PASS for i, v in verdicts.items() if i != 3)
    assert "GPU 3: 88 °C with SM clock 1155/1980 MHz (58% < 70%)" in report.summary()
    assert report.summary().endswith(gh.FAIL_ADVICE)


def test_hot_with_normal_clocks_warns() -> None:
    report = gh.assess_health(samples("h100x8_gpu6_hot_normal_clocks.csv"), READABLE_CLEAN,
                              inventory("h100x8_inventory.csv"))
    assert report.overall == gh.WARN
    gpu6 = by_index(report)[6]
    assert gpu6.verdict == gh.WARN and gpu6.temperature_c == 84
    assert [f.code for f in gpu6.findings] == ["hot"]


def test_hw_slowdown_bit_fails_and_counts_samples() -> None:
    report = gh.assess_health(samples("h100x8_gpu5_hw_slowdown.csv"), READABLE_CLEAN,
                              inventory("h100x8_inventory.csv"))
    gpu5 = by_index(report)[5]
    assert report.overall == gh.FAIL and gpu5.verdict == gh.FAIL
    assert [f.message for f in gpu5.findings] == ["HW slowdown (0x8) active in 2/5 samples"]
    assert sum(g.verdict == gh.FAIL for g in report.gpus) == 1


@pytest.mark.parametrize("bit, name", [(0x8, "HW slowdown"), (0x20, "SW thermal slowdown"),
                                       (0x40, "HW thermal slowdown"), (0x80, "HW power brake")])
def test_each_fail_bit_fails(bit: int, name: str) -> None:
    line = f"0, 00000000:18:00.0, 100, 70000, 81559, 60, 650.00, 700.00, 1980, 1980, {bit | 0x5:#018x}\n"
    report = gh.assess_health(gh.parse_gpu_samples(line * 5), READABLE_CLEAN)
    assert report.overall == gh.FAIL and name in report.gpus[0].findings[0].message


def test_only_the_ignored_bits_pass() -> None:
    line = "0, 00000000:18:00.0, 100, 70000, 81559, 60, 650.00, 700.00, 1980, 1980, 0x0000000000000005\n"
    assert gh.assess_health(gh.parse_gpu_samples(line * 5), READABLE_CLEAN).overall == gh.PASS


def _thermal(temp: float, clock: float) -> gh.HealthReport:
    line = f"0, 00000000:18:00.0, 100, 70000, 81559, {temp:g}, 650.00, 700.00, {clock:g}, 2000, 0x0\n"
    return gh.assess_health(gh.parse_gpu_samples(line * 5), READABLE_CLEAN)


def test_clock_at_temperature_boundaries() -> None:
    assert _thermal(82, 1000).overall == gh.PASS        # below 83 °C clocks do not matter
    assert _thermal(83, 1400).overall == gh.WARN        # exactly 70 % is not "< 70 %"
    assert _thermal(83, 1399).overall == gh.FAIL
    assert _thermal(83, 2000).overall == gh.WARN


def test_medians_not_one_snapshot_decide() -> None:
    cool = "0, 00000000:18:00.0, 100, 70000, 81559, 60, 650.00, 700.00, 1980, 1980, 0x0\n"
    spike = "0, 00000000:18:00.0, 100, 70000, 81559, 91, 650.00, 700.00, 900, 1980, 0x0\n"
    report = gh.assess_health(gh.parse_gpu_samples(cool * 3 + spike * 2), READABLE_CLEAN)
    assert report.overall == gh.PASS and report.gpus[0].temperature_c == 60
    report = gh.assess_health(gh.parse_gpu_samples(cool * 2 + spike * 3), READABLE_CLEAN)
    assert report.overall == gh.FAIL


def test_hot_with_unknown_clocks_warns() -> None:
    line = "0, 00000000:18:00.0, 100, 70000, 81559, 85, 650.00, 700.00, [N/A], [N/A], 0x0\n"
    report = gh.assess_health(gh.parse_gpu_samples(line * 5), READABLE_CLEAN)
    assert report.overall == gh.WARN and "clocks unknown" in report.gpus[0].findings[0].message


def test_na_fields_do_not_break_a_healthy_verdict() -> None:
    report = gh.assess_health(samples("a100x2_mig_na_samples.csv"), READABLE_CLEAN, inventory("a100x2_inventory.csv"))
    assert report.overall == gh.PASS
    gpu1 = by_index(report)[1]
    assert gpu1.util_pct is None and gpu1.power_w is None and gpu1.throttle_seen == 0 and gpu1.samples == 5


def test_old_driver_throttle_field_parses_and_its_lowercase_xid_matches() -> None:
    old = samples("v100_driver470_samples.csv")
    assert len(old) == 5 and old[0].throttle_reasons == 0x1 and old[0].pci_bus_id == "00000000:00:1E.0"
    assert gh.assess_health(old, READABLE_CLEAN).overall == gh.PASS
    report = gh.assess_health(old, kernel("dmesg_xid79_v100_lowercase.txt"), inventory("v100_driver470_inventory.csv"))
    assert report.overall == gh.FAIL


# ---- Xid ------------------------------------------------------------------------------------------

def _one_h100(log: gh.KernelLog) -> gh.HealthReport:
    return gh.assess_health(samples("h100x1_idle_samples.csv"), log, inventory("h100x1_inventory.csv"))


def test_xid79_of_another_device_is_ignored() -> None:
    report = _one_h100(kernel("dmesg_xid79_other_device.txt"))
    assert report.overall == gh.PASS
    assert report.notes == ("ignored 1 Xid line(s) of other PCI devices",)


def test_xid79_of_this_gpu_fails() -> None:
    report = _one_h100(kernel("dmesg_xid79_this_gpu.txt"))
    assert report.overall == gh.FAIL
    assert [f.message for f in report.gpus[0].findings] == ["Xid 79: GPU fell off the bus"]
    assert report.notes == ("ignored 1 Xid line(s) of other PCI devices",)


def test_xid48_fails_and_other_xids_only_warn() -> None:
    report = _one_h100(kernel("dmesg_xid48_this_gpu.txt"))
    assert report.overall == gh.FAIL
    assert [(f.level, f.code) for f in report.gpus[0].findings] == [(gh.FAIL, "xid48"), (gh.WARN, "xid63")]
    report = _one_h100(kernel("dmesg_xid13_this_gpu.txt"))
    assert report.overall == gh.WARN and {f.code for f in report.gpus[0].findings} == {"xid13"}


def test_an_xid_line_without_a_device_is_not_ignored() -> None:
    report = _one_h100(gh.KernelLog(readable=True, xid_text="NVRM: Xid (unknown): 31, pid=1, MMU Fault\n"))
    assert report.overall == gh.WARN and "names no PCI device" in report.gpus[0].findings[0].message


@pytest.mark.parametrize("log", [gh.KernelLog(readable=False, xid_text=""),
                                 gh.KernelLog(readable=False, source="none")])
def test_an_unreadable_kernel_log_is_not_authoritative(log: gh.KernelLog) -> None:
    report = _one_h100(log)
    assert report.overall == gh.WARN
    assert report.gpus[0].findings[0].message == "kernel log unreadable or empty: Xid check not authoritative"


def test_a_gpu_in_the_inventory_without_samples_warns() -> None:
    report = gh.assess_health([], READABLE_CLEAN, inventory("h100x1_inventory.csv"))
    assert report.overall == gh.WARN and report.gpus[0].findings[0].code == "no_samples"


# ---- the no-GPU state and the probe's JSON ---------------------------------------------------------

def test_no_gpu_is_a_state_not_an_error() -> None:
    report = gh.no_gpu()
    assert report.overall == gh.NO_GPU and report.gpus == () and report.advice == ""
    assert report.summary() == "nvidia-smi not found"
    assert gh.health_from_facts({"nvidia_smi": None}).overall == gh.NO_GPU
    assert gh.assess_health([], READABLE_CLEAN).overall == gh.NO_GPU


def test_nvidia_smi_failures() -> None:
    assert gh.nvidia_smi_failed(6, "No devices were found\n").overall == gh.NO_GPU
    broken = gh.nvidia_smi_failed(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                                     "driver. Make sure that the latest NVIDIA driver is installed and running.\n")
    assert broken.overall == gh.FAIL and "exit 9" in broken.summary()


def _facts(inv: str, sample_files: list[str], log: str, log_rc: int = 0) -> dict[str, object]:
    return {
        "nvidia_smi": "/usr/bin/nvidia-smi",
        "gpus": {"rc": 0, "out": text(inv)},
        "gpu_samples": {"fields": ",".join(gh.SAMPLE_FIELDS), "throttle_field": gh.THROTTLE_FIELDS[0],
                        "samples": [{"rc": 0, "out": text(f)} for f in sample_files]},
        "kernel_log": {"source": "dmesg", "rc": log_rc, "lines": len(text(log).splitlines()), "xid": text(log)},
    }


def test_health_from_probe_facts() -> None:
    facts = _facts("h100x1_inventory.csv", ["h100x1_idle_samples.csv"], "dmesg_xid79_this_gpu.txt")
    assert gh.health_from_facts(facts).overall == gh.FAIL
    facts = _facts("h100x1_inventory.csv", ["h100x1_idle_samples.csv"], "dmesg_clean.txt")
    assert gh.health_from_facts(facts).overall == gh.PASS
    facts = _facts("h100x1_inventory.csv", ["h100x1_idle_samples.csv"], "dmesg_clean.txt", log_rc=1)
    assert gh.health_from_facts(facts).overall == gh.WARN


def test_a_failed_sample_downgrades_a_pass_to_warn() -> None:
    facts = _facts("h100x1_inventory.csv", ["h100x1_idle_samples.csv"], "dmesg_clean.txt")
    facts["gpu_samples"]["samples"].append({"rc": 124, "out": ""})  # type: ignore[index]
    report = gh.health_from_facts(facts)
    assert report.overall == gh.WARN and "sample 2 failed (exit 124)" in report.notes


# ---- the live sampler's answer ----------------------------------------------------------------------

def test_sampler_answer_parsing() -> None:
    head = f"version={SAMPLE_VERSION}\n"
    assert parse_sample_output(f"{head}nvidia_smi=missing\n".encode()) is None
    assert parse_sample_output(f"{head}nvidia_smi=present\nrc=6\nNo devices were found\n".encode()) is None
    good = parse_sample_output(f"{head}nvidia_smi=present\nrc=0\n{text('h100x8_load_samples.csv')}".encode())
    assert good is not None and len(good) == 40 and good[0].memory_used_mib == 71234
    with pytest.raises(TransportError, match="exit 9"):
        parse_sample_output(f"{head}nvidia_smi=present\nrc=9\nNVIDIA-SMI has failed\n".encode())
    with pytest.raises(TransportError, match="answered badly"):
        parse_sample_output(b"Welcome to the box!\n")
    with pytest.raises(TransportError, match="answered badly"):
        parse_sample_output(f"{head}nvidia_smi=present\nrc=0\nnot, a, sample\n".encode())
