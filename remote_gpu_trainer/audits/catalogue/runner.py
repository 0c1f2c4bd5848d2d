"""The VERIFY catalogue: which checks exist (assets/catalogue.toml), which function answers each, and the one loop
that runs them over a project (docs/verify.md §2).

Each section module (comparability, statistics, metric_sanity, leakage, collapse, smoke, integrity) exports
`CHECKS`, a dict from check id to a pure function `(ProjectEvidence, params) -> CheckResult`. A check's params
are its defaults from assets/catalogue.toml with rgt.toml `[verify.<name>]` laid over them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from remote_gpu_trainer.audits.catalogue import attribution
from remote_gpu_trainer.audits.catalogue.model import (
    CheckResult,
    EvidenceRef,
    Finding,
    ProjectEvidence,
    result,
    skipped,
)
from remote_gpu_trainer.shipped_toml import ASSETS, read_asset

CATALOGUE_PATH = ASSETS / "catalogue.toml"
SECTIONS = (  # V00 (inputs_readable) is here, in the catalogue itself
    "comparability", "statistics", "metric_sanity", "leakage", "collapse", "smoke", "integrity", "documents")

INTERNAL_ERROR = "internal error in this check (a bug in rgt: please report it)"
CheckFn = Callable[[ProjectEvidence, Mapping[str, Any]], CheckResult]


@dataclass(frozen=True)
class CheckSpec:
    """One check as assets/catalogue.toml declares it: its id, name, kind (auto or probe), section, fix, title and
    default params, over which rgt.toml's `[verify.<name>]` is laid."""

    id: str
    name: str
    kind: str  # auto | probe
    section: str
    fix: str
    params: Mapping[str, Any]
    title: str = ""


@cache
def specs() -> dict[str, CheckSpec]:
    """assets/catalogue.toml's checks, in id order."""
    data = read_asset(CATALOGUE_PATH)
    table = data.get("checks", {})
    return {cid: CheckSpec(cid, row["name"], row["kind"], row["section"], row.get("fix", ""),
                           dict(row.get("params", {})), row.get("title", row["name"]))
            for cid, row in sorted(table.items())}


def by_name(name: str) -> CheckSpec | None:
    """A check by its id (`V04`) or its name (`seed_count`), as rgt.toml and the CLI spell it."""
    table = specs()
    if name.upper() in table:
        return table[name.upper()]
    return next((spec for spec in table.values() if spec.name == name), None)


@cache
def functions() -> dict[str, CheckFn]:
    """Every section's CHECKS; a section module that is not written yet contributes nothing."""
    found: dict[str, CheckFn] = {"V00": inputs_readable}
    for section in SECTIONS:
        try:
            module = importlib.import_module(f"remote_gpu_trainer.audits.catalogue.{section}")
        except ModuleNotFoundError as exc:
            if exc.name != f"remote_gpu_trainer.audits.catalogue.{section}":
                raise
            continue
        found.update(module.CHECKS)
    return found


def inputs_readable(project: ProjectEvidence, params: Mapping[str, Any]) -> CheckResult:
    """V00: every evidence file that is there parses as its format says. A malformed metrics.json, a results
    table without `item_id`, YAML that is not a mapping: an error naming the file, so a check that then skips
    for want of it is never a silent pass. One finding per capsule (or per other file), its problems joined."""
    grouped: dict[str, list[str]] = {}
    for problem in dict.fromkeys(project.problems):
        grouped.setdefault(_input_subject(project, problem.path), []).append(f"{problem.path}: {problem.message}")
    findings = [Finding("V00", subject, "error", "; ".join(messages), values={"problems": len(messages)},
                        evidence=tuple(EvidenceRef(m.split(": ")[0]) for m in messages),
                        disclosure=f"unreadable evidence: {messages[0].split(': ')[0]}")
                for subject, messages in sorted(grouped.items())]
    judged = [c.subject for c in project.capsules] + [f"file:{s.path}" for s in project.splits]
    judged += ["file:EVIDENCE.json"] + [f"file:runs/{run}/PULL_MANIFEST.json" for run in project.manifests]
    return result("V00", "inputs_readable", findings, judged)


def _input_subject(project: ProjectEvidence, path: str) -> str:
    capsule = next((c for c in project.capsules if path.startswith(c.path + "/")), None)
    return capsule.subject if capsule is not None else f"file:{path}"


def params_for(spec: CheckSpec, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Defaults with rgt.toml `[verify.<name>]` (or `[verify.<ID>]`) laid over them."""
    merged = dict(spec.params)
    merged.update(overrides.get(spec.name, {}))
    merged.update(overrides.get(spec.id, {}))
    return merged


def run_check(project: ProjectEvidence, spec: CheckSpec,
              overrides: Mapping[str, Mapping[str, Any]] | None = None) -> CheckResult:
    function = functions().get(spec.id)
    if function is None:
        return skipped(spec.id, spec.name, "not implemented in this rgt", kind=spec.kind)
    try:
        return function(project, params_for(spec, overrides or {}))
    except Exception as exc:  # noqa: BLE001 - one check's bug must not take the audit (or the dashboard) down
        return skipped(spec.id, spec.name, f"{INTERNAL_ERROR}: {type(exc).__name__}: {exc}"[:300], kind=spec.kind)


def run_all(project: ProjectEvidence, overrides: Mapping[str, Mapping[str, Any]] | None = None,
            only: set[str] | None = None) -> list[CheckResult]:
    """Every check of the catalogue, in id order (the panel's and the report's order). The cells of runs that
    have no data yet are taken out of the numbers first (audits/catalogue/attribution.py): a check never reads an
    unpulled run's absence as a result, and one left with nothing to judge says it did not run, and why."""
    ctx = attribution.context(project)
    judged, lost = attribution.without_waiting(project, ctx)
    answers = []
    for cid, spec in specs().items():
        if only is not None and cid not in only:
            continue
        answer = run_check(judged, spec, overrides)
        status, note = attribution.project_not_run(answer.status, answer.note, project, ctx, lost)
        answers.append(answer if status == answer.status else replace(answer, status=status, note=note))
    return answers
