"""Teardown of API-controlled cloud instances, always through services.teardown (docs/architecture.md §3.4).

Every test drives a real Session: the instance is a fake provider API (real HTTP on loopback, fake_clouds.py)
whose instance points at a real OpenSSH sshd on loopback, so the run is launched, pulled and verified over
SSH with real checkpoints before the gate can open. Nothing of rgt's own code is replaced; the only patched
things are waiting constants (teardown.POLL_GIVE_UP_S, RunPodClient.TERMINATE_TIMEOUT_S), never the logic.

What must hold: the confirmation names the provider's exact action, what it destroys, what keeps billing and
the profile's verified month; the approval is in the event log before any destroying call reaches the API;
the provider's OK is never proof (poll until it says gone); a state word nobody knows, a hung terminate or
an Alert state is never reported as `terminated`; and what still bills afterwards is listed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from remote_gpu_trainer import cli
from remote_gpu_trainer.errors import EXIT_REFUSED, GateRefused, RgtError
from remote_gpu_trainer.providers.cloud.runpod import RunPodClient
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import instance_status
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.state.events import Event
from support import cloud_teardown_fixtures
from support.cloud_teardown_fixtures import (
    INSTANCE,
    POD,
    RUN,
    Arrival,
    Stamped,
    StampedLambda,
    StampedPaperspace,
    StampedRunPod,
    add_pod,
    close,
    cloud_project,
    finished_run,
    pulled_and_verified,
    runpod_project,
)
from support.sshd_fixtures import Sshd

pytestmark = pytest.mark.sshd

runpod_cloud = cloud_teardown_fixtures.runpod_cloud
lambda_cloud = cloud_teardown_fixtures.lambda_cloud
paperspace_cloud = cloud_teardown_fixtures.paperspace_cloud
cloud_home = cloud_teardown_fixtures.cloud_home

LAMBDA_ID, MACHINE = "lam-7", "m1"
FAST_GIVE_UP_S = 0.5  # how long `_confirm` keeps re-asking before it says "unconfirmed" (600 s in the product)


# -- helpers ------------------------------------------------------------------------------------------------

def line(lines: tuple[str, ...], prefix: str) -> str:
    found = [text for text in lines if text.startswith(prefix)]
    assert len(found) == 1, f"no single {prefix!r} line in {lines}"
    return found[0]


def kinds(session: Session) -> list[str]:
    return [event.kind for event in session.db.events()]


def destroying(fake: Stamped) -> list[Arrival]:
    return [a for a in fake.arrivals if a.method in ("DELETE", "PATCH") or a.path.endswith("/terminate")]


def only(events: list[Event]) -> Event:
    assert len(events) == 1, events
    return events[0]


# -- RunPod: the whole arc ----------------------------------------------------------------------------------

async def test_runpod_arc_names_the_action_then_terminates_after_the_approval(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path) -> None:
    add_pod(runpod_cloud, sshd)
    session = await finished_run(runpod_project(tmp_path, runpod_cloud), sshd, runpod_cloud)
    try:
        await pulled_and_verified(session)
        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open and plan.gated, plan.reasons
        assert (plan.provider_id, plan.action_id, plan.action_label) == (POD, "terminate", "Terminate pod")
        action = line(plan.lines, "Action:")
        assert "Terminate pod" in action and POD in action and "IRREVERSIBLE" in action
        destroys = line(plan.lines, "Destroys:")
        assert "container (/)" in destroys and "volume (/workspace)" in destroys
        keeps = line(plan.lines, "Keeps billing:")
        assert "network volume" in keeps and "network-volume at /workspace" in keeps
        assert "volume at /workspace (2x" not in keeps  # terminate destroys the volume disk: it stops billing
        facts = line(plan.lines, "Billing facts:")
        assert "RunPod Pods profile, verified 2026-06 (" in facts  # the month the profile's money facts were checked
        assert any(text.startswith("Verified here: run r1: ") for text in plan.lines)

        stop = await teardown.plan(session, INSTANCE, "stop")
        assert stop.action_label == "Stop pod" and "(reversible)" in line(stop.lines, "Action:")
        stop_keeps = line(stop.lines, "Keeps billing:")
        assert "volume at /workspace" in stop_keeps and "2x" in stop_keeps
        assert "verified 2026-06" in line(stop.lines, "Billing facts:")
        assert destroying(runpod_cloud) == []  # planning asks, it never acts

        runpod_cloud.linger[POD] = 2  # RP14: the DELETE answers OK, the pod still reads back twice
        waits: list[teardown.WaitStep] = []
        result = await teardown.execute(session, INSTANCE, POD, plan.lines, progress=waits.append)
        assert len(waits) == 2, waits  # each look that did not yet see it gone is said, with what was heard
        assert all(w.line.startswith(f"waiting for {INSTANCE} to be terminated: ") and w.state != "terminated"
                   and "asked RunPod" in w.line and w.limit_s == teardown.POLL_GIVE_UP_S for w in waits), waits
        assert waits[0].elapsed_s <= waits[1].elapsed_s

        approval = only(session.db.events(kind="approval"))
        assert approval.detail["typed_id"] == POD and approval.detail["shown"] == list(plan.lines)
        [delete] = runpod_cloud.calls("DELETE")
        assert delete.path == f"/pods/{POD}" and delete.status == 204
        assert delete.events_then is not None and "approval" in delete.events_then
        assert "action" in delete.events_then and "torn_down" not in delete.events_then
        assert approval.at.timestamp() <= delete.at
        after = [a for a in runpod_cloud.calls("GET", f"/pods/{POD}") if a.seq > delete.seq]
        assert [a.status for a in after[:3]] == [200, 200, 404]  # polled through the linger until gone
        assert runpod_cloud.linger[POD] == 0

        assert (result.final_state, result.confirmed) == ("terminated", True)
        torn = only(session.db.events(kind="torn_down"))
        assert torn.detail["evidence"] == "provider-confirmed"
        assert torn.seq > approval.seq
        assert "nv-9" in result.message and "still billing" in result.message
        residuals = only(session.db.events(kind="residuals"))
        assert residuals.detail["from"] == "provider"
        assert any("network-volume nv-9" in text for text in residuals.detail["residuals"])
        assert (await instance_status(session, INSTANCE)).state == "terminated"
        run = (await observe_and_build(session)).run(RUN)
        assert run is not None and run.evidence_state == "torn_down"
    finally:
        await close(session)


async def test_the_gate_holds_until_pull_and_verify_and_then_needs_the_exact_typed_id(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path) -> None:
    add_pod(runpod_cloud, sshd)
    root = runpod_project(tmp_path, runpod_cloud)
    session = await finished_run(root, sshd, runpod_cloud)
    try:
        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open and plan.reasons
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, POD, plan.lines)  # the right id, but nothing pulled
        await pull_run(session, RUN)  # pulled, not verified: still closed
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, POD, plan.lines)
        assert await asyncio.to_thread(cli.main, ["down", RUN, str(root), "--confirm", POD]) == EXIT_REFUSED
        assert session.db.events(kind="approval") == [] and len(session.db.events(kind="refused")) == 3

        result = await verify_run(session, RUN)
        assert result.ok, result.errors
        assert (await teardown.plan(session, INSTANCE)).gate_open
        assert await asyncio.to_thread(cli.main, ["down", RUN, str(root), "--confirm", "p2"]) == EXIT_REFUSED
        with pytest.raises(GateRefused, match="typed id"):
            await teardown.execute(session, INSTANCE, POD.upper(), ["shown"])
        refused = session.db.events(kind="refused")
        assert [e.detail["typed_id"] for e in refused[3:]] == ["p2", POD.upper()]
        assert runpod_cloud.calls("DELETE") == [] and destroying(runpod_cloud) == []
        assert session.db.events(kind="approval") == [] and session.db.events(kind="action") == []
        assert (await instance_status(session, INSTANCE)).state == "running"
    finally:
        await close(session)


# -- RunPod: bad answers from the provider --------------------------------------------------------------------

async def test_an_unknown_state_word_after_the_delete_is_unknown_never_terminated(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teardown, "POLL_GIVE_UP_S", FAST_GIVE_UP_S)
    add_pod(runpod_cloud, sshd)
    session = await finished_run(runpod_project(tmp_path, runpod_cloud), sshd, runpod_cloud)
    try:
        await pulled_and_verified(session)
        plan = await teardown.plan(session, INSTANCE)
        runpod_cloud.after_delete_state = "MIGRATING"  # the DELETE answers OK, then the pod reads MIGRATING
        result = await teardown.execute(session, INSTANCE, POD, plan.lines)
        assert (result.final_state, result.confirmed) == ("unknown", False)
        assert "check the console" in result.message
        assert session.db.events(kind="torn_down") == []
        assert "'MIGRATING'" in result.message  # the provider's own word, not a guess
        # unconfirmed or not, what bills whatever the pod's fate is still named: the network volume
        [residuals] = session.db.events(kind="residuals")
        assert any("network" in item for item in residuals.detail["residuals"])
        assert len(session.db.events(kind="teardown_unconfirmed")) == 1
        [delete] = runpod_cloud.calls("DELETE")
        polls = [a for a in runpod_cloud.calls("GET", f"/pods/{POD}") if a.seq > delete.seq]
        assert len(polls) >= 2 and {a.status for a in polls} == {200}  # it kept asking, it did not assume
        status = await instance_status(session, INSTANCE)
        assert (status.state, status.detail["raw_state"]) == ("unknown", "MIGRATING")
        overview = await observe_and_build(session)
        instance, run = overview.instance(INSTANCE), overview.run(RUN)
        assert instance is not None and instance.state == "unknown"
        assert run is not None and run.evidence_state != "torn_down"
    finally:
        await close(session)


async def test_a_terminate_that_timed_out_but_took_effect_is_re_queried_then_confirmed(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RunPodClient, "TERMINATE_TIMEOUT_S", 0.5)
    add_pod(runpod_cloud, sshd)
    session = await finished_run(runpod_project(tmp_path, runpod_cloud), sshd, runpod_cloud)
    try:
        await pulled_and_verified(session)
        plan = await teardown.plan(session, INSTANCE)
        runpod_cloud.hang("DELETE", f"/pods/{POD}", 2.0, apply=True)  # deleted, but the answer comes too late
        result = await teardown.execute(session, INSTANCE, POD, plan.lines)
        [delete] = runpod_cloud.calls("DELETE")  # one call: a timeout is followed by a read, not a retry
        requery = [a for a in runpod_cloud.calls("GET", f"/pods/{POD}") if a.seq > delete.seq]
        assert requery and requery[0].status == 404
        assert (result.final_state, result.confirmed) == ("terminated", True)
        assert only(session.db.events(kind="torn_down")).detail["evidence"] == "provider-confirmed"
        assert session.db.events(kind="action_failed") == []
    finally:
        await close(session)


async def test_a_terminate_that_timed_out_and_did_not_take_effect_is_not_terminated(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RunPodClient, "TERMINATE_TIMEOUT_S", 0.5)
    add_pod(runpod_cloud, sshd)
    session = await finished_run(runpod_project(tmp_path, runpod_cloud), sshd, runpod_cloud)
    try:
        await pulled_and_verified(session)
        plan = await teardown.plan(session, INSTANCE)
        runpod_cloud.hang("DELETE", f"/pods/{POD}", 2.0, apply=False, times=2)
        with pytest.raises(RgtError, match="do not assume it is gone"):
            await teardown.execute(session, INSTANCE, POD, plan.lines)
        deletes = runpod_cloud.calls("DELETE")
        assert 1 <= len(deletes) <= 2
        for earlier, later in zip(deletes, deletes[1:], strict=False):  # never a blind retry: a read between
            assert any(earlier.seq < a.seq < later.seq for a in runpod_cloud.calls("GET", f"/pods/{POD}"))
        assert session.db.events(kind="torn_down") == []
        assert len(session.db.events(kind="action_failed")) == 1
        status = await instance_status(session, INSTANCE)
        assert status.state == "running"
        last = session.db.last_snapshot(INSTANCE)
        assert last is not None and last.state == "running"
        assert "torn_down" not in kinds(session)
    finally:
        await close(session)


async def test_an_instance_that_vanished_reads_terminated_by_the_providers_404_and_down_has_nothing_to_do(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path) -> None:
    add_pod(runpod_cloud, sshd)
    session = await finished_run(runpod_project(tmp_path, runpod_cloud), sshd, runpod_cloud)
    try:
        await pulled_and_verified(session)
        runpod_cloud.deleted.add(POD)  # gone behind rgt's back (console, low balance)
        status = await instance_status(session, INSTANCE)
        assert (status.state, status.detail["gone_by"]) == ("terminated", "http:404")
        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open and any("nothing to terminate" in r for r in plan.reasons)
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, POD, plan.lines)
        assert runpod_cloud.calls("DELETE") == []
        assert session.db.events(kind="approval") == []
    finally:
        await close(session)


# -- Lambda and Paperspace: their own follow-ups -----------------------------------------------------------------

async def test_lambda_alert_after_terminate_is_still_billing_not_gone(
        lambda_cloud: StampedLambda, sshd: Sshd, cloud_home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Lambda's IP is always on port 22, so the user's `host` points the run at the loopback sshd."""
    monkeypatch.setattr(teardown, "POLL_GIVE_UP_S", FAST_GIVE_UP_S)
    lambda_cloud.add_instance(LAMBDA_ID)
    root = cloud_project(tmp_path, f'provider = "lambda"\nid = "{LAMBDA_ID}"\napi_base = "{lambda_cloud.url}"\n'
                                   f'host = "{sshd.target}"')
    session = await finished_run(root, sshd, lambda_cloud)
    try:
        await pulled_and_verified(session)
        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open and plan.action_label == "Terminate"
        assert "NFS filesystem" in line(plan.lines, "Keeps billing:")
        assert "Lambda Cloud profile, verified 2026-06" in line(plan.lines, "Billing facts:")
        lambda_cloud.after_terminate_status = "alert"
        result = await teardown.execute(session, INSTANCE, LAMBDA_ID, plan.lines)

        [terminate_call] = lambda_cloud.calls("POST", "/instance-operations/terminate")
        assert terminate_call.events_then is not None and "approval" in terminate_call.events_then
        assert (result.final_state, result.confirmed) == ("unknown", False)
        assert session.db.events(kind="torn_down") == []
        assert len(session.db.events(kind="teardown_unconfirmed")) == 1
        status = await instance_status(session, INSTANCE)
        assert (status.state, status.detail["raw_state"]) == ("unknown", "alert")
        instance = (await observe_and_build(session)).instance(INSTANCE)
        assert instance is not None and instance.state == "unknown" and instance.burn_per_hour > 0
        # the spec's Lambda follow-up: the Alert state is named, and named as still billing
        shown = result.message + " " + " ".join(e.summary for e in session.db.events(kind="teardown_unconfirmed"))
        assert "alert" in shown.lower() and "bill" in shown.lower(), shown
    finally:
        await close(session)


