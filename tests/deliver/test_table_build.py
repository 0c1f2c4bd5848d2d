"""`build_table` on real capsule files (docs/deliver.md §4): byte-identical rebuilds, one changed number that
changes source.csv, the cell and every hash that depends on it, the bold rule both ways, directions from the
registry, disclosures, and bad input refused with nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.model import MetricRule
from remote_gpu_trainer.deliver.tables.build import TableBuild, build_table
from remote_gpu_trainer.errors import ConfigError
from support.capsules import write_capsule
from support.tables import write_table

CODE = {"git_commit": "e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f6071", "git_dirty": False, "dirty_diff_sha256": None}
FILES = ("source.csv", "final.md", "final.tex", "final.csv")
PSNR = {"base": [30.0, 31.0, 32.0], "ours": [33.0, 33.5, 34.0]}  # mean ± std: 31 ± 1 and 33.5 ± 0.5 (clears)
LPIPS = {"base": [0.25, 0.375, 0.5], "ours": [0.3125, 0.375, 0.4375]}  # 0.375 ± 0.125 and 0.375 ± 0.0625
ROWS = [{"method": "base", "capsules": ["base/seed0", "base/seed1", "base/seed2"]},
        {"method": "ours", "capsules": ["ours/seed0", "ours/seed1", "ours/seed2"]}]
LAYOUT = {"columns": ["psnr", "lpips"], "precision": {"psnr": 2, "lpips": 3}}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    for method in ("base", "ours"):
        for seed in range(3):
            write_capsule(project, method, f"seed{seed}", seed=seed, test_id="set5", n=5,
                          metrics={"psnr": PSNR[method][seed], "lpips": LPIPS[method][seed]})
    write_table(project, "tab", ROWS, layout=LAYOUT, supports_claims=["C1-main-psnr"], caption="Main results.")
    return project


def build(root: Path, table_id: str = "tab", **kw: Any) -> TableBuild:
    return build_table(root, table_id, code=CODE, **kw)


def files(root: Path, table_id: str = "tab") -> dict[str, bytes]:
    folder = root / "tables" / table_id
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_table_built_twice_is_byte_identical(root: Path) -> None:
    first = build(root)
    once = files(root)
    second = build(root)
    assert files(root) == {**once, "table.json": files(root)["table.json"]}
    assert {n: once[n] for n in FILES} == {n: files(root)[n] for n in FILES}
    assert (first.passed, first.deterministic, second.passed, second.deterministic) == (True, True, True, True)
    assert sorted(once) == ["final.csv", "final.md", "final.tex", "source.csv", "table.json"]  # no temp folders
    assert once["source.csv"].decode() == (
        "method,metric,mean,std,n,seeds,capsules,test_id\n"
        "base,lpips,0.375,0.125,5,3,base/seed0;base/seed1;base/seed2,set5\n"
        "base,psnr,31.0,1.0,5,3,base/seed0;base/seed1;base/seed2,set5\n"
        "ours,lpips,0.375,0.0625,5,3,ours/seed0;ours/seed1;ours/seed2,set5\n"
        "ours,psnr,33.5,0.5,5,3,ours/seed0;ours/seed1;ours/seed2,set5\n")
    # the bold rule both ways: psnr clears ([33, 34] vs [30, 32]); lpips overlaps ([0.3125, 0.4375] vs [0.25, 0.5])
    assert once["final.md"].decode() == (
        "| method | n | seeds | psnr ↑ | lpips ↓ |\n| :--- | ---: | ---: | ---: | ---: |\n"
        "| base | 5 | 3 | 31.00 ± 1.00 | 0.375 ± 0.125 |\n| ours | 5 | 3 | **33.50 ± 0.50** | 0.375 ± 0.062 |\n")


def test_one_changed_source_number_changes_source_the_cell_and_every_hash_that_rests_on_it(root: Path) -> None:
    build(root)
    before, document = files(root), json.loads(files(root)["table.json"])
    write_capsule(root, "ours", "seed2", seed=2, test_id="set5", n=5, metrics={"psnr": 35.0, "lpips": 0.4375})
    build(root)
    after, rebuilt = files(root), json.loads(files(root)["table.json"])
    mean, std = 101.5 / 3, statistics.stdev([33.0, 33.5, 35.0])
    changed = f"ours,psnr,{mean!r},{std!r},5,3,ours/seed0;ours/seed1;ours/seed2,set5"
    assert after["source.csv"].decode().splitlines()[4] == changed
    assert before["source.csv"].decode().splitlines()[:4] == after["source.csv"].decode().splitlines()[:4]
    assert after["final.md"].decode().splitlines()[3] == "| ours | 5 | 3 | **33.83 ± 1.04** | 0.375 ± 0.062 |"
    assert rebuilt["source"]["sha256"] == sha(root / "tables/tab/source.csv") != document["source"]["sha256"]
    assert [o["sha256"] for o in rebuilt["outputs"]] == [sha(root / "tables/tab" / n) for n in FILES[1:]]
    assert all(a["sha256"] != b["sha256"] for a, b in zip(rebuilt["outputs"], document["outputs"], strict=True))
    moved = [(a["path"], a["sha256"] != b["sha256"]) for a, b in zip(rebuilt["inputs"], document["inputs"],
                                                                     strict=True)]
    assert [path for path, differs in moved if differs] == ["runs/ours/seed2/test/set5/metrics.json"]


def test_table_json_keeps_the_user_keys_and_records_inputs_source_provenance_and_qa(root: Path) -> None:
    written = json.loads((root / "tables/tab/table.json").read_text())
    build(root)
    document = json.loads(files(root)["table.json"])
    assert {k: document[k] for k in written} == written
    assert list(document)[:len(written)] == list(written)
    assert document["inputs"] == [
        {"capsule": f"{m}/seed{s}", "test_id": "set5", "split": "test",
         "path": f"runs/{m}/seed{s}/test/set5/metrics.json",
         "sha256": sha(root / f"runs/{m}/seed{s}/test/set5/metrics.json")} for m in ("base", "ours") for s in range(3)]
    assert document["source"] == {
        "path": "source.csv", "sha256": sha(root / "tables/tab/source.csv"), "rows": 4,
        "columns": ["method", "metric", "mean", "std", "n", "seeds", "capsules", "test_id"],
        "key": ["method", "metric"], "directions": {"psnr": "higher_is_better", "lpips": "lower_is_better"}}
    assert document["outputs"] == [{"path": n, "sha256": sha(root / "tables/tab" / n)} for n in FILES[1:]]
    assert document["provenance"]["command"] == "rgt build table tab"
    assert sorted(document["provenance"]["checkpoint_sha256"]) == [f"{m}/seed{s}" for m in ("base", "ours")
                                                                   for s in range(3)]
    assert document["provenance"]["git_commit"] == CODE["git_commit"]
    assert document["provenance"]["env"]["pandas"] is not None
    assert {k: v for k, v in document["qa"].items() if k != "checked_at"} == {
        "passed": True, "deterministic": True, "notes": "",
        "checks": dict.fromkeys(["Q1_parse_back", "Q2_no_nan", "Q3_cells_match_source", "Q4_bold_rule",
                                 "Q5_n_shown", "Q6_direction_marked"], "pass")}
    assert document["disclosure"] is None


def test_a_bare_run_id_means_every_cell_of_the_run(root: Path) -> None:
    write_table(root, "short", [{"method": "base", "capsules": ["base"]}, {"method": "ours", "capsules": ["ours"]}],
                layout=LAYOUT)
    build(root, "short")
    build(root)
    assert files(root, "short")["source.csv"] == files(root)["source.csv"]


def test_directions_follow_declared_then_metrics_json_then_the_shipped_table(root: Path) -> None:
    """metrics.json's word beats the shipped table's name match (psnr said lower-is-better stays ↓, which V10
    reports); rgt.toml [metrics] beats both; no word at all is disclosed, no arrow."""
    for seed in range(3):
        write_capsule(root, "odd", f"seed{seed}", seed=seed, test_id="set5", n=5,
                      metrics={"psnr": 20.0 + seed, "sharpness_idx": 1.0 + seed, "blurb_q": 2.0 + seed},
                      directions={"psnr": "lower_is_better", "sharpness_idx": "lower_is_better",
                                  "blurb_q": "unknown"})
    write_table(root, "dirs", [{"method": "odd", "capsules": ["odd"]}],
                layout={"columns": ["psnr", "sharpness_idx", "blurb_q"]})
    header = "| method | n | seeds | psnr ↓ | sharpness\\_idx ↓ | blurb\\_q |"
    built = build(root, "dirs")
    assert files(root, "dirs")["final.md"].decode().splitlines()[0] == header
    assert (built.gate.checks["Q6_direction_marked"], built.passed) == ("disclosed", True)
    assert built.document["disclosure"] == ("the direction of blurb_q is unknown (declare it in rgt.toml "
                                            "[metrics]): no arrow.")
    declared = {"psnr": MetricRule("psnr", "max"), "sharpness_idx": MetricRule("sharpness_idx", "max"),
                "blurb_q": MetricRule("blurb_q", "min")}
    build(root, "dirs", declared=declared)
    assert files(root, "dirs")["final.md"].decode().splitlines()[0] == \
        "| method | n | seeds | psnr ↑ | sharpness\\_idx ↑ | blurb\\_q ↓ |"


def test_single_seed_and_validation_split_rows_are_disclosed(root: Path) -> None:
    write_capsule(root, "solo", "seed0", test_id="set5", split="val", n=5, metrics={"psnr": 40.0, "lpips": 0.1})
    write_table(root, "mixed", [*ROWS, {"method": "solo", "capsules": ["solo/seed0"]}], layout=LAYOUT)
    built = build(root, "mixed")
    assert files(root, "mixed")["final.md"].decode().splitlines()[4] == "| solo | 5 | 1 | 40.00 | 0.100 |"
    assert built.gate.checks["Q4_bold_rule"] == "disclosed" and built.passed
    assert built.document["disclosure"] == (
        "solo is single-seed (no ± shown, never bold). solo: val-split numbers, not test. psnr: the best row "
        "'solo' is single-seed (no error bar), so no row is bold. lpips: the best row 'solo' is single-seed (no "
        "error bar), so no row is bold.")
    assert built.document["inputs"][-1]["split"] == "val"


def test_a_spread_beyond_a_double_fails_q2_instead_of_killing_the_build(tmp_path: Path) -> None:
    for seed, value in enumerate([1.7e308, -1.7e308]):
        write_capsule(tmp_path, "huge", f"seed{seed}", test_id="set5", n=5, metrics={"psnr": value})
    write_table(tmp_path, "big", [{"method": "huge", "capsules": ["huge"]}])
    built = build(tmp_path, "big")
    assert files(tmp_path, "big")["source.csv"].decode().splitlines()[1] == \
        "huge,psnr,0.0,inf,5,2,huge/seed0;huge/seed1,set5"
    assert (built.gate.checks["Q2_no_nan"], built.passed, built.document["qa"]["passed"]) == ("fail", False, False)


# -- bad input: refused naming what and where, nothing written -----------------------------------------------
BAD = {
    "unknown key": ({"layuot": {}}, "tables/tab/table.json: layuot: unknown key (a table.json has schema, table_id, "
                                     "supports_claims, test_id, rows, layout, caption; rgt writes inputs, source, "
                                     "provenance, outputs, qa, disclosure)"),
    "bad precision": ({"layout": {"columns": ["psnr"], "precision": {"psnr": -1}}},
                      "tables/tab/table.json: layout.precision.psnr: -1 is not a number of decimals (a whole "
                      "number 0..12)"),
    "no columns": ({"layout": {}}, "tables/tab/table.json: layout.columns: a non-empty list of metric keys (as in "
                                   "metrics.json `metrics`) is required"),
    "bad capsule": ({"rows": [{"method": "x", "capsules": ["base/seed0", "../etc"]}]},
                    "tables/tab/table.json: rows[0].capsules[1]: '../etc' is not a capsule `<run>/<cell>` or a "
                    "run id"),
    "missing metric": ({"layout": {"columns": ["psnr", "ssim"]}},
                       "runs/base/seed0/test/set5/metrics.json: no finite metrics.ssim.value (row 'base' needs "
                       "ssim; tables/tab/table.json: rows[0].capsules[0])"),
    "no test id": ({"test_id": None}, "tables/tab/table.json: rows[0].test_id: no test id (set test_id at the top "
                                      "of table.json or on the row)"),
    "bad test id": ({"test_id": "../x"}, "tables/tab/table.json: test_id: '../x' is not a test id (the folder "
                                         "under test/ in each capsule)"),
    "wrong schema": ({"schema": "remote-gpu-trainer/FIGURE/v1"}, "schema: 'remote-gpu-trainer/FIGURE/v1', expected "
                                                                "'remote-gpu-trainer/TABLE/v1'"),
    "arrow in label": ({"layout": {"columns": ["psnr"], "labels": {"psnr": "PSNR ↑"}}},
                       "tables/tab/table.json: layout.labels.psnr: 'PSNR ↑' ends with an arrow: rgt adds ↑/↓ from "
                       "the metric's direction"),
    "missing test": ({"test_id": "set14"}, "tables/tab/table.json: rows[0].capsules[0]: "
                                           "runs/base/seed0/test/set14/metrics.json is missing"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_table_json_is_refused_naming_the_key_and_nothing_is_written(root: Path, case: str) -> None:
    change, message = BAD[case]
    path = root / "tables/tab/table.json"
    document = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as caught:
        build(root)
    assert str(caught.value).endswith(message)
    assert sorted(files(root)) == ["table.json"] and json.loads(path.read_text()) == document


def test_unknown_linked_and_unparsable_tables_are_refused(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^rgt build table: no table 'nope' \(expected the folder tables/nope/"):
        build(root, "nope")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "table.json").write_text((root / "tables/tab/table.json").read_text())
    os.symlink(outside, root / "tables" / "linked")
    with pytest.raises(ConfigError, match=r"^rgt build table: no table 'linked'"):
        build(root, "linked")
    (root / "tables/tab/table.json").write_text('{"schema": "remote-gpu-trainer/TABLE/v1", "rows": [}')
    with pytest.raises(ConfigError, match=r"table.json: malformed JSON"):
        build(root)
    assert sorted(os.listdir(outside)) == ["table.json"]


def test_a_capsule_linked_out_of_the_project_is_refused(root: Path, tmp_path: Path) -> None:
    write_capsule(tmp_path / "other", "evil", "seed0", test_id="set5", n=5, metrics={"psnr": 99.0, "lpips": 0.0})
    (root / "runs" / "evil").mkdir()
    os.symlink(tmp_path / "other/runs/evil/seed0", root / "runs/evil/seed0")
    write_table(root, "leak", [{"method": "evil", "capsules": ["evil/seed0"]}])
    with pytest.raises(ConfigError) as caught:
        build(root, "leak")
    assert str(caught.value) == ("tables/leak/table.json: rows[0].capsules[0]: runs/evil/seed0/test/set5/metrics.json "
                                 "goes through a symlink (refused: evidence is read only through regular files "
                                 "inside the project)")
    assert sorted(files(root, "leak")) == ["table.json"]


def test_seeds_tested_on_different_n_are_refused(root: Path) -> None:
    write_capsule(root, "ours", "seed2", seed=2, test_id="set5", n=4, metrics={"psnr": 34.0, "lpips": 0.4375})
    with pytest.raises(ConfigError) as caught:
        build(root)
    assert str(caught.value) == (
        "row 'ours': its capsules were tested on different n (runs/ours/seed0/test/set5/metrics.json n=5, "
        "runs/ours/seed1/test/set5/metrics.json n=5, runs/ours/seed2/test/set5/metrics.json n=4); a cell averages "
        "seeds of one test set")


def test_a_failed_rebuild_leaves_the_last_good_build_in_place(root: Path) -> None:
    build(root)
    good = files(root)
    write_capsule(root, "ours", "seed1", seed=1, test_id="set5", n=5, metrics={"psnr": 33.5})  # lpips gone
    with pytest.raises(ConfigError, match="no finite metrics.lpips.value"):
        build(root)
    assert files(root) == good
