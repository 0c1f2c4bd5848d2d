"""`build_figure` end to end on real capsules, real matplotlib renders and real files (docs/deliver.md §3):
each built-in kind passes all six gate checks and rebuilds byte-identical; one changed source number changes
source.csv and every hash resting on it; the data's own problems reach the gate; bad input is refused with
nothing written; a folder build.py goes through the same gate."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.deliver.figures.build import FigureBuild, build_figure, png_provenance
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from support.capsules import write_capsule, write_json
from support.figures import CELLS, curve, write_cells, write_figure

FILES = ("source.csv", "final.png", "final.svg", "final.pdf")
KINDS: dict[str, dict[str, Any]] = {
    "line": {"y": "loss", "title": "Training loss"},
    "bar": {"test_id": "main", "metric": "acc", "title": "Accuracy"},
    "scatter": {"test_id": "main", "x": "loss", "y": "acc"},
}


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    write_cells(project)
    return project


def hashes(root: Path, figure_id: str) -> dict[str, str]:
    folder = root / "figures" / figure_id
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in FILES}


def listing(root: Path, figure_id: str) -> dict[str, bytes]:
    folder = root / "figures" / figure_id
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_built_in_kind_passes_all_six_and_rebuilds_byte_identical(root: Path, kind: str) -> None:
    write_figure(root, "fig", kind, **KINDS[kind])
    first = build_figure(root, "fig")
    before = hashes(root, "fig")
    second = build_figure(root, "fig")
    assert hashes(root, "fig") == before
    assert first.checks.keys() == second.checks.keys() == {"G1_blank", "G2_glyphs", "G3_clipped", "G4_overlap",
                                                           "G5_axis", "G6_data"}
    assert {name: c.status for name, c in second.checks.items()} == dict.fromkeys(second.checks, "pass")
    qa = second.document["qa"]
    assert (qa["passed"], qa["deterministic"], qa["notes"], second.passed) == (True, True, "", True)
    outputs = {o["path"]: o["sha256"] for o in second.document["outputs"]}
    assert outputs == {name: before[name] for name in FILES[1:]}
    assert second.document["source"]["sha256"] == before["source.csv"]
    assert second.document["outputs"][0]["px"] == [960, 600]  # 6.4 × 4.0 in at the default 150 dpi


def test_source_rows_are_the_mean_and_std_over_seeds_at_full_precision(root: Path) -> None:
    write_figure(root, "bar", "bar", **KINDS["bar"])
    build_figure(root, "bar")
    ours = [0.90, 0.93, 0.91]
    mean = sum(ours) / 3  # math.fsum agrees here
    std = (sum((v - mean) ** 2 for v in ours) / 2) ** 0.5
    lines = (root / "figures/bar/source.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "series,x,y,err_lo,err_hi,n,seeds,capsules,test_id,metric"
    assert lines[2] == f"ours,1,{mean!r},{std!r},{std!r},50,3,ours/seed0;ours/seed1;ours/seed2,main,acc"
    assert len(lines) == 3


def test_the_png_and_svg_carry_the_stable_provenance_and_no_build_time(root: Path) -> None:
    write_figure(root, "bar", "bar", **KINDS["bar"])
    built = build_figure(root, "bar")
    folder = root / "figures/bar"
    stable = png_provenance((folder / "final.png").read_bytes())
    assert stable == {"inputs": {i["path"]: i["sha256"] for i in built.document["inputs"]},
                      "source_sha256": built.document["source"]["sha256"], "git_commit": None, "builder_sha256": None}
    svg = (folder / "final.svg").read_text(encoding="utf-8")
    assert built.document["source"]["sha256"] in svg and "<dc:description>" in svg
    created = built.document["provenance"]["created_at"]
    assert created.encode() not in (folder / "final.png").read_bytes() and created not in svg
    assert built.document["provenance"]["env"]["fonts"] == ["DejaVuSans.ttf"]
    assert built.document["provenance"]["checkpoint_sha256"] == {f"{r}/{c}": "ab" * 32 for r, c, _, _ in CELLS}


def test_one_changed_source_number_changes_source_csv_and_every_output_hash(root: Path) -> None:
    for figure_id, kind in (("bar", "bar"), ("loss", "line")):
        write_figure(root, figure_id, kind, **KINDS[kind])
        build_figure(root, figure_id)
    bar_before, line_before = hashes(root, "bar"), hashes(root, "loss")
    write_capsule(root, "ours", "seed1", metrics={"acc": 0.94, "loss": 0.07}, n=50, train=curve(0.03))
    build_figure(root, "bar")
    assert all(hashes(root, "bar")[name] != bar_before[name] for name in FILES)
    assert hashes(root, "loss") == line_before  # the curve did not change: neither did its figure
    assert f"ours,1,{(0.90 + 0.94 + 0.91) / 3!r}," in (root / "figures/bar/source.csv").read_text(encoding="utf-8")
    write_capsule(root, "ours", "seed1", metrics={"acc": 0.94, "loss": 0.07}, n=50, train=curve(0.04))
    build_figure(root, "loss")
    assert all(hashes(root, "loss")[name] != line_before[name] for name in FILES)


def test_seeds_logged_at_different_steps_fail_g5_and_the_outputs_are_kept(root: Path) -> None:
    write_capsule(root, "ours", "seed1", metrics={"acc": 0.93}, n=50, train=curve(0.03, steps=9))
    write_figure(root, "loss", "line", **KINDS["line"])
    built = build_figure(root, "loss")
    assert (built.checks["G5_axis"].status, built.checks["G5_axis"].notes) == ("fail", (
        "series 'ours': seeds do not share x values (ours/seed0: 10, ours/seed1: 9)",
        "axes 1: compared curves cover different x ranges (baseline 100–1000, ours 100–900)"))
    assert built.document["qa"]["passed"] is False and built.passed is False
    assert (root / "figures/loss/final.png").is_file()
    rows = (root / "figures/loss/source.csv").read_text(encoding="utf-8").splitlines()
    assert sum(r.startswith("ours,") for r in rows) == 9  # drawn on the steps every seed logged


def test_single_seed_series_and_validation_split_numbers_are_disclosed(root: Path) -> None:
    write_capsule(root, "val", "seed0", metrics={"acc": 0.7, "loss": 0.3}, n=50, split="val")
    series = [{"label": "ours", "capsules": ["ours/seed0", "ours/seed1", "ours/seed2"]},
              {"label": "on val", "capsules": ["val/seed0"]}]
    write_figure(root, "bar", "bar", **{**KINDS["bar"], "series": series})
    built = build_figure(root, "bar")
    assert (built.checks["G6_data"].status, built.checks["G6_data"].notes) == (
        "disclosed", ("'on val' is single-seed: no error bar",))
    assert built.document["qa"]["passed"] is True
    assert built.document["disclosure"] == "on val: val-split numbers, not test. on val is single-seed (no error bar)."
    assert [i["split"] for i in built.document["inputs"]] == ["test", "test", "test", "val"]
    dirty = {"git_commit": "e4f5" * 10, "git_dirty": True, "dirty_diff_sha256": "5c" * 32}
    again = build_figure(root, "bar", code=dirty)
    assert again.document["disclosure"].endswith("(no error bar). Built from uncommitted code.")
    assert {k: again.document["provenance"][k] for k in dirty} == dirty


def test_the_user_keys_stay_as_written_and_the_human_view_tick_survives(root: Path) -> None:
    path = write_figure(root, "bar", "bar", **KINDS["bar"], supports_claims=["C1"], note="mine",
                        expect={"rows": 2, "baseline": 0})
    written = json.loads(path.read_text(encoding="utf-8"))
    build_figure(root, "bar")
    document = json.loads(path.read_text(encoding="utf-8"))
    document["qa"]["human_viewed"] = True  # the user's tick T03
    path.write_text(json.dumps(document), encoding="utf-8")
    build_figure(root, "bar")
    again = json.loads(path.read_text(encoding="utf-8"))
    assert {k: again[k] for k in written} == written
    assert list(again)[:len(written)] == list(written)
    assert list(again)[len(written):] == ["inputs", "source", "provenance", "outputs", "qa", "disclosure"]
    assert again["qa"]["human_viewed"] is True


BAD = {
    "kind": ({"kind": "pie"}, "figures/fig/figure.json: kind: 'pie' is not one of line, bar, scatter, custom"),
    "series": ({"series": []}, "figures/fig/figure.json: series: missing or empty: a list of {label, capsules: "
                               "[\"<run>/<cell>\", ...]}"),
    "label": ({"series": [{"label": "a", "capsules": ["ours/seed0"]}, {"label": "a", "capsules": ["base/seed0"]}]},
              "figures/fig/figure.json: series[1].label: 'a' is used twice"),
    "dpi": ({"dpi": 5000}, "figures/fig/figure.json: dpi: 5000 is not a number from 50 to 600"),
    "expect": ({"expect": {"rows": 0}}, "figures/fig/figure.json: expect.rows: 0 is not a whole number ≥ 1"),
    "disclose": ({"disclose": {"G2_glyphs": "fine"}}, "figures/fig/figure.json: disclose.G2_glyphs: only G5_axis, "
                                                      "G6_data can be disclosed instead of fixed"),
    "capsule": ({"series": [{"label": "a", "capsules": ["ours/seed9"]}]},
                "series[0].capsules (ours/seed9): runs/ours/seed9/test/main/metrics.json is missing"),
    "metric": ({"metric": "f1"}, "runs/base/seed0/test/main/metrics.json: metrics.f1.value is None, not a finite "
                                 "number"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_refused_naming_the_key_and_nothing_is_written(root: Path, case: str) -> None:
    keys, message = BAD[case]
    kind = keys.get("kind", "bar")
    write_figure(root, "fig", kind, **{**KINDS["bar"], **{k: v for k, v in keys.items() if k != "kind"}})
    before = listing(root, "fig")
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "fig")
    assert str(caught.value) == message
    assert listing(root, "fig") == before


def test_unknown_figures_and_inputs_outside_the_project_are_refused(root: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "nope")
    assert str(caught.value) == ("rgt build figure: no figure 'nope' (expected the folder figures/nope/ with a "
                                 "figure.json, as a plain folder inside the project)")
    outside = tmp_path / "elsewhere"
    write_capsule(outside, "ours", "seed9", metrics={"acc": 0.99}, n=50)
    os.symlink(outside / "runs/ours/seed9", root / "runs/ours/seed9")
    write_figure(root, "fig", "bar", **{**KINDS["bar"], "series": [{"label": "a", "capsules": ["ours/seed9"]}]})
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "fig")
    assert str(caught.value) == ("series[0].capsules (ours/seed9): runs/ours/seed9/test/main/metrics.json goes "
                                 "through a symlink (refused: evidence is read only through regular files inside "
                                 "the project)")
    assert sorted(p.name for p in (root / "figures/fig").iterdir()) == ["figure.json"]


def test_a_failed_rebuild_leaves_the_last_good_build_in_place(root: Path) -> None:
    write_figure(root, "bar", "bar", **KINDS["bar"])
    build_figure(root, "bar")
    before = listing(root, "bar")
    (root / "runs/ours/seed2/test/main/metrics.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(ConfigError):
        build_figure(root, "bar")
    assert listing(root, "bar") == before


BUILD_PY = '''
import matplotlib.pyplot as plt
import pandas as pd


def build(inputs):
    rows = []
    for index, item in enumerate(inputs):
        value = item.json()["metrics"]["acc"]["value"]
        rows.append({"series": item.capsule, "x": index, "y": value, "err_lo": None, "err_hi": None, "n": 50,
                     "seeds": 1, "capsules": item.capsule, "test_id": item.test_id, "metric": "acc"})
    return pd.DataFrame(rows)


def render(df, out_dir):
    fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    for row in df.itertuples():
        ax.bar([row.x], [row.y {tamper}], label=row.series)
    ax.set_xticks(list(df.x), list(df.series))
    ax.set_ylabel("acc")
    return fig
'''


def _custom(root: Path, tamper: str = "") -> None:
    write_figure(root, "own", "custom", inputs=[{"capsule": "base/seed0", "test_id": "main", "metric": "acc"},
                                                {"capsule": "ours/seed0", "test_id": "main", "metric": "acc"}])
    (root / "figures/own/build.py").write_text(BUILD_PY.replace("{tamper}", tamper), encoding="utf-8")


def test_a_build_py_goes_through_the_same_gate_and_records_its_hash(root: Path) -> None:
    _custom(root)
    built: FigureBuild = build_figure(root, "own")
    assert {n: c.status for n, c in built.checks.items()} == {
        "G1_blank": "pass", "G2_glyphs": "pass", "G3_clipped": "pass", "G4_overlap": "pass", "G5_axis": "pass",
        "G6_data": "disclosed"}
    assert built.deterministic is True
    code = (root / "figures/own/build.py").read_bytes()
    assert built.document["provenance"]["builder"] == {"path": "figures/own/build.py",
                                                       "sha256": hashlib.sha256(code).hexdigest()}
    assert built.document["inputs"][1] == {"capsule": "ours/seed0", "test_id": "main", "metric": "acc",
                                           "split": "test", "path": "runs/ours/seed0/test/main/metrics.json",
                                           "sha256": hashlib.sha256((root / "runs/ours/seed0/test/main/metrics.json")
                                                                    .read_bytes()).hexdigest()}


def test_a_build_py_that_draws_a_wrong_bar_is_caught_by_g6(root: Path) -> None:
    _custom(root, tamper="+ 0.05 * (row.x == 1)")
    built = build_figure(root, "own")
    assert (built.checks["G6_data"].status, built.checks["G6_data"].notes[0]) == (
        "fail", f"series 'ours/seed0': drawn (1, {0.9 + 0.05!r}) but source.csv has (1, 0.9)")
    assert built.document["qa"]["passed"] is False


def test_a_build_py_that_raises_fails_the_build_with_nothing_written(root: Path) -> None:
    _custom(root, tamper="+ undefined_name")
    before = listing(root, "own")
    with pytest.raises(VerbFailed) as caught:
        build_figure(root, "own")
    assert str(caught.value) == "figures/own/build.py: render() raised NameError: name 'undefined_name' is not defined"
    assert listing(root, "own") == before
    write_json(root / "figures/own/figure.json", {"schema": "remote-gpu-trainer/FIGURE/v1", "kind": "bar",
                                                  "test_id": "main", "metric": "acc", "series": []})
    with pytest.raises(ConfigError) as refused:
        build_figure(root, "own")
    assert str(refused.value) == ("figures/own/figure.json: kind: 'bar', but the folder has a build.py: set kind to "
                                  "custom, or remove build.py")
