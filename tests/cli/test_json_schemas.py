"""`--format json` of events, verify, pull, info and watch --once: every key and its type, on a real sim
project driven through the installed module (up, run, watch, then verify before and after the pull).

The schemas are versioned like the report's (cli/schemas.py): a key may be added with a new test line,
never renamed or dropped; a change here is a change of contract.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.helpers import RUN, write_project
from support.json_shapes import NONE, assert_shape

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
PROBLEM = {"code": (str,), "path": (str,), "detail": (str,)}
EVENTS = {"schema": (str,), "run": (str, NONE), "events": (list,)}
EVENT = {"seq": (int,), "at": (str,), "kind": (str,), "actor": (str,), "run_id": (str, NONE),
         "instance": (str, NONE), "summary": (str,), "detail": (dict,)}
VERIFY = {"schema": (str,), "run": (str,), "ok": (bool,), "local_root": (str,), "manifest_sha256": (str, NONE),
          "marker": (str, NONE), "files": (list,), "errors": (list,), "cells": (list,)}
VERIFY_FILE = {"path": (str,), "bytes": (int,), "sha256": (str,), "status": (str,), "detail": (str,)}
PULL = {"schema": (str,), "run": (str,), "ok": (bool,), "local_root": (str,), "manifest_sha256": (str,),
        "bytes": (int,), "files": (list,), "fetched": (list,), "present": (list,), "failed": (list,)}
INFO = {"schema": (str,), "version": (str,), "python": (dict,), "packages": (dict,), "project_file": (str, NONE),
        "state_database": (str, NONE), "evidence_store": (str, NONE), "simulated_disks": (str, NONE),
        "terminal": (dict,)}
WATCH = {"schema": (str,), "run": (str,), "at": (str,), "state": (str,), "detail": (str,), "alerts": (list,)}
ALERT = {"severity": (str,), "title": (str,), "message": (str,), "fix": (str,), "signature": (str,)}
# the report's `results` key (rgt-report/v1, added with DELIVER: docs/formats.md)
RESULTS = {"runs": (list,), "claims": (list,), "evidence_note": (str,)}
RESULT_RUN = {"id": (str,), "status": (str,), "cells": (int,), "metrics": (list,), "started_at": (str, NONE),
              "finished_at": (str, NONE), "wall_s": (float, NONE), "wall_source": (str, NONE), "cost": (dict,),
              "trackers": (list,), "left_out": (list,)}
RESULT_METRIC = {"test_id": (str,), "split": (str, NONE), "metric": (str,), "direction": (str, NONE),
                 "arrow": (str,), "unit": (str, NONE), "mean": (float,), "std": (float, NONE), "seeds": (int,),
                 "n": (int, NONE), "cells": (list,), "curve": (str, NONE), "best": (float, NONE),
                 "last": (float, NONE), "note": (str,), "source": (str,), "sources": (list,)}
RESULT_COST = {"amount": (float, NONE), "currency": (str,), "estimate": (bool,), "shared_with": (list,),
               "note": (str,)}
RESULT_CLAIM = {"id": (str,), "statement": (str,), "state": (str,), "numbers": (list,), "disclosure": (str, NONE),
                "findings": (list,), "disclosures": (list,)}
SECRET = "rgt-test-SECRET-41c9e7d2"


class Rgt:
    """The installed module in its own process, with HOME and the user config of this module's project."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                    "RUNPOD_API_KEY": SECRET, "LAMBDA_API_KEY": SECRET}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=180)

    def json(self, *args: str, rc: int = 0) -> Any:
        result = self(*args, "--format", "json")
        assert result.returncode == rc, result.stderr
        assert SECRET not in result.stdout + result.stderr
        return json.loads(result.stdout)


@pytest.fixture(scope="module")
def arc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Rgt, dict[str, Any]]]:
    """A finished run, verified before its pull (a failing document), pulled, then verified."""
    base = tmp_path_factory.mktemp("json-arc")
    rgt = Rgt(base / "proj", base / "home")
    write_project(rgt.root)
    for args in (("up", RUN), ("run", RUN), ("watch", RUN, "--interval", "0.2")):
        result = rgt(*args)
        assert result.returncode == 0, result.stderr
    documents = {"verify_before_pull": rgt.json("verify", RUN, rc=1), "pull": rgt.json("pull", RUN),
                 "verify": rgt.json("verify", RUN)}
    yield rgt, documents


