"""The cost meter: money accrued from instance snapshots over time, with each profile's billing rules.

A snapshot is taken whenever rgt observes (or causes) a state; between two snapshots the earlier state's
rate applies, and from the last snapshot until now its rate keeps accruing. What a state bills comes from a
`BillingModel` built from the provider's profile (docs/providers.md §11): compute while up, the storage tiers that
bill while stopped, and things that outlive the instance (network volumes, NFS, static IPs, snapshots) on
their own clock until they are seen deleted.

Three rules keep the figure honest (docs/architecture.md §6):
- silence is not a free box: while the state is `unknown` (no answer, or a word rgt does not map) the last
  known rate keeps running; with no known rate yet, the price the provider gave with that state is assumed
  (`first_rates`); a stretch rgt did not watch is billed at the higher of the rates on either side; all are
  flagged as estimates;
- a billed state without a price adds nothing but sets `unknown_price`: the total is then a lower bound;
- an API price that differs from the quoted one by more than DRIFT_THRESHOLD is reported as drift.

Pure: no I/O, no clock, no Textual. services/meter.py and the session gather sizes, rates, uptimes and
watch times. A snapshot is anything shaped like `Observed` (state/billing.py's Snapshot is the one stored).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from remote_gpu_trainer.profiles import Profile, StorageTier

COMPUTE_STATES = frozenset({"pending", "running", "stopping", "terminating"})
# Every word of providers.base.INSTANCE_STATES but `unknown`: a state outside this set bills as `unknown`.
KNOWN_STATES = COMPUTE_STATES | {"stopped", "terminated"}
DRIFT_THRESHOLD = 0.05  # an API price more than 5 % away from the quoted one is worth a line on screen


# -- value types ------------------------------------------------------------------------------------------


class Observed(Protocol):
    """What the meter reads of one instance snapshot: when, which state, and the prices seen with it.

    A protocol rather than the stored dataclass, so that this pure module does not depend on the state
    package; `fill_gap` copies a snapshot with `dataclasses.replace`, hence the dataclass marker.
    """

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def at(self) -> datetime: ...

    @property
    def state(self) -> str: ...

    @property
    def price_per_hour(self) -> float | None: ...

    @property
    def price_source(self) -> str: ...

    @property
    def storage_per_hour(self) -> float | None: ...


SnapshotT = TypeVar("SnapshotT", bound=Observed)


@dataclass(frozen=True)
class Interval:
    """A stretch of time, e.g. one while rgt was not watching."""

    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return _hours(self.start, self.end)


@dataclass(frozen=True)
class PriceDrift:
    """The API bills a different hourly price than the one the user was quoted; `ratio` = api / quoted."""

    quoted: float
    api: float
    ratio: float

    @property
    def text(self) -> str:
        return f"API price {self.api:.4g}/h differs from the quoted {self.quoted:.4g}/h ({self.ratio - 1:+.1%})"


@dataclass(frozen=True)
class Rates:
    """What one state bills per hour; `unknown` when some part of it bills at a price nobody knows."""

    compute: float = 0.0
    storage: float = 0.0
    unknown: bool = False

    @property
    def total(self) -> float:
        return self.compute + self.storage


@dataclass(frozen=True)
class Breakdown:
    """Where the money went: compute, the instance's own storage, and items billing on their own clock."""

    compute: float = 0.0
    storage: float = 0.0
    residuals: float = 0.0

    @property
    def total(self) -> float:
        return self.compute + self.storage + self.residuals


@dataclass(frozen=True)
class BilledItem:
    """Something that bills on its own clock, whatever the instance does: a network volume, NFS, an IP.

    `per_hour` None means it bills at a price nobody knows (flagged, never silently 0). `start` None means
    since the first snapshot; `end` None means still present: it keeps billing after terminate until a
    provider read says it was deleted.
    """

    name: str
    per_hour: float | None
    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True)
