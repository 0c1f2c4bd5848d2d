"""The split manifest builder (services/audit/splits.py) on real files in a project folder: folders, file lists and a
CSV of paths, records hashed by their declared fields, every bad input refused before a byte is written, and
the manifest read back by the VERIFY loader with every member's hash matching the disk."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.catalogue.load import load_project
from remote_gpu_trainer.services.audit.splits import (
    SCHEMA,
    Source,
    SplitRequest,
    SplitsError,
    build_manifest,
    record_sha256,
)

STAMP = "2026-06-01T10:00:00Z"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project with train files in a nested folder, test files, and files the folder listing must skip."""
    project = tmp_path / "proj"
    put(project, "data/train/cat/001.png", b"cat 1")
    put(project, "data/train/cat/002.png", b"cat 2")
    put(project, "data/train/dog/001.png", b"dog 1")
    put(project, "data/train/.DS_Store", b"junk")
    put(project, "data/train/.cache/x.png", b"junk")
    put(project, "data/test/a.jpg", b"test a")
    put(project, "data/test/b.jpg", b"test b")
    return project


def build(root: Path, *sources: Source, **extra: Any) -> dict[str, Any]:
    request = SplitRequest("main", tuple(sources), **extra)
    target, document = build_manifest(root, request, created_at=STAMP)
    assert target == root / "splits" / "main.json"
    assert json.loads(target.read_text()) == document
    return document


def folder(root: Path, split: str, rel: str) -> Source:
    return Source("folder", root / rel, split)


def test_folders_list_every_regular_file_with_ids_relative_to_the_folder(root: Path) -> None:
    document = build(root, folder(root, "train", "data/train"), folder(root, "test", "data/test"), seed=3,
                     method="random", dataset="pets")
    assert document == {
        "schema": SCHEMA, "split_set_id": "main", "dataset": "pets", "method": "random", "seed": 3,
        "hash_unit": "file_bytes", "created_at": STAMP, "fit_records": [], "standard_reference": None,
        "members": {
            "train": [{"id": "cat/001", "path": "data/train/cat/001.png", "sha256": sha(b"cat 1"), "group": None,
                       "time": None},
                      {"id": "cat/002", "path": "data/train/cat/002.png", "sha256": sha(b"cat 2"), "group": None,
                       "time": None},
                      {"id": "dog/001", "path": "data/train/dog/001.png", "sha256": sha(b"dog 1"), "group": None,
                       "time": None}],
            "test": [{"id": "a", "path": "data/test/a.jpg", "sha256": sha(b"test a"), "group": None, "time": None},
                     {"id": "b", "path": "data/test/b.jpg", "sha256": sha(b"test b"), "group": None, "time": None}]},
    }


def test_the_manifest_loads_with_the_verify_loader_and_every_disk_hash_matches(root: Path) -> None:
    build(root, folder(root, "train", "data/train"), folder(root, "test", "data/test"))
    evidence = load_project(root)
    assert evidence.problems == ()
    (manifest,) = evidence.splits
    assert manifest.split_set_id == "main" and manifest.hash_unit == "file_bytes"
    assert manifest.sha256 == sha((root / "splits/main.json").read_bytes())
    assert len(manifest.of("train")) == 3 and len(manifest.of("test")) == 2
    assert {m.path: m.sha256 for m in manifest.members} == dict(manifest.disk_sha256)


def test_a_file_list_and_a_csv_name_files_relative_to_the_project_root(root: Path) -> None:
    put(root, "lists/test.txt", b"# held-out files\ndata/test/a.jpg\n\n  data/test/b.jpg  \n")
    put(root, "lists/rest.csv", b"split,path,id,group,time,label\n"
                                b"train,data/train/cat/001.png,c1,cats,2026-01-01,3\n"
                                b"train,data/train/dog/001.png,,dogs,,4\n"
                                b"val,data/train/cat/002.png,v1,,,3\n")
    document = build(root, Source("list", root / "lists/test.txt", "test"), Source("csv", root / "lists/rest.csv"))
    members = document["members"]
    assert list(members) == ["test", "train", "val"]
    assert [m["id"] for m in members["test"]] == ["data/test/a", "data/test/b"]
    assert members["train"] == [
        {"id": "c1", "path": "data/train/cat/001.png", "sha256": sha(b"cat 1"), "group": "cats", "time": "2026-01-01"},
        {"id": "data/train/dog/001", "path": "data/train/dog/001.png", "sha256": sha(b"dog 1"), "group": "dogs",
         "time": None}]
    assert members["val"][0]["id"] == "v1"
    assert {m.path: m.sha256 for m in load_project(root).splits[0].members} == dict(
        load_project(root).splits[0].disk_sha256)


