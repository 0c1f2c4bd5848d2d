"""Value types shared by the log pipeline: parsed metric samples and signature hits.

They live apart from the parsers and detectors so that each pure module (metrics, signatures, run rules)
can be read, tested and replaced on its own while speaking the same language to the ingest service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

SEVERITIES = ("info", "warn", "error", "critical")


def severity_rank(severity: str) -> int:
    """Higher is worse; unknown words rank below `info` so they never silence a real alert."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else -1


class Sample(NamedTuple):
    """One number read from a run's log or structured file (docs/log-signatures.md §4.1). A NamedTuple, not a
    dataclass: the parser builds one per value at 100k+ lines/s, and a frozen dataclass costs 4× more."""

    t: float  # when the line was ingested (epoch seconds)
    step: int | None  # global step when known
    epoch: float | None
    key: str  # canonical key: step, epoch, loss, lr, grad_norm, throughput, val/<rest>, or the lowercased raw key
    value: float  # may be nan or inf: S70 needs them
    source: str  # json | hf | tqdm | rich | kv | csv | trainer_state
    approx_step: bool = False  # Lightning bars: step ≈ epoch × total + n
    unit: str = ""  # throughput only: it/s, samples/s, tokens/s, img/s


@dataclass(frozen=True)
class Signature:
    """One catalogue row (assets/signatures.toml, or a user row): a regex over log lines or a named rule."""

    id: str  # S01..S93, or U... for user rows
    source: str  # log | log(dmesg) | log(ssh) | proc | host | metric | gpu
    severity: str  # the row's default; a rule may escalate it
    cause: str
    fix: str
    pattern: str | None = None  # regex rows
    rule: str | None = None  # rule rows: the sentence from the spec
    ignore_case: bool = False
    match: tuple[str, ...] = ()  # realistic lines that must match (regex rows)
    nomatch: tuple[str, ...] = ()  # realistic lines that must not
    requires: tuple[str, ...] = ()  # lower-case words one of which every match contains: a cheap gate before the regex


@dataclass(frozen=True)
class Hit:
    """One detection: which row fired, how badly, and the evidence (the line, or the rule's numbers)."""

    signature: str
    severity: str
    evidence: str
    t: float
    line_no: int | None = None
    detail: str = ""
