"""The newest checkpoint of a recoverable run kept home (services/recover/checkpoint_home.py, docs/remote-ops.md
§10.1), on an interruptible sim box running a real torch trainer (tests/fixtures/resumable_trainer.py).

Each test tries to make rgt keep something it must not: bytes that are not the box's, a checkpoint that does not
load weights-only, a path the box names outside the cell, a copy the run's evidence would count; and checks that a
copy replaces the one before only once it is good."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.gate import gate_view
from remote_gpu_trainer.services.instances import instance_status, remote
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.recover import checkpoint_home
from remote_gpu_trainer.services.recover.checkpoint_home import home_copies, home_dir, keep_home
from remote_gpu_trainer.state.events import EventKind
from support.helpers import INSTANCE, RUN, wait_for_liveness
from support.recover_project import checkpoint, disk, hold, launched_holding, project, wait_exists


@pytest.fixture(autouse=True)
def trainer_released(tmp_path: Path) -> Iterator[None]:
    """Each test's trainer may wait at a step when the test ends: let it finish, so no job outlives its test."""
    yield
    hold(tmp_path / "p", None)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_newest_checkpoint_is_kept_home_verified_once_per_interval_and_never_counted_as_evidence(
        tmp_path: Path) -> None:
    root = project(tmp_path / "p")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, root, 3)
            on_box = checkpoint(root, 2)
            kept = await keep_home(session, RUN, force=True)
            assert kept is not None and kept.asked and kept.problems == (), kept
            (copy,) = kept.copied
            assert (copy.cell, copy.path, copy.loaded) == ("seed0", "ckpt_002.pt", True), copy
            assert copy.local == home_dir(session.project, RUN) / "seed0" / "ckpt_002.pt"
            assert copy.local.read_bytes() == on_box.read_bytes() and copy.sha256 == sha256(on_box)
            assert "tensors" in copy.verdict
            assert not str(copy.local).startswith(str(session.project.run_dir(RUN)))

            # within the interval the box is not asked again, even though a newer checkpoint exists by then
            hold(root, 4)
            wait_exists(checkpoint(root, 3))
            assert await keep_home(session, RUN) == checkpoint_home.KeepResult()
            assert set(home_copies(session, RUN)) == {"seed0"}
            assert home_copies(session, RUN)["seed0"].path == "ckpt_002.pt"

            # asked again: the newer one replaces it, and the folder holds that one only
            newer = await keep_home(session, RUN, force=True)
            assert newer is not None and [c.path for c in newer.copied] == ["ckpt_003.pt"]
            assert sorted(p.name for p in (home_dir(session.project, RUN) / "seed0").iterdir()) == ["ckpt_003.pt"]
            unchanged = await keep_home(session, RUN, force=True)  # the same bytes: nothing copied, nothing written
            assert unchanged is not None and unchanged.asked and unchanged.copied == ()
            kept_events = [e for e in session.db.events(run_id=RUN, kind=EventKind.RECOVER)
                           if e.detail["step"] == "checkpoint_home"]
            assert [e.detail["path"] for e in kept_events] == ["ckpt_002.pt", "ckpt_003.pt"]

            hold(root, None)
            await wait_for_liveness(session)
            await pull_run(session, RUN)
            verified = await verify_run(session, RUN)
            assert verified.ok, verified
            status = await instance_status(session, INSTANCE)
            assert gate_view(session, RUN, status.provider_id, "finished").evidence_ok
            listed = (session.project.run_dir(RUN) / "PULL_MANIFEST.json").read_text()
            assert "recovery" not in listed and ".rgt" not in listed
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_a_checkpoint_that_does_not_load_weights_only_is_kept_with_its_verdict_and_bytes_not_the_boxs_are_not(
        tmp_path: Path) -> None:
    root = project(tmp_path / "p")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, root, 1)
            good = await keep_home(session, RUN, force=True)
            assert good is not None and [c.path for c in good.copied] == ["ckpt_000.pt"]

            # a newer checkpoint whose pickle names a global weights-only loading refuses
            hostile = checkpoint(root, 0).with_name("ckpt_zz_hostile.pt")
            torch.save({"model_state_dict": {"w": torch.ones(2)}, "opt": os.stat_result((0,) * 10)}, hostile)
            refused = await keep_home(session, RUN, force=True)
            assert refused is not None and len(refused.copied) == 1, refused
            (copy,) = refused.copied
            assert copy.path == "ckpt_zz_hostile.pt" and not copy.loaded
            assert copy.verdict.startswith("does not load") and "os.stat_result" in copy.verdict
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_the_boxs_listing_is_read_strictly() -> None:
    good = "a" * 64
    text = "\n".join([
        f"CKPT\tseed0\t1700000000.5\t10\t{good}\tckpt_001.pt",
        f"CKPT\tseed1\t1700000000.5\t10\t{good}\t../../etc/passwd",  # out of the cell
        f"CKPT\tseed2\t1700000000.5\t10\t{good}\t/abs/ckpt.pt",
        f"CKPT\tother\t1700000000.5\t10\t{good}\tckpt.pt",  # not a cell of the run
        f"CKPT\tseed3\tsoon\t10\t{good}\tckpt.pt",
        f"CKPT\tseed4\t1700000000.5\t-1\t{good}\tckpt.pt",
        "CKPT\tseed5\t1700000000.5\t10\tnot-a-hash\tckpt.pt",
        f"CKPT\tseed6\t1700000000.5\t10\t{good}\tsub/.hidden.pt",
        f"CKPT\tseed7\t1700000000.5\t10\t{good}\tckpt.pt\textra",
        f"\x1b[2JCKPT\tseed8\t1700000000.5\t10\t{good}\tckpt.pt",
    ])
    cells = {f"seed{index}" for index in range(9)}
    found = checkpoint_home._parse_listing(text, cells)
    assert [(entry.cell, entry.path, entry.size) for entry in found] == [("seed0", "ckpt_001.pt", 10)]


