"""The per-number disclosure gate D1–D8 and the inline form of a number (docs/deliver.md §5).

Every evidence row gets the items of the gate that have something to say, each computed from its own source:
D1 whether the value re-derives, D2 the split, D3 seeds and variance, D4 the direction, D5 the findings touching
it, D6 drift in the documents, D7 the QA of the figures and tables that show it, D8 the code it was built
from. Nothing here blocks: a row with every item firing is still written, carrying all of them.

The inline form is the number as a caption, a macro companion or the report prints it, e.g.
`31.42 dB ↑ (test, n=5 items, 3 seeds, mean ± std 0.08)` or
`30.81 dB ↑ (test, n=5, single seed — no variance band) [F-000041]`.
The services gather the facts (services/deliver/claims.py); this module only words them.
"""

from __future__ import annotations

from dataclasses import dataclass

from remote_gpu_trainer.audits.catalogue.generated_row import STD_OVER_SEEDS, GeneratedRow
from remote_gpu_trainer.deliver.evidence import RowSpec

DEFAULT_PRECISION = 2  # decimals shown when the row declares no `precision`
ARROWS = {"higher_is_better": "↑", "lower_is_better": "↓", "monitor": ""}
UNKNOWN_ARROW = "?"
STAT_LABELS = {"mean_over_seeds": "mean ± std", "iqm_over_seeds": "IQM, std"}
SINGLE_SEED = "single seed — no variance band"
VALIDATION_SPLITS = ("val", "validation")
NOT_SHOWN_INLINE = ("D3", "D5")  # the inline form prints D3 among the statistics and D5 as finding ids


@dataclass(frozen=True)
class FindingNote:
    """A VERIFY finding touching the row (open or acknowledged) and the text it discloses."""

    id: str
    text: str


@dataclass(frozen=True)
class OutputQA:
    """A figure or table the row names, as its figure.json / table.json `qa` says (`built` False: no file)."""

    kind: str  # figure | table
    id: str
    built: bool
    passed: bool = True
    flagged: tuple[tuple[str, str], ...] = ()  # (check, result) of every check that is not `pass`
    notes: str = ""
    disclosure: str = ""  # the folder's own disclosure (its JSON's `disclosure`: single seed, a disclosed axis...)
    deterministic: bool = True  # qa.deterministic: two builds gave the same bytes


@dataclass(frozen=True)
class RowFacts:
    """What the gate reads about one row; services/deliver/claims.py gathers it."""

    spec: RowSpec
    row: GeneratedRow
    required_seeds: int = 3  # V04's minimum in the row's regime
    legacy: tuple[str, ...] = ()  # cells read from an upstream best_metrics.json
    no_results: tuple[str, ...] = ()  # cells whose test holds no per-item results file
    findings: tuple[FindingNote, ...] = ()
    drifts: tuple[str, ...] = ()  # doc:line of every drift naming the row
    unread: tuple[str, ...] = ()  # `<doc> (<why>)` of every configured document that could not be read
    outputs: tuple[OutputQA, ...] = ()
    dirty: tuple[str, ...] = ()  # cells whose run.json says the code tree was dirty
    unverified: str = ""  # the sources no pull brought or whose run is not pull-verified, in words


ITEMS = ("D1", "D2", "D3", "D4", "D5", "D6", "D7", "D8")


@dataclass(frozen=True)
class Disclosure:
    """What the D1–D8 gate says about one number: the items that have something to disclose, with their texts, and
    the findings behind them."""

    items: tuple[tuple[str, str], ...]  # (D1..D8, text) of the items that disclose, in that order
    finding_ids: tuple[str, ...]

    @property
    def text(self) -> str | None:
        """The joined texts; None when there is nothing to disclose."""
        return "; ".join(text for _, text in self.items) or None

    def by_item(self) -> dict[str, str | None]:
        """D1…D8 each with its text, or None when it has nothing to disclose: EVIDENCE.json's per-row
        `disclosures` and what the report lists for every number."""
        said: dict[str, list[str]] = {}
        for code, text in self.items:
            said.setdefault(code, []).append(text)
        return {code: "; ".join(said[code]) if code in said else None for code in ITEMS}


def format_value(value: float, precision: int | None, display_scale: float = 1.0) -> str:
    """`f"{v*display_scale:.{precision}f}"`: the one formatter of every shown number (never round() then str)."""
    return f"{value * display_scale:.{DEFAULT_PRECISION if precision is None else precision}f}"


def disclose(facts: RowFacts) -> Disclosure:
    items = [(code, text) for code, text in (
        ("D1", _d1(facts)), ("D2", _d2(facts.row)), ("D3", _d3(facts)), ("D4", _d4(facts.row)))
        if text]
    items += [("D5", f"{note.text} [{note.id}]") for note in facts.findings]
    # a drift V31 already raised as a finding is disclosed once, by that finding (with its id)
    drifts = [where for where in facts.drifts if not any(where in note.text for note in facts.findings)]
    if drifts:
        items.append(("D6", "cross-document drift: " + ", ".join(drifts)))
    # a document that could not be read checked nothing: said once, by V31's finding when the audit raised it
    unread = [doc for doc in facts.unread if not any(f"not reconciled: {doc}" in note.text for note in facts.findings)]
    if unread:
        items.append(("D6", "document not reconciled: " + ", ".join(unread)))
    items += [("D7", text) for text in (_d7(output) for output in facts.outputs) if text]
    if facts.dirty:
        items.append(("D8", f"built from uncommitted code ({', '.join(facts.dirty)})"))
    if facts.unverified:
        items.append(("D8", facts.unverified))
    return Disclosure(tuple(items), tuple(dict.fromkeys(note.id for note in facts.findings)))


