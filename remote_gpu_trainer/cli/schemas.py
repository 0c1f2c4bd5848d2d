"""The JSON documents of `--format json`: one per verb, each with a versioned `schema` like the report's.

The contract (tests/cli/test_json_schemas.py checks every key and its type): keys are only ever added,
never renamed or removed, within a schema version; times are ISO-8601 UTC with a `Z`; every string is
escaped like the report's (cli/printers.py); no document carries a credential (events hold what the event
log holds, info names where credentials come from, never a value).

rgt-events/v1   {schema, run: str|null, events: [{seq: int, at: str, kind: str, actor: str,
                 run_id: str|null, instance: str|null, summary: str, detail: object}]}
rgt-verify/v1   {schema, run: str, ok: bool, local_root: str, manifest_sha256: str|null, marker: str|null,
                 files: [{path: str, bytes: int, sha256: str, status: str, detail: str}],
                 errors: [{code: str, path: str, detail: str}]}
rgt-pull/v1     {schema, run: str, ok: bool, local_root: str, manifest_sha256: str, bytes: int,
                 files: [str], fetched: [str], present: [str], failed: [{code: str, path: str, detail: str}]}
rgt-info/v1     {schema, version: str, python: {version: str, executable: str}, packages: {name: str},
                 project_file: str|null, state_database: str|null, evidence_store: str|null,
                 simulated_disks: str|null, terminal: {TERM: str, NO_COLOR: bool, ESCDELAY: str|null}}
rgt-watch/v1    {schema, run: str, at: str, state: str, detail: str, alerts: [{severity: str, title: str,
                 message: str, fix: str, signature: str}]}
rgt-status/v1   {schema, generated_at: str, currency: str, burn_per_hour: float, complete: bool,
                 instances: [{project: str, root: str, name: str, provider: str, id: str, state: str,
                 burn_per_hour: float, cost_so_far: float, currency: str, estimate: bool, idle_s: float|null,
                 runs: [{id: str, liveness: str, detail: str}], note: str}],
                 orphans: [{provider: str, account: str, id: str, name: str, state: str,
                 price_per_hour: float|null, price_source: str, currency: str, bills: bool, mark: str,
                 burn_per_hour: float, estimate: bool, unknown_price: bool}],
                 projects: [{root: str, name: str|null, status: str, detail: str, instances: int}],
                 errors: [str]}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.clock import iso_z

if TYPE_CHECKING:
    from remote_gpu_trainer.audits.liveness import Liveness
    from remote_gpu_trainer.audits.manifest import Problem
    from remote_gpu_trainer.fleet_views import FleetView
    from remote_gpu_trainer.services.evidence.pull import PullResult
    from remote_gpu_trainer.services.evidence.verify import VerifyResult
    from remote_gpu_trainer.services.watch.log_monitor import Alert
    from remote_gpu_trainer.state.events import Event

EVENTS_SCHEMA = "rgt-events/v1"
VERIFY_SCHEMA = "rgt-verify/v1"
PULL_SCHEMA = "rgt-pull/v1"
INFO_SCHEMA = "rgt-info/v1"
WATCH_SCHEMA = "rgt-watch/v1"
STATUS_SCHEMA = "rgt-status/v1"


def events_document(events: Sequence[Event], run_id: str | None) -> dict[str, Any]:
    return {
        "schema": EVENTS_SCHEMA,
        "run": run_id,
        "events": [{"seq": e.seq, "at": iso_z(e.at), "kind": e.kind, "actor": e.actor, "run_id": e.run_id,
                    "instance": e.instance, "summary": e.summary, "detail": e.detail} for e in events],
    }


def verify_document(run_id: str, local_root: Path, outcome: VerifyResult) -> dict[str, Any]:
    return {
        "schema": VERIFY_SCHEMA,
        "run": run_id,
        "ok": outcome.ok,
        "local_root": str(local_root),
        "manifest_sha256": outcome.manifest_sha256,
        "marker": str(outcome.marker) if outcome.marker is not None else None,
        "files": [{"path": f.path, "bytes": f.bytes, "sha256": f.sha256, "status": f.status, "detail": f.detail}
                  for f in outcome.files],
        "errors": _problems(outcome.errors),
        "cells": [{"cell": c.cell, "state": c.state, "exit_code": c.exit_code} for c in outcome.cells],
    }


def pull_document(run_id: str, local_root: Path, result: PullResult) -> dict[str, Any]:
    return {
        "schema": PULL_SCHEMA,
        "run": run_id,
        "ok": result.ok,
        "local_root": str(local_root),
        "manifest_sha256": result.manifest_sha256,
        "bytes": result.bytes,
        "files": list(result.files),
        "fetched": list(result.fetched),
        "present": list(result.present),
        "failed": _problems(result.failed),
    }


def watch_document(run_id: str, at: str, liveness: Liveness, alerts: Sequence[Alert]) -> dict[str, Any]:
    return {
        "schema": WATCH_SCHEMA,
        "run": run_id,
        "at": at,
        "state": liveness.state,
        "detail": liveness.detail,
        "alerts": [{"severity": a.severity, "title": a.title, "message": a.message, "fix": a.fix,
                    "signature": a.signature} for a in alerts],
    }


def status_document(view: FleetView) -> dict[str, Any]:
    """`rgt status --format json`: the view's fields in a fixed order (docs/formats.md)."""
    return {
        "schema": STATUS_SCHEMA, "generated_at": iso_z(view.generated_at), "currency": view.currency,
        "burn_per_hour": float(view.burn_per_hour), "complete": view.complete,
        "instances": [{**dataclasses.asdict(box), "burn_per_hour": float(box.burn_per_hour),
                       "cost_so_far": float(box.cost_so_far)} for box in view.instances],
        "orphans": [{**dataclasses.asdict(orphan), "price_per_hour": None if orphan.price_per_hour is None
                     else float(orphan.price_per_hour), "burn_per_hour": float(orphan.burn_per_hour)}
                    for orphan in view.orphans],
        "projects": [dataclasses.asdict(project) for project in view.projects],
        "errors": list(view.errors),
    }


def info_document(facts: dict[str, Any]) -> dict[str, Any]:
    """`facts` is what cli/project_verbs.info_facts gathered; the document fixes its keys and order."""
    return {"schema": INFO_SCHEMA, **{key: facts[key] for key in (
        "version", "python", "packages", "project_file", "state_database", "evidence_store", "simulated_disks",
        "terminal")}}


def _problems(problems: Sequence[Problem]) -> list[dict[str, str]]:
    return [{"code": p.code, "path": p.path, "detail": p.detail} for p in problems]