class Held:
    """One storage tier or residual the instance has, as the session knows it (input to `billing_model`).

    `name` is a storage tier name or residual id of the profile. `per_hour` (provider-reported or the
    user's rate) wins over the profile's per-GB price times `size_bytes`. `since`/`until` matter only for
    things that outlive the instance: when they were created, and when a provider read showed them deleted.
    """

    name: str
    size_bytes: int | None = None
    per_hour: float | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class BillingModel:
    """Per-state hourly rates for one instance, plus the items that bill on their own clock.

    Rates of None mean "bills, price unknown". The defaults reproduce the meter before profiles: compute at
    the snapshot's price, storage while stopped at the snapshot's `storage_per_hour`, nothing after terminate.
    """

    currency: str = "USD"
    metered: bool = True  # False where nothing bills at all (the user's own workstation)
    compute_per_hour: float | None = None  # fallback when a snapshot carries no price (a profile's demo price)
    running_storage_per_hour: float | None = 0.0  # instance storage billed on top of compute while up
    stopped_storage_per_hour: float | None = 0.0  # instance storage billed while stopped
    items: tuple[BilledItem, ...] = ()
    quoted_per_hour: float | None = None  # the price the user was shown (offer, rgt.toml, profile): for drift

    def rates(self, snapshot: Observed) -> Rates | None:
        """What the snapshot's state bills per hour; None for `unknown`, whose rate only history can tell.

        The snapshot's own prices win (they come from the provider or the user); the model fills the gaps.
        A state word outside INSTANCE_STATES counts as `unknown`, never as `terminated`.
        """
        if not self.metered:
            return Rates()
        state = snapshot.state if snapshot.state in KNOWN_STATES else "unknown"
        if state in COMPUTE_STATES:
            price = _first_price(snapshot.price_per_hour, self.compute_per_hour)
            storage = self.running_storage_per_hour
            return Rates(price or 0.0, storage or 0.0, unknown=price is None or storage is None)
        if state == "stopped":
            storage = _first_price(snapshot.storage_per_hour, self.stopped_storage_per_hour)
            return Rates(0.0, storage or 0.0, unknown=storage is None)
        if state == "terminated":
            return Rates()
        return None


    def unknown_state_rates(self, snapshot: Observed) -> Rates:
        """What an `unknown` state bills when no earlier state tells: the price the provider listed with it
        (a vast.ai `frozen` box, a Lambda `unhealthy` one: their docs bill the GPU), else an unknown price.
        Never nothing: a word rgt does not map is not a free box."""
        if not self.metered:
            return Rates()
        price = valid_price(snapshot.price_per_hour)
        if price is None:
            return Rates(unknown=True)
        storage = self.running_storage_per_hour
        return Rates(price, storage or 0.0, unknown=storage is None)


def first_rates(model: BillingModel, snapshot: Observed) -> tuple[Rates, bool]:
    """What one observation bills per hour with no history (a box listed once, as `rgt status` sees an
    orphan), and whether that is an estimate: the same rule `accrue` applies to a first snapshot."""
    rates = model.rates(snapshot)
    return (rates, False) if rates is not None else (model.unknown_state_rates(snapshot), True)