def test_pull_json_schema(arc: tuple[Rgt, dict[str, Any]]) -> None:
    rgt, documents = arc
    pulled = documents["pull"]
    assert_shape(pulled, PULL)
    assert pulled["schema"] == "rgt-pull/v1" and pulled["run"] == RUN and pulled["ok"] is True
    assert pulled["local_root"] == str(rgt.root / "runs" / RUN)
    assert SHA256.match(pulled["manifest_sha256"]) and pulled["bytes"] > 0
    assert pulled["files"] and all(type(path) is str for path in pulled["files"])
    assert sorted(pulled["fetched"] + pulled["present"]) == sorted(pulled["files"])
    assert pulled["failed"] == []
    again = rgt.json("pull", RUN)  # everything is here now: present, nothing fetched
    assert_shape(again, PULL)
    assert again["fetched"] == [] and sorted(again["present"]) == sorted(pulled["files"])


def test_verify_json_schema_when_it_passes(arc: tuple[Rgt, dict[str, Any]]) -> None:
    rgt, documents = arc
    verified = documents["verify"]
    assert_shape(verified, VERIFY)
    assert verified["schema"] == "rgt-verify/v1" and verified["run"] == RUN and verified["ok"] is True
    assert verified["manifest_sha256"] == documents["pull"]["manifest_sha256"]
    assert verified["marker"] == str(rgt.root / "runs" / RUN / "PULL_VERIFIED.json")
    assert Path(verified["marker"]).is_file()
    assert verified["errors"] == []
    assert {f["path"] for f in verified["files"]} == set(documents["pull"]["files"])
    for entry in verified["files"]:
        assert_shape(entry, VERIFY_FILE)
        assert entry["status"] == "verified" and SHA256.match(entry["sha256"]) and entry["bytes"] > 0


def test_verify_json_schema_when_it_fails(arc: tuple[Rgt, dict[str, Any]]) -> None:
    _, documents = arc
    failed = documents["verify_before_pull"]
    assert_shape(failed, VERIFY)
    assert failed["ok"] is False and failed["marker"] is None and failed["manifest_sha256"] is None
    assert failed["errors"]
    for problem in failed["errors"]:
        assert_shape(problem, PROBLEM)
    assert failed["errors"][0]["code"] == "missing_local"


