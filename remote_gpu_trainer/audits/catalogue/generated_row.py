"""A generated row of EVIDENCE.json as one record (audits/catalogue/generated.py computes it from the capsules): its
own module so that what only reads rows (the report's claims, deliver/disclosure.py) does not import the
computation and its statistics (issue 29: ~2 ms of each `rgt --report`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.catalogue.numbers import SeedValue

#: the row fields `rgt build evidence` owns, in the order it writes them after the user's fields
GENERATED_ROW_FIELDS = ("value", "direction", "split", "n", "seeds", "variance", "sources")
STD_OVER_SEEDS = "std_over_seeds"  # the variance type as V05 names it
NO_VARIANCE = "none"


@dataclass(frozen=True)
class GeneratedRow:
    """A row's generated fields, plus what the disclosures read and the JSON does not hold: the cells that
    gave no value (`missing`), the unit metrics.json states, and the per-seed values used."""

    value: float | None
    direction: str | None  # higher_is_better | lower_is_better | monitor | None (unknown)
    split: str | None  # None: the files state no split, or different ones
    n: int | None  # None: the files state no n, or different ones
    seeds: int
    variance: Mapping[str, Any] | None
    sources: tuple[Mapping[str, str | None], ...]
    missing: tuple[str, ...] = ()
    unit: str | None = None
    used: tuple[SeedValue, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The generated fields as EVIDENCE.json holds them, in GENERATED_ROW_FIELDS order."""
        return {"value": self.value, "direction": self.direction, "split": self.split, "n": self.n,
                "seeds": self.seeds, "variance": dict(self.variance) if self.variance is not None else None,
                "sources": [dict(source) for source in self.sources]}
