"""The builder contract every figure and table shares (docs/deliver.md §3), on real files, real git and real
folders: inputs are read once through regular files inside the project, source.csv bytes are exact, the user's
keys survive a rebuild, and a failed build leaves the previous outputs in place."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from remote_gpu_trainer.deliver.document import load_document, merge_document
from remote_gpu_trainer.deliver.inputs import input_path, read_input
from remote_gpu_trainer.deliver.outputs import staging
from remote_gpu_trainer.deliver.provenance import code_state, environment, provenance, stable_provenance
from remote_gpu_trainer.deliver.source_csv import read_source_csv, source_csv
from remote_gpu_trainer.errors import ConfigError
from support.capsules import write_capsule, write_json

COLUMNS = ["series", "x", "y", "err_lo", "err_hi", "n", "seeds", "capsules", "test_id", "metric"]


def _row(series: str, x: object, y: object, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {c: None for c in COLUMNS}
    row.update(series=series, x=x, y=y, **extra)
    return row


def test_read_input_hashes_the_bytes_it_read(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r1", "seed0", metrics={"acc": 0.91})
    rel = "runs/r1/seed0/test/main/metrics.json"
    found = read_input(tmp_path, rel, "figure.json inputs[0]")
    on_disk = (tmp_path / rel).read_bytes()
    assert (found.path, found.data, found.sha256) == (rel, on_disk, hashlib.sha256(on_disk).hexdigest())
    assert found.json()["metrics"]["acc"]["value"] == 0.91


def test_read_input_refuses_links_escapes_and_missing_files(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_capsule(project, "r1", "seed0", metrics={"acc": 0.5})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "train.csv").write_text("step,loss\n1,0.5\n", encoding="utf-8")
    os.symlink(outside / "train.csv", project / "runs/r1/seed0/linked.csv")
    os.symlink(outside, project / "runs/r1/elsewhere")
    cases = {
        "runs/r1/seed0/linked.csv": "w: runs/r1/seed0/linked.csv goes through a symlink (refused: evidence is read "
                                    "only through regular files inside the project)",
        "runs/r1/elsewhere/train.csv": "w: runs/r1/elsewhere/train.csv goes through a symlink (refused: evidence "
                                       "is read only through regular files inside the project)",
        "runs/../../outside/train.csv": "w: 'runs/../../outside/train.csv' is not a plain path inside the project "
                                        "(no `..`, not absolute)",
        str(outside / "train.csv"): f"w: {str(outside / 'train.csv')!r} is not a plain path inside the project "
                                    "(no `..`, not absolute)",
        "runs/r1/seed1/train.csv": "w: runs/r1/seed1/train.csv is missing",
        "runs/r1/seed0/train.csv/x": "w: runs/r1/seed0/train.csv/x is not a regular file inside the project",
        "runs/r1/seed0/test": "w: runs/r1/seed0/test is not a regular file",
    }
    for rel, message in cases.items():
        with pytest.raises(ConfigError) as caught:
            read_input(project, rel, "w")
        assert str(caught.value) == message


def test_input_path_names_the_capsule_file() -> None:
    assert input_path({"capsule": "r1/seed0", "test_id": "set5", "metric": "psnr"}, "w") == \
        "runs/r1/seed0/test/set5/metrics.json"
    assert input_path({"capsule": "r1/seed0", "test_id": "set5", "file": "results.parquet"}, "w") == \
        "runs/r1/seed0/test/set5/results.parquet"
    assert input_path({"capsule": "r1/seed0", "file": "train.csv"}, "w") == "runs/r1/seed0/train.csv"
    assert input_path({"capsule": "r1/seed0"}, "w") == "runs/r1/seed0/train.csv"
    for spec, message in [
        ({"capsule": "../r1"}, "w.capsule: '../r1' is not a capsule `<run-id>/<cell>`"),
        ({"capsule": "r1/seed0/x"}, "w.capsule: 'r1/seed0/x' is not a capsule `<run-id>/<cell>`"),
        ({"capsule": "r1/seed0", "test_id": "../x"}, "w.test_id: '../x' is not a test id"),
        ({"capsule": "r1/seed0", "test_id": "t", "file": "best.pth"},
         "w.file: 'best.pth' is not one of metrics.json, results.parquet, results.csv, train.csv"),
    ]:
        with pytest.raises(ConfigError) as caught:
            input_path(spec, "w")
        assert str(caught.value) == message


def test_source_csv_bytes_are_exact_sorted_and_full_precision() -> None:
    rows = [_row("b", 2, 0.1 + 0.2, n=5, seeds=1, capsules="r/s1"),
            _row("a", 10, 1 / 3, err_lo=0.25, err_hi=0.25, n=5, seeds=3, capsules="r/s0;r/s1", metric="acc"),
            _row("a", 2, float("nan"), n=5, seeds=3, capsules='say "hi", twice')]
    data = source_csv(COLUMNS, rows, ("series", "x"), "w")
    assert data == (b"series,x,y,err_lo,err_hi,n,seeds,capsules,test_id,metric\n"
                    b'a,2,nan,,,5,3,"say ""hi"", twice",,\n'
                    b"a,10,0.3333333333333333,0.25,0.25,5,3,r/s0;r/s1,,acc\n"
                    b"b,2,0.30000000000000004,,,5,1,r/s1,,\n")
    assert read_source_csv(data)[1]["y"] == "0.3333333333333333"
    with pytest.raises(ConfigError) as caught:
        source_csv(COLUMNS, [{"series": "a", "x": 1, "y": 2, "colour": "red"}], ("series",), "build.py")
    assert str(caught.value) == ("build.py: row 0 has columns that are not source.csv's (series, x, y, err_lo, "
                                 "err_hi, n, seeds, capsules, test_id, metric): missing capsules, err_hi, err_lo, "
                                 "metric, n, seeds, test_id: extra colour")


def test_merge_keeps_the_user_keys_as_written_and_replaces_generated_ones() -> None:
    user = {"schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "f", "kind": "bar", "title": "Mine",
            "inputs": [{"metric": "acc", "capsule": "r/s0", "test_id": "t", "note": "kept"}],
            "qa": {"passed": False, "human_viewed": True}, "outputs": [{"path": "old.png", "sha256": "00"}],
            "expect": {"baseline": 0}}
    generated = {"inputs": [{"capsule": "r/s0", "test_id": "t", "metric": "acc", "split": "test",
                             "path": "runs/r/s0/test/t/metrics.json", "sha256": "ab"}],
                 "qa": {"passed": True, "human_viewed": False}, "outputs": [], "disclosure": None}
    merged = merge_document(user, generated)
    assert list(merged) == ["schema", "figure_id", "kind", "title", "inputs", "qa", "outputs", "expect",
                            "disclosure"]
    assert merged["inputs"] == [{"metric": "acc", "capsule": "r/s0", "test_id": "t", "note": "kept",
                                 "split": "test", "path": "runs/r/s0/test/t/metrics.json", "sha256": "ab"}]
    assert merged["qa"] == {"passed": True, "human_viewed": True}
    assert (merged["outputs"], merged["expect"], merged["title"]) == ([], {"baseline": 0}, "Mine")
    assert user["qa"] == {"passed": False, "human_viewed": True}  # the user's mapping is not modified


def test_load_document_names_the_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "figure.json"
    for body, message in [
        ("{", f"{path}: malformed JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
              "(char 1)"),
        ("[]", f"{path}: not a JSON object"),
        ('{"schema": "x"}', f"{path}: schema: 'x', expected 'remote-gpu-trainer/FIGURE/v1'"),
        ('{"schema": "remote-gpu-trainer/FIGURE/v1", "figure_id": "g"}',
         f"{path}: figure_id: 'g' is not the folder's name 'f'"),
    ]:
        path.write_text(body, encoding="utf-8")
        with pytest.raises(ConfigError) as caught:
            load_document(path, "remote-gpu-trainer/FIGURE/v1", "figure_id", "f")
        assert str(caught.value) == message


def test_a_failed_build_leaves_the_previous_outputs_and_a_good_one_replaces_them(tmp_path: Path) -> None:
    folder = tmp_path / "figures" / "f"
    folder.mkdir(parents=True)
    for name, text in [("final.png", "old png"), ("final.eps", "stale"), ("figure.json", "{}")]:
        (folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(RuntimeError), staging(folder) as stage:
        (stage.first / "final.png").write_text("half", encoding="utf-8")
        raise RuntimeError("render crashed")
    assert sorted(p.name for p in folder.iterdir()) == ["figure.json", "final.eps", "final.png"]
    assert (folder / "final.png").read_text(encoding="utf-8") == "old png"
    with staging(folder) as stage:
        for out in (stage.first, stage.second):
            (out / "final.png").write_bytes(b"new png")
            (out / "source.csv").write_bytes(b"a\n")
        assert stage.deterministic(["source.csv", "final.png"]) is True
        (stage.second / "final.png").write_bytes(b"other png")
        assert stage.deterministic(["source.csv", "final.png"]) is False
        outputs = stage.outputs(["final.png"], {"final.png": (3, 2)})
        stage.install(["source.csv", "final.png"], "figure.json", {"outputs": outputs})
    assert sorted(p.name for p in folder.iterdir()) == ["figure.json", "final.png", "source.csv"]
    assert outputs == [{"path": "final.png", "sha256": hashlib.sha256(b"new png").hexdigest(), "px": [3, 2]}]
    assert json.loads((folder / "figure.json").read_text(encoding="utf-8")) == {"outputs": outputs}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def test_provenance_reads_the_seal_the_records_and_the_tree(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r1", "seed0", metrics={"acc": 0.5})
    write_capsule(tmp_path, "r1", "seed1", metrics={"acc": 0.6})
    write_json(tmp_path / "runs/r1/PULL_MANIFEST.json", {"files": [{"path": "seed0/best.pth", "sha256": "cd" * 32,
                                                                     "bytes": 1}]})
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "x")
    commit = _git(tmp_path, "rev-parse", "HEAD")
    env = environment(["numpy", "no-such-package-x"], backend="Agg", fonts=["b.ttf", "a.ttf", "b.ttf"])
    prov = provenance(tmp_path, ["r1/seed1", "r1/seed0"], command="rgt build figure f", builder=None, env=env)
    assert {k: prov[k] for k in ("git_commit", "git_dirty", "dirty_diff_sha256", "checkpoint_sha256",
                                 "data_sha256", "command", "builder")} == {
        "git_commit": commit, "git_dirty": False, "dirty_diff_sha256": None,
        "checkpoint_sha256": {"r1/seed0": "cd" * 32, "r1/seed1": "ab" * 32},  # the seal first, then run.json
        "data_sha256": "7c" * 32, "command": "rgt build figure f", "builder": None}
    assert (env["no-such-package-x"], env["backend"], env["fonts"]) == (None, "Agg", ["a.ttf", "b.ttf"])
    (tmp_path / "note.txt").write_text("uncommitted", encoding="utf-8")
    dirty = code_state(tmp_path)
    body = b"note.txt\0" + hashlib.sha256(b"uncommitted").hexdigest().encode() + b"\n"
    assert dirty == {"git_commit": commit, "git_dirty": True, "dirty_diff_sha256": hashlib.sha256(body).hexdigest()}
    stable = stable_provenance([{"path": "p", "sha256": "s"}], "src", {**prov, "builder": {"sha256": "b"}})
    assert stable == {"inputs": {"p": "s"}, "source_sha256": "src", "git_commit": commit, "builder_sha256": "b"}