async def test_paperspace_leftover_ip_and_snapshot_are_listed_after_the_destroy(
        paperspace_cloud: StampedPaperspace, sshd: Sshd, cloud_home: Path, tmp_path: Path) -> None:
    """Paperspace's address has no port, so the user's `host` points the run at the loopback sshd."""
    paperspace_cloud.stop_polls = 0  # off at the first read after the shut-down
    paperspace_cloud.add_machine(MACHINE, static_ip="198.18.0.77")
    paperspace_cloud.snapshots.append({"id": "snap-3", "name": "before-upgrade", "machineId": MACHINE})
    paperspace_cloud.snapshots.append({"id": "snap-9", "name": "someone-else", "machineId": "m9"})
    root = cloud_project(tmp_path, f'provider = "paperspace"\nid = "{MACHINE}"\n'
                                   f'api_base = "{paperspace_cloud.url}"\nhost = "{sshd.target}"\nprice_per_hour = 2.3')
    session = await finished_run(root, sshd, paperspace_cloud)
    try:
        await pulled_and_verified(session)
        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open and plan.action_label == "Destroy machine"
        assert "block (/)" in line(plan.lines, "Destroys:")
        keeps = line(plan.lines, "Keeps billing:")
        assert "static public IP" in keeps and "snapshots" in keeps
        facts = line(plan.lines, "Billing facts:")
        # issue 25 stamped the API and pricing facts 2026-12: nothing is unstamped any more, the oldest is 2026-06
        assert "Paperspace Core profile, verified 2026-06" in facts and "unstamped" not in facts, facts
        result = await teardown.execute(session, INSTANCE, MACHINE, plan.lines)

        [stop] = paperspace_cloud.calls("PATCH", f"/machines/{MACHINE}/stop")
        [delete] = paperspace_cloud.calls("DELETE", f"/machines/{MACHINE}")
        for call in (stop, delete):
            assert call.events_then is not None and "approval" in call.events_then
        assert stop.seq < delete.seq and delete.status == 200
        assert (result.final_state, result.confirmed) == ("terminated", True)
        assert only(session.db.events(kind="torn_down")).detail["evidence"] == "provider-confirmed"
        assert "198.18.0.77" in result.message and "snap-3" in result.message and "snap-9" not in result.message
        residuals = only(session.db.events(kind="residuals"))
        listed = residuals.detail["residuals"]
        assert residuals.detail["from"] == "provider"
        assert any(text.startswith("public-ip 198.18.0.77") for text in listed)
        assert any(text.startswith("snapshot snap-3") for text in listed)
        assert len(listed) == 2, listed
    finally:
        await close(session)


