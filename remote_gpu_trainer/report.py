"""`rgt --report`: one Overview rendered as text, Markdown or JSON (docs/architecture.md §3.5, docs/ux.md §8).

Stable ordering and fixed widths so two reports over the same state diff cleanly; JSON keys in contract
order; money rounded only when rendered as text.

Much of a report is text from the box (file names, checkpoint load errors, log lines as findings evidence,
liveness details, provider errors in instance notes, gate reasons quoting paths). Every string is passed
through `escape_control` first, in every format, so `cat report.txt` or a JSON viewer cannot be made to
recolour the terminal, move the cursor or forge a line.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.clock import iso_z
from remote_gpu_trainer.text import (
    cadence_line,
    duration,
    escape_all,
    location_drift_line,
    money,
    recovery_line,
    short_hash,
    size,
)
from remote_gpu_trainer.views import (
    AuditFindingView,
    AuditView,
    CadenceView,
    ClaimView,
    Overview,
    RecoveryView,
    ResultRowView,
    ResultsView,
    RunResultsView,
    RunView,
)

if TYPE_CHECKING:
    from remote_gpu_trainer.request_views import RequestView

SCHEMA = "rgt-report/v1"
FORMATS = ("text", "markdown", "json")


def to_dict(overview: Overview) -> dict[str, Any]:
    overview = escape_all(overview)
    return {
        "schema": SCHEMA,
        "generated_at": iso_z(overview.generated_at),
        "project": overview.project,
        "results": results_dict(overview.results),
        "meter": {"currency": overview.currency, "total": round(overview.total, 6),
                  "burn_per_hour": round(overview.burn_per_hour, 6)},
        "instances": [
            {"name": i.name, "provider": i.provider, "id": i.id, "state": i.state, "gpu": i.gpu,
             "price_per_hour": i.price_per_hour, "price_source": i.price_source, "billing": i.billing,
             "cost_so_far": round(i.cost_so_far, 6), "verified_month": i.verified_month, "stale": i.stale,
             "burn_per_hour": round(i.burn_per_hour, 6), "estimate": i.estimate, "note": i.note,
             "eta_s": _round(i.eta_s), "cost_to_finish": _round(i.cost_to_finish), "facts_age": i.facts_age,
             "drift": i.drift,
             # added 2026-12-06: the box's teardown gate, as `rgt down` decides it (docs/gate.md §7.2)
             "gate": None if i.gate_open is None else {"open": i.gate_open, "reasons": list(i.gate_reasons),
                                                       "at_risk": list(i.at_risk)}}
            for i in sorted(overview.instances, key=lambda i: i.name)
        ],
        "runs": [_run_dict(r) for r in sorted(overview.runs, key=lambda r: r.id)],
        "alerts": list(overview.alerts),
        "verify": audit_dict(overview.audit),
        # added 2026-12-07: the approval inbox (docs/agents.md): open requests, then the latest decided ones
        "requests": [request_dict(r) for r in overview.requests],
    }


def request_dict(r: RequestView) -> dict[str, Any]:
    """One request as the report and the agent's `rgt_requests` show it: who asked, who decided, what it does."""
    return {"id": r.id, "kind": r.kind, "state": r.state, "subject": r.subject, "filed_at": iso_z(r.filed_at),
            "filed_by": r.filed_by, "why": r.why, "decided_by": r.decided_by, "state_at": iso_z(r.state_at),
            "outcome": r.outcome, "allowance": r.allowance, "price_per_hour": r.plan.price_per_hour,
            "irreversible": r.plan.irreversible, "blocked": list(r.plan.blocked), "plan": list(r.plan.lines),
            "digest": r.plan.digest}


def request_line(r: RequestView) -> str:
    """`Q-000001 teardown of box: pending · filed by agent:claude-code · why`; the decision when there is one."""
    decided = f" · {r.state} by {r.decided_by}" if r.decided_by else ""
    outcome = f": {r.outcome}" if r.outcome and r.state != "pending" else ""
    return (f"{r.id} {r.kind} of {r.subject}: {r.state} · filed by {r.filed_by}{decided}{outcome} · "
            f"why: {r.why}")