@dataclass(frozen=True)
class MeterReading:
    """The meter's figures for one instance; flags say how far to trust them."""

    total: float
    burn_per_hour: float
    estimate: bool  # some of the total was assumed (unknown state, unwatched gap)
    since_finished: float = 0.0
    breakdown: Breakdown = Breakdown()
    unknown_price: bool = False  # something billed at an unknown price: total and burn are lower bounds
    drift: PriceDrift | None = None
    gaps: tuple[Interval, ...] = ()  # stretches billed at an upper-bound rate because nobody saw them
    currency: str = "USD"

    def projected_to_finish(self, eta_s: float | None) -> float | None:
        """What finishing still costs at the current burn rate; None without an ETA."""
        if eta_s is None or not math.isfinite(eta_s) or eta_s < 0:
            return None
        return self.burn_per_hour * eta_s / 3600.0

    def notes(self) -> list[str]:
        """One line per reason to doubt the figure, for the dashboard and the report."""
        lines = []
        if self.unknown_price:
            lines.append("some billing has no known price: the total and burn rate are lower bounds")
        if self.gaps:
            spans = ", ".join(f"{g.start:%Y-%m-%d %H:%M} to {g.end:%Y-%m-%d %H:%M}" for g in self.gaps)
            lines.append(f"rgt was not watching ({spans}): billed at the higher rate, an estimate")
        elif self.estimate:
            lines.append("state unknown: the last known rate (or the price listed with it) is assumed, an estimate")
        if self.drift is not None:
            lines.append(self.drift.text)
        return lines


LEGACY = BillingModel()


# -- building a model from a profile ----------------------------------------------------------------------


def billing_model(profile: Profile, held: Sequence[Held] = (), quoted_per_hour: float | None = None) -> BillingModel:
    """The billing rules of `profile` applied to what this instance actually has.

    Storage tiers that die with the instance bill by its state: while stopped when the profile says they
    do (a flat `pricing.storage_per_hour` wins, as for the simulated box), and while running only when the
    profile prices them `applies = "always"`. Tiers that survive destroy and residuals bill on their own
    clock, and only when `held` lists them: rgt cannot know whether the user has a network volume.
    A tier that bills but has neither a rate nor a size gives an unknown price rather than 0.
    """
    by_name = {h.name: h for h in held}
    known = {t.name for t in profile.storage} | {r.id for r in profile.residuals if r.id}
    stray = sorted(set(by_name) - known)
    if stray:
        raise ValueError(f"profile {profile.id!r} has no storage tier or residual {stray[0]!r}")
    own = [t for t in profile.storage if not t.survives_destroy]
    stopped = profile.pricing.storage_per_hour
    if stopped is None:
        stopped = _sum(_tier_per_hour(profile, t, by_name.get(t.name)) for t in own if t.billed_while_stopped)
    running = _sum(_tier_per_hour(profile, t, by_name.get(t.name)) for t in own if _applies(profile, t) == "always")
    items = tuple(_item(profile, h) for h in held if h.name not in {t.name for t in own} and _bills(profile, h))
    return BillingModel(
        currency=profile.pricing.currency, metered=profile.pricing.source != "none",
        compute_per_hour=profile.pricing.compute_per_hour, running_storage_per_hour=running,
        stopped_storage_per_hour=stopped, items=items, quoted_per_hour=quoted_per_hour,
    )


def _applies(profile: Profile, tier: StorageTier) -> str | None:
    rate = profile.pricing.storage_rate(tier.name)
    return rate.applies if rate else None


def _tier_per_hour(profile: Profile, tier: StorageTier, held: Held | None) -> float | None:
    """Hourly price of one instance tier: the given rate, else profile per-GB price × size, else unknown."""
    if held is not None and valid_price(held.per_hour) is not None:
        return valid_price(held.per_hour)
    rate = profile.pricing.storage_rate(tier.name)
    if rate is None or held is None or held.size_bytes is None:
        return None
    return rate.per_hour(held.size_bytes, profile.pricing.hours_per_month)


def _bills(profile: Profile, held: Held) -> bool:
    """Whether a surviving tier or residual bills at all: a tier that is free while stopped and has no price
    (Featurize's /cloud) does not; residuals do by definition."""
    tier = profile.tier(held.name)
    if tier is None or tier.billed_while_stopped:
        return True
    return held.per_hour is not None or profile.pricing.storage_rate(held.name) is not None


def _item(profile: Profile, held: Held) -> BilledItem:
    per_hour = valid_price(held.per_hour)
    rate = profile.pricing.storage_rate(held.name)
    if per_hour is None and rate is not None and held.size_bytes is not None:
        per_hour = rate.per_hour(held.size_bytes, profile.pricing.hours_per_month)
    return BilledItem(held.name, per_hour, held.since, held.until)