def _d1(facts: RowFacts) -> str:
    spec, parts = facts.spec, []
    if facts.row.missing:
        parts.append(f"not regenerable: no {spec.metric} in test/{spec.test_id}/metrics.json of "
                     f"{', '.join(facts.row.missing)}")
    if facts.legacy:
        parts.append("legacy cell: no run record or per-item results; not re-derivable "
                     f"({', '.join(facts.legacy)})")
    if facts.no_results:
        parts.append(f"not regenerable from per-item results: no results file in {', '.join(facts.no_results)}")
    return "; ".join(parts)


def _d2(row: GeneratedRow) -> str:
    if row.seeds == 0 or row.split == "test":
        return ""
    if row.split is None:
        return "split unknown: the metrics.json files state no split, or different ones"
    return "validation-split number" + ("" if row.split in VALIDATION_SPLITS else f" (split {row.split})")


def _d3(facts: RowFacts) -> str:
    """Said of a value only: a row without one (D1 says why) has no variance band to miss."""
    seeds = facts.row.seeds
    if facts.row.value is None:
        return ""
    if seeds == 1:
        return SINGLE_SEED
    if 1 < seeds < facts.required_seeds:
        return f"{seeds} seeds, no CI"
    return ""


def _d4(row: GeneratedRow) -> str:
    return "" if row.direction is not None else "direction unknown: declare the metric in rgt.toml [metrics]"


def _d7(output: OutputQA) -> str:
    if not output.built:
        return f"{output.kind} {output.id}: not built (rgt build {output.kind} {output.id})"
    if output.passed and not output.flagged and output.deterministic:
        return ""
    flagged = [f"{check} {result}" for check, result in output.flagged]
    if not output.deterministic:
        flagged.append("not deterministic (two builds gave different bytes)")
    checks = ", ".join(flagged) or "qa failed"
    return f"{output.kind} {output.id}: {checks}" + (f" — {output.notes}" if output.notes else "")


def inline(facts: RowFacts, disclosure: Disclosure) -> str:
    """The number with its disclosure, as captions, the report and the macros' companions print it."""
    return f"{shown_value(facts)} {inline_rest(facts, disclosure)}"


def shown_value(facts: RowFacts) -> str:
    """The number at its precision and display scale; `n/a` for a row without a value."""
    row, spec = facts.row, facts.spec
    return format_value(row.value, spec.precision, spec.display_scale) if row.value is not None else "n/a"


def inline_rest(facts: RowFacts, disclosure: Disclosure, *, finding_texts: bool = False) -> str:
    """Everything the inline form prints after the number: unit, arrow, statistics, the other disclosures and
    the finding ids. `finding_texts` prints each finding's disclosure text with its id instead (the `…Disc`
    macro does: a reader of the paper cannot look an id up)."""
    row = facts.row
    arrow = ARROWS.get(row.direction or "", UNKNOWN_ARROW) if row.direction is not None else UNKNOWN_ARROW
    head = " ".join(part for part in (row.unit or "", arrow) if part)
    hidden = ("D3",) if finding_texts else NOT_SHOWN_INLINE
    others = [text for code, text in disclosure.items if code not in hidden]
    seeds_said = next((text for code, text in disclosure.items if code == "D3"), "")
    body = ", ".join(_statistics(facts, seeds_said)) + ("; " + "; ".join(others) if others else "")
    ids = f" [{', '.join(disclosure.finding_ids)}]" if disclosure.finding_ids and not finding_texts else ""
    return f"{head} ({body}){ids}" if head else f"({body}){ids}"


def _statistics(facts: RowFacts, seeds_said: str) -> list[str]:
    """split, n, seeds and variance: `n=5 items` when a seed count follows (two counts side by side), `n=5`
    when the single-seed disclosure takes the seed count's place. `seeds_said` is the disclosure's D3 (read from
    the Disclosure, so a stored one prints as it was built, whatever the seed regime)."""
    row, spec = facts.row, facts.spec
    n = "?" if row.n is None else str(row.n)
    parts = [row.split or "split ?"]
    if row.seeds <= 1:
        return parts + [f"n={n}"] + ([SINGLE_SEED] if seeds_said == SINGLE_SEED else [])
    parts += [f"n={n} items", seeds_said or f"{row.seeds} seeds"]
    variance = row.variance or {}
    if variance.get("type") == STD_OVER_SEEDS and isinstance(variance.get("value"), float):
        label = STAT_LABELS.get(spec.aggregate, "std")
        parts.append(f"{label} {format_value(variance['value'], spec.precision, spec.display_scale)}")
    return parts
