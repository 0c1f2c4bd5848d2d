"""GPU health from nvidia-smi samples and the kernel log (docs/remote-ops.md §5): pure parsing and verdicts.

Why medians over several samples: one snapshot lies (utilization counts any kernel in the window, clocks
dip between kernels). Why filter Xid lines by PCI bus id: the ring buffer holds other GPUs' and earlier
tenants' events, and a box must not be condemned for a neighbour's fault. Why an unreadable kernel log is
a WARN and not a PASS: inside a container dmesg is usually denied or empty, so "no Xid" proves nothing.

"No GPU" is a state, not an error: `no_gpu()` is what a box without nvidia-smi (or without devices) gets;
whether that matters is decided by the caller, who knows whether the run wants GPUs.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SAMPLE_FIELDS = ("index", "pci.bus_id", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu",
                 "power.draw", "power.limit", "clocks.sm", "clocks.max.sm")
# newer drivers (535+) renamed the throttle bitmask; the survey tries the new name, then the old one
THROTTLE_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
INVENTORY_FIELDS = ("index", "uuid", "name", "pci.bus_id", "memory.total", "memory.used", "driver_version")

# throttle reason bits (nvml.h nvmlClocksEventReason*): these four mean the board is sick or overheating
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
FAIL_BITS = {HW_SLOWDOWN: "HW slowdown", SW_THERMAL: "SW thermal slowdown", HW_THERMAL: "HW thermal slowdown",
             HW_POWER_BRAKE: "HW power brake"}
# 0x1 (idle) and 0x4 (SW power cap) are normal operation and are ignored, as are the other bits

HOT_C = 83.0
SLOW_CLOCK_RATIO = 0.70
FATAL_XIDS = {48: "double-bit ECC error", 79: "GPU fell off the bus"}

PASS, WARN, FAIL, NO_GPU = "pass", "warn", "fail", "no_gpu"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
FAIL_ADVICE = "re-rent a different box; do not launch"


class GpuParseError(ValueError):
    """nvidia-smi answered something that is not the CSV we asked for (names the line)."""


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant; None where nvidia-smi said [N/A] or [Not Supported]."""

    index: int
    pci_bus_id: str | None
    util_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    throttle_reasons: int | None


@dataclass(frozen=True)
class GpuInfo:
    """One line of the inventory query (environment audit row 7)."""

    index: int
    uuid: str | None
    name: str
    pci_bus_id: str | None
    memory_total_mib: float | None
    memory_used_mib: float | None
    driver_version: str | None


@dataclass(frozen=True)
class XidEvent:
    """One Xid line from the kernel log with the PCI address it names, so a GPU is judged only by its own events."""

    code: int
    pci: tuple[int, int, int] | None  # (domain, bus, device); None when the line names no device
    line: str


@dataclass(frozen=True)
class KernelLog:
    """The Xid lines the survey found, and whether the log could be read at all."""

    readable: bool
    xid_text: str = ""
    source: str = "dmesg"


@dataclass(frozen=True)
class GpuFinding:
    """One thing wrong with a GPU (an Xid, throttling, heat): a warn or a fail, with a code and a message."""

    level: str  # warn | fail
    code: str
    message: str


@dataclass(frozen=True)
class GpuVerdict:
    """One GPU's verdict over several samples: its findings and the median readings they were judged from."""

    index: int
    pci_bus_id: str | None
    verdict: str  # pass | warn | fail
    findings: tuple[GpuFinding, ...]
    samples: int
    util_pct: float | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    throttle_seen: int = 0  # OR of every sample's bitmask


@dataclass(frozen=True)
class HealthReport:
    """The box's GPU health: the overall verdict (or no_gpu), each GPU's verdict, and notes such as an unreadable
    kernel log; `summary` is its checklist line."""

    overall: str  # pass | warn | fail | no_gpu
    gpus: tuple[GpuVerdict, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def advice(self) -> str:
        return FAIL_ADVICE if self.overall == FAIL else ""

    def summary(self) -> str:
        """One line for a checklist row: the verdict, the worst finding per GPU, and the advice."""
        if self.overall == NO_GPU:
            return "; ".join(self.notes) or "no GPU"
        bad = [f"GPU {g.index}: {'; '.join(f.message for f in g.findings)}" for g in self.gpus if g.findings]
        text = " | ".join(bad) if bad else f"{len(self.gpus)} GPU(s) healthy"
        if self.notes:
            text += " (" + "; ".join(self.notes) + ")"
        return f"{text} — {FAIL_ADVICE}" if self.overall == FAIL else text


# ---- parsing --------------------------------------------------------------------------------------

_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)(?:\s*[A-Za-z%]+)?$")
_NA_WORDS = {"n/a", "not supported", "unknown error", "insufficient permissions", "gpu is lost", ""}


