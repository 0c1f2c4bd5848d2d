"""PULL_MANIFEST.json parsing: every docs/gate.md §2 rule refuses what it must, and a good manifest passes untouched."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from remote_gpu_trainer.audits.manifest import (
    MANIFEST_SCHEMA,
    MarkerCheckpoint,
    canonical_json,
    is_checkpoint,
    marker_bytes,
    parse_manifest,
    parse_marker,
    path_problems,
    required_checkpoints,
)

ROSTER = ("seed0", "seed1")
SHA_A = "a" * 64
SHA_B = "b" * 64


def good() -> dict[str, Any]:
    files = [
        {"path": "seed0/best.pth", "bytes": 120, "sha256": SHA_A},
        {"path": "seed0/best_metrics.json", "bytes": 20, "sha256": SHA_B},
        {"path": "seed1/best.pth", "bytes": 130, "sha256": SHA_A},
        {"path": "seed1/sub/best_metrics.json", "bytes": 0, "sha256": SHA_B},
    ]
    return {
        "schema": MANIFEST_SCHEMA, "run_id": "exp1", "created_at_utc": "2026-07-14T09:12:03+00:00",
        "top_level_dirs": ["seed0", "seed1"], "files": files, "totals": {"files": 4, "bytes": 270},
    }


def codes(obj: Any, roster: tuple[str, ...] = ROSTER, run_id: str = "exp1") -> set[str]:
    _, problems = parse_manifest(canonical_json(obj), roster=roster, run_id=run_id)
    return {problem.code for problem in problems}


def test_good_manifest_parses_with_its_identity() -> None:
    data = canonical_json(good())
    manifest, problems = parse_manifest(data, roster=ROSTER, run_id="exp1")
    assert problems == []
    assert manifest is not None
    assert manifest.sha256 == hashlib.sha256(data).hexdigest()
    assert [entry.path for entry in manifest.files][0] == "seed0/best.pth"
    assert manifest.top_level_dirs == ("seed0", "seed1")
    assert manifest.total_bytes == 270


def test_canonical_serialization_is_the_spec_one() -> None:
    obj = {"b": 1, "a": "é"}
    assert canonical_json(obj) == b'{\n  "a": "\xc3\xa9",\n  "b": 1\n}\n'


def _set_path(path: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["files"][0]["path"] = path
    return change


@pytest.mark.parametrize("path", [
    "/seed0/best.pth", "\\seed0\\best.pth", "seed0/../seed1/best.pth", "seed0/./best.pth", "seed0//best.pth",
    "seed0\\best.pth", "seed0/be\nst.pth", "seed0/be\x7fst.pth", "best.pth", "seed0/",
    "seed0/be\x00st.pth", "seed0/be\x85st.pth", "seed0/x.part", "seed0/.rgt-tmp-1", "se ed0/best.pth",
    ".hydra/config.yaml", "seed0/" + "L" * 251, "seed0/" + "语" * 84,  # 251 and 252 bytes: no room for `.part`
])
def test_unsafe_paths_are_refused(path: str) -> None:
    obj = good()
    _set_path(path)(obj)
    obj["files"].sort(key=lambda entry: entry["path"])
    manifest, problems = parse_manifest(canonical_json(obj), roster=ROSTER, run_id="exp1")
    assert "path_unsafe" in {problem.code for problem in problems}
    assert manifest is None, "a manifest with an unsafe path must not be usable at all"


@pytest.mark.parametrize("path", [
    "seed0/epoch=3-step=64.ckpt", "seed0/.hydra/config.yaml", "seed0/mlruns/.trash/.keep", "seed0/sp ace.pth",
    "seed0/-x", "seed0/.hidden", "seed0/naïve-Ø.txt", "seed0/notes.txt~", "seed0/.nfs000abc", "seed0/.#lock",
    "seed0/a\\b", "seed0/" + "L" * 250, "seed0/" + "语" * 83,  # 250 and 249 bytes
])
def test_the_names_tools_write_are_manifest_paths(path: str) -> None:
    """docs/gate.md §2: any part that is not empty, `.` or `..` and holds no NUL or control character; the cell,
    the first part, is one of rgt's ids."""
    assert path_problems(path) == []
    obj = good()
    _set_path(path)(obj)
    obj["files"].sort(key=lambda entry: entry["path"])
    manifest, problems = parse_manifest(canonical_json(obj), roster=ROSTER, run_id="exp1")
    assert problems == [] and manifest is not None and path in manifest.by_path()