def test_events_json_schema(arc: tuple[Rgt, dict[str, Any]]) -> None:
    rgt, _ = arc
    log = rgt.json("events")
    assert_shape(log, EVENTS)
    assert log["schema"] == "rgt-events/v1" and log["run"] is None
    for event in log["events"]:
        assert_shape(event, EVENT)
        assert ISO_Z.match(event["at"]), event["at"]
    seqs = [event["seq"] for event in log["events"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    kinds = {event["kind"] for event in log["events"]}
    assert {"launch", "pull", "verify"} <= kinds, kinds
    text = rgt("events")
    assert len([line for line in text.stdout.splitlines() if line[:5].strip().isdigit()]) == len(seqs)
    one_run = rgt.json("events", "--run", RUN)
    assert one_run["run"] == RUN and one_run["events"]
    assert all(event["run_id"] == RUN for event in one_run["events"])


def test_watch_once_json_schema(arc: tuple[Rgt, dict[str, Any]]) -> None:
    rgt, _ = arc
    watched = rgt.json("watch", RUN, "--once")
    assert_shape(watched, WATCH)
    assert watched["schema"] == "rgt-watch/v1" and watched["run"] == RUN
    assert watched["state"] == "finished" and ISO_Z.match(watched["at"])
    for alert in watched["alerts"]:
        assert_shape(alert, ALERT)
    refused = rgt("watch", RUN, "--format", "json")  # a stream of states is not one document
    assert refused.returncode == 2 and "add --once" in refused.stderr


def test_info_json_schema_and_no_secret(arc: tuple[Rgt, dict[str, Any]]) -> None:
    rgt, _ = arc
    facts = rgt.json("info")
    assert_shape(facts, INFO)
    assert facts["schema"] == "rgt-info/v1" and facts["version"] == "0.1.0"
    assert_shape(facts["python"], {"version": (str,), "executable": (str,)})
    assert set(facts["packages"]) == {"textual", "asyncssh", "torch", "rich"}
    assert all(type(version) is str for version in facts["packages"].values())
    assert facts["project_file"] == str(rgt.root / "rgt.toml")
    assert facts["state_database"] == str(rgt.root / ".rgt" / "state.db")
    assert facts["evidence_store"] == str(rgt.root / "runs")
    assert facts["simulated_disks"] == str(rgt.root / ".rgt" / "sim")
    assert_shape(facts["terminal"], {"TERM": (str,), "NO_COLOR": (bool,), "ESCDELAY": (str, NONE)})
    text = rgt("info").stdout
    assert f"project file: {facts['project_file']}" in text and f"rgt {facts['version']}" in text


def test_info_json_outside_a_project_has_nulls(tmp_path: Path) -> None:
    rgt = Rgt(tmp_path, tmp_path / "home")
    facts = rgt.json("info")
    assert_shape(facts, INFO)
    assert facts["project_file"] is None and facts["state_database"] is None
    assert list(tmp_path.iterdir()) == []


def test_json_strings_are_escaped_like_the_report(tmp_path: Path) -> None:
    """Text in the event log (here a tick note with an OSC title sequence in it) cannot drive a terminal
    through the JSON document: it is escaped before it is encoded."""
    root = tmp_path / "proj"
    write_project(root)
    rgt = Rgt(root, tmp_path / "home")
    assert rgt("tick", RUN, "T01", "--note", "ok\x1b]0;pwned\x07").returncode == 0
    raw = rgt("events", "--format", "json").stdout
    assert "\x1b" not in raw and "\x07" not in raw and "\\u001b" not in raw
    notes = [e["detail"].get("note") for e in json.loads(raw)["events"] if e["kind"] == "checklist"]
    assert notes == ["ok\\x1b]0;pwned\\x07"]  # shown escaped, as `rgt events` and the report show it


def test_report_results_json_schema(arc: tuple[Rgt, dict[str, Any]]) -> None:
    """The finished, pulled and verified run: its legacy cells' numbers, its wall time from the launch record and
    the box's exit stamp, and its share of what the box billed meanwhile (at most the box's whole bill)."""
    rgt, _ = arc
    report = rgt.json("--report")
    assert list(report)[:4] == ["schema", "generated_at", "project", "results"]
    results = report["results"]
    assert_shape(results, RESULTS)
    assert results["claims"] == [] and results["evidence_note"] == "no EVIDENCE.json: no claims written yet"
    (run,) = results["runs"]
    assert_shape(run, RESULT_RUN)
    assert (run["id"], run["status"], run["cells"], run["wall_source"]) == (RUN, "results", 2, "launch")
    assert ISO_Z.match(run["started_at"]) and ISO_Z.match(run["finished_at"]) and run["wall_s"] >= 0
    (metric,) = run["metrics"]
    assert_shape(metric, RESULT_METRIC)
    assert {k: metric[k] for k in ("test_id", "split", "metric", "direction", "arrow", "seeds", "cells")} == {
        "test_id": "best_metrics", "split": "val", "metric": "val_loss", "direction": "lower_is_better",
        "arrow": "↓", "seeds": 2, "cells": [f"{RUN}/seed0", f"{RUN}/seed1"]}
    assert metric["mean"] == (0.5 + 0.4) / 2 and metric["curve"] is None
    assert_shape(run["cost"], RESULT_COST)
    (box,) = report["instances"]
    # the box billed its price all along, so the run's share is that price over its wall window (whole seconds
    # here: the job takes less than one), and never more than the box's whole bill
    assert run["cost"]["amount"] == round(box["price_per_hour"] * run["wall_s"] / 3600, 6) <= box["cost_so_far"]
    assert run["cost"]["currency"] == "USD" and run["cost"]["estimate"] is False
    assert run["trackers"] == []

    evidence = rgt.root / "EVIDENCE.json"
    evidence.write_text(json.dumps({"schema": "remote-gpu-trainer/EVIDENCE/v1", "project": "t", "claims": [
        {"id": "C1", "statement": "val_loss is low", "evidence": [
            {"exp_id": RUN, "test_id": "best_metrics", "metric": "val_loss", "cells": metric["cells"]}]}]}),
        encoding="utf-8")
    try:
        (claim,) = rgt.json("--report")["results"]["claims"]
    finally:
        evidence.unlink()
    assert_shape(claim, RESULT_CLAIM)
    assert (claim["id"], claim["state"], claim["disclosure"], len(claim["numbers"])) == ("C1", "not_built", None, 1)
    assert claim["disclosures"] == [None]  # never built: no D1–D8 recorded