def results_dict(results: ResultsView) -> dict[str, Any]:
    """The report's `results` (docs/formats.md): per run its metrics at full precision, time, cost and tracker
    links, then the claims of EVIDENCE.json with their disclosures."""
    return {
        "runs": [_run_results_dict(run) for run in results.runs],
        "claims": [{"id": c.id, "statement": c.statement, "state": c.state, "numbers": list(c.numbers),
                    "disclosure": c.disclosure or None, "findings": list(c.findings),
                    "disclosures": [dict(items) or None for items in c.items]} for c in results.claims],
        "evidence_note": results.evidence_note,
    }


def _run_results_dict(run: RunResultsView) -> dict[str, Any]:
    return {
        "id": run.id, "status": "results" if run.rows else "no_results", "cells": run.cells,
        "metrics": [{"test_id": r.test_id, "split": r.split, "metric": r.metric, "direction": r.direction,
                     "arrow": r.arrow, "unit": r.unit, "mean": r.mean, "std": r.std, "seeds": r.seeds, "n": r.n,
                     "cells": list(r.cells), "curve": r.curve, "best": r.best, "last": r.last, "note": r.note,
                     "source": r.source, "sources": list(r.sources)}
                    for r in run.rows],
        "started_at": iso_z(run.started_at) if run.started_at else None,
        "finished_at": iso_z(run.finished_at) if run.finished_at else None,
        "wall_s": _round(run.wall_s), "wall_source": run.wall_source,
        "cost": {"amount": _round(run.cost), "currency": run.currency, "estimate": run.cost_estimate,
                 "shared_with": list(run.shared_with), "note": run.cost_note},
        "trackers": list(run.trackers),
        "left_out": list(run.left_out),
    }


FINDING_SCHEMA = "remote-gpu-trainer/FINDING/v1"


FINDING_SCHEMA = "remote-gpu-trainer/FINDING/v1"


def finding_dict(f: AuditFindingView) -> dict[str, Any]:
    """A VERIFY finding record as docs/verify.md §3 shows it."""
    return {
        "schema": FINDING_SCHEMA, "id": f.id, "check": f.check, "check_name": f.check_name, "subject": f.subject,
        "severity": f.severity, "status": f.status, "note": f.note, "disclosure": f.disclosure or None,
        "message": f.message, "fix": f.fix, "evidence": [{"path": p, "sha256": sha} for p, sha in f.evidence],
        "values": f.values, "claims": list(f.claims), "integrity_class": f.integrity_class, "kind": f.kind,
        "scope": f.scope, "fingerprint": f.fingerprint, "first_seen": iso_z(f.first_seen),
        "last_seen": iso_z(f.last_seen), "status_changed_at": iso_z(f.status_changed_at), "status_by": f.status_by,
        "reopened_reason": f.reopened_reason,
    }


def audit_dict(audit: AuditView) -> dict[str, Any]:
    """The latest audit: when it ran, whether inputs changed since, every check's answer, every record."""
    return {
        "audited_at": iso_z(audit.audited_at) if audit.audited_at is not None else None,
        "stale": audit.stale,
        "checks": [{"id": c.id, "name": c.name, "title": c.title, "kind": c.kind, "status": c.status, "note": c.note,
                    "findings": c.findings} for c in audit.checks],
        "findings": [finding_dict(f) for f in audit.sorted_findings()],
    }


def _run_dict(run: RunView) -> dict[str, Any]:
    return {
        "id": run.id,
        "instance": run.instance,
        "evidence_state": run.evidence_state,
        "liveness": run.liveness,
        "checkpoints": [
            {"path": c.path, "bytes": c.bytes, "sha256": c.sha256, "status": c.status, "detail": c.detail}
            for c in sorted(run.checkpoints, key=lambda c: c.path)
        ],
        "gate": {"open": run.gate.open, "action": run.gate.action, "destroys": list(run.gate.destroys),
                 "reasons": list(run.gate.reasons)},
        "findings": [
            {"id": f.id, "check": f.check, "severity": f.severity, "status": f.status, "message": f.message,
             "fix": f.fix, "count": f.count, "evidence": f.evidence}
            for f in run.sorted_findings()
        ],
        "checklist": [{"id": c.id, "title": c.title, "status": c.status, "note": c.note} for c in run.checklist],
        "liveness_detail": run.liveness_detail,
        "environment": [{"id": r.id, "check": r.check, "status": r.status, "detail": r.detail}
                        for r in run.environment],
        "step": run.step,
        "total_steps": run.total_steps,
        "eta_s": _round(run.eta_s),
        "sentinel": run.sentinel or None,
        "checkpoint_cadence": _cadence_json(run.checkpoint_cadence),
        "location_drift": [{"key": d.key, "launched": _drift_json(d.launched), "now": _drift_json(d.now)}
                           for d in run.location_drift],
        "recovery": _recovery_json(run.recovery),
    }


