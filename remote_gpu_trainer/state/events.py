"""The event log: every approval and cost-affecting action, with its time and what the screen said.

The log is append-only (triggers refuse UPDATE and DELETE) and each approval is written *before* the provider
call it authorises. Its kinds are `EventKind` members, whose values are the strings stored in existing
databases; package code writes an event only through the writer function for it below (one per event, named
for what happened, its docstring saying when it is written and what its payload holds) and reads kinds by
comparing with `EventKind` members, never with string literals.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from remote_gpu_trainer.clock import iso_offset, parse_iso
from remote_gpu_trainer.state.store import Store


class EventKind(StrEnum):
    """What an event records; the value is the `kind` column as stored (and as `rgt events` prints it)."""

    APPROVAL = "approval"  # the user approved a cost-affecting action (teardown, launch, create)
    ACTION = "action"  # the provider call an approval authorised is about to be made
    ACTION_FAILED = "action_failed"  # that provider call failed
    REFUSED = "refused"  # the teardown gate refused an action
    RESIDUALS = "residuals"  # after a terminate, what still bills
    TORN_DOWN = "torn_down"  # the box is terminated, on the provider's word or the user's
    STOPPED = "stopped"  # the box is stopped, on the provider's word or the user's
    TEARDOWN_UNCONFIRMED = "teardown_unconfirmed"  # the provider never confirmed a terminate or stop
    HOST_KEY_TRUSTED = "host_key_trusted"  # the user trusted a box's SSH host key
    METER_GAP = "meter_gap"  # a stretch nobody watched, billed as an estimate
    ENV_AUDIT = "env_audit"  # the phase-0 environment audit of a run's box
    ENV_ACK = "env_ack"  # a run launched despite failed audit rows
    LAUNCH = "launch"  # a run's command started on its box
    RERUN = "rerun"  # a run copied to a new id for a re-run
    CELL_STARTED = "cell_started"  # a training log started a new sweep cell
    FINDING_ACK = "finding_ack"  # the user acknowledged a log finding
    CHECKLIST = "checklist"  # the user ticked a checklist item
    PULL = "pull"  # a pull started, or finished with every file verified
    PULL_FAILED = "pull_failed"  # a pull failed or was interrupted
    PULL_INCOMPLETE = "pull_incomplete"  # a pull ended with files not fetched
    VERIFY = "verify"  # a verification passed or failed
    LAUNCH_REFUSED = "launch_refused"  # `rgt up` refused: the typed price is not the stated one
    LAUNCHED = "launched"  # `rgt up` rented a box (its provider id is in the payload)
    LAUNCH_OVER_BUDGET = "launch_over_budget"  # `rgt up` rented a box above the approved price
    VERIFY_AUDIT = "verify_audit"  # the audit catalogue ran over the project (the stored kind keeps its old name)
    FINDING_STATUS = "finding_status"  # a VERIFY finding record changed status (raised, acknowledged, fixed, ...)
    PROBE = "probe"  # a model probe's answer was stored for a VERIFY check
    ACCEPTANCE = "acceptance"  # a pulled bundle was accepted (re-hashed, load-checked) on a second machine
    NOTIFIED = "notified"  # the local patrol sent one event of a run through apprise (rgt watch --notify)
    AUTO_FOLLOW = "auto_follow"  # a watcher started, or finished, the automatic pull/verify of a finished run
    ADOPTED = "adopted"  # `rgt adopt` rebuilt a launch record from the box's ledger (docs/gate.md §7.2)
    AGENT_TOOL = "agent_tool"  # an agent called a tool of `rgt mcp` that changes something (its actor: agent:NAME)
    REQUEST = "request"  # an agent filed a request in the approval inbox, or it changed state (docs/agents.md)
    ALLOWANCE = "allowance"  # a person granted or revoked a spending allowance, or a request used one
    RECOVER = "recover"  # a step of recovering a preempted run: approved, revoked, decided, quoted, rented, launched


@dataclass(frozen=True)
class Event:
    """One entry of the append-only event log as read back: what happened, to which run or instance, who did it, and
    its payload."""

    seq: int
    at: datetime
    kind: str  # an EventKind; a kind only a newer rgt knows stays a plain string
    run_id: str | None
    instance: str | None
    actor: str
    summary: str
    detail: dict[str, Any]


def _kind(stored: str) -> str:
    try:
        return EventKind(stored)
    except ValueError:
        return stored


class EventLog(Store):
    """The `events` table: appended to by the writers below, read by `rgt events`, the meter and the monitor."""

    def append_event(self, kind: EventKind, summary: str, *, run_id: str | None = None,
                     instance: str | None = None, actor: str = "rgt",
                     detail: dict[str, Any] | None = None, at: datetime | None = None) -> Event:
        """One row, as it is; package code calls the writer for its event instead."""
        stamp = iso_offset(at) if at is not None else self._now()
        body = json.dumps(detail or {}, sort_keys=True, ensure_ascii=False)
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO events (at, kind, run_id, instance, actor, summary, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (stamp, kind, run_id, instance, actor, summary, body),
            )
        seq = cursor.lastrowid
        assert seq is not None
        return Event(seq, parse_iso(stamp), kind, run_id, instance, actor, summary, detail or {})

    def launched_provider_id(self, instance: str) -> str | None:
        """The provider id of the box `rgt up` last rented for this instance name (rgt.toml is never rewritten)."""
        row = self._one(
            "SELECT detail FROM events WHERE instance = ? AND kind IN (?, ?) ORDER BY seq DESC LIMIT 1",
            (instance, EventKind.LAUNCHED, EventKind.LAUNCH_OVER_BUDGET))
        ident = json.loads(row[0]).get("provider_id") if row else None
        return str(ident) if ident else None

    def replacement_of(self, instance: str, provider_id: str) -> str | None:
        """The provider id of the box recovery rented under this instance name to replace `provider_id` (a LAUNCHED
        event whose `replaces` names it), if any: the newest such."""
        rows = self._all(
            "SELECT detail FROM events WHERE instance = ? AND kind IN (?, ?) ORDER BY seq DESC",
            (instance, EventKind.LAUNCHED, EventKind.LAUNCH_OVER_BUDGET))
        for (detail,) in rows:
            data = json.loads(detail)
            if data.get("replaces") == provider_id and data.get("provider_id"):
                return str(data["provider_id"])
        return None

    def events(self, *, run_id: str | None = None, kind: EventKind | None = None,
               limit: int | None = None) -> list[Event]:
        query = "SELECT seq, at, kind, run_id, instance, actor, summary, detail FROM events WHERE 1=1"
        args: list[Any] = []
        if run_id is not None:
            query += " AND run_id = ?"
            args.append(run_id)
        if kind is not None:
            query += " AND kind = ?"
            args.append(kind)
        query += " ORDER BY seq"
        if limit is not None:
            query = f"SELECT * FROM ({query.replace('ORDER BY seq', 'ORDER BY seq DESC')} LIMIT ?) ORDER BY seq"
            args.append(limit)
        rows = self._all(query, args)
        return [Event(r[0], parse_iso(r[1]), _kind(r[2]), r[3], r[4], r[5], r[6], json.loads(r[7])) for r in rows]


# -- teardown (services/teardown.py) ------------------------------------------------------------------------------

def teardown_approved(db: EventLog, *, instance: str, provider_id: str, action: str, typed_id: str,
                      shown: Sequence[str], runs: Sequence[str], gated: bool, actor: str,
                      accepted_loss: dict[str, list[str]] | None = None) -> Event:
    """APPROVAL, written when the user approved a terminate or stop, before the gate's second look and the
    provider call. Payload: `action`, the `typed_id` the user typed, the `shown` lines of the screen, the
    `runs` on the box and whether the action was `gated`; with a waiver (`--accept-loss`, docs/gate.md
    §7.2), `accepted_loss` maps each run whose loss the user typed to the reasons shown for it. Its time is
    the approval the gate checks."""
    detail: dict[str, object] = {"action": action, "typed_id": typed_id, "shown": list(shown), "runs": list(runs),
                                 "gated": gated}
    summary = f"approved {action} of {instance} ({provider_id})"
    if accepted_loss:
        detail["accepted_loss"] = {name: list(reasons) for name, reasons in accepted_loss.items()}
        summary += f", accepting the loss of {', '.join(sorted(accepted_loss))}"
    return db.append_event(EventKind.APPROVAL, summary, instance=instance, actor=actor, detail=detail)


def teardown_requested(db: EventLog, *, instance: str, provider_id: str, action: str, actor: str) -> Event:
    """ACTION, written right before the provider is asked to terminate or stop. Payload: the `action`."""
    return db.append_event(EventKind.ACTION, f"{action} {instance} ({provider_id}) requested", instance=instance,
                           actor=actor, detail={"action": action})


def teardown_failed(db: EventLog, *, instance: str, action: str, error: str) -> Event:
    """ACTION_FAILED, written when the provider's terminate or stop call raised; the error is in the summary."""
    return db.append_event(EventKind.ACTION_FAILED, f"{action} of {instance} failed: {error}", instance=instance,
                           actor="rgt")


