"""Evidence from a box we do not trust, through the whole catalogue: every file garbage in its own way, and the
audit still answers every check, names each bad file in a V00 finding, and never raises or hangs."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.audits.catalogue import runner as catalogue
from remote_gpu_trainer.audits.catalogue.plain_yaml import YamlRefused, load_plain
from support.capsules import classification_items, load, write_capsule, write_split

LAUGHS = b"a: &a [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n".encode() for i in range(8))

GARBAGE = {
    "run.json": b'{"schema": "remote-gpu-trainer/RUN/v1", "provenance": {"seed": NaN}}',
    "config.yaml": LAUGHS,
    "train.csv": b"\xff\xfe\x00garbage\x00\n1,2,3\n",
    "test/main/metrics.json": b"[" * 200_000 + b"]" * 200_000,
    "test/main/results.csv": b"item_id,acc\nx,1\nx,not-a-number\n,,,,,\n",
}


def test_a_billion_laughs_config_is_refused_not_expanded() -> None:
    with pytest.raises(YamlRefused, match="aliases"):
        load_plain(LAUGHS)
    assert load_plain(b"model: {width: 64}\nlr: 0.001\n") == {"model": {"width": 64}, "lr": 0.001}


def test_only_a_text_with_an_alias_is_refused_for_it() -> None:
    """load_plain skips the alias pass for a text without * or &: an anchor alone loads, an alias in a flow
    mapping or after a merge key is refused, and malformed YAML is refused as malformed either way."""
    assert load_plain(b"base: &b {lr: 1}\nname: 'a*b'\n") == {"base": {"lr": 1}, "name": "a*b"}
    for aliased in (b"a: &x 1\nb: {c: *x}\n", b"a: &x {lr: 1}\nb:\n  <<: *x\n"):
        with pytest.raises(YamlRefused, match="aliases"):
            load_plain(aliased)
    for malformed in (b"a: [1, 2\nb: 3\n", b"a: &x [1\nb: *x\n"):
        with pytest.raises(YamlRefused, match="malformed YAML"):
            load_plain(malformed)


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_one_garbage_file_is_named_and_every_check_still_answers(tmp_path: Path, name: str) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.8}, items=classification_items(50, correct=40))
    write_capsule(tmp_path, "r", "seed1", metrics={"acc": 0.7}, items=classification_items(50, correct=35))
    (tmp_path / "runs" / "r" / "seed0" / name).write_bytes(GARBAGE[name])
    write_split(tmp_path, "main", {"train": [("a", b"1")], "test": [("b", b"2")]})
    project = load(tmp_path)
    results = catalogue.run_all(project)
    assert [r.check for r in results] == sorted(catalogue.specs())
    assert all(r.status in ("pass", "findings", "skipped") for r in results)
    assert not [r.note for r in results if r.note.startswith(catalogue.INTERNAL_ERROR)]
    inputs = next(r for r in results if r.check == "V00")
    named = " ".join(f.message for f in inputs.findings)
    if name != "test/main/results.csv":  # a results table with odd rows still parses; the checks judge its values
        assert f"runs/r/seed0/{name}" in named, named


def test_everything_garbage_at_once(tmp_path: Path) -> None:
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.8}, items=classification_items(50, correct=40))
    for name, data in GARBAGE.items():
        (tmp_path / "runs" / "r" / "seed0" / name).write_bytes(data)
    (tmp_path / "splits").mkdir()
    (tmp_path / "splits" / "main.json").write_bytes(b'{"members": {"train": "not a list"}}')
    (tmp_path / "EVIDENCE.json").write_bytes(b'{"claims": [{"id": 5, "evidence": "x"}, null, {"id": "c"}]}')
    (tmp_path / "runs" / "r" / "PULL_MANIFEST.json").write_bytes(b"\x00\x01")
    results = catalogue.run_all(load(tmp_path))
    assert not [r.note for r in results if r.note.startswith(catalogue.INTERNAL_ERROR)]
    inputs = next(r for r in results if r.check == "V00")
    named = " ".join(f.message for f in inputs.findings)
    for path in ("runs/r/seed0/config.yaml", "runs/r/seed0/run.json", "runs/r/PULL_MANIFEST.json",
                 "splits/main.json"):
        assert path in named, (path, named)


def test_a_check_that_raises_is_one_skipped_check_naming_the_bug_not_a_dead_audit(tmp_path: Path) -> None:
    """A bug in one check (here: a param of the wrong type) must not take the audit, or the dashboard whose
    worker runs it, down: that check says it failed, every other check answers."""
    write_capsule(tmp_path, "r", "seed0", metrics={"acc": 0.8}, items=classification_items(50, correct=40))
    results = catalogue.run_all(load(tmp_path), {"V04": {"min_seeds": "three"}})
    broken = next(r for r in results if r.check == "V04")
    assert broken.status == "skipped" and broken.note.startswith(catalogue.INTERNAL_ERROR)
    assert next(r for r in results if r.check == "V13").status == "pass"


def test_a_split_member_reached_through_a_link_out_of_the_project_is_never_read(tmp_path: Path) -> None:
    """A folder link (data/test -> /elsewhere) or a file link to outside: the member counts as missing, so V14
    says so, and its bytes outside the project are never hashed."""
    project_root = tmp_path / "p"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"outside the project")
    write_split(project_root, "main", {"train": [("a.bin", b"train")], "test": [("b.bin", b"test")]})
    (project_root / "data" / "test" / "b.bin").unlink()
    (project_root / "data" / "test" / "b.bin").symlink_to(outside / "secret.bin")
    (project_root / "data" / "linked").symlink_to(outside, target_is_directory=True)
    manifest = project_root / "splits" / "main.json"
    manifest.write_text(manifest.read_text().replace('"members": {', '"members": {"val": [{"id": "v", '
                                                     '"path": "data/linked/secret.bin", "sha256": "00"}], ', 1))
    split = load(project_root).splits[0]
    assert split.disk_sha256["data/test/b.bin"] is None
    assert split.disk_sha256["data/linked/secret.bin"] is None
    assert split.disk_sha256["data/train/a.bin"] is not None
    leak = next(r for r in catalogue.run_all(load(project_root)) if r.check == "V14")
    assert any("missing" in f.message for f in leak.findings), [f.message for f in leak.findings]
