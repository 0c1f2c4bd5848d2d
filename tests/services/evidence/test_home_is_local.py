"""Home is local (issue 24, hole 5; docs/gate.md §5): `runs/<id>` that is the box's own folder seen from here, as a
symlink, a symlinked `runs/`, or a bind mount, is no copy. Pull refuses it, verify writes no marker there, and the
gate stays closed, even after a real pull and verification, so `rgt down` exits 3 and the box keeps its files."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import GateRefused, VerbFailed
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.opening import open_session
from support.helpers import INSTANCE, RUN, launched_and_finished, run_rgt, write_project
from support.mounts import mounted


@pytest.fixture
async def finished(tmp_path: Path) -> Path:
    """A sim project whose run finished on its box; nothing pulled yet."""
    root = tmp_path / "proj"
    write_project(root)
    session = open_session(str(root))
    try:
        await launched_and_finished(session)
    finally:
        session.close()
    return root


def box_root(root: Path) -> Path:
    return root / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt" / RUN


def refused_down(root: Path) -> None:
    down = run_rgt("down", RUN, "--confirm", "sim-box", cwd=root)
    assert down.returncode == 3 and "is not a local copy" in down.stderr, down.stderr
    assert (box_root(root) / "seed0" / "best.pth").is_file()


@pytest.mark.parametrize("how", ["run_link", "runs_link"])
async def test_a_symlinked_local_root_is_refused_by_pull_verify_and_the_gate(finished: Path, how: str) -> None:
    root = finished
    (root / "runs").mkdir(exist_ok=True)
    if how == "run_link":
        (root / "runs" / RUN).symlink_to(box_root(root))
    else:
        (root / "runs").rmdir()
        (root / "runs").symlink_to(box_root(root).parent)
    session = open_session(str(root))
    try:
        with pytest.raises(VerbFailed, match=r"runs/r1 is not a local copy: .*symlink"):
            await pull_run(session, RUN)
        result = await verify_run(session, RUN)
        assert not result.ok and [p.code for p in result.errors] == ["not_home"]
        assert not (box_root(root) / "PULL_VERIFIED.json").exists()
        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open and any("is not a local copy" in r for r in plan.reasons), plan.reasons
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, plan.provider_id, plan.lines)
    finally:
        session.close()
    refused_down(root)


async def test_a_verified_copy_swapped_for_the_boxs_folder_closes_the_gate(finished: Path) -> None:
    """A real pull and verification open the gate; replacing runs/r1 by a link to the box's folder, marker and
    manifest copied along, closes it again."""
    root = finished
    session = open_session(str(root))
    try:
        await pull_run(session, RUN)
        assert (await verify_run(session, RUN)).ok
        assert (await teardown.plan(session, INSTANCE)).gate_open
        for name in ("PULL_VERIFIED.json",):
            shutil.copy2(root / "runs" / RUN / name, box_root(root) / name)
        shutil.rmtree(root / "runs" / RUN, ignore_errors=True)
        subprocess.run(["chmod", "-R", "u+w", str(root / "runs")], check=False)
        shutil.rmtree(root / "runs" / RUN, ignore_errors=True)
        assert not (root / "runs" / RUN).exists()
        (root / "runs" / RUN).symlink_to(box_root(root))
        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open and any("is not a local copy" in r for r in plan.reasons), plan.reasons
    finally:
        session.close()
    refused_down(root)


@pytest.fixture
def bind_mounted(finished: Path) -> Iterator[Path]:
    """runs/r1 as a bind mount of the box's result root (CI runs as root)."""
    target = finished / "runs" / RUN
    target.mkdir(parents=True)
    with mounted(target, "--bind", str(box_root(finished))):
        yield finished


async def test_a_bind_mount_of_the_boxs_folder_is_not_home(bind_mounted: Path) -> None:
    root = bind_mounted
    session = open_session(str(root))
    try:
        with pytest.raises(VerbFailed, match="is the box's own folder"):
            await pull_run(session, RUN)
        result = await verify_run(session, RUN)
        assert [p.code for p in result.errors] == ["not_home"]
        assert not (box_root(root) / "PULL_VERIFIED.json").exists()
    finally:
        session.close()
    refused_down(root)


def test_a_network_file_system_is_named_from_the_mount_table() -> None:
    from remote_gpu_trainer.services.evidence.local_root import REMOTE_FS, filesystem_type

    table = ("/dev/vda / ext4 rw 0 0\n"
             "box:/workspace /home/me/proj/runs fuse.sshfs rw,nosuid 0 0\n"
             "nas:/export /home/me/proj/runs/r2 nfs4 rw 0 0\n"
             "tmpfs /home/me/proj/runs2 tmpfs rw 0 0\n")
    assert filesystem_type(Path("/home/me/proj/runs/r1"), table) == "fuse.sshfs"
    assert filesystem_type(Path("/home/me/proj/runs/r2/seed0"), table) == "nfs4"  # the longest mount wins
    assert filesystem_type(Path("/home/me/proj/runs2/r1"), table) == "tmpfs"  # not a prefix match on names
    assert filesystem_type(Path("/home/me/proj"), table) == "ext4"
    assert {"fuse.sshfs", "nfs4"} <= REMOTE_FS and "tmpfs" not in REMOTE_FS