# -- drift --------------------------------------------------------------------------------------------------


def price_drift(quoted: float | None, api: float | None, threshold: float = DRIFT_THRESHOLD) -> PriceDrift | None:
    """Drift when the API price is more than `threshold` (a fraction) away from the quoted one.

    Nothing to compare without a positive quote or a valid API price; exactly `threshold` is not drift (the
    tolerance absorbs float error such as 1.05 / 1.00 = 1.0500000000000000444).
    """
    quoted, api = valid_price(quoted), valid_price(api)
    if quoted is None or api is None or quoted <= 0:
        return None
    ratio = api / quoted
    return PriceDrift(quoted, api, ratio) if abs(ratio - 1.0) > threshold + 1e-9 else None


def _latest_api_price(snapshots: Sequence[Observed]) -> float | None:
    prices = [s.price_per_hour for s in snapshots
              if s.price_source == "api" and valid_price(s.price_per_hour) is not None]
    return prices[-1] if prices else None


# -- gaps: stretches rgt did not watch ----------------------------------------------------------------------


@dataclass(frozen=True)
class GapFill(Generic[SnapshotT]):
    """How a stretch nobody watched is explained: snapshots to add, and what stays an estimate."""

    snapshots: tuple[SnapshotT, ...]
    estimate: Interval | None


def silent_intervals(watched: Iterable[datetime], max_silence_s: float) -> list[Interval]:
    """Where rgt was not watching: consecutive watch times (meter samples) further apart than max_silence_s."""
    times = sorted(watched)
    return [Interval(a, b) for a, b in zip(times, times[1:], strict=False) if _hours(a, b) * 3600 > max_silence_s]


def reported_since(state: str, at: datetime, *, uptime_s: float | None = None, started_at: datetime | None = None,
                   ended_at: datetime | None = None) -> datetime | None:
    """When the provider says `state` began: from uptime or a start stamp while up, from a stop stamp when
    stopped or terminated; None when the API does not tell (then the gap stays an estimate)."""
    if state in COMPUTE_STATES:
        if started_at is not None:
            return started_at
        if uptime_s is not None and math.isfinite(uptime_s) and uptime_s >= 0:
            return at - timedelta(seconds=uptime_s)
        return None
    if state in ("stopped", "terminated"):
        return ended_at
    return None


def fill_gap(last: Observed, seen: SnapshotT, since: datetime | None = None) -> GapFill[SnapshotT]:
    """Explain the stretch between the last recorded snapshot and a fresh observation after rgt was closed.

    With `since` (when the provider says `seen.state` began) the change is placed exactly: a snapshot at
    `since` is returned for the timeline. A box that is in the same state but restarted during the gap
    (uptime shorter than the gap) went down at a time nobody knows, so the part before its restart stays an
    estimate. Without `since`, or when the provider's state is `unknown`, the whole gap is an estimate.
    """
    start, end = last.at, seen.at
    if end <= start or last.state == seen.state == "terminated":  # terminate is final: nothing to explain
        return GapFill((), None)
    if since is None or seen.state not in KNOWN_STATES:
        return GapFill((), Interval(start, end))
    at = min(max(since, start), end)
    added = (replace(seen, at=at),) if at < end else ()
    if at > start and last.state == seen.state:
        return GapFill(added, Interval(start, at))
    return GapFill(added, None)


# -- accrual ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Segment:
    """One stretch of time billed at one set of rates: a snapshot to the next, cut at gap edges; `estimate` marks
    rates assumed rather than known."""

    start: datetime
    end: datetime
    rates: Rates
    estimate: bool
    gap: bool = False  # billed at a gap's upper bound