def gate_refused(db: EventLog, *, instance: str, action: str, reasons: list[str], typed_id: str,
                 actor: str) -> Event:
    """REFUSED, written when the gate (or a typed id that does not match) refused a teardown. Payload: the
    gate's `reasons` and the `typed_id`."""
    return db.append_event(EventKind.REFUSED, f"{action} of {instance} refused by the gate", instance=instance,
                           actor=actor, detail={"reasons": reasons, "typed_id": typed_id.strip()})


def residuals_billing(db: EventLog, *, instance: str, residuals: list[str], source: str) -> Event:
    """RESIDUALS, written after a terminate when something still bills (volumes, IPs, snapshots, an instance
    left in an alert state). Payload: the `residuals` in words and where they came `from` ("provider": its
    own audit, or "profile": what the profile says the action keeps billing)."""
    return db.append_event(EventKind.RESIDUALS,
                           f"after terminating {instance}, still billing: {len(residuals)} item(s)",
                           instance=instance, actor="rgt", detail={"residuals": residuals, "from": source})


def teardown_confirmed(db: EventLog, *, instance: str, terminated: bool, message: str, evidence: str,
                       state: str) -> Event:
    """TORN_DOWN (a terminate) or STOPPED (a stop), written once the provider's state says so. Payload: the
    `evidence` ("provider-confirmed", "user-attested", "command") and the `state` the provider reported."""
    kind = EventKind.TORN_DOWN if terminated else EventKind.STOPPED
    return db.append_event(kind, message, instance=instance, actor="rgt",
                           detail={"evidence": evidence, "state": state})


