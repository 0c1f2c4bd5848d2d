"""`rgt build figure ID [PROJECT] [--format json]` as a user runs it, in its own process: exit 0 built with the
pixel gate passed, 1 built with a check failed (outputs kept), 2 bad input with one line on stderr and nothing
written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.capsules import write_capsule
from support.figures import curve, write_cells, write_figure
from support.helpers import run_rgt

DOCUMENT = {"schema": str, "figure_id": str, "folder": str, "passed": bool, "deterministic": bool, "qa": dict,
            "source": dict, "outputs": list, "disclosure": (str, type(None))}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "rgt.toml").write_text('[project]\nname = "figures"\n', encoding="utf-8")
    write_cells(project)
    write_figure(project, "acc", "bar", test_id="main", metric="acc")
    write_figure(project, "loss", "line", y="loss")
    return project


def rgt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_rgt("build", "figure", *args, cwd=root)


def test_a_built_figure_exits_0_and_says_what_it_wrote_and_checked(root: Path) -> None:
    result = rgt(root, "acc")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        f"figure acc: QA passed → {root / 'figures/acc'}\n"
        "  wrote source.csv (2 rows), final.png (960×600 px), final.svg, final.pdf\n"
        "  G1_blank     pass\n  G2_glyphs    pass\n  G3_clipped   pass\n  G4_overlap   pass\n"
        "  G5_axis      pass\n  G6_data      pass\n"
        "  disclosure: unverified evidence: runs/base/seed0/test/main/metrics.json, runs/base/seed1/test/main/"
        "metrics.json (not pulled by rgt: no pull of run base is recorded); runs/ours/seed0/test/main/metrics.json, "
        "runs/ours/seed1/test/main/metrics.json, runs/ours/seed2/test/main/metrics.json (not pulled by rgt: no pull "
        "of run ours is recorded).\n")  # write_cells writes the capsules here: nothing was pulled
    assert sorted(p.name for p in (root / "figures/acc").iterdir()) == [
        "figure.json", "final.pdf", "final.png", "final.svg", "source.csv"]


def test_the_json_document_has_its_schema_and_the_figure_json_generated_keys(root: Path, tmp_path: Path) -> None:
    result = run_rgt("build", "figure", "loss", str(root), "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    for key, kinds in DOCUMENT.items():
        assert isinstance(document[key], kinds), key
    written = json.loads((root / "figures/loss/figure.json").read_text(encoding="utf-8"))
    assert (document["schema"], document["figure_id"], document["passed"], document["deterministic"]) == (
        "rgt-build-figure/v1", "loss", True, True)
    assert {k: document[k] for k in ("qa", "source", "outputs", "disclosure")} == \
        {k: written[k] for k in ("qa", "source", "outputs", "disclosure")}


def test_a_figure_that_fails_its_gate_exits_1_and_keeps_its_outputs(root: Path) -> None:
    write_capsule(root, "ours", "seed2", metrics={"acc": 0.91}, n=50, train=curve(0.02, steps=9))
    result = rgt(root, "loss")
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"figure loss: QA FAILED → {root / 'figures/loss'}"
    assert lines[6] == ("  G5_axis      fail       series 'ours': seeds do not share x values (ours/seed0: 10, "
                        "ours/seed2: 9); axes 1: compared curves cover different x ranges (baseline 100–1000, "
                        "ours 100–900)")
    assert (root / "figures/loss/final.png").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (("nope",), "rgt: rgt build figure: no figure 'nope' (expected the folder figures/nope/ with a figure.json, "
                "as a plain folder inside the project)"),
    (("bad",), "rgt: figures/bad/figure.json: metric: missing"),
    (("gone",), "rgt: series[0].capsules (ours/seed7): runs/ours/seed7/test/main/metrics.json is missing"),
])
def test_bad_input_exits_2_with_one_line_and_nothing_written(root: Path, args: tuple[str, ...],
                                                             message: str) -> None:
    write_figure(root, "bad", "bar", test_id="main")
    write_figure(root, "gone", "bar", test_id="main", metric="acc",
                 series=[{"label": "x", "capsules": ["ours/seed7"]}])
    result = rgt(root, *args)
    assert (result.returncode, result.stdout, result.stderr.strip()) == (2, "", message)
    for figure_id in ("bad", "gone"):
        assert [p.name for p in (root / "figures" / figure_id).iterdir()] == ["figure.json"]


def test_two_processes_in_two_folders_write_the_same_bytes(root: Path, tmp_path: Path) -> None:
    """No process state (hash seeds, font caches) and no path leaks into the outputs."""
    import hashlib
    import shutil

    copy = tmp_path / "elsewhere" / "proj"
    shutil.copytree(root, copy)
    for project in (root, copy):
        assert rgt(project, "loss").returncode == 0

    def hashes(project: Path) -> dict[str, str]:
        folder = project / "figures/loss"
        return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
                for name in ("source.csv", "final.png", "final.svg", "final.pdf")}

    assert hashes(root) == hashes(copy)