def _recovery_json(view: RecoveryView | None) -> dict[str, object] | None:
    """runs[].recovery (docs/formats.md, Report JSON): null for a run without `recover` limits."""
    if view is None:
        return None
    return {"approved": view.approved, "why_not": view.why_not or None, "restarts_used": view.restarts_used,
            "max_restarts": view.max_restarts, "spent": _round(view.spent), "max_spend": _round(view.max_spend),
            "currency": view.currency, "until": view.until, "checkpoint_age_s": _round(view.checkpoint_age_s),
            "last": view.last or None, "checkpoint_home": view.home or None, "checkpoint_home_age_s":
            _round(view.home_age_s), "checkpoint_home_every_s": _round(view.home_every_s),
            "checkpoint_home_cells": view.home_cells, "cells": view.cells,
            "preempted_seen": view.preempted_seen or None}


def _drift_json(value: str | tuple[str, ...] | None) -> str | list[str] | None:
    """runs[].location_drift values (docs/formats.md, Report JSON): a string, a list (roster), or null (unset)."""
    return list(value) if isinstance(value, tuple) else value


def _cadence_json(view: CadenceView | None) -> dict[str, object] | None:
    """runs[].checkpoint_cadence (docs/formats.md, Report JSON): the Young/Daly figures, null when unknown."""
    if view is None:
        return None
    return {"interval_s": _round(view.interval_s), "write_s": _round(view.write_s), "write_source": view.write_source,
            "mtbp_s": _round(view.mtbp_s), "mtbp_source": view.mtbp_source, "iterations": view.iterations,
            "s_per_iteration": _round(view.s_per_iteration), "newest_age_s": _round(view.newest_age_s),
            "overdue": view.overdue}


