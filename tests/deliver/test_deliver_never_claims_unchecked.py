"""DELIVER never claims what was not checked (issue 26, items 7–10): an unverified source, a failed read or a
changed input is disclosed, never dropped. Each case is a real project on disk built through the real `rgt build`
(cli.main in-process), and, where the panel shows it, through the Deliver panel's `b` driven by Pilot."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.app import RgtApp
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.services.deliver.build import deliver_view
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.views import DeliverRow
from remote_gpu_trainer.widgets.deliver_panel import DeliverPanel
from support.capsules import write_evidence
from support.claims_project import build_verified, claim, read_evidence, verified_copy
from support.deliver_project import user_project
from support.figures import write_figure
from support.tables import write_table
from support.tui_helpers import dashboard, notified, wait_until

#: a figure's own build.py (docs/deliver.md §3) that, while it draws, makes a verified file writable, appends to
#: it and drops a file of its own into the run: the evidence the figure is drawn from is no longer what was pulled
TAMPERING_BUILD_PY = '''
import os
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd


def build(inputs):
    rows = [{"series": item.capsule, "x": index, "y": item.json()["metrics"]["acc"]["value"], "err_lo": None,
             "err_hi": None, "n": 100, "seeds": 1, "capsules": item.capsule, "test_id": item.test_id,
             "metric": "acc"} for index, item in enumerate(inputs)]
    return pd.DataFrame(rows)


def render(df, out_dir):
    root = Path(out_dir).resolve().parents[2]
    target = root / "runs" / "r1" / "seed0" / "train.csv"
    os.chmod(target, 0o600)
    with open(target, "a", encoding="utf-8") as handle:
        handle.write("999,99,0.0\\n")
    (root / "runs" / "r1" / "seed0" / "notes.txt").write_text("drawn here", encoding="utf-8")
    fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    for row in df.itertuples():
        ax.bar([row.x], [row.y], label=row.series)
    ax.set_xticks(list(df.x), list(df.series))
    ax.set_ylabel("acc")
    return fig
'''

STORE_LINE = ("✖ figure own: the evidence store runs/ changed (figures/own/build.py changed it): "
              "runs/r1/seed0/notes.txt added; runs/r1/seed0/train.csv content changed, mode 0o644 → 0o600; the "
              "pulled copy is no longer the verified one and the teardown gate stays closed until it is: "
              "rgt verify r1 says what changed, and a pull restores it")
FIFO_LINE = ("✖ figure x: figures/x/figure.json is a FIFO, not a regular file: refused unread (a figure is built "
             "only from a regular figure.json)")


def tampering_figure(root: Path) -> None:
    write_figure(root, "own", "custom", inputs=[{"capsule": "r1/seed0", "test_id": "main", "metric": "acc"},
                                                {"capsule": "r1/seed1", "test_id": "main", "metric": "acc"}])
    (root / "figures" / "own" / "build.py").write_text(TAMPERING_BUILD_PY, encoding="utf-8")


def fifo_figure(root: Path) -> Path:
    (root / "figures" / "x").mkdir(parents=True)
    fifo = root / "figures" / "x" / "figure.json"
    os.mkfifo(fifo)
    return fifo


# -- item 8: a build that changes the evidence store fails and says what changed ------------------------------
def test_a_build_py_that_changes_the_evidence_store_fails_the_build_naming_each_change(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It reported "5 passed", exit 0, and the gate closed later with no explanation: runs/ is hashed before the
    build and after the figure's build.py ran (content and mode), and the figure's line says what changed."""
    root = tmp_path / "p"
    user_project(root).close()
    tampering_figure(root)
    assert main(["build", str(root)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert STORE_LINE in lines
    assert lines[-1] == "build: 4 passed, 1 failed"
    assert (root / "runs/r1/seed0/notes.txt").exists()  # said, not undone: the user restores it by a pull


# -- item 10: a figure.json that is a FIFO is a failure naming the file ------------------------------------------
def test_a_figure_json_that_is_a_fifo_is_refused_naming_it_never_opened(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was skipped in silence ("4 passed", exit 0); now it is bad input on its own line (exit 2), the rest is
    built, and the panel's view names it. Nothing ever opens the FIFO (an open would wait for a writer)."""
    root = tmp_path / "p"
    user_project(root).close()
    fifo_figure(root)
    assert main(["build", str(root)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert FIFO_LINE in lines
    assert lines[-1] == "build: 4 passed, 1 refused (bad input)"
    assert FIFO_LINE.split(": ", 1)[1] in deliver_view(root).problems


# -- the Deliver panel's b: the same lines ------------------------------------------------------------------------
async def test_the_panel_b_fails_on_a_changed_store_and_names_a_fifo_figure_json(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = user_project(root)
    tampering_figure(root)
    fifo_figure(root)
    app = RgtApp(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("5")
        await wait_until(pilot, lambda: dashboard(app).deliver_view is not None)
        await pilot.press("b")
        await wait_until(pilot, lambda: notified(app, "build:"), timeout=180)
        progress = app.screen.query_one(DeliverPanel).progress
        assert STORE_LINE in progress and FIFO_LINE in progress
        assert [str(n.message) for n in app._notifications if str(n.message).startswith("build")] == [
            "build: 4 passed, 1 failed, 1 refused (bad input)"]
    session.close()


# -- item 9: an unreadable claims document is a finding on every claim it was meant to check ---------------------
@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run r1 (three capsules) launched on a sim box, pulled and verified by rgt; EVIDENCE.json cites all three;
    paper.tex, the one document of [deliver] docs, quotes the claim with a stale number (31.40 for 31.42)."""
    root = build_verified(tmp_path_factory.mktemp("honesty") / "project")
    with (root / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write('\n[deliver]\ndocs = ["paper.tex"]\n')
    (root / "paper.tex").write_text("Our model reaches a PSNR on Set5 of 31.40 dB.\n", encoding="utf-8")
    write_evidence(root, [{**claim(), "paper_anchor": "paper.tex"}])
    return root


def built_claim(root: Path, capsys: pytest.CaptureFixture[str], code: int) -> dict[str, Any]:
    assert main(["build", str(root)]) == code, capsys.readouterr()
    capsys.readouterr()
    return read_evidence(root)["claims"][0]


@pytest.mark.parametrize("swap", ["fifo", "symlink-out"])
def test_a_claims_document_that_is_a_fifo_or_leads_out_of_the_project_is_a_finding_on_every_claim(
        verified: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], swap: str) -> None:
    """The claim stood at pull_verified with the drift disclosed; paper.tex swapped for a FIFO (or a link to a file
    outside the project) made `rgt build` exit 0 and lift the claim to audited with nothing disclosed: the drift
    vanished from every number. Now the document that could not be read is itself disclosed on the claim, its
    open finding keeps the claim below audited, and the build does not pass."""
    root = verified_copy(verified, tmp_path / "project")
    before = built_claim(root, capsys, 0)
    assert before["state"] == "pull_verified" and "cross-document drift: paper.tex:1" in before["disclosure"]
    paper = root / "paper.tex"
    paper.unlink()
    if swap == "fifo":
        os.mkfifo(paper)
    else:
        outside = tmp_path / "elsewhere.md"
        outside.write_text("Our model reaches a PSNR on Set5 of 31.42 dB.\n", encoding="utf-8")
        paper.symlink_to(outside)
    assert main(["build", str(root)]) == 1
    why = ("not a regular file (a FIFO): refused unread" if swap == "fifo" else "outside the project root; refused")
    line = next(line for line in capsys.readouterr().out.splitlines() if "evidence:" in line)
    assert line.startswith("▲ evidence: C1-main-psnr pull_verified;")
    assert line.endswith(f"; not reconciled, unreadable: paper.tex ({why}) → EVIDENCE.json")
    after = read_evidence(root)["claims"][0]
    assert after["state"] == "pull_verified"  # never audited: an open finding touches it
    assert f"document not reconciled: paper.tex ({why})" in after["disclosure"]
    assert "cross-document drift: paper.tex:1" in after["disclosure"]  # the drift it held is not dropped either
    assert len(after["findings"]) == len(before["findings"]) + 1


# -- item 7: a number from evidence rgt never pulled or verified is disclosed, and its claim stays planned -------
FAKE = "runs/fake/s0/test/set5/metrics.json"
NEVER_PULLED = f"{FAKE} (not pulled by rgt: no pull of run fake is recorded)"


def with_hand_written_cell(verified: Path, target: Path) -> Path:
    """The verified project plus `runs/fake/s0/test/set5/metrics.json` written by hand (no manifest, no marker, no
    run in rgt.toml), a table with it beside the verified run, and a claim on it."""
    root = verified_copy(verified, target)
    fake = root / FAKE
    fake.parent.mkdir(parents=True)
    fake.write_text((root / "runs/r1/seed0/test/set5/metrics.json").read_text(encoding="utf-8")
                    .replace("31.34", "33.9"), encoding="utf-8")
    write_table(root, "main", [{"method": "ours", "capsules": ["r1"]}, {"method": "fake", "capsules": ["fake/s0"]}],
                test_id="set5", layout={"columns": ["psnr"]})
    write_evidence(root, [{**claim(), "paper_anchor": "paper.tex"},
                          {**claim("C2-fake", cells=["fake/s0"], aggregate="single"), "paper_anchor": "paper.tex"}])
    return root


def test_a_hand_written_metrics_json_is_disclosed_in_the_table_and_its_claim_stays_planned(
        verified: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It went into a table next to the verified rows, QA passed, the only disclosure "single-seed", and its
    claim climbed to evaluated. Now the table says which input is not evidence rgt checked, the number carries it
    (D8), and the claim cannot climb past planned."""
    root = with_hand_written_cell(verified, tmp_path / "project")
    main(["build", str(root)])
    lines = capsys.readouterr().out.splitlines()
    assert "✔ table main: QA passed (Q4_bold_rule disclosed); 1 input(s) not verified evidence, disclosed → "\
           "tables/main/" in lines
    table = json.loads((root / "tables/main/table.json").read_text(encoding="utf-8"))
    assert f"unverified evidence: {NEVER_PULLED}." in table["disclosure"]
    assert "runs/r1/" not in table["disclosure"]  # the verified rows are not disclosed as unverified
    verified_claim, fake_claim = read_evidence(root)["claims"]
    assert verified_claim["state"] == "pull_verified"
    assert fake_claim["state"] == "planned"
    assert fake_claim["evidence"][0]["disclosures"]["D8"] == f"unverified evidence: {NEVER_PULLED}"
    assert "unverified evidence" not in (verified_claim["disclosure"] or "")
    assert main(["build", "evidence", str(root), "--format", "json"]) == 0
    stopped = {c["id"]: c["stopped"] for c in json.loads(capsys.readouterr().out)["claims"]}
    assert stopped["C2-fake"] == f"not evaluated: not pulled by rgt: {FAKE} (no pull of run fake is recorded)"


def claim_row(app: RgtApp) -> DeliverRow:
    view = dashboard(app).deliver_view
    rows = {row.key: row for row in view.rows} if view is not None else {}
    return rows.get("claim:C2-fake") or DeliverRow("", "", "", "", "")


async def test_the_panel_shows_the_hand_written_number_planned_with_its_disclosure(
        verified: Path, tmp_path: Path) -> None:
    root = with_hand_written_cell(verified, tmp_path / "project")
    session = open_session(str(root))
    app = RgtApp(session)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_until(pilot, lambda: dashboard(app).overview is not None)
        await pilot.press("5")
        await wait_until(pilot, lambda: dashboard(app).deliver_view is not None)
        await pilot.press("b")
        await wait_until(pilot, lambda: notified(app, "build:"), timeout=180)
        await wait_until(pilot, lambda: claim_row(app).status == "planned")
        assert f"unverified evidence: {NEVER_PULLED}" in claim_row(app).describe
        assert "1 input(s) not verified evidence" in "\n".join(app.screen.query_one(DeliverPanel).progress)
    session.close()
