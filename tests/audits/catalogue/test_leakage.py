"""VERIFY section D, leakage (V14–V19), on split manifests and member files written to disk (docs/verify.md §2)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from remote_gpu_trainer.audits.catalogue.leakage import CHECKS, data_sha256
from remote_gpu_trainer.audits.catalogue.model import CheckResult, Finding, ProjectEvidence
from remote_gpu_trainer.audits.catalogue.near_duplicates import dhash
from remote_gpu_trainer.audits.catalogue.runner import specs
from support.capsules import load, write_capsule, write_json, write_split


def run(check: str, project: ProjectEvidence, **overrides: Any) -> CheckResult:
    params = dict(specs()[check].params)
    params.update(overrides)
    return CHECKS[check](project, params)


def only(outcome: CheckResult) -> Finding:
    [finding] = outcome.findings
    return finding


def files(prefix: str, count: int) -> list[tuple[str, bytes]]:
    return [(f"{prefix}{i}.bin", f"{prefix}-{i}".encode()) for i in range(count)]


def edit_manifest(root: Path, split_set_id: str, edit: Any) -> None:
    """Rewrite a written manifest through `edit(body)` (groups, times, broken rows)."""
    path = root / "splits" / f"{split_set_id}.json"
    body = json.loads(path.read_text(encoding="utf-8"))
    edit(body)
    write_json(path, body)


def test_every_check_of_the_section_is_here_under_its_catalogue_name(tmp_path: Path) -> None:
    assert sorted(CHECKS) == sorted(cid for cid, spec in specs().items() if spec.section == "leakage")
    project = load(tmp_path)
    outcomes = {cid: run(cid, project) for cid in CHECKS}
    assert {cid: o.name for cid, o in outcomes.items()} == {cid: specs()[cid].name for cid in CHECKS}
    assert all(o.status == "skipped" and o.note for o in outcomes.values())


# -- V14 ----------------------------------------------------------------------------------------------------------
def test_v14_disjoint_splits_pass(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 5), "val": files("v", 2), "test": files("t", 3)})
    outcome = run("V14", load(tmp_path))
    assert outcome.status == "pass" and outcome.subjects == ("split:main",)


def test_v14_same_name_different_bytes_is_one_name_collision_and_no_leak(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("1.png", b"train bytes")], "test": [("1.png", b"test bytes")]})
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "info"
    assert finding.values["name_collisions"] == 1 and finding.values["names"] == ["1.png"]
    assert (finding.values["train_test"], finding.values["val_test"], finding.values["train_val"]) == (0, 0, 0)
    assert finding.values["fraction_of_test_seen"] == 0.0


def test_v14_train_test_overlap_at_or_above_one_percent_is_critical(tmp_path: Path) -> None:
    test = files("t", 9) + [("dup.bin", b"shared")]
    write_split(tmp_path, "main", {"train": files("a", 5) + [("x.bin", b"shared")], "test": test})
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "critical"
    assert finding.message == "train∩test = 1 items (10.0 % of test)"
    assert finding.values["fraction_of_test_seen"] == pytest.approx(0.1)
    assert finding.evidence[0].path == "splits/main.json" and finding.evidence[0].sha256


def test_v14_train_test_overlap_below_one_percent_is_an_error(tmp_path: Path) -> None:
    test = files("t", 199) + [("dup.bin", b"shared")]
    write_split(tmp_path, "main", {"train": [("x.bin", b"shared")], "test": test})
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "error" and finding.disclosure_text == "train∩test = 1 items (0.5 % of test)"


def test_v14_val_test_is_an_error_train_val_a_warning_and_within_split_duplicates_info(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("a.bin", b"tv"), ("b.bin", b"same"), ("c.bin", b"same")],
                                   "val": [("v.bin", b"tv"), ("w.bin", b"vt")], "test": [("t.bin", b"vt")]})
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "error"
    assert finding.message.split("; ") == ["val∩test = 1 items", "train∩val = 1 items",
                                           "within-split duplicates: train 1"]
    assert finding.values["within_split_duplicates"] == {"train": 1}


def test_v14_row_whose_file_is_missing_is_fabricated(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 3), "test": files("t", 3)})
    (tmp_path / "data" / "test" / "t1.bin").unlink()
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "error"
    assert "fabricated/missing rows" in finding.message and finding.values["missing_ids"] == ["test-t1.bin"]


def test_v14_recorded_hash_that_is_not_the_bytes_on_disk_is_critical(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 3), "test": files("t", 3)})
    (tmp_path / "data" / "train" / "a2.bin").write_bytes(b"edited after the manifest")
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "critical"
    assert finding.message.startswith("1 recorded sha256 differ from the bytes on disk")
    assert finding.values["mismatch_ids"] == ["train-a2.bin"]


def test_v14_a_path_out_of_the_root_counts_as_missing(tmp_path: Path) -> None:
    project_root = tmp_path / "project"
    (tmp_path / "outside.bin").write_bytes(b"x")
    write_split(project_root, "main", {"train": files("a", 2), "test": files("t", 2)})
    edit_manifest(project_root, "main", lambda body: body["members"]["test"][0].update(
        {"path": "../outside.bin", "sha256": hashlib.sha256(b"x").hexdigest()}))
    finding = only(run("V14", load(project_root)))
    assert finding.values["missing_ids"] == ["test-t0.bin"]


def test_v14_malformed_rows_are_a_finding_and_an_unreadable_manifest_a_skip(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 2), "test": files("t", 2)})
    edit_manifest(tmp_path, "main", lambda body: body["members"]["test"].append({"path": "nowhere"}))
    finding = only(run("V14", load(tmp_path)))
    assert finding.severity == "error" and "malformed manifest row" in finding.message

    write_json(tmp_path / "splits" / "main.json", {"schema": "remote-gpu-trainer/SPLITS/v1"})
    outcome = run("V14", load(tmp_path))
    assert outcome.status == "skipped" and "splits/main.json: no `members` object" in outcome.note
    (tmp_path / "splits" / "main.json").write_text("{", encoding="utf-8")
    assert "malformed JSON" in run("V14", load(tmp_path)).note


def test_v14_empty_splits_are_judged_without_error(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [], "test": []})
    outcome = run("V14", load(tmp_path))
    assert outcome.status == "pass"


# -- V15 ----------------------------------------------------------------------------------------------------------
def test_v15_case_only_file_names_warn(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("a.png", b"1"), ("A.png", b"2")], "test": [("t.png", b"3")]})
    finding = only(run("V15", load(tmp_path)))
    assert finding.severity == "warn"
    assert finding.values["case_collisions"] == {"train": [["data/train/A.png", "data/train/a.png"]]}


def test_v15_sibling_folders_differing_by_case_are_double_ingestion(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("Cats/1.png", b"1"), ("cats/2.png", b"2")], "test": [("t.png", b"3")]})
    finding = only(run("V15", load(tmp_path)))
    assert finding.severity == "error"
    assert finding.message == "double ingestion on case-insensitive FS: data/train/Cats ~ data/train/cats"


def test_v15_clean_paths_pass(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("cats/1.png", b"1"), ("dogs/2.png", b"2")], "test": [("t.png", b"3")]})
    assert run("V15", load(tmp_path)).status == "pass"


def test_v15_on_a_case_insensitive_host_paths_that_are_one_file_are_an_error(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("a.png", b"1"), ("A.png", b"1")], "test": [("t.png", b"3")]})
    (tmp_path / "data" / "train" / "A.png").unlink()
    os.link(tmp_path / "data" / "train" / "a.png", tmp_path / "data" / "train" / "A.png")  # what such a host sees
    project = load(tmp_path)
    assert only(run("V15", project)).severity == "warn"
    finding = only(run("V15", replace(project, case_insensitive_fs=True)))
    assert finding.severity == "error"
    assert finding.values["same_file_pairs"] == [["data/train/A.png", "data/train/a.png"]]


# -- V16 ----------------------------------------------------------------------------------------------------------
def png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


RNG = np.random.default_rng(0)
BASE = RNG.integers(0, 256, (32, 32)).astype(float)
OTHER = RNG.integers(0, 256, (32, 32)).astype(float)
WORDS = ("the quick brown fox jumps over the lazy dog while a small bird sings in the old oak tree near the quiet "
         "river bank at dawn and the farmer walks his cattle home").split()


def test_v16_dhash_is_64_bits_and_stable_under_a_small_brightness_change(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(png(BASE * 0.9))
    (tmp_path / "b.png").write_bytes(png(BASE * 0.9 + 3))
    (tmp_path / "c.png").write_bytes(png(OTHER))
    a, b, c = (dhash(tmp_path / name) for name in ("a.png", "b.png", "c.png"))
    assert a is not None and b is not None and c is not None and 0 <= a < 1 << 64
    assert (a ^ b).bit_count() <= 4 < (a ^ c).bit_count()


def test_v16_near_duplicate_image_and_text_are_info_candidates(tmp_path: Path) -> None:
    text = " ".join(WORDS)
    write_split(tmp_path, "main", {
        "train": [("a.png", png(BASE * 0.9)), ("o.png", png(OTHER)), ("doc.txt", text.encode()),
                  ("bad.png", b"not a png")],
        "test": [("b.png", png(BASE * 0.9 + 3)), ("doc2.txt", (text + " today").encode()),
                 ("same.png", png(OTHER)), ("data.bin", b"skipped")]})
    finding = only(run("V16", load(tmp_path)))
    assert finding.severity == "info" and finding.values["candidates"] == 2
    [image, doc] = finding.values["listed"]
    assert (image["kind"], image["test"], image["train"]) == ("image", "test-b.png", "train-a.png")
    assert image["distance"] <= 4
    assert (doc["kind"], doc["test"], doc["train"]) == ("text", "test-doc2.txt", "train-doc.txt")
    assert doc["jaccard"] >= 0.8
    assert finding.values["unreadable"] == 1  # bad.png; the exact duplicate same.png is V14's


def test_v16_unrelated_items_are_quiet_and_listing_is_capped(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": [("a.png", png(BASE)), ("doc.txt", " ".join(WORDS).encode())],
                                   "test": [("b.png", png(OTHER)), ("doc.txt", " ".join(reversed(WORDS)).encode())]})
    assert run("V16", load(tmp_path)).status == "pass"
    write_split(tmp_path, "many", {"train": [(f"a{i}.png", png(BASE * 0.9 + i)) for i in range(3)],
                                   "test": [("b.png", png(BASE * 0.9 + 5))]})
    finding = next(f for f in run("V16", load(tmp_path), listed=2).findings if f.subject == "split:many")
    assert finding.values["candidates"] == 3 and len(finding.values["listed"]) == 2


# -- V17 ----------------------------------------------------------------------------------------------------------
def npy(values: list[float]) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(values, dtype=float))
    return buffer.getvalue()


def _fit_project(tmp_path: Path, stats_of: str, record: dict[str, Any] | None = None) -> None:
    members = {"train": [(f"{i}.npy", npy([i, 2 * i])) for i in range(4)],
               "test": [(f"{i}.npy", npy([10 + i, 30 + i])) for i in range(4)]}
    rows = np.asarray([[i, 2 * i] for i in range(4)] + ([[10 + i, 30 + i] for i in range(4)]
                                                         if stats_of == "all" else []), dtype=float)
    write_json(tmp_path / "stats" / "norm.json", {"mean": rows.mean(axis=0).tolist(), "std": rows.std(axis=0).tolist()})
    write_split(tmp_path, "main", members, extra={"fit_records": [record or {"artifact": "stats/norm.json"}]})


def test_v17_fit_ids_equal_to_the_train_ids_pass_and_all_ids_are_an_error(tmp_path: Path) -> None:
    train_ids = "\n".join(sorted(f"train-{i}.npy" for i in range(4)))
    _fit_project(tmp_path, "train", {"artifact": "stats/norm.json", "fit_split": "train",
                                     "fit_ids_sha256": hashlib.sha256(train_ids.encode()).hexdigest()})
    assert run("V17", load(tmp_path)).status == "pass"
    every = "\n".join(sorted([f"train-{i}.npy" for i in range(4)] + [f"test-{i}.npy" for i in range(4)]))
    _fit_project(tmp_path, "train", {"artifact": "stats/norm.json", "fit_split": "train",
                                     "fit_ids_sha256": hashlib.sha256(every.encode()).hexdigest()})
    finding = only(run("V17", load(tmp_path)))
    assert finding.severity == "error" and finding.message.startswith("preprocessing fitted on non-train data")
    assert finding.values["stats/norm.json.fit_scope"] == "train∪val∪test"


@pytest.mark.parametrize(("stats_of", "severity"), [("train", None), ("all", "error")])
def test_v17_without_a_record_the_stats_are_recomputed(tmp_path: Path, stats_of: str, severity: str | None) -> None:
    _fit_project(tmp_path, stats_of)
    outcome = run("V17", load(tmp_path))
    if severity is None:
        assert outcome.status == "pass" and outcome.subjects == ("split:main",)
        return
    finding = only(outcome)
    assert finding.severity == severity and "d(all)" in finding.message
    assert finding.values["stats/norm.json.d_all"] < finding.values["stats/norm.json.d_train"]
    assert finding.evidence[1].path == "stats/norm.json" and finding.evidence[1].sha256


def test_v17_stats_that_cannot_be_recomputed_are_fit_scope_unknown(tmp_path: Path) -> None:
    write_json(tmp_path / "stats" / "norm.json", {"mean": [0.5], "std": [0.1]})
    write_split(tmp_path, "main", {"train": [("a.png", b"x")], "test": [("b.png", b"y")]},
                extra={"fit_records": [{"artifact": "stats/norm.json"}, {"artifact": "vocab.pkl"}]})
    finding = only(run("V17", load(tmp_path)))
    assert finding.severity == "warn" and finding.message.startswith("fit scope unknown: stats/norm.json")
    assert "fit scope unknown: vocab.pkl (the artifact is not a JSON file" in finding.message


def test_v17_a_record_naming_another_fit_split_is_an_error(tmp_path: Path) -> None:
    _fit_project(tmp_path, "train", {"artifact": "stats/norm.json", "fit_split": "all"})
    finding = only(run("V17", load(tmp_path)))
    assert finding.severity == "error" and finding.values["stats/norm.json.fit_scope"] == "all"


def test_v17_skips_without_fit_records(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 2), "test": files("t", 2)})
    assert run("V17", load(tmp_path)).note == "no fit_records[] in any split manifest"


# -- V18 ----------------------------------------------------------------------------------------------------------
def test_v18_selection_on_test_is_critical_and_a_qrp_tell(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, record={"selection": {"criterion": "acc",
                                                                                     "split": "test"}})
    write_capsule(tmp_path, "ok", "seed0", metrics={"acc": 0.9})
    outcome = run("V18", load(tmp_path))
    finding = only(outcome)
    assert (finding.subject, finding.severity, finding.integrity_class) == ("capsule:r/seed0", "critical", "qrp_tell")
    assert "capsule:ok/seed0" in outcome.passed_subjects


def test_v18_per_epoch_test_columns_are_an_error_and_one_final_row_is_not(tmp_path: Path) -> None:
    logged = [{"step": s, "epoch": s, "loss": 1 / s, "test/acc": 0.5 + s / 10} for s in range(1, 4)]
    final = [{"step": s, "epoch": s, "loss": 1 / s, "test/acc": 0.8 if s == 3 else None} for s in range(1, 4)]
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, train=logged)
    write_capsule(tmp_path, "ok", "seed0", metrics={"acc": 0.9}, train=final)
    finding = only(run("V18", load(tmp_path)))
    assert finding.subject == "capsule:r/seed0" and finding.severity == "error"
    assert finding.message == "per-epoch test evaluation in train.csv: test/acc on 3 rows"


def test_v18_repeated_or_superseded_test_evaluations_warn(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9})
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.8}, test_id="main-ep50",
                  metrics_extra={"test_id": "main"})
    finding = only(run("V18", load(tmp_path)))
    assert finding.severity == "warn" and finding.message.startswith("test touched before the end")
    assert finding.values["repeated_tests"] == {"main": ["main", "main-ep50"]}

    record = {"checkpoints": {"best": {"path": "best.pth", "sha256": "ab" * 32},
                              "epoch10": {"path": "e10.pth", "sha256": "cd" * 32}}}
    write_capsule(tmp_path, "s", "seed0", metrics={"acc": 0.9}, record=record,
                  metrics_extra={"checkpoint_sha256": "cd" * 32})
    superseded = next(f for f in run("V18", load(tmp_path)).findings if f.subject == "capsule:s/seed0")
    assert superseded.values["superseded_checkpoints"] == {"main": "epoch10"}


def test_v18_sweep_ranked_by_a_test_metric_is_critical(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, record={"sweep": {"id": "s1", "rank_by": "test/acc"}})
    finding = only(run("V18", load(tmp_path)))
    assert finding.severity == "critical" and finding.message == "sweep ranked trials by a test metric (test/acc)"


# -- V19 ----------------------------------------------------------------------------------------------------------
def test_v19_clean_holdout_passes_and_a_missing_validation_split_warns(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 2), "val": files("v", 2), "test": files("t", 2)})
    write_split(tmp_path, "noval", {"train": files("a", 2), "test": files("t", 2)})
    outcome = run("V19", load(tmp_path))
    finding = only(outcome)
    assert (finding.subject, finding.severity) == ("split:noval", "warn")
    assert "split:main" in outcome.passed_subjects


def test_v19_shared_group_keys_are_an_error(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 2), "val": files("v", 1), "test": files("t", 2)})

    def groups(body: dict[str, Any]) -> None:
        for split, keys in (("train", ["p1", "p2"]), ("val", ["p3"]), ("test", ["p2", "p4"])):
            for row, key in zip(body["members"][split], keys, strict=True):
                row["group"] = key

    edit_manifest(tmp_path, "main", groups)
    finding = only(run("V19", load(tmp_path)))
    assert finding.severity == "error" and finding.values["shared_groups"] == {"test∩train": ["p2"]}


@pytest.mark.parametrize(("val_time", "broken"), [("2024-02-01T00:00:00Z", False), ("2023-12-01T00:00:00Z", True)])
def test_v19_temporal_split_order(tmp_path: Path, val_time: str, broken: bool) -> None:
    write_split(tmp_path, "main", {"train": files("a", 1), "val": files("v", 1), "test": files("t", 1)},
                method="temporal")

    def times(body: dict[str, Any]) -> None:
        for split, when in (("train", "2024-01-01T00:00:00Z"), ("val", val_time), ("test", "2024-03-01")):
            body["members"][split][0]["time"] = when

    edit_manifest(tmp_path, "main", times)
    outcome = run("V19", load(tmp_path))
    if not broken:
        assert outcome.status == "pass"
        return
    finding = only(outcome)
    assert finding.severity == "error" and finding.values["temporal_violations"] == ["max(train.time) ≥ min(val.time)"]


def test_v19_temporal_split_without_times_is_an_error(tmp_path: Path) -> None:
    write_split(tmp_path, "main", {"train": files("a", 1), "val": files("v", 1), "test": files("t", 1)},
                method="temporal")
    assert only(run("V19", load(tmp_path))).values["untimed"] == 3


def test_v19_non_standard_split_is_info_and_the_standard_one_passes(tmp_path: Path) -> None:
    members = {"train": files("a", 2), "val": files("v", 1), "test": files("t", 1)}
    write_split(tmp_path, "main", members, extra={"standard_reference": {"source": "official", "sha256": "00" * 32}})
    finding = only(run("V19", load(tmp_path)))
    assert finding.severity == "info" and finding.message == "non-standard split (differs from official)"
    standard = data_sha256(load(tmp_path).splits[0])
    write_split(tmp_path, "main", members, extra={"standard_reference": {"source": "official", "sha256": standard}})
    assert run("V19", load(tmp_path)).status == "pass"


def test_v19_val_series_identical_to_the_train_series_is_an_error(tmp_path: Path) -> None:
    same = [{"step": e, "epoch": e, "loss": 1 / e, "val/loss": 1 / e} for e in range(1, 4)]
    held_out = [{"step": e, "epoch": e, "loss": 1 / e, "val/loss": 1.1 / e} for e in range(1, 4)]
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.9}, train=same)
    write_capsule(tmp_path, "ok", "seed0", metrics={"acc": 0.9}, train=held_out)
    outcome = run("V19", load(tmp_path))
    finding = only(outcome)
    assert (finding.subject, finding.severity) == ("capsule:r/seed0", "error")
    assert finding.message == "val computed on training data: val/loss = loss on 3 epochs"
    assert "capsule:ok/seed0" in outcome.passed_subjects
