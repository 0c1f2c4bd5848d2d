"""Each completeness check (docs/deliver.md §7) failing for its own reason and passing when whole, through the
real `rgt completeness` on real files: CKPT against the real manifest builder's seal, INPUTS against the split
manifest's members and fitted artifacts, VISUALS against a figure's source.csv and the declared visual roster,
UNIFORM across the points of a test; a link never counts as a file here; an unreachable box is unknown."""

from __future__ import annotations

import asyncio
import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.remote.build_manifest import build
from remote_gpu_trainer.services.deliver.completeness import box_checkpoint_lines, run_completeness
from remote_gpu_trainer.services.opening import open_session
from support.capsules import sha256_file, write_capsule, write_json, write_split
from support.helpers import FIXTURES, HUNG

CKPT = FIXTURES / "cells" / "seed0" / "best.pth"
CKPT_SHA = sha256_file(CKPT)
SEEDS = ("seed0", "seed1")


def make_project(root: Path, *, vis: dict[str, Any] | None = None, fit: bool = False,
                 metrics: dict[str, dict[str, float]] | None = None, extra: str = "") -> Path:
    """Run `r` with cells seed0 and seed1, each a full capsule with best.pth, sealed by the real builder;
    a [grid] over the two seeds with test `main`."""
    members = {"train": [("a.bin", b"a"), ("b.bin", b"b")], "test": [("c.bin", b"c")]}
    fit_records = []
    if fit:
        (root / "stats").mkdir(parents=True, exist_ok=True)
        (root / "stats" / "norm.json").write_text('{"mean": 0.5}', encoding="utf-8")
        fit_records = [{"artifact": "stats/norm.json", "sha256": sha256_file(root / "stats" / "norm.json"),
                        "fit_split": "train"}]
    split_sha = sha256_file(write_split(root, "main", members, extra={"fit_records": fit_records}))
    for cell in SEEDS:
        tests = [{"test_id": "main", "split": "test", "checkpoint": "best", "n": 2, **({"vis": vis} if vis else {})}]
        data = {"dataset": "synthetic", "split_manifest": "splits/main.json", "split_manifest_sha256": split_sha}
        folder = write_capsule(root, "r", cell, metrics=(metrics or {}).get(cell, {"acc": 0.5}),
                               items=[{"acc": 1.0}, {"acc": 0.0}], record={"provenance": {"data": data},
                                                                            "tests": tests},
                               metrics_extra={"checkpoint_sha256": CKPT_SHA})
        shutil.copyfile(CKPT, folder / "best.pth")
        if vis:
            for role in vis["roles"]:
                for ident in ("x1", "x2"):
                    path = folder / "test" / "main" / "vis" / "ours" / role / f"{ident}.png"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(b"\x89PNG" + ident.encode())
    assert build(str(root / "runs" / "r"), "r", list(SEEDS), ["run.json", "best.pth"]) == 0
    (root / "rgt.toml").write_text('[project]\nname = "c"\n\n[grid]\ndims = { seed = [0, 1] }\n'
                                   'capsule = "r/seed{seed}"\ntest_id = "main"\n' + extra, encoding="utf-8")
    return root