def test_records_are_hashed_by_the_canonical_json_of_their_declared_fields_only(root: Path) -> None:
    put(root, "records.jsonl", b'{"split": "train", "id": "q1", "question": "2+2?", "context": {"k": [1, 2]},'
                               b' "label": 4}\n\n'
                               b'{"split": "test", "id": "q2", "question": "2+2?", "context": {"k": [1, 2]},'
                               b' "label": 5, "group": "g", "time": 17}\n')
    document = build(root, Source("jsonl", root / "records.jsonl"), hash_unit="record",
                     fields=("question", "context"))
    expected = sha(json.dumps({"question": "2+2?", "context": {"k": [1, 2]}}, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False).encode())
    assert document["hash_unit"] == "record"
    assert document["members"] == {
        "train": [{"id": "q1", "path": None, "sha256": expected, "group": None, "time": None}],
        "test": [{"id": "q2", "path": None, "sha256": expected, "group": "g", "time": "17"}]}  # the label is not hashed
    (manifest,) = load_project(root).splits
    assert manifest.hash_unit == "record" and len(manifest.members) == 2


def test_records_from_a_csv_hash_the_cells_as_the_file_holds_them(root: Path) -> None:
    put(root, "records.csv", b"split,id,text,label\ntrain,r1,hello,1\ntest,r2,h\xc3\xa9llo,0\n")
    document = build(root, Source("csv", root / "records.csv"), hash_unit="record", fields=("text",))
    assert document["members"]["train"][0]["sha256"] == record_sha256({"text": "hello"})
    assert document["members"]["test"][0]["sha256"] == sha('{"text":"héllo"}'.encode())


def test_progress_reports_files_and_bytes_after_each_file(root: Path) -> None:
    seen: list[tuple[int, int, int, int]] = []
    build_manifest(root, SplitRequest("main", (folder(root, "test", "data/test"),)),
                   progress=lambda *numbers: seen.append(numbers))
    assert seen == [(1, 2, 6, 12), (2, 2, 12, 12)]


# -- refusals: one error naming the input, and nothing written ---------------------------------------------

def refused(root: Path, request: SplitRequest, match: str) -> None:
    with pytest.raises(SplitsError, match=match) as caught:
        build_manifest(root, request, created_at=STAMP)
    assert "\n" not in str(caught.value)
    assert not (root / "splits").exists() or list((root / "splits").iterdir()) == []


def test_a_missing_file_is_refused(root: Path) -> None:
    put(root, "test.txt", b"data/test/a.jpg\ndata/test/gone.jpg\n")
    refused(root, SplitRequest("main", (Source("list", root / "test.txt", "test"),)),
            r"split test: .*test.txt:2: .*data/test/gone.jpg: no such file")


def test_a_missing_folder_is_refused(root: Path) -> None:
    refused(root, SplitRequest("main", (folder(root, "test", "data/nope"),)), "split test: .*data/nope: no such folder")


def test_a_path_outside_the_project_root_is_refused(root: Path, tmp_path: Path) -> None:
    put(tmp_path, "outside/x.png", b"x")
    put(root, "test.txt", b"../outside/x.png\n")
    refused(root, SplitRequest("main", (Source("list", root / "test.txt", "test"),)), "is outside the project root")
    refused(root, SplitRequest("main", (Source("folder", tmp_path / "outside", "test"),)),
            "is outside the project root")
    (root / "data" / "link").symlink_to(tmp_path / "outside")
    refused(root, SplitRequest("main", (folder(root, "test", "data/link"),)), "is outside the project root")