def accrue(snapshots: Sequence[Observed], now: datetime, finished_at: datetime | None = None, *,
           model: BillingModel = LEGACY, gaps: Sequence[Interval] = ()) -> MeterReading:
    """Total cost so far, burn rate, cost since the job finished, and how far to trust them.

    `gaps` are stretches rgt did not watch and could not explain (`fill_gap(...).estimate`, persisted by the
    session): they bill at the higher of the rates in force during and right after them, flagged estimate.
    """
    ordered = sorted(snapshots, key=lambda s: s.at)
    segments = _with_gaps(_segments(model, ordered, now), gaps)
    compute = storage = since_finished = 0.0
    for seg in segments:
        compute += seg.rates.compute * _hours(seg.start, seg.end)
        storage += seg.rates.storage * _hours(seg.start, seg.end)
        since_finished += seg.rates.total * _hours_after(seg.start, seg.end, finished_at)
    first = ordered[0].at if ordered else None
    residuals, burn_items, items_unknown = 0.0, 0.0, False
    for item in model.items:
        start, end = item.start or first or now, min(item.end or now, now)
        residuals += (item.per_hour or 0.0) * _hours(start, end)
        since_finished += (item.per_hour or 0.0) * _hours_after(start, end, finished_at)
        present = start <= now and (item.end is None or item.end > now)
        burn_items += (item.per_hour or 0.0) if present else 0.0
        items_unknown |= item.per_hour is None and (end > start or present)
    burn = segments[-1].rates.total if segments else 0.0
    used_gaps = tuple(Interval(s.start, s.end) for s in _merge_gap_spans(segments))
    return MeterReading(
        total=compute + storage + residuals, burn_per_hour=burn + burn_items,
        estimate=any(s.estimate for s in segments), since_finished=since_finished,
        breakdown=Breakdown(compute, storage, residuals),
        unknown_price=items_unknown or any(s.rates.unknown for s in segments),
        drift=price_drift(model.quoted_per_hour, _latest_api_price(ordered)), gaps=used_gaps,
        currency=model.currency,
    )


@dataclass(frozen=True)
class WindowCost:
    """What an instance billed during one stretch of time, e.g. a run's launch to its finish."""

    total: float
    estimate: bool  # part of the stretch was billed at an assumed rate (unknown state, unwatched gap)
    unknown_price: bool  # something billed at a price nobody knows: the total is a lower bound


def cost_between(snapshots: Sequence[Observed], start: datetime, end: datetime, *, model: BillingModel = LEGACY,
                 gaps: Sequence[Interval] = ()) -> WindowCost:
    """The meter's segments (and the items billing on their own clock) clipped to [start, end): the same
    arithmetic as `accrue`, built from the snapshots up to `end` only, so nothing seen later reaches back."""
    ordered = sorted((s for s in snapshots if s.at <= end), key=lambda s: s.at)
    total, estimate, unknown = 0.0, False, False
    for seg in _with_gaps(_segments(model, ordered, end), gaps):
        hours = _hours(max(seg.start, start), min(seg.end, end))
        if hours > 0:
            total += seg.rates.total * hours
            estimate, unknown = estimate or seg.estimate, unknown or seg.rates.unknown
    first = ordered[0].at if ordered else end
    for item in model.items:
        hours = _hours(max(item.start or first, start), min(item.end or end, end))
        if hours > 0:
            total += (item.per_hour or 0.0) * hours
            unknown = unknown or item.per_hour is None
    return WindowCost(total, estimate, unknown)


def shared_pieces(windows: Mapping[str, Interval]) -> list[tuple[Interval, tuple[str, ...]]]:
    """The windows of runs on one instance cut at every start and end: each piece with the runs (sorted) whose
    window covers it. A piece covered by k runs is split equally among them, so the shares add up to what the
    instance billed while any of them ran, and time no run covers is nobody's."""
    cuts = sorted({edge for w in windows.values() for edge in (w.start, w.end)})
    pieces = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        covering = tuple(sorted(run for run, w in windows.items() if w.start <= a and b <= w.end))
        if covering and b > a:
            pieces.append((Interval(a, b), covering))
    return pieces


