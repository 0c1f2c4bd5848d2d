"""The audit catalogue's findings lifecycle (docs/verify.md §3) on a real state database: the no-re-raise table row by
row, check-scoped acknowledgements, the user's moves and the event written for every status change."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.catalogue.model import CheckResult, EvidenceRef, Finding, result, skipped
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.services.audit import findings
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.state.events import EventKind
from support.helpers import FIXED_NOW, FixedClock


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(FIXED_NOW)


@pytest.fixture
def db(tmp_path: Path, clock: FixedClock) -> Iterator[StateDB]:
    handle = StateDB(tmp_path / ".rgt" / "state.db", clock)
    yield handle
    handle.close()


def seeds(subject: str, n: int, severity: str = "info") -> Finding:
    return Finding("V04", subject, severity, f"{n} seed < 3", values={"seeds": n, "required": 3},
                   evidence=(EvidenceRef(f"runs/{subject}/metrics.json", "ab" * 32),),
                   disclosure="single seed — no variance band", integrity_class="qrp_tell")


def audit(*found: Finding, judged: tuple[str, ...] = ()) -> list[CheckResult]:
    return [result("V04", "seed_count", list(found), judged)]


def statuses(db: StateDB) -> dict[str, str]:
    return {r.subject: r.status for r in db.finding_records()}


def test_a_new_finding_is_created_open_and_raised_once(db: StateDB) -> None:
    first = findings.apply_results(db, audit(seeds("claim:C1", 1)))
    again = findings.apply_results(db, audit(seeds("claim:C1", 1)))
    assert [r.status for r in first.raised] == ["open"] and again.raised == ()
    [record] = db.finding_records()
    assert record.id == "F-000001" and record.body["values"] == {"seeds": 1, "required": 3}
    assert record.body["fix"].startswith("Run more seeds"), "the catalogue's fix text rides with the record"


def test_acknowledging_then_re_auditing_unchanged_artifacts_raises_nothing(db: StateDB, clock: FixedClock) -> None:
    findings.apply_results(db, audit(seeds("claim:C1", 1)))
    findings.set_status(db, "F-000001", "acknowledged", note="one seed by budget; stated in Sec 4.3",
                        disclosure="single seed — no variance band")
    clock.now += timedelta(hours=1)
    outcome = findings.apply_results(db, audit(seeds("claim:C1", 1)))
    [record] = db.finding_records()
    assert outcome.raised == ()
    assert record.status == "acknowledged" and record.note == "one seed by budget; stated in Sec 4.3"
    assert record.last_seen == clock.now and record.status_changed_at == FIXED_NOW


def test_a_check_scoped_acknowledgement_covers_a_new_subject_with_the_same_disclosure(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:C1", 1)))
    findings.set_status(db, "F-000001", "acknowledged", note="single-seed budget for the whole project",
                        disclosure="single seed — no variance band", scope="check")
    outcome = findings.apply_results(db, audit(seeds("claim:C1", 1), seeds("claim:C2", 1)))
    assert outcome.raised == ()
    second = next(r for r in db.finding_records() if r.subject == "claim:C2")
    assert (second.status, second.disclosure, second.status_by) == (
        "acknowledged", "single seed — no variance band", "auto")
    [created] = [e for e in db.events(kind=EventKind.FINDING_STATUS) if e.detail["subject"] == "claim:C2"]
    assert created.detail["reason"] == "check_scope" and created.detail["new"] == "acknowledged"


def test_an_acknowledged_finding_whose_severity_rises_is_reopened(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:C1", 2, "info")))
    findings.set_status(db, "F-000001", "acknowledged", note="fine", disclosure="two seeds")
    outcome = findings.apply_results(db, audit(seeds("claim:C1", 2, "warn")))
    [record] = db.finding_records()
    assert [r.id for r in outcome.raised] == ["F-000001"]
    assert (record.status, record.severity, record.reopened_reason) == ("open", "warn", "severity_increased")


def test_a_lower_severity_keeps_the_acknowledgement_and_the_recorded_severity(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:C1", 2, "warn")))
    findings.set_status(db, "F-000001", "waived", note="not a seed-based claim")
    outcome = findings.apply_results(db, audit(seeds("claim:C1", 2, "info")))
    [record] = db.finding_records()
    assert outcome.raised == () and (record.status, record.severity) == ("waived", "warn")


def test_passing_fixes_open_and_acknowledged_records_but_not_waived_ones(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:A", 1), seeds("claim:B", 1), seeds("claim:C", 1)))
    findings.set_status(db, "F-000002", "acknowledged", note="n", disclosure="d")
    findings.set_status(db, "F-000003", "waived", note="does not apply")
    outcome = findings.apply_results(db, audit(judged=("claim:A", "claim:B", "claim:C")))
    assert statuses(db) == {"claim:A": "fixed", "claim:B": "fixed", "claim:C": "waived"}
    assert {r.status_by for r in outcome.fixed} == {"auto"}


def test_a_fixed_record_that_fires_again_is_reopened_as_regressed(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:A", 1)))
    findings.apply_results(db, audit(judged=("claim:A",)))
    outcome = findings.apply_results(db, audit(seeds("claim:A", 1)))
    [record] = db.finding_records()
    assert [r.reopened_reason for r in outcome.raised] == ["regressed"] and record.status == "open"


def test_a_manual_fixed_is_provisional_until_the_next_audit(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:A", 1)))
    findings.set_status(db, "F-000001", "fixed", note="ran two more seeds")
    findings.apply_results(db, audit(seeds("claim:A", 1)))
    assert statuses(db) == {"claim:A": "open"}


def test_a_skipped_check_moves_nothing(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:A", 1)))
    outcome = findings.apply_results(db, [skipped("V04", "seed_count", "no metrics.json")])
    assert statuses(db) == {"claim:A": "open"} and outcome.records == ()


def test_every_status_change_is_in_the_event_log(db: StateDB) -> None:
    findings.apply_results(db, audit(seeds("claim:A", 1)))
    findings.set_status(db, "F-000001", "acknowledged", note="n", disclosure="d")
    findings.apply_results(db, audit(seeds("claim:A", 1)))  # not a change: no event
    findings.apply_results(db, audit(judged=("claim:A",)))
    moves = [(e.detail["old"], e.detail["new"], e.actor) for e in db.events(kind=EventKind.FINDING_STATUS)]
    assert moves == [(None, "open", "rgt"), ("open", "acknowledged", "user"), ("acknowledged", "fixed", "rgt")]


@pytest.mark.parametrize(("status", "note", "disclosure", "message"), [
    ("acknowledged", "", "d", "a note is required"),
    ("acknowledged", "why", "", "needs a disclosure"),
    ("waived", " ", "", "a note is required"),
    ("closed", "n", "d", "must be one of"),
])
def test_a_move_without_its_note_or_disclosure_is_refused_and_changes_nothing(
        db: StateDB, status: str, note: str, disclosure: str, message: str) -> None:
    findings.apply_results(db, audit(seeds("claim:A", 1)))
    with pytest.raises(RgtError, match=message):
        findings.set_status(db, "F-000001", status, note=note, disclosure=disclosure)
    assert statuses(db) == {"claim:A": "open"}
    assert len(db.events(kind=EventKind.FINDING_STATUS)) == 1


def test_an_unknown_finding_id_is_a_clear_error(db: StateDB) -> None:
    with pytest.raises(RgtError, match="no VERIFY finding F-000009"):
        findings.set_status(db, "F-000009", "waived", note="n")


def test_ticking_t10_acknowledges_v04_for_the_project_and_unticking_withdraws_it(db: StateDB) -> None:
    from remote_gpu_trainer.services.audit import checklist

    findings.apply_results(db, audit(seeds("claim:A", 1)))
    checklist.set_tick(db, "r1", "T10", "ticked", "one seed by budget for every run")
    assert statuses(db) == {"claim:A": "acknowledged", "project": "acknowledged"}
    assert findings.apply_results(db, audit(seeds("claim:A", 1), seeds("claim:B", 1))).raised == ()
    assert statuses(db)["claim:B"] == "acknowledged"
    checklist.set_tick(db, "r1", "T10", "open", "")
    assert statuses(db) == {"claim:A": "open", "claim:B": "open", "project": "fixed"}
    outcome = findings.apply_results(db, audit(seeds("claim:A", 1), seeds("claim:B", 1), seeds("claim:C", 1)))
    assert [r.subject for r in outcome.raised] == ["claim:C"], "no acknowledgement covers a new subject any more"
