"""The request tools: what costs money, destroys or decides goes to the approval inbox (services/inbox/) and waits for
a person. tools.py lists them.

A request tool never acts: it files the request (the service computes the plan a person will be shown, and records
it) and returns its id and state, `pending` unless an allowance a person granted let a rent or a resume through.
The agent then polls rgt_requests, or waits on it with `wait_s`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from remote_gpu_trainer.agents.calls import Call, Outcome

REQUEST_SCHEMA = "rgt-request/v1"
REQUESTS_SCHEMA = "rgt-requests/v1"
Why = Annotated[str, Field(description="why, for the person who decides (one paragraph; never a secret)")]
Run = Annotated[str, Field(description="the run's id: a [runs.ID] table of rgt.toml")]
Instance = Annotated[str, Field(description="the instance's name: an [instances.NAME] table of rgt.toml")]
Hours = Annotated[float, Field(gt=0, le=744, description="how long the box is wanted: the price × hours is what an "
                                                       "allowance counts")]


async def _file(call: Call, kind: str, why: str, *, run_id: str | None = None, instance: str | None = None,
                params: dict[str, Any] | None = None) -> Outcome:
    from remote_gpu_trainer.services.inbox.model import RequestKind
    from remote_gpu_trainer.services.inbox.requests import file_request

    if run_id is not None:
        call.run(run_id)
    if instance is not None:
        call.instance = instance
    session = call.writable(f"rgt_request_{kind}")
    view = await file_request(session, RequestKind(kind), actor=call.actor, why=why, run_id=run_id,
                              instance=instance, params=params)
    return Outcome({"schema": REQUEST_SCHEMA, "request": view.as_dict(),
                    "next": f"a person approves or rejects it; rgt_requests with ids=[\"{view.id}\"] and wait_s "
                            "says when it leaves pending"})


async def request_rent(call: Call, run: Run, why: Why, hours: Hours = 1.0) -> Outcome:
    return await _file(call, "rent", why, run_id=run, params={"hours": hours})


async def request_stop(call: Call, instance: Instance, why: Why) -> Outcome:
    return await _file(call, "stop", why, instance=instance)


async def request_teardown(call: Call, instance: Instance, why: Why) -> Outcome:
    return await _file(call, "teardown", why, instance=instance)


async def request_resume(call: Call, run: Run, why: Why, hours: Hours = 1.0) -> Outcome:
    return await _file(call, "resume", why, run_id=run, params={"hours": hours})


async def request_recovery(call: Call, run: Run, why: Why) -> Outcome:
    return await _file(call, "recover", why, run_id=run)


async def request_finding_decision(
        call: Call, finding: Annotated[str, Field(description="the VERIFY finding's id (rgt_findings lists them)")],
        decision: Annotated[Literal["acknowledge", "waive"], Field(
            description="acknowledge: the finding stays disclosed beside the claims with `disclosure`; waive: it "
                        "does not apply, for the reason in `note`")],
        note: Annotated[str, Field(description="why this decision (the person reads it)")], why: Why,
        disclosure: Annotated[str, Field(description="the text that rides with the claims (acknowledge needs it)")]
        = "") -> Outcome:
    return await _file(call, "finding_decision", why, params={
        "finding": finding, "decision": decision, "note": note, "disclosure": disclosure})


async def requests(call: Call, ids: Annotated[list[str] | None, Field(
        description="request ids (Q-000003); none: every request (and, with wait_s, the pending ones)")] = None,
        wait_s: Annotated[float, Field(ge=0, le=600, description="wait until one of them leaves pending, at most "
                                                                 "this long (0: answer at once)")] = 0.0) -> Outcome:
    """The requests and their states; with `wait_s`, after one of them left pending or the time passed."""
    from remote_gpu_trainer.services.inbox.model import RequestState
    from remote_gpu_trainer.services.inbox.requests import get_request, list_requests, wait_for_change

    session = call.session()
    timed_out = False
    if wait_s > 0:
        watched = ids if ids else [v.id for v in list_requests(session, [RequestState.PENDING])]
        views, timed_out = await wait_for_change(session, watched, wait_s)
        if ids is None:
            views = list_requests(session)
    else:
        views = [get_request(session, ident) for ident in ids] if ids else list_requests(session)
    return Outcome({"schema": REQUESTS_SCHEMA, "timed_out": timed_out,
                    "requests": [view.as_dict() for view in views]})