def teardown_unconfirmed(db: EventLog, *, instance: str, message: str) -> Event:
    """TEARDOWN_UNCONFIRMED, written when the provider still lists the box after the confirmation window:
    it may still bill. No payload; the summary says what the provider said."""
    return db.append_event(EventKind.TEARDOWN_UNCONFIRMED, message, instance=instance, actor="rgt")


# -- instances and the meter (services/session.py) ----------------------------------------------------------------

def create_approved(db: EventLog, *, instance: str, price: float | None, actor: str) -> Event:
    """APPROVAL, written before a sim box is created (the embedded default's `up`). Payload: `action`
    "create" and the profile's `price_per_hour`."""
    return db.append_event(EventKind.APPROVAL, f"create instance {instance} at ${price}/h", instance=instance,
                           actor=actor, detail={"action": "create", "price_per_hour": price})


def host_key_trusted(db: EventLog, *, instance: str, receipt: dict[str, Any], actor: str) -> Event:
    """HOST_KEY_TRUSTED, written when the user trusted the host key a box presented (trust on first use).
    Payload: the receipt of the known_hosts entry (fingerprint, host, port, instance id, time)."""
    return db.append_event(EventKind.HOST_KEY_TRUSTED,
                           f"trusted host key of {instance}: {receipt['fingerprint_sha256']}", instance=instance,
                           actor=actor, detail=receipt)


def meter_gap(db: EventLog, *, instance: str, start: datetime, end: datetime) -> Event:
    """METER_GAP, written when a stretch nobody watched could not be explained from the provider's clock;
    the meter bills it at the higher rate. Payload: the stretch's `start` and `end` (ISO 8601)."""
    return db.append_event(
        EventKind.METER_GAP, f"{instance}: not watched from {start:%Y-%m-%d %H:%M} to "
        f"{end:%Y-%m-%d %H:%M}; billed there at the higher rate (an estimate)", instance=instance, actor="rgt",
        detail={"start": start.isoformat(), "end": end.isoformat()})


