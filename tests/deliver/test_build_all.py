"""`rgt build` of everything (docs/deliver.md §9) through the real CLI on real files: figures, then tables, then
EVIDENCE.json, then the macros, one line per item with its QA; exit 0 when all built and passed, 1 when an item
failed its QA or its builder, 2 when an item was bad input (the others still built) or nothing is buildable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.services.deliver.build import deliver_view
from support.capsules import write_csv, write_json
from support.deliver_project import user_project

#: user_project writes its capsules into runs/ itself (no pull of rgt): each output discloses its two inputs as
#: unverified evidence, and the claim stays planned (issue 26 item 7; the verified case is in
#: test_deliver_never_claims_unchecked.py)
BUILT = [
    "✔ figure loss-curve: QA passed; 2 input(s) not verified evidence, disclosed → figures/loss-curve/",
    "✔ table tab-main: QA passed; 2 input(s) not verified evidence, disclosed → tables/tab-main/",
    "✔ evidence: C1-acc planned; 1 with a disclosure → EVIDENCE.json",
    "✔ macros: 1 macro(s) with their disclosure companions → tables/macros/final.tex",
    "build: 4 passed",
]


def test_everything_is_built_in_order_with_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    user_project(root).close()
    assert main(["build", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == BUILT
    figure = json.loads((root / "figures" / "loss-curve" / "figure.json").read_text(encoding="utf-8"))
    assert figure["qa"]["passed"] is True and [o["path"] for o in figure["outputs"]] == [
        "final.png", "final.svg", "final.pdf"]
    assert (root / "tables" / "tab-main" / "final.md").read_text(encoding="utf-8").splitlines()[-1] == \
        "| r1 | 100 | 2 | 0.805 ± 0.007 |"
    evidence = json.loads((root / "EVIDENCE.json").read_text(encoding="utf-8"))
    assert evidence["claims"][0]["evidence"][0]["value"] == pytest.approx(0.805, abs=1e-12)
    macros = (root / "tables" / "macros" / "final.tex").read_text(encoding="utf-8")
    assert "\\newcommand{\\ClaimCOneAcc}{0.805}" in macros


def test_a_failed_check_exits_1_and_a_bad_item_exits_2_after_the_others_are_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    user_project(root).close()
    # seed1 logged at other steps than seed0: a mean curve over them would be drawn on x values one seed lacks
    write_csv(root / "runs" / "r1" / "seed1" / "train.csv",
              [{"step": 50 * (i + 1), "epoch": i + 1, "loss": 1.0 / (i + 1)} for i in range(10)])
    assert main(["build", str(root)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("▲ figure loss-curve: QA failed: G5_axis fail")
    assert lines[1:] == [BUILT[1], BUILT[2], BUILT[3], "build: 3 passed, 1 built with failed QA"]

    write_json(root / "tables" / "broken" / "table.json", {"schema": "remote-gpu-trainer/TABLE/v1",
                                                           "table_id": "broken", "colour": "red"})
    assert main(["build", str(root), "--format", "json"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["schema"] == "rgt-build/v1" and document["exit_code"] == 2
    assert [(s["kind"], s["id"], s["status"]) for s in document["steps"]] == [
        ("figure", "loss-curve", "qa_failed"), ("table", "broken", "bad_input"), ("table", "tab-main", "passed"),
        ("evidence", "", "passed"), ("macros", "", "passed")]
    assert document["steps"][1]["detail"].startswith("tables/broken/table.json: colour: unknown key")
    assert document["summary"] == "build: 3 passed, 1 built with failed QA, 1 refused (bad input)"


def test_nothing_to_build_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    user_project(root).close()
    for path in sorted(root.glob("figures/*/figure.json")) + sorted(root.glob("tables/*/table.json")):
        path.unlink()
    (root / "EVIDENCE.json").unlink()
    assert main(["build", str(root)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"rgt build: nothing to build in {root}: no figures/<id>/figure.json" in captured.err


def test_without_evidence_the_figures_and_tables_still_build(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    user_project(root).close()
    (root / "EVIDENCE.json").unlink()
    assert main(["build", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        BUILT[0], BUILT[1], "· evidence: no EVIDENCE.json: no claims to generate", "· macros: no claims, no macros",
        "build: 2 passed, 2 skipped"]


LINKED = "is a symlink: refused, never read through (a {} is built only from a plain folder inside the project)"


@pytest.mark.parametrize(("link", "kind", "refused", "at"), [
    ("figures/loss-curve", "figure", "✖ figure loss-curve: figures/loss-curve", 0),
    ("figures", "figure", "✖ figure: figures/", 0),
    ("tables/tab-main", "table", "✖ table tab-main: tables/tab-main", 1),
])
def test_a_linked_figure_or_table_folder_is_refused_on_its_own_line_and_the_others_are_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], link: str, kind: str, refused: str, at: int) -> None:
    """A folder moved out of the project and linked back is refused (exit 2), not passed over with exit 0; the
    Deliver panel names it too and reads nothing through it."""
    root = tmp_path / "p"
    user_project(root).close()
    outside = tmp_path / "elsewhere"
    shutil.move(root / link, outside)
    (root / link).symlink_to(outside)
    before = sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*"))
    assert main(["build", str(root)]) == 2
    refusal = f"{refused} {LINKED.format(kind)}"
    expected = BUILT[:4]
    expected[at] = refusal
    assert capsys.readouterr().out.splitlines() == [*expected, "build: 3 passed, 1 refused (bad input)"]
    assert sorted(p.relative_to(outside).as_posix() for p in outside.rglob("*")) == before
    view = deliver_view(root)
    assert view.problems == (refusal.split(": ", 1)[1],)
    assert [r.key for r in view.rows] == ["claim:C1-acc", "table:tab-main" if kind == "figure" else "figure:loss-curve"]


def test_the_panel_refuses_a_figure_json_that_is_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    user_project(root).close()
    document = root / "figures" / "loss-curve" / "figure.json"
    outside = tmp_path / "elsewhere.json"
    shutil.move(document, outside)
    document.symlink_to(outside)
    view = deliver_view(root)
    assert view.problems == ("Deliver panel: figures/loss-curve/figure.json goes through a symlink (refused: "
                             "evidence is read only through regular files inside the project)",)
    assert [r.key for r in view.rows] == ["claim:C1-acc", "table:tab-main"]
    assert main(["build", "figure", "loss-curve", str(root)]) == 2
    assert "figures/loss-curve/figure.json: not a regular file (a link or a folder): refused unread" in \
        capsys.readouterr().err