def csv_value(raw: str) -> str | None:
    """A field without brackets and padding; None for [N/A], [Not Supported] and friends."""
    text = raw.strip()
    inner = text[1:-1].strip() if text.startswith("[") and text.endswith("]") else text
    if text != inner or inner.lower() in _NA_WORDS:
        return None
    return inner


def _number(raw: str, where: str) -> float | None:
    value = csv_value(raw)
    if value is None:
        return None
    match = _NUMBER.match(value)
    if match is None:
        raise GpuParseError(f"{where}: {value!r} is not a number")
    return float(match.group(1))


def _bitmask(raw: str, where: str) -> int | None:
    value = csv_value(raw)
    if value is None:
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(value)
    except ValueError:
        raise GpuParseError(f"{where}: {value!r} is not a bitmask") from None


def _rows(csv: str, header_word: str) -> Iterable[tuple[int, list[str]]]:
    for number, line in enumerate(csv.splitlines(), 1):
        if not line.strip() or line.strip().startswith(header_word + ","):
            continue
        yield number, [part.strip() for part in line.split(",")]


def _index(raw: str, where: str) -> int:
    value = csv_value(raw)
    if value is None or not value.isdigit():
        raise GpuParseError(f"{where}: GPU index {raw.strip()!r} is not an integer")
    return int(value)


def parse_gpu_samples(csv: str) -> list[GpuSample]:
    """Lines of `nvidia-smi --query-gpu=SAMPLE_FIELDS,<throttle field> --format=csv,noheader,nounits`."""
    samples = []
    width = len(SAMPLE_FIELDS) + 1
    for number, cols in _rows(csv, "index"):
        where = f"sample line {number}"
        if len(cols) != width:
            raise GpuParseError(f"{where}: {len(cols)} fields, expected {width}: {', '.join(cols)[:120]!r}")
        samples.append(GpuSample(
            index=_index(cols[0], where), pci_bus_id=csv_value(cols[1]),
            util_pct=_number(cols[2], where), memory_used_mib=_number(cols[3], where),
            memory_total_mib=_number(cols[4], where), temperature_c=_number(cols[5], where),
            power_w=_number(cols[6], where), power_limit_w=_number(cols[7], where),
            sm_clock_mhz=_number(cols[8], where), max_sm_clock_mhz=_number(cols[9], where),
            throttle_reasons=_bitmask(cols[10], where)))
    return samples


def parse_gpu_inventory(csv: str) -> list[GpuInfo]:
    """Lines of `nvidia-smi --query-gpu=INVENTORY_FIELDS --format=csv,noheader,nounits`.

    A product name is the one field that could hold a comma, so surplus columns are joined back into it.
    """
    gpus = []
    width = len(INVENTORY_FIELDS)
    for number, cols in _rows(csv, "index"):
        where = f"inventory line {number}"
        if len(cols) < width:
            raise GpuParseError(f"{where}: {len(cols)} fields, expected {width}: {', '.join(cols)[:120]!r}")
        extra = len(cols) - width
        name = ", ".join(cols[2:3 + extra])
        rest = cols[3 + extra:]
        gpus.append(GpuInfo(
            index=_index(cols[0], where), uuid=csv_value(cols[1]), name=csv_value(name) or "?",
            pci_bus_id=csv_value(rest[0]), memory_total_mib=_number(rest[1], where),
            memory_used_mib=_number(rest[2], where), driver_version=csv_value(rest[3])))
    return gpus