# -- runs: audit, launch, re-run, log, findings, checklist --------------------------------------------------------

def env_audited(db: EventLog, *, run_id: str, instance: str, worst: str, fails: int, warns: int,
                rows: list[dict[str, Any]], actor: str) -> Event:
    """ENV_AUDIT, written after the phase-0 environment audit of a run's box. Payload: every audit row."""
    return db.append_event(EventKind.ENV_AUDIT, f"environment audit of {instance} for {run_id}: worst "
                           f"{worst} ({fails} fail, {warns} warn)", run_id=run_id, instance=instance, actor=actor,
                           detail={"rows": rows})


def env_acknowledged(db: EventLog, *, run_id: str, instance: str, note: str, checks: list[str],
                     actor: str) -> Event:
    """ENV_ACK, written when a run is launched despite failed audit rows (`rgt run --ack`). Payload: the
    user's `note` and the failed `rows` by check name."""
    return db.append_event(EventKind.ENV_ACK, f"launched {run_id} despite {len(checks)} failed audit row(s)",
                           run_id=run_id, instance=instance, actor=actor, detail={"note": note, "rows": checks})


def run_launched(db: EventLog, *, run_id: str, instance: str, handle: str, detail: dict[str, Any],
                 actor: str) -> Event:
    """LAUNCH, written once a run's command started on its box. Payload: the launch record (`ctl_dir`, `log`,
    `started_at`, `method`, `pushed`, `log_offset`, and `pid` or `slurm_job`)."""
    return db.append_event(EventKind.LAUNCH, f"launched run {run_id} on {instance} ({handle})", run_id=run_id,
                           instance=instance, actor=actor, detail=detail)


def launch_adopted(db: EventLog, *, run_id: str, instance: str, detail: dict[str, Any], actor: str) -> Event:
    """ADOPTED, written when `rgt adopt` recorded a launch the box's ledger holds and this project's launch log
    did not (a lost state database). Payload: the launch record written, with the ledger entry's path."""
    return db.append_event(EventKind.ADOPTED, f"adopted run {run_id}'s launch on {instance} from the box's ledger",
                           run_id=run_id, instance=instance, actor=actor, detail=detail)


def rerun_added(db: EventLog, *, run_id: str, of: str, remote_root: str, actor: str) -> Event:
    """RERUN, written when run `of` was copied to the new id `run_id` in rgt.toml. Payload: `of` and the new
    run's `remote_root`."""
    return db.append_event(EventKind.RERUN, f"run {run_id} added to rgt.toml as a re-run of {of}", run_id=run_id,
                           actor=actor, detail={"of": of, "remote_root": remote_root})


def cell_started(db: EventLog, *, run_id: str, cell: str, t: float, samples_before: int) -> Event:
    """CELL_STARTED, written when a run's log starts a new sweep cell; the log monitor reads the latest one
    back after a restart. Payload: the `cell`, its log time `t` and the run's stored `samples_before` it."""
    return db.append_event(EventKind.CELL_STARTED, f"run {run_id}: cell {cell} started", run_id=run_id,
                           actor="rgt", detail={"cell": cell, "t": t, "samples_before": samples_before})


def finding_acknowledged(db: EventLog, *, run_id: str, signature: str, note: str, actor: str) -> Event:
    """FINDING_ACK, written when the user acknowledged a log finding. Payload: the `signature` and the `note`."""
    return db.append_event(EventKind.FINDING_ACK, f"acknowledged {signature} on run {run_id}: {note}",
                           run_id=run_id, actor=actor, detail={"signature": signature, "note": note})


def tick_set(db: EventLog, *, run_id: str, item_id: str, status: str, note: str, actor: str) -> Event:
    """CHECKLIST, written when the user ticked (or marked not applicable, or reopened) a manual checklist item.
    Payload: the `item`, its new `status` and the `note`."""
    return db.append_event(EventKind.CHECKLIST, f"{item_id} marked {status}", run_id=run_id, actor=actor,
                           detail={"item": item_id, "status": status, "note": note})


# -- the audit catalogue: audits, finding records, model probes (docs/verify.md §3) -------------------------------

