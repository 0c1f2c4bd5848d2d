"""The teardown gate after the evidence store made the verified copy read-only (docs/deliver.md §1): the mode
bits are a guard, never what the gate trusts. A user who puts the write bit back and edits a verified file in
place, or deletes one (a read-only file in a writable folder can be deleted), must still get `rgt down` refused
with exit 3, the box kept; a write bit put back with no edit changes nothing. Real sim project, real `rgt`
processes, real checkpoints (support/gate_helpers.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from support.gate_helpers import (
    assert_refused,
    assert_torn_down,
    copy_project,
    flip_in_place,
    local_root,
    rgt,
    verified_project,
)
from support.helpers import RUN


@pytest.fixture(scope="module")
def verified_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    return asyncio.run(verified_project(tmp_path_factory.mktemp("template") / "proj"))


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def chmod_u_w(path: Path) -> None:
    os.chmod(path, mode(path) | stat.S_IWUSR)


def test_the_verified_copy_is_read_only(verified_template: Path) -> None:
    files = sorted(p for p in local_root(verified_template).rglob("*") if p.is_file())
    names = [p.relative_to(local_root(verified_template)).as_posix() for p in files]
    assert names == ["PULL_MANIFEST.json", "PULL_VERIFIED.json", "seed0/best.pth", "seed0/best_metrics.json",
                     "seed1/best.pth", "seed1/best_metrics.json"]
    write_bits = {name: mode(p) & 0o222 for name, p in zip(names, files, strict=True)}
    assert write_bits == {**dict.fromkeys(names, 0), "PULL_VERIFIED.json": write_bits["PULL_VERIFIED.json"]}
    assert all(mode(p.parent) & stat.S_IWUSR for p in files), "folders stay writable for a re-pull"


def test_an_edit_after_chmod_u_w_is_refused_even_with_the_mode_and_mtime_put_back(verified_template: Path,
                                                                                   tmp_path: Path) -> None:
    root = copy_project(verified_template, tmp_path / "proj")
    path = local_root(root) / "seed1" / "best.pth"
    before = mode(path)
    chmod_u_w(path)
    flip_in_place(path)  # same size, mtime set back
    os.chmod(path, before)  # and read-only again, as if nothing happened
    assert_refused(root, "seed1/best.pth content differs")
    # the way back is the evidence chain, not the mode: pull replaces the file, verify seals it again
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 1
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert mode(path) & 0o222 == 0
    assert_torn_down(root)


def test_a_deleted_verified_file_is_refused(verified_template: Path, tmp_path: Path) -> None:
    root = copy_project(verified_template, tmp_path / "proj")
    (local_root(root) / "seed0" / "best_metrics.json").unlink()
    assert_refused(root, "seed0/best_metrics.json missing locally: run pull")


def test_a_write_bit_put_back_without_an_edit_keeps_the_gate_open(verified_template: Path, tmp_path: Path) -> None:
    """chmod moves every file's ctime, so the gate hashes them again and finds the bytes verified."""
    root = copy_project(verified_template, tmp_path / "proj")
    for path in local_root(root).rglob("*"):
        if path.is_file():
            chmod_u_w(path)
    assert_torn_down(root)