def _segments(model: BillingModel, ordered: Sequence[Observed], now: datetime) -> list[_Segment]:
    """One segment per snapshot, to the next one (or now); `unknown` carries the last known rates."""
    segments: list[_Segment] = []
    last_known: Rates | None = None
    for index, snapshot in enumerate(ordered):
        end = ordered[index + 1].at if index + 1 < len(ordered) else now
        rates = model.rates(snapshot)
        if rates is None:
            assumed = last_known or model.unknown_state_rates(snapshot)
            segments.append(_Segment(snapshot.at, max(end, snapshot.at), assumed, True))
        else:
            last_known = rates
            segments.append(_Segment(snapshot.at, max(end, snapshot.at), rates, False))
    return segments


def _with_gaps(segments: list[_Segment], gaps: Sequence[Interval]) -> list[_Segment]:
    """Cut segments at gap edges and bill each unwatched piece at its gap's upper-bound rate."""
    if not segments or not gaps:
        return segments
    bounds = [(gap, _upper_bound(segments, gap)) for gap in gaps if gap.end > gap.start]
    cuts = sorted({edge for gap, _ in bounds for edge in (gap.start, gap.end)})
    result = []
    for seg in segments:
        edges = [seg.start, *(c for c in cuts if seg.start < c < seg.end), seg.end]
        for a, b in zip(edges, edges[1:], strict=False):
            bound = next((r for gap, r in bounds if gap.start <= a and b <= gap.end and a < b), None)
            piece = _Segment(a, b, seg.rates, seg.estimate) if bound is None else _Segment(a, b, bound, True, gap=True)
            result.append(piece)
    return result


def _upper_bound(segments: Sequence[_Segment], gap: Interval) -> Rates:
    """The highest rate in force during the gap or right after it: the state may have changed at its end."""
    during = [s.rates for s in segments if s.start < gap.end and s.end > gap.start]
    after = [s.rates for s in segments if s.start <= gap.end][-1:]
    candidates = during + after or [Rates(unknown=True)]
    top = max(candidates, key=lambda r: r.total)
    return replace(top, unknown=any(r.unknown for r in candidates))


def _merge_gap_spans(segments: Sequence[_Segment]) -> list[Interval]:
    """The gap-billed stretches, merged where adjacent (segments cut by snapshots inside one gap)."""
    spans: list[Interval] = []
    for seg in segments:
        if not seg.gap or seg.start >= seg.end:
            continue
        if spans and spans[-1].end == seg.start:
            spans[-1] = Interval(spans[-1].start, seg.end)
        else:
            spans.append(Interval(seg.start, seg.end))
    return spans


# -- small helpers ------------------------------------------------------------------------------------------


def valid_price(price: float | None) -> float | None:
    """A usable price, or None: a negative, NaN or infinite figure from an API is as good as none."""
    if price is None or isinstance(price, bool) or not math.isfinite(price) or price < 0:
        return None
    return float(price)


def _first_price(*prices: float | None) -> float | None:
    return next((p for p in (valid_price(x) for x in prices) if p is not None), None)


def _sum(parts: Iterable[float | None]) -> float | None:
    """Sum of hourly prices; None (unknown) if any part is unknown."""
    total = 0.0
    for part in parts:
        if part is None:
            return None
        total += part
    return total


def _hours(start: datetime, end: datetime) -> float:
    return max((end - start).total_seconds(), 0.0) / 3600.0


def _hours_after(start: datetime, end: datetime, cutoff: datetime | None) -> float:
    """Hours of [start, end) that fall after `cutoff` (the job finishing)."""
    if cutoff is None or end <= cutoff:
        return 0.0
    return _hours(max(start, cutoff), end)