def catalogue_audited(db: EventLog, *, checks: int, passed: int, with_findings: int, skipped: int, raised: int,
                      actor: str) -> Event:
    """VERIFY_AUDIT, written after the audit catalogue ran. Payload: the counts of checks by result and of findings
    raised (new or reopened)."""
    return db.append_event(
        EventKind.VERIFY_AUDIT, f"audit: {passed} pass, {with_findings} with findings, {skipped} skipped; "
        f"{raised} raised", actor=actor,
        detail={"checks": checks, "pass": passed, "findings": with_findings, "skipped": skipped, "raised": raised})


def finding_status_changed(db: EventLog, *, finding_id: str, check: str, subject: str, old: str | None, new: str,
                           note: str, reason: str | None, actor: str) -> Event:
    """FINDING_STATUS, written whenever a VERIFY finding record is created or changes status. Payload: the
    finding `id`, `check`, `subject`, the `old` status (None when created), the `new` one, the `note` and the
    `reason` (`severity_increased`, `regressed`, `check_scope` or None)."""
    was = old or "new"
    return db.append_event(
        EventKind.FINDING_STATUS, f"{finding_id} [{check}] {subject}: {was} -> {new}", actor=actor,
        detail={"id": finding_id, "check": check, "subject": subject, "old": old, "new": new, "note": note,
                "reason": reason})


def probe_recorded(db: EventLog, *, check: str, subject: str, where: str, actor: str) -> Event:
    """PROBE, written when a model probe's answer was stored. Payload: `check`, `subject` and `where` it ran."""
    return db.append_event(EventKind.PROBE, f"probe {check} on {subject} ({where})", actor=actor,
                           detail={"check": check, "subject": subject, "where": where})


def acceptance_recorded(db: EventLog, *, run_id: str, machine: str, instance: str | None, ok: bool,
                        problems: int, record: str, record_sha256: str, actor: str) -> Event:
    """ACCEPTANCE, written after `rgt accept` wrote an acceptance record. Payload: the `machine` it ran on, `ok`,
    the count of `problems`, the `record` path and its `record_sha256`."""
    summary = "accepted" if ok else f"not accepted ({problems} problem(s))"
    return db.append_event(EventKind.ACCEPTANCE, f"run {run_id} {summary} on {machine}", run_id=run_id,
                           instance=instance, actor=actor,
                           detail={"machine": machine, "ok": ok, "problems": problems, "record": record,
                                   "record_sha256": record_sha256})


# -- evidence: pull and verify ------------------------------------------------------------------------------------

def pull_started(db: EventLog, *, run_id: str, instance: str, actor: str) -> Event:
    """PULL, written when a pull starts, under the run's lock. No payload."""
    return db.append_event(EventKind.PULL, f"pull of run {run_id} started", run_id=run_id, instance=instance,
                           actor=actor)


def pull_finished(db: EventLog, *, run_id: str, instance: str, detail: dict[str, Any], actor: str) -> Event:
    """PULL, written when a pull ended with every file here and matching its manifest hash. Payload: counts
    of `files`, `fetched` and `present`, and `failed` (empty)."""
    return db.append_event(EventKind.PULL, f"pull of run {run_id} finished: {detail['files']} file(s) here, "
                           "each matching its manifest hash", run_id=run_id, instance=instance, actor=actor,
                           detail=detail)


def pull_incomplete(db: EventLog, *, run_id: str, instance: str, detail: dict[str, Any], failed: int,
                    actor: str) -> Event:
    """PULL_INCOMPLETE, written when a pull ended with `failed` files not fetched. Payload: counts of `files`,
    `fetched` and `present`, and the first 50 `failed` files with their problem."""
    return db.append_event(EventKind.PULL_INCOMPLETE, f"pull of run {run_id} incomplete: {failed} of "
                           f"{detail['files']} file(s) not fetched", run_id=run_id, instance=instance, actor=actor,
                           detail=detail)


def pull_failed(db: EventLog, *, run_id: str, instance: str, error: str | None, actor: str) -> Event:
    """PULL_FAILED, written when a pull raised (`error`) or was cancelled (`error` None). Payload: the `error`,
    "cancelled" for an interrupted pull."""
    summary = f"pull of run {run_id} failed: {error}" if error is not None else f"pull of run {run_id} interrupted"
    return db.append_event(EventKind.PULL_FAILED, summary, run_id=run_id, instance=instance, actor=actor,
                           detail={"error": error if error is not None else "cancelled"})


