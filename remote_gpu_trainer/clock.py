"""One notion of 'now' so tests and snapshots can pin the clock and reports can honour SOURCE_DATE_EPOCH."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def report_now() -> datetime:
    """`generated_at` for reports: SOURCE_DATE_EPOCH makes two runs over the same state byte-identical."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.strip().isdigit():
        return datetime.fromtimestamp(int(epoch), UTC)
    return utc_now()


def iso_z(moment: datetime) -> str:
    """ISO-8601 UTC with a `Z`, seconds precision: the report's timestamp form."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_offset(moment: datetime) -> str:
    """ISO-8601 UTC with `+00:00`: the manifest and marker timestamp form (docs/gate.md)."""
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def parse_iso(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {text!r}")
    return value.astimezone(UTC)
