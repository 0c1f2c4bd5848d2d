"""`rgt build table ID [PROJECT] [--format json]` as a user runs it, in its own process: exit 0 built with QA
passed, 1 built with a check failed, 2 bad input with one line on stderr and nothing written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.capsules import write_capsule
from support.helpers import run_rgt
from support.tables import write_table

DOCUMENT = {"schema": str, "table_id": str, "folder": str, "passed": bool, "deterministic": bool, "qa": dict,
            "source": dict, "outputs": list, "disclosure": (str, type(None))}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "rgt.toml").write_text('[project]\nname = "tables"\n', encoding="utf-8")
    for method, values in (("base", [30.0, 31.0, 32.0]), ("ours", [33.0, 33.5, 34.0])):
        for seed, value in enumerate(values):
            write_capsule(project, method, f"seed{seed}", seed=seed, test_id="set5", n=5, metrics={"psnr": value})
    write_table(project, "main", [{"method": "base", "capsules": ["base"]}, {"method": "ours", "capsules": ["ours"]}])
    return project


def unpulled(run: str) -> str:
    paths = ", ".join(f"runs/{run}/seed{seed}/test/set5/metrics.json" for seed in range(3))
    return f"{paths} (not pulled by rgt: no pull of run {run} is recorded)"


def rgt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_rgt("build", "table", *args, cwd=root)


def test_a_built_table_exits_0_and_says_what_it_checked(root: Path) -> None:
    result = rgt(root, "main")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        f"table main: QA passed → {root / 'tables/main'}\n"
        "  Q1_parse_back            pass\n  Q2_no_nan                pass\n  Q3_cells_match_source    pass\n"
        "  Q4_bold_rule             pass\n  Q5_n_shown               pass\n  Q6_direction_marked      pass\n"
        f"  disclosure: unverified evidence: {unpulled('base')}; {unpulled('ours')}.\n")  # written here, not pulled
    assert (root / "tables/main/final.md").read_text().splitlines()[3] == "| ours | 5 | 3 | **33.50 ± 0.50** |"


def test_the_json_document_has_its_schema_and_the_table_json_generated_keys(root: Path, tmp_path: Path) -> None:
    result = run_rgt("build", "table", "main", str(root), "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    for key, kinds in DOCUMENT.items():
        assert isinstance(document[key], kinds), key
    written = json.loads((root / "tables/main/table.json").read_text())
    assert document["schema"] == "rgt-build-table/v1"
    assert (document["table_id"], document["passed"], document["deterministic"]) == ("main", True, True)
    assert {k: document[k] for k in ("qa", "source", "outputs", "disclosure")} == \
        {k: written[k] for k in ("qa", "source", "outputs", "disclosure")}


def test_a_table_that_fails_its_gate_exits_1(root: Path) -> None:
    """Finite values whose spread is beyond a double: the std is inf, Q2 fails, the build still writes."""
    for seed, value in enumerate([1.7e308, -1.7e308]):
        write_capsule(root, "huge", f"seed{seed}", test_id="set5", n=5, metrics={"psnr": value})
    write_table(root, "big", [{"method": "huge", "capsules": ["huge"]}])
    result = rgt(root, "big", "--format", "json")
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert (document["passed"], document["qa"]["checks"]["Q2_no_nan"]) == (False, "fail")
    assert document["qa"]["notes"].startswith("Q2_no_nan: source.csv huge / psnr: mean 0.0, std inf")
    assert (root / "tables/big/final.md").read_text().splitlines()[2] == "| huge | 5 | 2 | 0.00 ± inf |"


@pytest.mark.parametrize(("args", "stderr"), [
    (["nope"], "rgt: rgt build table: no table 'nope' (expected the folder tables/nope/ with a table.json, as a "
               "plain folder inside the project)\n"),
    ([], "rgt: rgt build table: name the table (its folder under tables/), or run `rgt build` for everything\n"),
])
def test_an_unknown_or_unnamed_table_exits_2(root: Path, args: list[str], stderr: str) -> None:
    result = rgt(root, *args)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", stderr)


def test_a_capsule_without_the_metric_exits_2_with_nothing_written(root: Path) -> None:
    write_table(root, "main", [{"method": "base", "capsules": ["base"]}], layout={"columns": ["psnr", "ssim"]})
    result = rgt(root, "main")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("rgt: runs/base/seed0/test/set5/metrics.json: no finite metrics.ssim.value (row 'base' "
                             "needs ssim; tables/main/table.json: rows[0].capsules[0])\n")
    assert sorted(p.name for p in (root / "tables/main").iterdir()) == ["table.json"]


def test_control_characters_in_a_label_are_refused_not_printed(root: Path) -> None:
    write_table(root, "main", [{"method": "base\x1b[2J", "capsules": ["base"]}])
    result = rgt(root, "main")
    assert result.returncode == 2
    assert result.stderr == ("rgt: tables/main/table.json: rows[0].method: 'base\\x1b[2J' must be one line of at "
                             "most 200 characters, without control characters or surrounding spaces\n")