def verified(db: EventLog, *, run_id: str, instance: str, ok: bool, problems: int, errors: list[dict[str, Any]],
             actor: str) -> Event:
    """VERIFY, written after a verification, passed or with `problems` problems. Payload: `ok` and the first
    50 `errors`."""
    summary = "passed" if ok else f"failed ({problems} problem(s))"
    return db.append_event(EventKind.VERIFY, f"verification of run {run_id} {summary}", run_id=run_id,
                           instance=instance, actor=actor, detail={"ok": ok, "errors": errors})


# -- renting a box (services/launch/rent.py) ---------------------------------------------------------------------

def launch_refused(db: EventLog, *, run_id: str, instance: str, typed_price: str, price_text: str,
                   shown: Sequence[str], actor: str) -> Event:
    """LAUNCH_REFUSED, written when the typed price is not the stated one; nothing is rented. Payload: the
    `typed_price`, the stated `price` and the `shown` lines."""
    return db.append_event(
        EventKind.LAUNCH_REFUSED, f"launch of {instance} refused: typed {typed_price!r}, stated {price_text}",
        run_id=run_id, instance=instance, actor=actor,
        detail={"typed_price": typed_price, "price": price_text, "shown": list(shown)})


def launch_approved(db: EventLog, *, run_id: str, instance: str, price_shown: str, typed_price: str,
                    price_per_hour: float, ceiling: float, shown: Sequence[str], request: dict[str, Any],
                    smoke: dict[str, Any], actor: str) -> Event:
    """APPROVAL, written when the user approved renting a box, before the provider call. Payload: `action`
    "launch", the `typed_price`, `price_per_hour`, `ceiling`, the `shown` lines, the `request` sent and the
    `smoke` gate's record."""
    return db.append_event(
        EventKind.APPROVAL, f"approved launch of {instance} at {price_shown}/h", run_id=run_id, instance=instance,
        actor=actor, detail={"action": "launch", "typed_price": typed_price, "price_per_hour": price_per_hour,
                             "ceiling": ceiling, "shown": list(shown), "request": request, "smoke": smoke})


def launch_requested(db: EventLog, *, run_id: str, instance: str, approval_seq: int, actor: str) -> Event:
    """ACTION, written right before the provider is asked to rent the box. Payload: `action` "launch" and the
    `approval_seq` of the approval it acts on."""
    return db.append_event(EventKind.ACTION, f"launch of {instance} requested", run_id=run_id, instance=instance,
                           actor=actor, detail={"action": "launch", "approval_seq": approval_seq})


def launch_failed(db: EventLog, *, run_id: str, instance: str, error: str) -> Event:
    """ACTION_FAILED, written when the provider's launch call raised; the error is in the summary."""
    return db.append_event(EventKind.ACTION_FAILED, f"launch of {instance} failed: {error}", run_id=run_id,
                           instance=instance, actor="rgt")


def instance_rented(db: EventLog, *, over_budget: bool, run_id: str, instance: str, provider: str,
                    provider_id: str, state: str, raw_state: str, price_per_hour: float,
                    price_shown: str, price_source: str, config_line: str, replaces: str | None = None) -> Event:
    """LAUNCHED, or LAUNCH_OVER_BUDGET when the box came up above the approved price: written as soon as the
    provider created a box, whatever came next, so `launched_provider_id` finds it. Payload: `provider_id`,
    `state`, `raw_state`, `price_per_hour`, `price_source` and the `config_line` to put in rgt.toml; `replaces`
    (added 2026-12-08) the id of the box recovery rented it in place of (docs/remote-ops.md §10.1)."""
    kind = EventKind.LAUNCH_OVER_BUDGET if over_budget else EventKind.LAUNCHED
    detail: dict[str, Any] = {"provider_id": provider_id, "state": state, "raw_state": raw_state,
                              "price_per_hour": price_per_hour, "price_source": price_source,
                              "config_line": config_line}
    if replaces is not None:
        detail["replaces"] = replaces
    return db.append_event(
        kind, f"{instance} launched as {provider} {provider_id} ({state}) at {price_shown}/h"
        + (f", replacing {replaces}" if replaces else ""), run_id=run_id, instance=instance, actor="rgt",
        detail=detail)