def test_a_run_without_recover_limits_keeps_nothing_home(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    text = (root / "rgt.toml").read_text()
    start = text.index("recover = {")
    (root / "rgt.toml").write_text(text[:start] + text[text.index("}", start) + 1:])
    assert load_project(root / "rgt.toml").run(RUN).recover is None

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, root, 1)
            assert await keep_home(session, RUN, force=True) is None
            assert not home_dir(session.project, RUN).exists()
            assert disk(root).is_dir()
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_bytes_that_are_not_the_ones_the_box_stated_are_not_kept_and_the_copy_before_stays(tmp_path: Path) -> None:
    root = project(tmp_path / "p")

    async def go() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, root, 2)
            first = await keep_home(session, RUN, force=True)
            assert first is not None and [c.path for c in first.copied] == ["ckpt_001.pt"]
            run = session.project.run(RUN)
            transport = await remote(session, INSTANCE)
            newer = checkpoint(root, 1).with_name("ckpt_009.pt")
            torch.save({"model_state_dict": {"w": torch.zeros(3)}}, newer)
            (stated,) = await checkpoint_home.newest_on_box(run, transport)
            assert stated.path == "ckpt_009.pt" and stated.sha256 == sha256(newer)
            torch.save({"model_state_dict": {"w": torch.ones(3)}}, newer)  # rewritten after the box stated it
            with pytest.raises(checkpoint_home.NotTheBoxBytes):
                await checkpoint_home.copy_home(session, run, transport, stated)
            kept = home_copies(session, RUN)
            assert kept["seed0"].path == "ckpt_001.pt" and kept["seed0"].local.is_file()
            assert sorted(p.name for p in (home_dir(session.project, RUN) / "seed0").iterdir()) == ["ckpt_001.pt"]
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(go())


def test_rgt_watch_keeps_a_running_recoverable_runs_checkpoint_home_and_says_so(tmp_path: Path) -> None:
    root = project(tmp_path / "p")

    async def launched() -> None:
        session = open_session(str(root))
        try:
            await launched_holding(session, root, 2)
        finally:
            await session.close_transports()
            session.close()

    asyncio.run(launched())
    watched = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "watch", RUN, "--once"], cwd=root,
                             capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert watched.returncode == 0, watched.stderr
    assert re.search(r"r1: seed0/ckpt_001\.pt kept home \([\d,]+ bytes, loads weights-only: \d+ tensors\)",
                     watched.stdout), watched.stdout
    kept = home_dir(load_project(root / "rgt.toml"), RUN) / "seed0" / "ckpt_001.pt"
    assert kept.read_bytes() == checkpoint(root, 1).read_bytes()
    again = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "watch", RUN, "--once"], cwd=root,
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert again.returncode == 0 and "kept home" not in again.stdout  # the interval since that copy has not passed
    hold(root, None)