_PCI = re.compile(r"^(?:PCI:)?(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?$")
_XID = re.compile(r"NVRM: Xid \(([^)]*)\):\s*(\d+)")


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of `00000000:18:00.0` (nvidia-smi) or `PCI:0000:18:00` (Xid lines)."""
    if not bus_id:
        return None
    match = _PCI.match(bus_id.strip())
    if match is None:
        return None
    domain, bus, device = match.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16)


def parse_xid_lines(text: str) -> list[XidEvent]:
    events = []
    for line in text.splitlines():
        match = _XID.search(line)
        if match is not None:
            events.append(XidEvent(code=int(match.group(2)), pci=pci_key(match.group(1)), line=line.strip()))
    return events


# ---- verdicts -------------------------------------------------------------------------------------

def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _worst(levels: Iterable[str]) -> str:
    return max(levels, key=lambda level: _RANK[level], default=PASS)


def _xid_findings(gpu_pci: tuple[int, int, int] | None, events: Sequence[XidEvent]) -> list[GpuFinding]:
    findings = []
    for event in events:
        if event.pci is not None and event.pci != gpu_pci:
            continue  # another device's (or an earlier tenant's) event
        where = "" if event.pci is not None else " (line names no PCI device)"
        if event.code in FATAL_XIDS:
            findings.append(GpuFinding(FAIL, f"xid{event.code}", f"Xid {event.code}: {FATAL_XIDS[event.code]}{where}"))
        else:
            findings.append(GpuFinding(WARN, f"xid{event.code}", f"Xid {event.code} in the kernel log{where}"))
    return findings


def _throttle_findings(samples: Sequence[GpuSample]) -> list[GpuFinding]:
    findings = []
    for bit, name in FAIL_BITS.items():
        hits = sum(1 for s in samples if s.throttle_reasons is not None and s.throttle_reasons & bit)
        if hits:
            findings.append(GpuFinding(FAIL, f"throttle_{bit:#x}",
                                       f"{name} ({bit:#x}) active in {hits}/{len(samples)} samples"))
    return findings


def _thermal_findings(temp: float | None, clock: float | None, max_clock: float | None) -> list[GpuFinding]:
    if temp is None or temp < HOT_C:
        return []
    if clock is None or not max_clock:
        return [GpuFinding(WARN, "hot", f"{temp:.0f} °C (≥ {HOT_C:.0f}) and SM clocks unknown")]
    ratio = clock / max_clock
    if ratio < SLOW_CLOCK_RATIO:
        return [GpuFinding(FAIL, "hot_throttled",
                           f"{temp:.0f} °C with SM clock {clock:.0f}/{max_clock:.0f} MHz ({ratio:.0%} < 70%)")]
    return [GpuFinding(WARN, "hot", f"{temp:.0f} °C (≥ {HOT_C:.0f}) with normal clocks ({ratio:.0%} of max)")]


def assess_gpu(index: int, pci_bus_id: str | None, samples: Sequence[GpuSample],
               events: Sequence[XidEvent], kernel_readable: bool) -> GpuVerdict:
    """One GPU's verdict: Xid for its bus id, throttle bits in any sample, the clock-at-temperature rule."""
    findings = _xid_findings(pci_key(pci_bus_id), events)
    if not kernel_readable:
        findings.append(GpuFinding(WARN, "kernel_log", "kernel log unreadable or empty: Xid check not authoritative"))
    if not samples:
        findings.append(GpuFinding(WARN, "no_samples", "no usable nvidia-smi samples"))
    findings += _throttle_findings(samples)
    temp = _median(s.temperature_c for s in samples)
    clock = _median(s.sm_clock_mhz for s in samples)
    max_clock = _median(s.max_sm_clock_mhz for s in samples)
    findings += _thermal_findings(temp, clock, max_clock)
    throttle = 0
    for s in samples:
        throttle |= s.throttle_reasons or 0
    return GpuVerdict(
        index=index, pci_bus_id=pci_bus_id, verdict=_worst(f.level for f in findings),
        findings=tuple(sorted(findings, key=lambda f: -_RANK[f.level])), samples=len(samples),
        util_pct=_median(s.util_pct for s in samples), sm_clock_mhz=clock, max_sm_clock_mhz=max_clock,
        temperature_c=temp, power_w=_median(s.power_w for s in samples), throttle_seen=throttle)


