"""The cost meter's gathering: what a provider says an instance holds, turned into the inputs of the billing
arithmetic in audits/meter.py (which holds the rules and is pure).

record_snapshot and sample_meter keep the meter's record of what the providers said in the state database
(and, for this session, each box's last answer: last_status), and meter_reading asks audits/meter.py for the
figures; this module reads the provider's answer so the audit never sees a provider type.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.meter import (
    BillingModel,
    Held,
    Interval,
    MeterReading,
    WindowCost,
    accrue,
    billing_model,
    cost_between,
    fill_gap,
    reported_since,
    valid_price,
)
from remote_gpu_trainer.clock import parse_iso
from remote_gpu_trainer.profiles import Profile
from remote_gpu_trainer.providers.base import InstanceStatus
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.billing import Snapshot
from remote_gpu_trainer.state.events import EventKind

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

METER_SAMPLE_S = 30.0
UNWATCHED_GAP_S = 300.0  # longer than this without a sample or snapshot: rgt was not watching


def held_storage(profile: Profile, status: object | None) -> list[Held]:
    """What the provider says this instance holds (its `detail["storage"]`: name, size_gb,
    price_per_gb_month), as `Held` entries for the tiers and residuals the profile knows; others are
    left out rather than guessed at."""
    detail = getattr(status, "detail", None)
    items = detail.get("storage") if isinstance(detail, dict) else None
    known = {t.name for t in profile.storage} | {r.id for r in profile.residuals if r.id}
    held: list[Held] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or item.get("name") not in known:
            continue
        size_gb, price = valid_price(_float(item.get("size_gb"))), valid_price(_float(item.get("price_per_gb_month")))
        per_hour = valid_price(_float(item.get("price_per_hour")))  # the provider's own hourly figure wins
        if per_hour is None and size_gb is not None and price is not None:
            per_hour = size_gb * price / profile.pricing.hours_per_month
        held.append(Held(str(item["name"]), int(size_gb * 1e9) if size_gb is not None else None, per_hour))
    return held


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def meter_reading(session: Session, name: str, finished_at: datetime | None = None) -> MeterReading:
    """The meter for one instance with its profile's billing rules, what the provider says it holds
    (volumes, disks), the user's quote for drift, and the stretches nobody watched."""
    model, gaps = _billing(session, name)
    return accrue(session.db.snapshots(name), session.clock(), finished_at, model=model, gaps=gaps)


def window_cost(session: Session, name: str, start: datetime, end: datetime) -> WindowCost:
    """What the instance billed between `start` and `end`, by the same rules and records as its meter."""
    model, gaps = _billing(session, name)
    return cost_between(session.db.snapshots(name), start, end, model=model, gaps=gaps)


def _billing(session: Session, name: str) -> tuple[BillingModel, list[Interval]]:
    """The instance's billing model and the stretches nobody watched (recorded METER_GAP events)."""
    quoted = session.instance(name).price_per_hour
    model = billing_model(session.profile(name), held_storage(session.profile(name), last_status(session, name)),
                          quoted)
    gaps = [Interval(parse_iso(str(e.detail["start"])), parse_iso(str(e.detail["end"])))
            for e in session.db.events(kind=EventKind.METER_GAP) if e.instance == name]
    return model, gaps


def last_status(session: Session, name: str) -> InstanceStatus | None:
    """What the provider last said of the box in this session (None before it was asked): every answer passes
    through record_snapshot, so this module keeps the last one for whoever needs the box's latest word."""
    return _last_statuses(session).get(name)


def _last_statuses(session: Session) -> dict[str, InstanceStatus]:
    return session.cache(__name__, dict)


def record_snapshot(session: Session, status: InstanceStatus) -> None:
    """A snapshot when something changed, or after a stretch nobody watched: that stretch is then
    explained from the provider's own clock (uptime, start stamp) or recorded as an estimate. The answer
    becomes the box's last_status either way."""
    _last_statuses(session)[status.name] = status
    db = session.db
    last = db.last_snapshot(status.name)
    if last is None and status.state == "unknown" and valid_price(status.price_per_hour) is None:
        return  # nothing known yet, so nothing to bill or to estimate (with a price, it is billed as an estimate)
    now = session.clock()
    seen = Snapshot(at=now, instance=status.name, provider=status.provider, provider_id=status.provider_id,
                    state=status.state, price_per_hour=status.price_per_hour, price_source=status.price_source,
                    storage_per_hour=status.storage_per_hour)
    if last is None:
        db.add_snapshot(seen)
        return
    watched = max(filter(None, (last.at, db.last_meter_sample_at(status.name))))
    changed = (last.state, last.price_per_hour, last.storage_per_hour) != (
        status.state, status.price_per_hour, status.storage_per_hour)
    if (now - watched).total_seconds() > UNWATCHED_GAP_S:
        _explain_gap(session, last, seen, status)
    elif changed:
        db.add_snapshot(seen)


def _explain_gap(session: Session, last: Snapshot, seen: Snapshot, status: InstanceStatus) -> None:
    since = reported_since(status.state, seen.at, uptime_s=_float(status.detail.get("uptime_s")),
                           started_at=_stamp(status.detail.get("started_at")))
    fill = fill_gap(last, seen, since)
    for snapshot in fill.snapshots:
        session.db.add_snapshot(snapshot)
    session.db.add_snapshot(seen)
    if fill.estimate is not None:
        events.meter_gap(session.db, instance=status.name, start=fill.estimate.start, end=fill.estimate.end)


def sample_meter(session: Session, name: str, state: str, burn: float, total: float, estimate: bool) -> None:
    """One stored sample per instance per METER_SAMPLE_S: the UI ticks every 2 s, the record needs less."""
    last = session.db.last_meter_sample_at(name)
    if last is None or (session.clock() - last).total_seconds() >= METER_SAMPLE_S:
        session.db.add_meter_sample(name, state, burn, total, estimate)


def _stamp(value: object) -> datetime | None:
    """An API time stamp (ISO 8601, or epoch seconds) as an aware datetime; None when absent or unreadable."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, str) and value:
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    return None
