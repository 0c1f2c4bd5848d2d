"""The recovery decision (audits/recover.py, docs/remote-ops.md §10.1): a pure function that refuses first (no limits,
no standing approval, past `until`, restarts or spending used up), then resumes on the box that is back, waits for
one coming back, or rents; and the quote check a rent must pass (price, GPU class, spending)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from remote_gpu_trainer.audits.recover import ApprovalCheck, RecoveryFacts, Step, decide, quote_refusals
from remote_gpu_trainer.config.recover import RecoverLimits

NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)
LIMITS = RecoverLimits(max_price_per_hour=0.6, max_spend=10.0, max_restarts=2, until=NOW + timedelta(hours=8))
FACTS = RecoveryFacts(run_id="r1", preempted=True, limits=LIMITS, approval=ApprovalCheck(True, seq=7),
                      restarts_used=0, spent=0.0, now=NOW, box_state="running", box_holds_run=True)


def test_a_preempted_run_on_a_box_that_is_back_resumes_there() -> None:
    assert decide(FACTS).step == Step.RESUME_HERE
    for coming in ("pending", "resuming", "stopping", "terminating"):
        assert decide(replace(FACTS, box_state=coming, box_holds_run=False)).step == Step.WAIT
    assert decide(replace(FACTS, preempted=False)).step == Step.NONE


def test_a_box_is_rented_only_once_it_is_gone_and_once_per_launch() -> None:
    gone = replace(FACTS, box_state="terminated", box_holds_run=False)
    assert decide(gone).step == Step.RENT
    listed = decide(replace(FACTS, box_state="unknown", box_holds_run=False, box_reclaimed=True))
    assert listed.step == Step.REFUSED and "still lists it" in listed.reasons[0]  # it may bill: nothing beside it
    again = decide(replace(gone, rented="5001"))
    assert again.step == Step.REFUSED and "one box per launch" in again.reasons[0]
    unknown = decide(replace(FACTS, box_state="unknown", box_holds_run=False))  # no answer is not a gone box
    assert unknown.step == Step.WAIT and "nothing is rented while the box may still be there" in unknown.reasons[0]
    unread = decide(replace(FACTS, box_holds_run=False))  # running, but its run cannot be read (a new host key)
    assert unread.step == Step.REFUSED and "but its run cannot be read" in unread.reasons[0]
    stopped = replace(FACTS, box_state="stopped", box_holds_run=False)
    assert decide(stopped).step == Step.REFUSED  # a stopped box rgt cannot start: a person decides
    assert decide(replace(stopped, box_startable=True)).step == Step.START_BOX
    assert decide(replace(stopped, box_startable=True, rented="pod1")).step == Step.REFUSED  # started once already


def test_a_box_a_person_put_down_is_never_recovered() -> None:
    decision = decide(replace(FACTS, box_state="stopped", box_startable=True, put_down="gpu stopped"))
    assert decision.step == Step.REFUSED and "a person put the box down" in decision.reasons[0]


@pytest.mark.parametrize(("change", "reason"), [
    ({"limits": None}, "runs.r1.recover is not set in rgt.toml"),
    ({"approval": ApprovalCheck(False, "no person approved recovery of r1")}, "no person approved recovery of r1"),
    ({"now": NOW + timedelta(hours=8)}, "the recovery window ended at 2026-12-07T20:00:00+00:00"),
    ({"restarts_used": 2}, "2 of 2 restart(s) used (runs.r1.recover.max_restarts)"),
    ({"spent": 10.0}, "recovery spent 10.00 of 10.00 (runs.r1.recover.max_spend)"),
])
def test_each_refusal_names_its_limit_and_refuses_even_a_box_that_is_back(change: dict[str, object],
                                                                           reason: str) -> None:
    decision = decide(replace(FACTS, **change))  # type: ignore[arg-type]
    assert decision.step == Step.REFUSED and decision.reasons[0].startswith(reason), decision.reasons


def test_every_reason_is_named_at_once() -> None:
    decision = decide(replace(FACTS, approval=ApprovalCheck(False, "revoked"), restarts_used=3, spent=11.0))
    assert decision.reasons == ("revoked", "3 of 2 restart(s) used (runs.r1.recover.max_restarts)",
                                "recovery spent 11.00 of 10.00 (runs.r1.recover.max_spend)")


def test_a_quote_is_rented_only_within_price_gpu_class_and_spending() -> None:
    ok = quote_refusals(LIMITS, price_per_hour=0.59, gpu="RTX 4090", own_gpu="rtx 4090", spent=0.0, run_id="r1")
    assert ok == []
    dear = quote_refusals(LIMITS, price_per_hour=0.61, gpu="RTX 4090", own_gpu="RTX 4090", spent=0.0, run_id="r1")
    assert dear == ["the quote is 0.6100/h, above max_price_per_hour 0.6000 (runs.r1.recover)"]
    other = quote_refusals(LIMITS, price_per_hour=0.5, gpu="A100", own_gpu="RTX 4090", spent=0.0, run_id="r1")
    assert other == ["the quote is for 'A100', not one of RTX 4090"]
    listed = replace(LIMITS, gpus=("A100", "H100"))
    assert quote_refusals(listed, price_per_hour=0.5, gpu="a100", own_gpu="RTX 4090", spent=0.0, run_id="r1") == []
    unknown = quote_refusals(LIMITS, price_per_hour=None, gpu="RTX 4090", own_gpu="RTX 4090", spent=0.0, run_id="r1")
    assert unknown == ["the quote states no price: nothing is rented at an unknown price"]
    spent = quote_refusals(LIMITS, price_per_hour=0.5, gpu="RTX 4090", own_gpu="RTX 4090", spent=9.6, run_id="r1")
    assert spent == ["an hour at 0.5000 would take recovery's spending from 9.60 past max_spend 10.00"]
    nothing = quote_refusals(LIMITS, price_per_hour=0.5, gpu="RTX 4090", own_gpu=None, spent=0.0, run_id="r1")
    assert nothing == ["no GPU class to rent: set runs.r1.recover.gpus or the instance's launch.gpu"]