def assess_health(samples: Sequence[GpuSample], kernel: KernelLog,
                  inventory: Sequence[GpuInfo] = ()) -> HealthReport:
    """Per-GPU verdicts and the overall one (the worst). Every GPU of the inventory gets a verdict."""
    by_gpu: dict[int, list[GpuSample]] = {}
    bus_ids: dict[int, str | None] = {g.index: g.pci_bus_id for g in inventory}
    for sample in samples:
        by_gpu.setdefault(sample.index, []).append(sample)
        bus_ids.setdefault(sample.index, sample.pci_bus_id)
    if not bus_ids:
        return no_gpu("nvidia-smi lists no GPU")
    events = parse_xid_lines(kernel.xid_text) if kernel.readable else []
    verdicts = tuple(assess_gpu(i, bus_ids[i], by_gpu.get(i, []), events, kernel.readable) for i in sorted(bus_ids))
    known = {pci_key(b) for b in bus_ids.values()}
    foreign = sum(1 for e in events if e.pci is not None and e.pci not in known)
    notes = (f"ignored {foreign} Xid line(s) of other PCI devices",) if foreign else ()
    return HealthReport(overall=_worst(v.verdict for v in verdicts), gpus=verdicts, notes=notes)


def no_gpu(reason: str = "nvidia-smi not found") -> HealthReport:
    """The no-GPU state: nothing to judge. Callers decide whether a GPU was required."""
    return HealthReport(overall=NO_GPU, notes=(reason,))


def nvidia_smi_failed(rc: int, output: str) -> HealthReport:
    """nvidia-smi exists but cannot list GPUs: 'No devices were found' is no GPU; anything else is a sick box."""
    first = next((line.strip() for line in output.splitlines() if line.strip()), f"exit {rc}")
    if rc == 6 or "no devices were found" in output.lower():
        return no_gpu(f"nvidia-smi found no device: {first}")
    return HealthReport(overall=FAIL, notes=(f"nvidia-smi failed (exit {rc}): {first[:200]}",))


# ---- from the environment survey's JSON -----------------------------------------------------------

def _result(value: Any) -> tuple[int, str] | None:
    if isinstance(value, Mapping) and isinstance(value.get("rc"), int) and isinstance(value.get("out"), str):
        return value["rc"], value["out"]
    return None


def survey_samples(facts: Mapping[str, Any]) -> tuple[list[GpuSample], list[str]]:
    """Every parseable sample the survey took, and a note per sample that failed or did not parse."""
    block = facts.get("gpu_samples")
    samples: list[GpuSample] = []
    problems: list[str] = []
    raw = block.get("samples") if isinstance(block, Mapping) else None
    for number, item in enumerate(raw if isinstance(raw, list) else [], 1):
        result = _result(item)
        if result is None or result[0] != 0:
            problems.append(f"sample {number} failed" + (f" (exit {result[0]})" if result else ""))
            continue
        try:
            samples += parse_gpu_samples(result[1])
        except GpuParseError as exc:
            problems.append(f"sample {number}: {exc}")
    return samples, problems


def survey_kernel_log(facts: Mapping[str, Any]) -> KernelLog:
    block = facts.get("kernel_log")
    if not isinstance(block, Mapping):
        return KernelLog(readable=False, source="none")
    readable = block.get("rc") == 0 and isinstance(block.get("lines"), int) and block["lines"] > 0
    xid = block.get("xid")
    return KernelLog(readable=readable, xid_text=xid if isinstance(xid, str) else "",
                     source=str(block.get("source", "dmesg")))


def health_from_facts(facts: Mapping[str, Any]) -> HealthReport:
    """The §5 verdict from the environment survey's JSON (audit row 13)."""
    if not facts.get("nvidia_smi"):
        return no_gpu()
    inventory_result = _result(facts.get("gpus"))
    if inventory_result is None:
        return HealthReport(overall=WARN, notes=("the probe did not query the GPUs",))
    if inventory_result[0] != 0:
        return nvidia_smi_failed(*inventory_result)
    try:
        inventory = parse_gpu_inventory(inventory_result[1])
    except GpuParseError as exc:
        return HealthReport(overall=WARN, notes=(str(exc),))
    samples, problems = survey_samples(facts)
    report = assess_health(samples, survey_kernel_log(facts), inventory)
    if problems and report.overall != NO_GPU:
        overall = report.overall if report.overall == FAIL else WARN
        return HealthReport(overall=overall, gpus=report.gpus, notes=report.notes + tuple(problems))
    return report
