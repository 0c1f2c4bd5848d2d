"""The claim ladder (docs/deliver.md §2) on a real project: capsules a sim box wrote, launched, pulled and
verified by rgt with a real state database, then `rgt build evidence`, `rgt audit` and documents. Each step
stops the ladder for its own missing evidence, one test per step, and the top is reached only when every step
holds."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.deliver import ladder
from support.capsules import write_evidence
from support.claims_project import CELLS, RUN, build_verified, claim, files_project, read_evidence, verified_copy

DOCS = '\n[deliver]\ndocs = ["paper.tex", "notes.txt"]\n'


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run r1 (three capsules) launched on a sim box, pulled and verified; EVIDENCE.json cites all three."""
    return build_verified(tmp_path_factory.mktemp("ladder") / "project")


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    return verified_copy(template, tmp_path / "project")


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def state(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str | None]:
    """`rgt build evidence --format json`: the claim's state and why it stopped; EVIDENCE.json agrees."""
    (claimed,) = json.loads(rgt(capsys, "build", "evidence", str(root), "--format", "json"))["claims"]
    assert read_evidence(root)["claims"][0]["state"] == claimed["state"]
    return claimed["state"], claimed["stopped"]


def documents(root: Path, paper: str, notes: str = "Nothing numeric here.\n") -> None:
    with (root / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write(DOCS)
    (root / "paper.tex").write_text(paper, encoding="utf-8")
    (root / "notes.txt").write_text(notes, encoding="utf-8")


def test_planned_a_source_cell_has_no_metrics(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_evidence(project, [claim(cells=[f"{RUN}/{c}" for c in (*CELLS, "seed7")])])
    assert state(project, capsys) == ("planned", "not evaluated: no metrics.json value in r1/seed7")


def test_planned_the_run_was_never_pulled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same capsules written here instead of pulled are no measurement rgt made: not even evaluated."""
    root = files_project(tmp_path, [claim()])
    found, why = state(root, capsys)
    assert (found, why) == ("planned", why) and why is not None
    assert why == "not evaluated: not pulled by rgt: " + ", ".join(
        f"runs/{RUN}/{cell}/test/set5/metrics.json" for cell in CELLS) + f" (no pull of run {RUN} is recorded)"


def test_planned_a_metrics_json_changed_since_the_pull(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = project / "runs" / RUN / "seed1" / "test" / "set5" / "metrics.json"
    os.chmod(metrics, stat.S_IRUSR | stat.S_IWUSR)
    metrics.write_text(metrics.read_text(encoding="utf-8").replace("31.42", "31.92"), encoding="utf-8")
    assert state(project, capsys) == ("planned", f"not evaluated: not pulled by rgt: runs/{RUN}/seed1/test/set5/"
                                                 f"metrics.json (changed since run {RUN} was pulled (sha256 differs "
                                                 "from its manifest))")


def test_evaluated_a_marker_that_is_not_the_verifications(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = project / "runs" / RUN / "PULL_VERIFIED.json"
    body = json.loads(marker.read_text())
    os.chmod(marker, stat.S_IRUSR | stat.S_IWUSR)
    marker.write_text(json.dumps(body, indent=4))  # the same fields, other bytes: not what verify wrote
    why = "PULL_VERIFIED.json is not the one the last verification wrote (edited or copied): run verify"
    assert state(project, capsys) == ("evaluated", f"not pull-verified: run r1: {why}")
    paths = ", ".join(f"runs/{RUN}/{cell}/test/set5/metrics.json" for cell in CELLS)  # pulled, and still disclosed
    assert read_evidence(project)["claims"][0]["evidence"][0]["disclosures"]["D8"] == \
        f"unverified evidence: {paths} (pulled, not verified: {why})"


def test_pull_verified_a_finding_touching_the_claim_is_still_open(project: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Two of the three seeds: V04 finds too few seeds for the claim, and nobody has dispositioned it."""
    write_evidence(project, [claim(cells=[f"{RUN}/seed0", f"{RUN}/seed1"])])
    found, why = state(project, capsys)
    (record,) = read_evidence(project)["claims"][0]["findings"]
    assert (found, why) == ("pull_verified", f"open finding {record}: acknowledge, waive or fix (rgt finding ID)")
    assert f"{record} warn     open         [V04] claim:C1-main-psnr: 2 seeds < 3 (regime default)" in \
        rgt(capsys, "audit", str(project), "--check", "V04")
    rgt(capsys, "finding", record, str(project), "--ack", "--note", "budget", "--disclosure", "two seeds only")
    assert state(project, capsys)[0] == "audited"


def test_audited_no_document_quotes_it(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit after verification saw the rows before their fields existed (V05 judges no unbuilt row); the
    build audits again once it wrote them, which moves nothing here, and the claim is audited."""
    document = json.loads(rgt(capsys, "build", "evidence", str(project), "--format", "json"))
    assert document["reaudited"] is None
    assert state(project, capsys) == ("audited", "no documents to reconcile: name them in rgt.toml [deliver] docs")
    assert read_evidence(project)["claims"][0]["findings"] == []


def test_audited_the_paper_quotes_a_stale_number(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents(project, "PSNR on Set5 31.42 dB.\n", notes="As before, PSNR on Set5 is 31.40 dB.\n")
    built = json.loads(rgt(capsys, "build", "evidence", str(project), "--format", "json"))
    assert built["reaudited"] == {"fixed": 0, "raised": 1}  # the drift exists once the value is written
    found, why = state(project, capsys)
    assert (found, why) == ("pull_verified", why) and why is not None and why.startswith("open finding F-")
    (finding,) = [f for f in json.loads(rgt(capsys, "audit", str(project), "--check", "V31", "--format", "json"))
                  ["findings"] if f["status"] == "open"]
    assert finding["subject"] == "doc:notes.txt:1"
    rgt(capsys, "finding", finding["id"], str(project), "--ack", "--note", "old draft",
        "--disclosure", "notes.txt keeps the pre-fix number")
    assert state(project, capsys) == ("audited", "cross-document drift: notes.txt:1")


def test_audited_quoted_only_outside_the_document_its_anchor_names(project: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    documents(project, "Results are in the notes.\n", notes="PSNR on Set5: 31.42 dB.\n")
    assert state(project, capsys) == ("audited", "C1-main-psnr not quoted in paper.tex")


def test_paper_supported_every_step_holds(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents(project, "Our model reaches a PSNR on Set5 of 31.42 dB (3 seeds).\n")
    assert state(project, capsys) == ("paper_supported", None)
    written = read_evidence(project)["claims"][0]
    assert (written["disclosure"], written["findings"]) == (None, [])
    assert "C1-main-psnr  paper_supported" in rgt(capsys, "build", "macros", str(project))


def test_each_step_needs_its_own_evidence_never_the_next_ones() -> None:
    """The pure ladder: a higher step's evidence never lifts a claim over a lower step that is missing."""
    top = ladder.ClaimEvidence(rows=1)
    assert ladder.climb(top) == ladder.Ladder("paper_supported", None)
    assert ladder.climb(ladder.ClaimEvidence(rows=0)) == ladder.Ladder("planned", "no evidence rows: nothing is "
                                                                                  "measured yet")
    assert ladder.climb(ladder.ClaimEvidence(rows=1, missing_cells=("r1/seed2",))).state == "planned"
    unpulled = ladder.ClaimEvidence(rows=1, unpulled=("runs/r3/s0/test/t/metrics.json (no pull of run r3 is "
                                                      "recorded)",))
    assert ladder.climb(unpulled) == ladder.Ladder("planned", "not evaluated: not pulled by rgt: runs/r3/s0/test/t/"
                                                              "metrics.json (no pull of run r3 is recorded)")
    unverified = ladder.ClaimEvidence(rows=1, unverified={"r2": "no PULL_VERIFIED.json: run verify"})
    assert ladder.climb(unverified) == ladder.Ladder("evaluated", "not pull-verified: run r2: no PULL_VERIFIED.json: "
                                                                  "run verify")
    unaudited = ladder.ClaimEvidence(rows=1, audit_gap="run r1 was verified after the last audit: run rgt audit")
    assert ladder.climb(unaudited) == ladder.Ladder("pull_verified", unaudited.audit_gap)
    assert ladder.climb(ladder.ClaimEvidence(rows=1, not_quoted="no paper_anchor: the claim names no document "
                                                                "that asserts it")).state == "audited"


def test_a_doc_glob_never_reads_evidence_json_so_v31_stays_put_across_builds_and_audits(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`docs = ["paper.tex", "*.json"]`: the glob once swept in EVIDENCE.json, whose disclosure quotes the claim's
    number, so each build raised "is quoted consistently in no configured document" and each audit fixed it again."""
    write_evidence(project, [claim(aliases=[])])
    with (project / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write('\n[deliver]\ndocs = ["paper.tex", "*.json"]\n')
    (project / "paper.tex").write_text("Nothing numeric here.\n", encoding="utf-8")
    (project / "card.json").write_text('{"model": "SR-Net"}\n', encoding="utf-8")
    missing = "C1-main-psnr (psnr = 31.42) is quoted consistently in no configured document"
    for _ in range(2):
        found, why = state(project, capsys)
        assert (found, why) == ("pull_verified", why) and why is not None and why.startswith("open finding F-")
        (disclosure,) = [c["disclosure"] for c in read_evidence(project)["claims"]]
        assert disclosure.startswith(f"{missing} [F-")
        audit = rgt(capsys, "audit", str(project), "--check", "V31").splitlines()
        assert audit[-1] == "0 pass, 1 with findings, 0 skipped; 0 raised, 0 fixed. `rgt finding ID` shows one."
        assert [line.split(maxsplit=3)[1:] for line in audit if line.startswith("F-")] == [
            ["info", "open", f"[V31] claim:C1-main-psnr: {missing}"]]