def _round(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


def render(overview: Overview, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_dict(overview), indent=2, ensure_ascii=False) + "\n"  # to_dict escapes it
    overview = escape_all(overview)
    if fmt == "markdown":
        return _markdown(overview)
    return _text(overview)


def needs_attention(overview: Overview) -> list[str]:
    """What `--strict` exits 1 for (docs/ux.md §8)."""
    reasons = []
    for run in overview.runs:
        if not run.gate.evidence_ok:
            reasons.append(f"run {run.id}: results not pulled and verified here")
        if any(f.severity in ("warn", "error", "critical") and f.status == "open" for f in run.findings):
            reasons.append(f"run {run.id}: open findings")
        if run.liveness == "unknown" and run.evidence_state != "planned_not_started":
            reasons.append(f"run {run.id}: liveness unknown")
    reasons.extend(f"instance {i.name}: billing facts stale" for i in overview.instances if i.stale)
    open_findings = [f for f in overview.audit.findings
                   if f.status == "open" and f.severity in ("warn", "error", "critical")]
    if open_findings:
        reasons.append(f"VERIFY: {len(open_findings)} open finding(s) at warn or above")
    return reasons


def _text(o: Overview) -> str:
    out = [
        f"rgt report · project {o.project} · generated {iso_z(o.generated_at)}",
        f"meter: total {money(o.total, o.currency)} · burning {money(o.burn_per_hour, o.currency)}/h",
    ]
    out.extend(o.alerts)
    out.extend(_results_text(o.results))
    out.append("")
    out.append("INSTANCES")
    out.append(f"  {'name':<14} {'provider':<9} {'state':<11} {'price/h':>10} {'source':<8} {'spent':>10}"
               f" {'billing':<14} facts")
    for i in o.instances:
        facts = f"{i.verified_month}{' STALE' if i.stale else ''}"
        out.append(f"  {i.name:<14} {i.provider:<9} {i.state:<11} {money(i.price_per_hour, i.currency):>10}"
                   f" {i.price_source:<8} {money(i.cost_so_far, i.currency):>10} {i.billing:<14} {facts}")
    out.extend(f"  {i.name}: billing facts {i.facts_age}" for i in o.instances if i.stale)
    out.extend(f"  {i.name}: {i.note}" for i in o.instances if i.state == "unknown" and i.note)  # e.g. a timeout
    for i in o.instances:
        if i.gate_open is not None:
            risk = f" · at risk: {', '.join(i.at_risk)}" if i.at_risk else ""
            out.append(f"  {i.name}: teardown gate {'OPEN' if i.gate_open else 'CLOSED'}{risk}")
            out.extend(f"    - {reason}" for reason in i.gate_reasons)
    for run in o.runs:
        out.append("")
        out.append(f"RUN {run.id} on {run.instance}: {run.evidence_state} · liveness {run.liveness}"
                   f" ({run.liveness_detail})")
        out.extend(f"  {note}" for note in _run_notes(run))
        gate = "OPEN" if run.gate.open else "CLOSED"
        out.append(f"  gate {gate}: {run.gate.action}")
        out.extend(f"    - {reason}" for reason in run.gate.reasons)
        out.append("  checkpoints:")
        if not run.checkpoints:
            out.append("    (none yet: the manifest is built when the run finishes)")
        for c in run.checkpoints:
            out.append(f"    {c.status:<14} {c.path:<34} {size(c.bytes):>10} {short_hash(c.sha256)}  {c.detail}")
        if run.step is not None:
            eta = f" · ETA {duration(run.eta_s)}" if run.eta_s is not None else ""
            out.append(f"  training: step {run.step}{f'/{run.total_steps}' if run.total_steps else ''}{eta}")
        if run.findings:
            out.append("  findings:")
            for f in run.sorted_findings():
                count = f" ×{f.count}" if f.count > 1 else ""
                out.append(f"    {f.severity:<8} {f.status:<12} {f.id:<4} {f.message}{count}")
                if f.fix:
                    out.append(f"      fix: {f.fix}")
        if run.environment:
            out.append("  environment (phase-0 audit):")
            out.extend(f"    [{r.status:<7}] {r.id:>2} {r.check:<22} {r.detail}" for r in run.environment)
        out.append("  checklist:")
        out.extend(f"    [{c.status:<14}] {c.id} {c.title}" + (f" — {c.note}" if c.note else "")
                   for c in run.checklist)
    out.extend(_audit_text(o.audit))
    out.extend(_requests_text(o))
    return "\n".join(out) + "\n"


def _run_notes(run: RunView) -> list[str]:
    """What the text report says of a run under its heading, each when there is something to say: its launch's
    drift from rgt.toml, the sentinel, the Young/Daly cadence, its recovery."""
    notes = [location_drift_line(run.location_drift)] if run.location_drift else []
    notes += [f"sentinel: {run.sentinel}"] if run.sentinel else []
    notes += [cadence_line(run.checkpoint_cadence)] if run.checkpoint_cadence is not None else []
    return notes + ([recovery_line(run.recovery)] if run.recovery is not None else [])


def _requests_text(o: Overview) -> list[str]:
    if not o.requests:
        return []
    return ["", f"REQUESTS (the approval inbox: {o.pending_requests} pending; `rgt approve ID` decides one)",
            *(f"  {request_line(r)}" for r in o.requests)]


def _num(value: float | None) -> str:
    """Six significant digits at render; the JSON keeps full precision."""
    return "—" if value is None else f"{value:.6g}"


def _value(row: ResultRowView) -> str:
    unit = f" {row.unit}" if row.unit else ""
    spread = f" ± {_num(row.std)}" if row.std is not None else " (single seed: no std)"
    return f"{_num(row.mean)}{unit}{spread}"


def _facts(row: ResultRowView) -> str:
    return f"{row.split or '?'}, n={row.n if row.n is not None else '?'}, {row.seeds} seed{'s' * (row.seeds != 1)}"


def _sources(row: ResultRowView, shown: int = 3) -> str:
    """The format and the first files the row's values were read from (the JSON lists every one)."""
    more = f", … {len(row.sources) - shown} more" if len(row.sources) > shown else ""
    return f"{row.source or '?'}: {', '.join(row.sources[:shown])}{more}"


def _from(row: ResultRowView) -> str:
    """`from <format>: <files>` for a row not read from rgt's own capsules, else nothing."""
    return f"from {_sources(row)}" if row.sources and row.source != "capsule" else ""


def _curve(row: ResultRowView) -> str:
    return f"best {_num(row.best)} · last {_num(row.last)} ({row.curve})" if row.curve else "no training curve"


WALL_FROM = {"capsules": "run.json created_at to closed_at", "launch": "launch to finish",
             "running": "launch to now: still running"}


def _wall_and_cost(run: RunResultsView) -> str:
    wall = f"wall {duration(run.wall_s)} ({WALL_FROM.get(run.wall_source or '', run.wall_source)})" \
        if run.wall_s is not None else "wall —"
    cost = f"cost {money(run.cost, run.currency)}{' estimate' if run.cost_estimate else ''}" \
        if run.cost is not None else "cost —"
    return f"{wall} · {cost}" + (f" ({run.cost_note})" if run.cost_note else "")


def _results_text(results: ResultsView) -> list[str]:
    """The report opens with this: each run's results, then the claims (docs/deliver.md §8)."""
    out = ["", "RESULTS"]
    if not results.runs:
        out.append("  no runs yet")
    for run in results.runs:
        out.append(f"  run {run.id}: {_wall_and_cost(run)}")
        if not run.rows:
            out.append("    no results yet")
        if run.left_out:
            out.append(f"    left out of the numbers (did not finish, as the box recorded): {', '.join(run.left_out)}")
        for row in run.rows:
            out.append(f"    {row.test_id} {row.metric} {row.arrow}  {_value(row)}  ({_facts(row)})  {_curve(row)}")
            if row.note:
                out.append(f"      note: {row.note}")
            if _from(row):
                out.append(f"      {_from(row)}")
        out.extend(f"    tracker: {url}" for url in run.trackers)
    out += ["", "EVIDENCE"]
    if results.evidence_note:
        out.append(f"  {results.evidence_note}")
    for claim in results.claims:
        out.append(f"  {claim.id} [{claim.state}] {claim.statement}")
        lines = claim.item_lines()
        for index, number in enumerate(claim.numbers):
            out.append(f"    {number}")
            if index < len(lines) and lines[index] is not None:
                out.append(f"      {lines[index]}")
        if claim.disclosure:
            out.append(f"    disclosure: {claim.disclosure}")
        if claim.findings:
            out.append(f"    findings: {', '.join(claim.findings)}")
    return out


def _results_markdown(results: ResultsView) -> list[str]:
    out = ["## Results", ""]
    if not results.runs:
        out += ["No runs yet.", ""]
    for run in results.runs:
        out += [f"### Run {run.id}", "", _cell(_wall_and_cost(run)) + ".", ""]
        out.extend(f"Tracker: {_cell(url)}" for url in run.trackers)
        out += [""] if run.trackers else []
        if run.left_out:
            out += [_cell(f"Left out of the numbers (did not finish, as the box recorded): {', '.join(run.left_out)}"),
                    ""]
        if not run.rows:
            out += ["No results yet.", ""]
            continue
        out += ["| test | metric | | mean ± std | split, n, seeds | best · last (curve) | note |",
                "|---|---|:-:|---:|---|---|---|"]
        out.extend(f"| {_cell(r.test_id)} | {_cell(r.metric)} | {r.arrow} | {_cell(_value(r))} | {_cell(_facts(r))} "
                   f"| {_cell(_curve(r))} | {_cell('; '.join(filter(None, [r.note, _from(r)])))} |"
                   for r in run.rows)
        out.append("")
    out += ["## Evidence", ""]
    if results.evidence_note:
        out += [_cell(results.evidence_note) + ".", ""]
    if results.claims:
        out += ["| claim | state | statement | numbers | disclosure | findings |", "|---|---|---|---|---|---|"]
        out.extend(f"| {_cell(c.id)} | {_cell(c.state)} | {_cell(c.statement)} | "
                   f"{'<br>'.join(_cell(n) for n in _with_items(c))} | {_cell(c.disclosure)} | "
                   f"{_cell(', '.join(c.findings))} |" for c in results.claims)
        out.append("")
    return out


def _audit_line(audit: AuditView) -> str:
    if audit.audited_at is None:
        return "no audit has run yet (rgt audit)"
    stale = " · inputs changed since: run `rgt audit`" if audit.stale else ""
    counts = {s: sum(1 for c in audit.checks if c.status == s) for s in ("pass", "findings", "skipped")}
    return (f"audited {iso_z(audit.audited_at)}: {counts['pass']} pass, {counts['findings']} with findings, "
            f"{counts['skipped']} skipped{stale}")


def _audit_text(audit: AuditView) -> list[str]:
    out = ["", f"VERIFY · {_audit_line(audit)}"]
    for f in audit.sorted_findings():
        if f.status == "fixed":
            continue
        out.append(f"  {f.severity:<8} {f.status:<12} {f.id} [{f.check} {f.check_name}] {f.subject}: {f.message}")
        if f.disclosure:
            out.append(f"      disclosure: {f.disclosure}")
        if f.note:
            out.append(f"      note: {f.note}")
    return out


def _cell(text: str) -> str:
    """Markdown table cells: text from a box (a file named `<img onerror=…>.pth` or `[x](javascript:…)`) is shown
    as the characters it is, never as HTML or a link (`<` and `>` as entities, `](` broken by a backslash), and a
    pipe never splits the row. Brackets and underscores alone stay as written: they make no link."""
    return (text.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")
            .replace("](", "]\\("))


def _markdown(o: Overview) -> str:
    out = [f"# rgt report: {o.project}", "", f"Generated {iso_z(o.generated_at)}. "
           f"Meter: total {money(o.total, o.currency)}, burning {money(o.burn_per_hour, o.currency)}/h.", ""]
    out.extend(f"> {alert}" for alert in o.alerts)
    out.extend(_results_markdown(o.results))
    out += ["## Instances", "", "| name | provider | state | price/h | source | spent | billing | facts verified |",
            "|---|---|---|---:|---|---:|---|---|"]
    for i in o.instances:
        out.append(f"| {i.name} | {i.provider} | {i.state} | {money(i.price_per_hour, i.currency)} | "
                   f"{i.price_source} | {money(i.cost_so_far, i.currency)} | {i.billing} | "
                   f"{i.verified_month}{' (stale)' if i.stale else ''} |")
    for run in o.runs:
        out += ["", f"## Run {run.id}", "",
                f"Instance {run.instance}; evidence state **{run.evidence_state}**; liveness **{run.liveness}** "
                f"({run.liveness_detail}).{f' Sentinel: {run.sentinel}.' if run.sentinel else ''}", "",
                *([_cell(location_drift_line(run.location_drift)), ""] if run.location_drift else []),
                f"Gate: **{'open' if run.gate.open else 'closed'}** — {run.gate.action}", ""]
        out.extend(f"- {reason}" for reason in run.gate.reasons)
        if run.findings:
            out += ["", "| severity | status | id | finding | fix |", "|---|---|---|---|---|"]
            out.extend(f"| {f.severity} | {f.status} | {f.id} | {_cell(f.message)} | {_cell(f.fix)} |"
                       for f in run.sorted_findings())
        out += ["", "| status | path | size | sha256 | detail |", "|---|---|---:|---|---|"]
        out.extend(f"| {c.status} | {_cell(c.path)} | {size(c.bytes)} | {short_hash(c.sha256)} | {_cell(c.detail)} |"
                   for c in run.checkpoints)
        if run.environment:
            out += ["", "| environment | check | status | detail |", "|---:|---|---|---|"]
            out.extend(f"| {r.id} | {r.check} | {r.status} | {_cell(r.detail)} |" for r in run.environment)
        out += ["", "| checklist | item | status | note |", "|---|---|---|---|"]
        out.extend(f"| {c.id} | {c.title} | {c.status} | {_cell(c.note)} |" for c in run.checklist)
    out += ["", "## VERIFY", "", _audit_line(o.audit) + "."]
    shown = [f for f in o.audit.sorted_findings() if f.status != "fixed"]
    if shown:
        out += ["", "| severity | status | id | check | subject | finding | disclosure |",
                "|---|---|---|---|---|---|---|"]
        out.extend(f"| {f.severity} | {f.status} | {f.id} | {f.check} {f.check_name} | {_cell(f.subject)} | "
                   f"{_cell(f.message)} | {_cell(f.disclosure)} |" for f in shown)
    if o.requests:
        out += ["", "## Requests", "", f"{o.pending_requests} pending; `rgt approve ID` decides one.", "",
                "| id | kind | subject | state | filed by | decided by | why |", "|---|---|---|---|---|---|---|"]
        out.extend(f"| {r.id} | {r.kind} | {_cell(r.subject)} | {r.state} | {_cell(r.filed_by)} | "
                   f"{_cell(r.decided_by or '')} | {_cell(r.why)} |" for r in o.requests)
    return "\n".join(out) + "\n"


def _with_items(claim: ClaimView) -> list[str]:
    """Each number, then its D1–D8 line when the claim was built."""
    lines = claim.item_lines()
    return [text for i, number in enumerate(claim.numbers)
            for text in (number, *(line for line in lines[i:i + 1] if line is not None))]
