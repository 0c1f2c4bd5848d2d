"""The box's disk fills while the manifest is built: a clear one-line error, and nothing half-written
anywhere (no manifest, no temp file on the box, nothing recorded or pulled here)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services.evidence.verbs import pull_run
from remote_gpu_trainer.services.opening import open_session
from support.helpers import FIXTURES, write_project
from support.helpers import fill_disk as fill
from support.mounts import tmpfs

RUN = "r1"


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: a real filesystem that really runs out of space (tests and CI run as root)."""
    mount = tmp_path / "box"
    mount.mkdir()
    with tmpfs(mount, "256k"):
        yield mount




async def test_disk_full_during_the_manifest_build(tiny_disk: Path, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    result_root = tiny_disk / "rgt" / RUN
    for cell in ("seed0", "seed1"):
        shutil.copytree(FIXTURES / "cells" / cell, result_root / cell)
    assert fill(result_root / "seed1" / "filler.bin") > 0
    write_project(root, "true", instance="box", instance_body='provider = "local"', box=tiny_disk)
    session = open_session(str(root))
    try:
        with pytest.raises(VerbFailed) as caught:
            await pull_run(session, RUN)
    finally:
        session.close()
    message = str(caught.value)
    assert "\n" not in message and "No space left on device" in message and "PULL_MANIFEST.json" in message
    assert not (result_root / "PULL_MANIFEST.json").exists()
    assert [p.name for p in result_root.iterdir() if p.name.startswith(".rgt-tmp")] == []
    assert not (root / "runs" / RUN / "PULL_MANIFEST.json").exists()
    reopened = open_session(str(root))
    assert reopened.db.recorded_manifest(RUN) is None
    reopened.close()