def test_duplicate_paths_are_refused() -> None:
    obj = good()
    obj["files"][1] = dict(obj["files"][0])
    manifest, problems = parse_manifest(canonical_json(obj), roster=ROSTER, run_id="exp1")
    assert "duplicate_path" in {problem.code for problem in problems}
    assert manifest is None


@pytest.mark.parametrize("value", [True, False, -1, 1.5, "12", None])
def test_bytes_must_be_a_plain_non_negative_int(value: Any) -> None:
    obj = good()
    obj["files"][0]["bytes"] = value
    assert "schema" in codes(obj)


@pytest.mark.parametrize("mutate, code", [
    (lambda o: o.update(extra=1), "schema"),
    (lambda o: o["files"][0].update(mode=0o644), "schema"),
    (lambda o: o["totals"].update(dirs=2), "schema"),
    (lambda o: o.pop("created_at_utc"), "schema"),
    (lambda o: o.update(schema="remote-gpu-trainer/PULL/v2"), "schema"),
    (lambda o: o.update(created_at_utc="2026-07-14T09:12:03Z"), "schema"),
    (lambda o: o.update(created_at_utc="yesterday"), "schema"),
    (lambda o: o["files"][0].update(sha256="A" * 64), "schema"),
    (lambda o: o["files"][0].update(sha256="a" * 63), "schema"),
    (lambda o: o["files"].reverse(), "schema"),
    (lambda o: o.update(files=[]), "schema"),
    (lambda o: o["totals"].update(files=5), "totals_mismatch"),
    (lambda o: o["totals"].update(bytes=271), "totals_mismatch"),
    (lambda o: o["totals"].update(files=True), "schema"),
    (lambda o: o.update(top_level_dirs=["seed1", "seed0"]), "schema"),
    (lambda o: o.update(top_level_dirs=["seed0", "seed0", "seed1"]), "schema"),
    (lambda o: o.update(top_level_dirs=["seed0"]), "roster_mismatch"),
    (lambda o: o.update(run_id="exp2"), "run_id"),
    (lambda o: o.update(run_id="../exp1"), "run_id"),
    (lambda o: o.update(run_id="  "), "run_id"),
])
def test_each_rule_is_enforced(mutate: Callable[[dict[str, Any]], Any], code: str) -> None:
    obj = copy.deepcopy(good())
    mutate(obj)
    assert code in codes(obj)


def test_top_level_dirs_must_equal_the_roster_and_the_files() -> None:
    assert "roster_mismatch" in codes(good(), roster=("seed0", "seed1", "seed2"))
    obj = good()
    obj["files"] = [entry for entry in obj["files"] if entry["path"].startswith("seed0/")]
    obj["totals"] = {"files": 2, "bytes": 140}
    assert "schema" in codes(obj)  # seed1 listed in top_level_dirs but holds no file


def test_semantic_problems_still_return_the_file_list() -> None:
    obj = good()
    obj["run_id"] = "other"
    manifest, problems = parse_manifest(canonical_json(obj), roster=ROSTER, run_id="exp1")
    assert manifest is not None and len(manifest.files) == 4
    assert [problem.code for problem in problems] == ["run_id"]


def test_all_problems_are_collected() -> None:
    obj = good()
    obj["files"][0]["bytes"] = True
    obj["files"][2]["path"] = "seed1/../../etc/passwd"
    obj["totals"]["files"] = 9
    obj["extra"] = 1
    found = codes(obj)
    assert {"schema", "path_unsafe", "totals_mismatch"} <= found


