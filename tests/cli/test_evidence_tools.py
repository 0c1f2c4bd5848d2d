"""`rgt capsule` and `rgt splits build`, run as a user runs them: the installed module in its own process, with
its exit code, its one-line refusals and the files it leaves (or does not leave) behind."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.catalogue.load import load_project
from remote_gpu_trainer.remote import rgt_capsule
from support.helpers import run_rgt

HELPER = Path(rgt_capsule.__file__)


# -- rgt capsule ------------------------------------------------------------------------------------------------

def test_capsule_prints_the_helpers_path(tmp_path: Path) -> None:
    result = run_rgt("capsule", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve() == HELPER.resolve()
    assert list(tmp_path.iterdir()) == []


def test_capsule_write_copies_the_helper_and_refuses_to_replace_a_different_file(tmp_path: Path) -> None:
    first = run_rgt("capsule", "--write", str(tmp_path), cwd=tmp_path)
    assert first.returncode == 0 and "wrote" in first.stdout, first.stderr
    target = tmp_path / "rgt_capsule.py"
    assert target.read_bytes() == HELPER.read_bytes()
    again = run_rgt("capsule", "--write", str(tmp_path), cwd=tmp_path)
    assert again.returncode == 0 and "already this version" in again.stdout
    target.write_text("# an older helper\n")
    refused = run_rgt("capsule", "--write", str(tmp_path), cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert target.read_text() == "# an older helper\n"
    forced = run_rgt("capsule", "--write", str(tmp_path), "--force", cwd=tmp_path)
    assert forced.returncode == 0 and target.read_bytes() == HELPER.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rgt_capsule.py"]  # no temp file left


def test_capsule_write_into_a_missing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_rgt("capsule", "--write", str(tmp_path / "nope"), cwd=tmp_path)
    assert result.returncode == 2 and "no such folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# -- rgt splits build -------------------------------------------------------------------------------------------

def project(tmp_path: Path) -> Path:
    """A project (an rgt.toml is all `splits build` needs of it) with train and test files."""
    root = tmp_path / "proj"
    for rel, data in (("data/train/001.png", b"t1"), ("data/train/002.png", b"t2"), ("data/test/a.png", b"a"),
                      ("data/test/b.png", b"b")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "rgt.toml").write_text("# the project\n")
    return root


def test_splits_build_from_folders_writes_a_manifest_the_verify_loader_reads(tmp_path: Path) -> None:
    root = project(tmp_path)
    result = run_rgt("splits", "build", "main", "--split", "train=data/train", "--split", "test=data/test",
                     "--method", "random", "--seed", "7", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "wrote splits/main.json: train 2, test 2 (file_bytes)"
    assert result.stderr == ""  # no progress lines for a set this small when stderr is not a terminal
    document = json.loads((root / "splits/main.json").read_text())
    assert document["method"] == "random" and document["seed"] == 7 and document["dataset"] == "main"
    assert [m["id"] for m in document["members"]["train"]] == ["001", "002"]
    (manifest,) = load_project(root).splits
    assert manifest.sha256 == hashlib.sha256((root / "splits/main.json").read_bytes()).hexdigest()
    assert {m.path: m.sha256 for m in manifest.members} == dict(manifest.disk_sha256)
    assert all(manifest.disk_sha256.values())


def test_splits_build_from_a_csv_and_a_list_given_the_project_from_elsewhere(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "rest.csv").write_text("split,path,group\ntrain,data/train/001.png,g1\ntrain,data/train/002.png,g2\n")
    (root / "test.txt").write_text("data/test/a.png\ndata/test/b.png\n")
    result = run_rgt("splits", "build", "mixed", str(root), "--csv", str(root / "rest.csv"),
                     "--split-list", f"test={root / 'test.txt'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    members = json.loads((root / "splits/mixed.json").read_text())["members"]
    assert [m["group"] for m in members["train"]] == ["g1", "g2"]
    assert [m["id"] for m in members["test"]] == ["data/test/a", "data/test/b"]


def test_splits_build_of_records_hashes_the_declared_fields(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "records.csv").write_text("split,id,question,label\ntrain,q1,what,1\ntest,q2,why,0\n")
    result = run_rgt("splits", "build", "qa", "--hash-unit", "record", "--csv", "records.csv",
                     "--fields", "question", cwd=root)
    assert result.returncode == 0, result.stderr
    document = json.loads((root / "splits/qa.json").read_text())
    assert document["hash_unit"] == "record"
    assert document["members"]["test"][0]["sha256"] == hashlib.sha256(b'{"question":"why"}').hexdigest()


@pytest.mark.parametrize("argv, message", [
    (("--split", "test=data/test", "--split-list", "val=val.txt"), "data/test/gone.png: no such file"),
    (("--split", "test=data/nope"), "no such folder"),
    (("--split", "test=data/test", "--split", "train=../outside"), "is outside the project root"),
    (("--split", "test=data/test", "--split", "val=data/empty"), "split val is empty"),
    (("--split", "test=data/test", "--csv", "dupes.csv"), "id 'x' appears twice"),
    (("--split", "test",), "write NAME=PATH"),
    ((), "nothing to build from"),
    (("--hash-unit", "record", "--csv", "dupes.csv"), "needs --fields"),
])
def test_splits_build_refuses_bad_input_in_one_line_with_exit_2_and_writes_nothing(
        tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    root = project(tmp_path)
    (root / "val.txt").write_text("data/train/001.png\ndata/test/gone.png\n")
    (root / "data/empty").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/x.png").write_bytes(b"x")
    (root / "dupes.csv").write_text("split,path,id\ntrain,data/train/001.png,x\ntrain,data/train/002.png,x\n")
    result = run_rgt("splits", "build", "main", *argv, cwd=root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stdout == ""
    assert not (root / "splits").exists() or list((root / "splits").iterdir()) == []


def test_splits_build_keeps_an_existing_manifest_unless_forced(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert run_rgt("splits", "build", "main", "--split", "test=data/test", cwd=root).returncode == 0
    before = (root / "splits/main.json").read_bytes()
    again = run_rgt("splits", "build", "main", "--split", "train=data/train", cwd=root)
    assert again.returncode == 2 and "--force" in again.stderr
    assert (root / "splits/main.json").read_bytes() == before
    forced = run_rgt("splits", "build", "main", "--split", "train=data/train", "--force", cwd=root)
    assert forced.returncode == 0 and list(json.loads((root / "splits/main.json").read_text())["members"]) == ["train"]


def test_splits_build_without_a_project_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_rgt("splits", "build", "main", "--split", "test=.", cwd=tmp_path)
    assert result.returncode == 2 and "rgt.toml" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_plain_progress_is_one_line_every_few_thousand_files_and_at_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    from remote_gpu_trainer.cli.evidence_tools import PLAIN_EVERY_FILES, _plain_progress
    from remote_gpu_trainer.text import size

    total = 2 * PLAIN_EVERY_FILES + 1
    for files in range(1, total + 1):
        _plain_progress(files, total, files * 1024, total * 1024)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"hashed {n}/{total} files ({size(n * 1024)} of {size(total * 1024)})"
                     for n in (PLAIN_EVERY_FILES, 2 * PLAIN_EVERY_FILES, total)]