def completeness(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["completeness", str(root), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def point(body: dict[str, Any], capsule: str) -> dict[str, Any]:
    return next(p for p in body["points"] if p["capsule"] == capsule)


# ".." is a condition name only a hostile run.json writes: it never becomes a path (4 visuals, not 6)
VIS = {"selection_id": "main-all", "path": "selections/main-all.json", "k": 2, "conditions": ["ours", ".."],
       "roles": ["input", "pred"]}


def test_a_whole_grid_is_complete_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p", fit=True)
    code, body = completeness(root, capsys)
    assert code == 0 and body["exit_code"] == 0
    assert [(p["state"], p["CKPT"], p["SPLIT"], p["INPUTS"], p["VISUALS"], p["UNIFORM"], p["details"])
            for p in body["points"]] == [("complete", "ok", "ok", "ok", "n/a", "ok", {})] * 2
    assert body["pull_list"] == [] and body["boxes"] == [
        {"run": "r", "remote_root": None, "reachable": False, "detail": "not a run of rgt.toml: no box to ask"}]


def test_a_checkpoint_changed_after_the_seal_or_never_sealed_is_a_mismatch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p")
    ckpt = root / "runs" / "r" / "seed0" / "best.pth"
    ckpt.write_bytes(ckpt.read_bytes() + b"\0")
    (root / "runs" / "r" / "PULL_MANIFEST.json").unlink()
    shutil.copyfile(root / "runs" / "r" / "seed0" / "best.pth", tmp_path / "changed.pth")
    code, body = completeness(root, capsys)
    assert code == 1
    assert point(body, "r/seed1")["details"]["CKPT"] == (
        "runs/r/seed1/best.pth is here but runs/r/PULL_MANIFEST.json does not seal it: not a verified copy")
    assert build(str(root / "runs" / "r"), "r", list(SEEDS), ["run.json"]) == 0  # sealed again, then changed
    ckpt.write_bytes(CKPT.read_bytes())
    code, body = completeness(root, capsys)
    changed = sha256_file(tmp_path / "changed.pth")
    assert point(body, "r/seed0")["CKPT"] == "mismatch"
    assert point(body, "r/seed0")["details"]["CKPT"] == (
        f"runs/r/seed0/best.pth differs from the sha256 PULL_MANIFEST.json seals ({CKPT_SHA[:12]} here, "
        f"{changed[:12]} sealed)")
    assert point(body, "r/seed1")["CKPT"] == "ok"


def test_a_checkpoint_reached_through_a_link_is_not_here(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p")
    ckpt = root / "runs" / "r" / "seed0" / "best.pth"
    shutil.copyfile(ckpt, tmp_path / "outside.pth")
    ckpt.unlink()
    ckpt.symlink_to(tmp_path / "outside.pth")
    code, body = completeness(root, capsys)
    assert code == 1 and point(body, "r/seed0")["CKPT"] == "missing"
    assert point(body, "r/seed0")["details"]["CKPT"] == (
        "runs/r/seed0/best.pth is not here (run r has no box in rgt.toml)")


def test_inputs_name_the_member_the_manifest_change_and_the_fitted_artifact(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p", fit=True)
    (root / "data" / "train" / "b.bin").unlink()
    _, body = completeness(root, capsys)
    assert point(body, "r/seed0")["INPUTS"] == "missing"
    assert point(body, "r/seed0")["details"]["INPUTS"] == (
        "1 of 3 member(s) of splits/main.json are not here (first: data/train/b.bin)")
    (root / "data" / "train" / "b.bin").write_bytes(b"B")
    _, body = completeness(root, capsys)
    assert point(body, "r/seed1")["details"]["INPUTS"] == (
        "1 member(s) of splits/main.json differ from their sha256 (first: data/train/b.bin)")
    (root / "data" / "train" / "b.bin").write_bytes(b"b")
    (root / "stats" / "norm.json").write_text('{"mean": 0.6}', encoding="utf-8")
    _, body = completeness(root, capsys)
    assert (point(body, "r/seed0")["INPUTS"], point(body, "r/seed0")["details"]["INPUTS"]) == (
        "mismatch", "fitted artifact stats/norm.json differs from the sha256 the split manifest records")
    manifest = root / "splits" / "main.json"
    manifest.write_text(manifest.read_text(encoding="utf-8").replace('"random"', '"official"'), encoding="utf-8")
    _, body = completeness(root, capsys)
    assert point(body, "r/seed0")["details"]["INPUTS"].startswith("splits/main.json changed since the run")
    manifest.unlink()
    code, body = completeness(root, capsys)
    assert code == 1 and point(body, "r/seed0")["details"]["INPUTS"] == (
        "splits/main.json (named by runs/r/seed0/run.json) is not here")


def test_visuals_are_checked_only_for_points_a_figure_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p", vis=VIS)
    write_json(root / "selections" / "main-all.json", {"selection_id": "main-all", "ids": ["x1", "x2"]})
    write_json(root / "figures" / "bars" / "figure.json",
               {"schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "bars", "kind": "bar", "test_id": "main",
                "metric": "acc", "series": [{"label": "ours", "capsules": ["r/seed0"]}]})
    code, body = completeness(root, capsys)
    assert (point(body, "r/seed0")["VISUALS"], point(body, "r/seed1")["VISUALS"]) == ("missing", "n/a")
    assert point(body, "r/seed0")["details"]["VISUALS"] == "figures/bars/source.csv is not here (not built)"
    with (root / "figures" / "bars" / "source.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["series", "x", "y", "err_lo", "err_hi", "n", "seeds", "capsules", "test_id", "metric"])
        writer.writerow(["ours", "ours", "0.5", "", "", "2", "1", "r/seed0", "main", "acc"])
    code, body = completeness(root, capsys)
    assert code == 0 and point(body, "r/seed0")["VISUALS"] == "ok"
    (root / "runs" / "r" / "seed0" / "test" / "main" / "vis" / "ours" / "pred" / "x2.png").unlink()
    code, body = completeness(root, capsys)
    assert code == 1 and point(body, "r/seed0")["details"]["VISUALS"] == (
        "1 of 4 visual(s) are nowhere (first: runs/r/seed0/test/main/vis/ours/pred/x2.png)")
    (root / "selections" / "main-all.json").unlink()
    _, body = completeness(root, capsys)
    assert point(body, "r/seed0")["details"]["VISUALS"] == (
        "the selection 'selections/main-all.json' run.json names for the visuals is not here")


def test_a_run_json_declaring_more_visuals_than_can_be_counted_is_a_mismatch_not_a_listing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run.json is written on the box: 60,000 condition names (a few hundred kB) × 1 role × 2 ids were 120,000
    paths listed, stat'ed here and asked of the box per point (3,000 × 3,000 names: billions, never finishing)."""
    many = {**VIS, "conditions": [f"c{i}" for i in range(60_000)], "roles": ["input"]}
    root = make_project(tmp_path / "p", vis=many)
    write_json(root / "selections" / "main-all.json", {"selection_id": "main-all", "ids": ["x1", "x2"]})
    write_json(root / "figures" / "bars" / "figure.json",
               {"schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "bars", "kind": "bar", "test_id": "main",
                "metric": "acc", "series": [{"label": "ours", "capsules": ["r/seed0"]}]})
    (root / "figures" / "bars" / "source.csv").write_text(
        "series,x,y,err_lo,err_hi,n,seeds,capsules,test_id,metric\nours,0,0.5,,,2,1,r/seed0,main,acc\n",
        encoding="utf-8")
    code, body = completeness(root, capsys)
    assert code == 1
    assert (point(body, "r/seed0")["VISUALS"], point(body, "r/seed0")["details"]["VISUALS"]) == (
        "mismatch", "run.json declares 120000 visuals for test main (conditions × roles × ids), more than 100000: "
                    "not counted")
    assert point(body, "r/seed1")["VISUALS"] == "n/a" and body["pull_list"] == []


def test_uniform_compares_outputs_and_the_checkpoint_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path / "p", metrics={"seed0": {"acc": 0.5}, "seed1": {"acc": 0.5, "f1": 0.4}},
                        extra="")
    # three points of the test so one shape is the usual one
    (root / "rgt.toml").write_text((root / "rgt.toml").read_text().replace("[0, 1]", "[0, 1, 2]"), encoding="utf-8")
    shutil.copytree(root / "runs" / "r" / "seed0", root / "runs" / "r" / "seed2")
    metrics = root / "runs" / "r" / "seed2" / "test" / "main" / "metrics.json"
    body = json.loads(metrics.read_text(encoding="utf-8"))
    body["checkpoint_sha256"] = "ef" * 32
    metrics.write_text(json.dumps(body), encoding="utf-8")
    (root / "runs" / "r" / "PULL_MANIFEST.json").unlink()
    assert build(str(root / "runs" / "r"), "r", ["seed0", "seed1", "seed2"], ["run.json"]) == 0
    code, report = completeness(root, capsys)
    assert code == 1
    assert [(p["capsule"], p["UNIFORM"]) for p in report["points"]] == [
        ("r/seed0", "ok"), ("r/seed1", "mismatch"), ("r/seed2", "mismatch")]
    assert point(report, "r/seed1")["details"]["UNIFORM"] == (
        "r/seed1 test main has metrics ['acc', 'f1'] where the other points of the test have ['acc']")
    assert point(report, "r/seed2")["details"]["UNIFORM"] == (
        f"metrics.json was computed from checkpoint {'ef' * 6}, best.pth is {CKPT_SHA[:12]}")


def test_an_unreachable_box_leaves_its_points_unknown_never_ok(
        tmp_path: Path, silent_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = make_project(tmp_path / "p", extra=f"""
[instances.{HUNG}]
provider = "ssh"
host = "nobody@127.0.0.1:{silent_server}"
price_per_hour = 1.0

[runs.far]
instance = "{HUNG}"
workdir = "/w"
command = "true"
remote_root = "/w/rgt/far"
roster = ["seed0"]
""")
    (root / "rgt.toml").write_text((root / "rgt.toml").read_text().replace('capsule = "r/seed{seed}"',
                                                                           'capsule = "far/seed{seed}"'),
                                   encoding="utf-8")

    async def ask() -> tuple[Any, list[str]]:
        session = open_session(str(root))
        try:
            return await run_completeness(session, timeout_s=2.0), await box_checkpoint_lines(
                session, ("far",), timeout_s=2.0)
        finally:
            await session.close_transports()
            session.close()

    report, lines = asyncio.run(ask())
    assert [(r.state, r.checks["CKPT"].state, r.checks["CKPT"].detail) for r in report.points] == [
        ("unknown", "unknown", f"runs/far/{cell}/best.pth is not here and the box did not answer (no answer within 2s)")
        for cell in SEEDS]
    assert report.exit_code == 1 and report.pull_list == ()
    assert lines == [f"Grid:      seed={n} (far/seed{n}): no checkpoint here, and the box did not answer "
                     "(no answer within 2s)" for n in (0, 1)]
