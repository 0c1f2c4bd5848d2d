"""Reading the environment survey's facts (docs/remote-ops.md §4): the raw command results remote/env_survey.sh
printed, and the `df` and `findmnt` output inside them. Parsing only; the rows judge what comes out."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DfRow:
    """One `df` row of the environment survey: its target and the total, used and available counts, None where df
    printed `-`."""

    target: str
    total: int | None  # None where df printed "-" (inodes not reported)
    used: int | None
    avail: int | None

    def used_pct(self) -> float | None:
        """What df's Use% is before rounding up: used / (used + avail), so root-reserved blocks count as full."""
        if self.used is None or self.avail is None or self.used + self.avail <= 0:
            return None
        return 100.0 * self.used / (self.used + self.avail)


def survey_result(value: Any) -> tuple[int, str] | None:
    if isinstance(value, Mapping) and isinstance(value.get("rc"), int) and isinstance(value.get("out"), str):
        return value["rc"], value["out"]
    return None


def first_line(text: str, default: str = "") -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), default)[:200]


def _int_or_none(token: str) -> int | None:
    return int(token) if token.isdigit() else None


def parse_df(text: str) -> DfRow:
    """The data line of `df --output=target,<3 numbers>,pcent PATH`; the target may contain spaces."""
    lines = [line for line in text.splitlines()[1:] if line.strip()]
    if not lines:
        raise ValueError(f"df printed no data line: {first_line(text, 'nothing')!r}")
    parts = lines[-1].rsplit(None, 4)
    if len(parts) != 5:
        raise ValueError(f"df line has {len(parts)} fields: {lines[-1]!r}")
    target, total, used, avail, _pct = parts
    return DfRow(target=target.strip(), total=_int_or_none(total), used=_int_or_none(used),
                 avail=_int_or_none(avail))


_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_findmnt(text: str) -> dict[str, str] | None:
    """The top mount (last line) of `findmnt -n -P -o TARGET,FSTYPE,SOURCE -T PATH`, \\xHH decoded."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    pairs = {key: _unescape(value) for key, value in _PAIR.findall(lines[-1])}
    return pairs or None


def _unescape(value: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)


def mount_of(value: Any) -> dict[str, str] | None:
    result = survey_result(value)
    return parse_findmnt(result[1]) if result and result[0] == 0 else None


def disk_block(facts: Mapping[str, Any], role: str) -> Mapping[str, Any]:
    disks = facts.get("disks")
    block = disks.get(role) if isinstance(disks, Mapping) else None
    return block if isinstance(block, Mapping) else {}


def df_of(facts: Mapping[str, Any], role: str, kind: str) -> tuple[DfRow | None, str]:
    """(row, "") or (None, why): `kind` is "bytes" or "inodes"."""
    result = survey_result(disk_block(facts, role).get(kind))
    if result is None:
        return None, "not in the probe output"
    rc, out = result
    if rc == 124:
        return None, "df timed out (hung mount?)"
    if rc != 0:
        return None, f"df failed: {first_line(out, f'exit {rc}')}"
    try:
        return parse_df(out), ""
    except ValueError as exc:
        return None, str(exc)


def args_block(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    block = facts.get("args")
    return block if isinstance(block, Mapping) else {}
