"""rgt.toml `runs.<id>.recover`: the limits within which rgt may recover a preempted run on its own
(docs/remote-ops.md §10.1).

```toml
[runs.r1]
recover = { max_price_per_hour = 0.60, max_spend = 25.0, max_restarts = 3, until = 2026-12-10T08:00:00Z,
            gpus = ["RTX 4090", "RTX A5000"] }
```

The table does nothing by itself: a person approves it once (`rgt recover RUN --approve` at a terminal, the TUI,
or the approval inbox an agent files into), and the approval is bound to these limits and to the run's launch
configuration. Spending is the user's decision: every figure here is a ceiling recovery never passes, and a new box
is rented only at a price at or below `max_price_per_hour`. `gpus` lists the GPU classes a box rented by recovery
may have; empty means the class the run's instance rents (`launch.gpu`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remote_gpu_trainer.toml_table import Table

RECOVER_KEYS = {"max_price_per_hour", "max_spend", "max_restarts", "until", "gpus"}


@dataclass(frozen=True)
class RecoverLimits:
    """What recovery may spend and how often, for one run; a person's approval names exactly these."""

    max_price_per_hour: float  # a box rented by recovery: its quoted price per hour, at most this
    max_spend: float  # everything recovery's boxes bill, summed over the run, at most this
    max_restarts: int  # recoveries of the run, at most this many
    until: datetime  # after this moment (timezone-aware), nothing is recovered
    gpus: tuple[str, ...] = ()  # the GPU classes a rented box may have; (): the run's instance's own

    def canonical(self) -> str:
        """The limits as one stable text: what an approval is bound to (any change asks again)."""
        return json.dumps({"max_price_per_hour": self.max_price_per_hour, "max_spend": self.max_spend,
                           "max_restarts": self.max_restarts, "until": self.until.isoformat(),
                           "gpus": list(self.gpus)}, sort_keys=True)

    def lines(self, currency: str = "USD") -> tuple[str, ...]:
        """The limits in words, as the approval prompt and the report show them."""
        gpus = ", ".join(self.gpus) if self.gpus else "the run's own GPU class"
        return (f"at most {self.max_restarts} restart(s), until {self.until.isoformat()}",
                f"a new box at most {self.max_price_per_hour:.2f} {currency}/h ({gpus})",
                f"at most {self.max_spend:.2f} {currency} spent by recovery in all")


def read_recover(body: Table) -> RecoverLimits | None:
    """`runs.<id>.recover`, every key required but `gpus`; None when absent or wrong (each problem named)."""
    if not body.has("recover"):
        return None
    table = body.table("recover")
    if table is None:
        return None
    table.expect(RECOVER_KEYS)
    table.done()
    price = table.number("max_price_per_hour", required=True, above=True,
                         message="must be a price per hour > 0, in the provider's currency")
    spend = table.number("max_spend", required=True, above=True, message="must be an amount > 0")
    restarts = table.whole("max_restarts", minimum=1, message="must be a whole number of restarts >= 1")
    if restarts is None and not table.has("max_restarts"):
        table.problem("max_restarts", "is required")
    until = _until(table)
    gpus = table.strings("gpus", nonempty=True) or ()
    if price is None or spend is None or restarts is None or until is None:
        return None
    return RecoverLimits(price, spend, restarts, until, tuple(gpus))


def _until(table: Table) -> datetime | None:
    """A moment with its offset: a TOML date-time (`2026-12-10T08:00:00Z`) or the same as a string. A local time
    without an offset is refused: read on another machine, it would be another moment."""
    raw: Any = table.value("until", required=True)
    if raw is None:
        return None
    value = raw
    if isinstance(raw, str):
        try:
            value = datetime.fromisoformat(raw.strip())
        except ValueError:
            value = None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        table.problem("until", "must be a date and time with its offset, e.g. 2026-12-10T08:00:00Z")
        return None
    return value