# -- the TUI's stop on a provider whose stop destroys data ------------------------------------------------------

async def test_a_stop_that_wipes_the_container_needs_the_gate_and_the_typed_id_in_the_tui(
        runpod_cloud: StampedRunPod, sshd: Sshd, cloud_home: Path, tmp_path: Path) -> None:
    """RunPod's stop wipes the container disk: the dashboard's `s` is gated like terminate, from the one
    decision the service made, and nothing reaches the API before the typed id and the approval."""
    from textual.widgets import Input

    from remote_gpu_trainer.app import RgtApp
    from remote_gpu_trainer.screens.teardown import TeardownScreen
    from support.tui_helpers import dashboard, notified, wait_until

    add_pod(runpod_cloud, sshd)
    session = await finished_run(runpod_project(tmp_path, runpod_cloud), sshd, runpod_cloud)
    app = RgtApp(session)
    stops = lambda: runpod_cloud.calls("POST", f"/pods/{POD}/action")  # noqa: E731
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: dashboard(app).current_run() is not None)
            control = dashboard(app).current_run().stop  # type: ignore[union-attr]
            assert control.offered and not control.enabled and not control.irreversible and control.reasons
            assert dashboard(app).check_action("stop", ()) is None  # greyed: the gate is closed
            dashboard(app).action_stop()  # chosen anyway (the palette way): refused with the reasons
            await wait_until(pilot, lambda: notified(app, f"not available: {control.reasons[0]}"))
            assert stops() == [] and not isinstance(app.screen, TeardownScreen)

            await pulled_and_verified(session)
            await wait_until(pilot, lambda: dashboard(app).current_run().stop.enabled)  # type: ignore[union-attr]
            assert dashboard(app).check_action("stop", ()) is True
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
            await wait_until(pilot, lambda: bool(app.screen.query("#confirm-id")))  # composed: keys reach the field
            modal = app.screen
            assert isinstance(modal, TeardownScreen) and modal.plan.gated and not modal.plan.irreversible
            assert "reversible, storage keeps billing" in str(modal.query_one("#teardown-dialog").border_title)
            await pilot.press(*"p2", "enter")  # not the pod's id: nothing is done
            await wait_until(pilot, lambda: notified(app, "'p2' is not the instance id"))
            await pilot.press("escape")
            await wait_until(pilot, lambda: notified(app, "stop cancelled: nothing was done"))
            assert stops() == [] and session.db.events(kind="approval") == []

            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, TeardownScreen))
            await wait_until(pilot, lambda: bool(app.screen.query("#confirm-id")))
            field = app.screen.query_one("#confirm-id", Input)
            await pilot.press(*POD)
            await wait_until(pilot, lambda: field.value == POD)
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(stops()) == 1)
            approval = only(session.db.events(kind="approval"))
            assert approval.detail["action"] == "stop" and approval.detail["typed_id"] == POD
            assert approval.detail["gated"] is True and approval.at.timestamp() <= stops()[0].at
            assert runpod_cloud.calls("DELETE") == []  # a stop, never a terminate
    finally:
        await close(session)