def test_an_empty_split_is_refused(root: Path) -> None:
    (root / "data" / "empty").mkdir()
    put(root, "data/empty/.hidden", b"dotfiles do not count")
    refused(root, SplitRequest("main", (folder(root, "train", "data/train"), folder(root, "val", "data/empty"))),
            "split val is empty")
    put(root, "empty.txt", b"# nothing\n\n")
    refused(root, SplitRequest("main", (Source("list", root / "empty.txt", "test"),)), "split test is empty")
    put(root, "header.csv", b"split,path\n")
    refused(root, SplitRequest("main", (Source("csv", root / "header.csv"),)), "holds no rows")


def test_a_duplicate_id_is_refused_naming_both_files(root: Path) -> None:
    put(root, "data/test/a.png", b"same id as a.jpg")
    refused(root, SplitRequest("main", (folder(root, "test", "data/test"),)),
            r"split test: id 'a' appears twice \(.*a.jpg and .*a.png\)")
    put(root, "dupes.csv", b"split,path,id\ntest,data/test/a.jpg,x\ntest,data/test/b.jpg,x\n")
    refused(root, SplitRequest("main", (Source("csv", root / "dupes.csv"),)), "id 'x' appears twice")


@pytest.mark.parametrize("request_args, match", [
    ({"sources": ()}, "nothing to build from"),
    ({"split_set_id": "../up"}, "is not an id"),
    ({"hash_unit": "record"}, "reads records from --csv or --jsonl"),
    ({"hash_unit": "record", "sources": "csv"}, "needs --fields"),
    ({"hash_unit": "record", "sources": "csv", "fields": ("text", "label")}, "may not name label"),
    ({"fields": ("text",)}, "--fields applies to --hash-unit record only"),
    ({"sources": "jsonl"}, "--jsonl holds records"),
    ({"method": "vibes"}, "method 'vibes'"),
])
def test_inputs_that_do_not_fit_together_are_refused(root: Path, request_args: dict[str, Any], match: str) -> None:
    put(root, "r.csv", b"split,id,text\ntrain,a,x\n")
    kinds = {"csv": (Source("csv", root / "r.csv"),), "jsonl": (Source("jsonl", root / "r.jsonl"),)}
    sources = request_args.pop("sources", (folder(root, "test", "data/test"),))
    request_args["sources"] = kinds.get(sources, sources) if isinstance(sources, str) else sources
    refused(root, SplitRequest(**{"split_set_id": "main", **request_args}), match)


def test_a_split_from_two_sources_and_bad_records_are_refused(root: Path) -> None:
    put(root, "more.csv", b"split,path\ntest,data/test/a.jpg\n")
    refused(root, SplitRequest("main", (folder(root, "test", "data/test"), Source("csv", root / "more.csv"))),
            "split test comes from both")
    put(root, "r.jsonl", b'{"split": "train", "id": "a", "text": "x"}\n{"split": "train", "id": "b"}\n')
    refused(root, SplitRequest("main", (Source("jsonl", root / "r.jsonl"),), hash_unit="record", fields=("text",)),
            r"r.jsonl:2: the record has no text")
    put(root, "r.jsonl", b'{"split": "train", "id": "a", "text": NaN}\n')
    refused(root, SplitRequest("main", (Source("jsonl", root / "r.jsonl"),), hash_unit="record", fields=("text",)),
            r"r.jsonl:1: not a JSON object")
    put(root, "tabs.csv", b"split,id,text\ntrain,\"a\tb\",x\n")
    refused(root, SplitRequest("main", (Source("csv", root / "tabs.csv"),), hash_unit="record", fields=("text",)),
            "holds a tab or line break")
    put(root, "short.csv", b"split,path\ntest\n")
    refused(root, SplitRequest("main", (Source("csv", root / "short.csv"),)), "different number of cells")


def test_an_existing_manifest_is_kept_unless_forced(root: Path) -> None:
    first = build(root, folder(root, "test", "data/test"))
    before = (root / "splits/main.json").read_bytes()
    with pytest.raises(SplitsError, match="splits/main.json exists"):
        build_manifest(root, SplitRequest("main", (folder(root, "train", "data/train"),)))
    assert (root / "splits/main.json").read_bytes() == before
    _, second = build_manifest(root, SplitRequest("main", (folder(root, "train", "data/train"),)), force=True)
    assert list(first["members"]) == ["test"] and list(second["members"]) == ["train"]
    assert [p.name for p in (root / "splits").iterdir()] == ["main.json"]