# -- watching without the laptop: the patrol's notifications and automatic follow-ups (docs/remote-ops.md §9.2) --

def notified(db: EventLog, *, run_id: str, instance: str, launch_seq: int, event: str, channels: int,
             actor: str) -> Event:
    """NOTIFIED, written once the patrol sent `event` of one launch of a run through apprise: the patrol sends
    each (launch, event) once, across processes. Payload: `launch_seq`, `event` and how many `channels` took
    it; never a URL."""
    return db.append_event(EventKind.NOTIFIED, f"notified: run {run_id} {event.replace('_', ' ')}", run_id=run_id,
                           instance=instance, actor=actor,
                           detail={"launch_seq": launch_seq, "event": event, "channels": channels})


def auto_follow(db: EventLog, *, run_id: str, instance: str, launch_seq: int, outcome: str, steps: Sequence[str],
                summary: str, actor: str) -> Event:
    """AUTO_FOLLOW, written when a watcher takes the automatic follow-up of one launch (`outcome` "started")
    and when it ended ("verified", "pulled", "failed", or "interrupted": the next watcher takes it again).
    Payload: `launch_seq`, `outcome`, the `steps` and the `summary` in words."""
    return db.append_event(EventKind.AUTO_FOLLOW, f"auto follow-up of run {run_id}: {summary}", run_id=run_id,
                           instance=instance, actor=actor,
                           detail={"launch_seq": launch_seq, "outcome": outcome, "steps": list(steps),
                                   "summary": summary})


# -- the approval inbox (services/inbox/) --------------------------------------------------------------------------

def request_moved(db: EventLog, *, request: str, kind: str, state: str, summary: str, run_id: str | None,
                  instance: str | None, actor: str, detail: dict[str, Any] | None = None) -> Event:
    """REQUEST, written when an agent files a request and at every change of its state (approved, rejected,
    back to pending because its plan changed, refused at execution, done, failed), before what it authorises.
    Payload: the `request` id, its `kind` and new `state`, and what that move carries (the plan's digest and
    lines when it was filed or approved, the note of a rejection, the reason of a refusal)."""
    body = {"request": request, "kind": kind, "state": state, **(detail or {})}
    return db.append_event(EventKind.REQUEST, summary, run_id=run_id, instance=instance, actor=actor, detail=body)


def allowance_changed(db: EventLog, *, allowance: str, summary: str, actor: str, detail: dict[str, Any]) -> Event:
    """ALLOWANCE, written when a person grants or revokes an allowance and when a request is let through by one.
    Payload: the `allowance` id and its terms or the use (`request`, `amount`)."""
    return db.append_event(EventKind.ALLOWANCE, summary, actor=actor, detail={"allowance": allowance, **detail})


# -- the agent face (remote_gpu_trainer/agents/) ---------------------------------------------------------------------

def agent_tool_called(db: EventLog, *, tool: str, run_id: str | None, instance: str | None, outcome: str, actor: str,
                      arguments: dict[str, Any]) -> Event:
    """AGENT_TOOL, written once per call of an `rgt mcp` tool that changes something (a push, a launch, a pull, a
    request filed), when that call's work ended. Payload: the `tool`, its `outcome` in words ("ok", or the exit
    code and the one line of the refusal) and the `arguments` the agent passed, secrets already replaced."""
    return db.append_event(EventKind.AGENT_TOOL, f"agent tool {tool}: {outcome}", run_id=run_id, instance=instance,
                           actor=actor, detail={"tool": tool, "outcome": outcome, "arguments": arguments})


# -- recovery of a preempted run (services/recover/) ----------------------------------------------------------------

def recover_step(db: EventLog, *, run_id: str, instance: str | None, step: str, summary: str, actor: str,
                  detail: dict[str, Any]) -> Event:
    """RECOVER, written before each step recovery takes and for a person's approval or revocation of its limits
    (docs/remote-ops.md §10.1). Payload: the `step` (approved, revoked, decided, quoted, renting, rented, pushed,
    launching, launched, failed, notified, checkpoint_home) and what it carries (the limits and launch binding
    approved, the decision and its reasons, the quote, the box, the checkpoint kept home)."""
    return db.append_event(EventKind.RECOVER, summary, run_id=run_id, instance=instance, actor=actor,
                           detail={"step": step, **detail})
