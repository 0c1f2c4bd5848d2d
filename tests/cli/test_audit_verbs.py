"""`rgt audit` and `rgt finding` as a user runs them (their own process): the audit's JSON document
(rgt-audit/v1), findings raised once, an acknowledgement that survives a re-audit, --strict, bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.capsules import classification_items, write_capsule, write_split
from support.helpers import run_rgt, write_project

AUDIT = {"schema": str, "run": (str, type(None)), "audited_at": str, "checks": list, "raised": list,
         "findings": list}
FINDING = {"schema": str, "id": str, "check": str, "check_name": str, "subject": str, "severity": str,
           "status": str, "note": str, "disclosure": (str, type(None)), "message": str, "evidence": list,
           "values": dict, "claims": list, "integrity_class": str, "kind": str, "scope": str, "fingerprint": str,
           "first_seen": str, "last_seen": str, "status_changed_at": str, "status_by": str}


def rgt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_rgt(*args, cwd=root)


def audit_json(root: Path, *args: str, rc: int = 0) -> dict[str, Any]:
    result = rgt(root, "audit", *args, "--format", "json")
    assert result.returncode == rc, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A single-seed run (V04 fires, info) whose test split holds a copy of a training file (V14, error)."""
    root = tmp_path / "proj"
    write_project(root)
    write_capsule(root, "r1", "seed0", metrics={"acc": 0.8}, items=classification_items(100, correct=80))
    write_split(root, "main", {"train": [("a.png", b"same bytes"), ("b.png", b"other")],
                               "test": [("c.png", b"same bytes"), ("d.png", b"test only")]})
    return root


def by_check(document: dict[str, Any], check: str) -> list[dict[str, Any]]:
    return [f for f in document["findings"] if f["check"] == check]


def test_the_audit_document_has_its_schema_and_lists_every_check(project: Path) -> None:
    document = audit_json(project)
    for key, kinds in AUDIT.items():
        assert isinstance(document[key], kinds), key
    assert document["schema"] == "rgt-audit/v1"
    assert [c["id"] for c in document["checks"]] == [f"V{n:02d}" for n in range(0, 34)]
    [leak] = by_check(document, "V14")
    for key, kinds in FINDING.items():
        assert isinstance(leak[key], kinds), key
    assert leak["severity"] in ("error", "critical") and leak["status"] == "open"
    assert leak["id"] in document["raised"]


def test_a_finding_acknowledged_with_a_disclosure_is_not_raised_again(project: Path) -> None:
    first = audit_json(project)
    [seed] = by_check(first, "V04")
    moved = rgt(project, "finding", seed["id"], "--ack", "--note", "one seed by budget",
                "--disclosure", "single seed — no variance band")
    assert moved.returncode == 0, moved.stderr
    assert "acknowledged" in moved.stdout and "single seed — no variance band" in moved.stdout
    again = audit_json(project)
    [kept] = by_check(again, "V04")
    assert kept["status"] == "acknowledged" and kept["note"] == "one seed by budget"
    assert again["raised"] == []


def test_strict_exits_one_while_a_finding_at_warn_or_above_is_open(project: Path) -> None:
    strict = rgt(project, "audit", "--strict")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    [leak] = by_check(audit_json(project), "V14")
    waived = rgt(project, "finding", leak["id"], "--waive", "--note", "the copy is a planted test fixture")
    assert waived.returncode == 0, waived.stderr
    others = [f for f in audit_json(project)["findings"]
              if f["status"] == "open" and f["severity"] in ("warn", "error", "critical")]
    for f in others:
        assert rgt(project, "finding", f["id"], "--waive", "--note", "test").returncode == 0
    assert rgt(project, "audit", "--strict").returncode == 0


def test_the_report_carries_the_audit_and_strict_counts_its_findings(project: Path) -> None:
    audit_json(project)
    report = rgt(project, "--report", "--format", "json")
    assert report.returncode == 0, report.stderr
    verify = json.loads(report.stdout)["verify"]
    assert verify["audited_at"] and not verify["stale"]
    assert any(f["check"] == "V14" for f in verify["findings"])
    text = rgt(project, "--report").stdout
    assert "VERIFY · audited" in text and "[V14 split_hash_disjoint]" in text
    assert rgt(project, "--report", "--strict").returncode == 1


def test_an_acknowledgement_without_a_disclosure_is_refused_and_changes_nothing(project: Path) -> None:
    [seed] = by_check(audit_json(project), "V04")
    refused = rgt(project, "finding", seed["id"], "--ack", "--note", "why")
    assert refused.returncode == 2 and "needs a disclosure" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    [still] = by_check(audit_json(project), "V04")
    assert still["status"] == "open"


@pytest.mark.parametrize(("args", "message"), [
    (("audit", "--check", "V99"), "no VERIFY check 'V99'"),
    (("finding", "F-000404"), "no VERIFY finding F-000404"),
    (("audit", "nosuchrun"), "run 'nosuchrun' does not exist"),
])
def test_bad_input_is_one_line_and_exit_two(project: Path, args: tuple[str, ...], message: str) -> None:
    result = rgt(project, *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_malformed_metrics_file_is_a_finding_naming_it_and_mending_it_fixes_it(project: Path) -> None:
    metrics = project / "runs" / "r1" / "seed0" / "test" / "main" / "metrics.json"
    good = metrics.read_bytes()
    metrics.write_text("{not json", encoding="utf-8")
    [unreadable] = by_check(audit_json(project), "V00")
    assert unreadable["subject"] == "capsule:r1/seed0" and unreadable["severity"] == "error"
    assert "runs/r1/seed0/test/main/metrics.json: malformed JSON" in unreadable["message"]
    metrics.write_bytes(good)
    assert by_check(audit_json(project), "V00") == [], "a mended file fixes the finding (fixed ones are not listed)"