@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"a": NaN}', b"\xff\xfe", b'{"a": 1, "a": 2}'])
def test_unparseable_bytes_are_schema_problems(data: bytes) -> None:
    manifest, problems = parse_manifest(data, roster=ROSTER, run_id="exp1")
    assert manifest is None and problems and problems[0].code == "schema"


def test_marker_round_trip_and_refusals() -> None:
    moment = datetime(2026, 7, 14, 11, 40, 27, 123456, tzinfo=UTC)
    checkpoint = MarkerCheckpoint("seed0/best.pth", SHA_A, "torch-zip", 3, 16, "model_state_dict")
    data = marker_bytes(run_id="exp1", manifest_sha256=SHA_B, verified_at=moment,
                        verifier_version="0.1.0+probe1", files=4, total_bytes=270, checkpoints=[checkpoint])
    marker, reasons = parse_marker(data)
    assert reasons == [] and marker is not None
    assert marker.verified_at == moment and marker.checkpoints == (checkpoint,)

    obj = json.loads(data)
    obj["schema"] = "remote-gpu-trainer/PULL-VERIFIED/v1"
    assert parse_marker(canonical_json(obj))[0] is None
    obj = json.loads(data)
    obj["note"] = "trust me"
    marker, reasons = parse_marker(canonical_json(obj))
    assert marker is None and any("unknown key" in reason for reason in reasons)
    obj = json.loads(data)
    obj["files"] = True
    assert parse_marker(canonical_json(obj))[0] is None


def test_checkpoint_globs() -> None:
    globs = ("*.pth", "*.safetensors")
    assert is_checkpoint("seed0/best.pth", globs)
    assert is_checkpoint("seed0/sub/model.safetensors", globs)
    assert not is_checkpoint("seed0/best_metrics.json", globs)
    assert required_checkpoints(("s1", "s0"), ("best.pth", "best_metrics.json"), globs) == [
        "s0/best.pth", "s1/best.pth"]


LINKS = [{"path": "seed0/out", "target": "/etc/passwd", "inside": None},
         {"path": "seed0/wandb/latest-run", "target": "run-1", "inside": "seed0/wandb/run-1"}]


def test_links_are_an_optional_list_of_path_target_and_inside() -> None:
    obj = good()
    obj["links"] = LINKS
    manifest, problems = parse_manifest(canonical_json(obj), roster=ROSTER, run_id="exp1")
    assert problems == [] and manifest is not None
    assert [(link.path, link.target, link.inside) for link in manifest.links] == [
        ("seed0/out", "/etc/passwd", None), ("seed0/wandb/latest-run", "run-1", "seed0/wandb/run-1")]
    assert [link.path for link in manifest.links_out] == ["seed0/out"]
    plain, _ = parse_manifest(canonical_json(good()), roster=ROSTER, run_id="exp1")
    assert plain is not None and plain.links == ()


@pytest.mark.parametrize(("change", "code"), [
    (lambda links: links.clear(), "schema"),  # present means non-empty
    (lambda links: links.reverse(), "schema"),  # sorted by path
    (lambda links: links[0].update(path="seed0/best.pth"), "duplicate_path"),  # a file's path
    (lambda links: links.append(dict(links[1])), "duplicate_path"),
    (lambda links: links[0].update(path="seed0/../../x"), "path_unsafe"),
    (lambda links: links[0].update(target="a\x1b[2Jb"), "link_unsafe"),
    (lambda links: links[0].update(target=""), "link_unsafe"),
    (lambda links: links[1].update(inside="/etc"), "link_unsafe"),
    (lambda links: links[1].update(inside="seed0/../.."), "link_unsafe"),
    (lambda links: links[1].update(extra=1), "schema"),
    (lambda links: links[1].pop("inside"), "schema"),
])
def test_a_malformed_link_refuses_the_manifest(change: Callable[[list[dict[str, Any]]], None], code: str) -> None:
    obj = good()
    obj["links"] = [dict(link) for link in LINKS]
    change(obj["links"])
    manifest, problems = parse_manifest(canonical_json(obj), roster=ROSTER, run_id="exp1")
    assert code in {problem.code for problem in problems}
    assert manifest is None
