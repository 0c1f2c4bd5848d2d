"""Pulls tell the truth: every failed file with its reason and a non-zero exit, events that never say
"finished" for an incomplete pull, a damaged local copy repaired by pulling again, and the streamed hash
seeding the cache so the next gate check hashes nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from remote_gpu_trainer.services.gate import gather_gate_inputs
from remote_gpu_trainer.state.caches import FileKey
from remote_gpu_trainer.state.db import StateDB
from support.evidence_helpers import Env, flip_byte, truncate
from support.helpers import RUN
from support.helpers import run_rgt as rgt


def edit_in_place_keeping_mtime(path: Path) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    with open(path, "r+b") as handle:
        handle.write(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("damage", [flip_byte, truncate, edit_in_place_keeping_mtime])
async def test_pulling_again_repairs_a_damaged_local_copy(env: Env, damage: object) -> None:
    first = await pull(env.project, env.run, env.transport, env.db)
    assert first.ok
    target = env.local / "seed1" / "best.pth"
    damage(target)  # type: ignore[operator]
    assert not (await verify(env.project, env.run, env.db)).ok
    again = await pull(env.project, env.run, env.transport, env.db)
    assert again.ok and again.fetched == ["seed1/best.pth"], again
    assert target.read_bytes() == (env.box / "seed1" / "best.pth").read_bytes()
    assert (await verify(env.project, env.run, env.db)).ok


async def test_the_streamed_hash_seeds_the_cache_so_the_gate_hashes_nothing(env: Env) -> None:
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok
    for path in result.files:
        local = env.local.joinpath(*path.split("/"))
        cached = env.db.cached_hash(str(local), FileKey.of(local.stat()))
        assert cached == hashlib.sha256(local.read_bytes()).hexdigest(), path
    # the gate's listing answers every file from the cache: poisoning the bytes' key would show if it hashed
    inputs = gather_gate_inputs(env.project, env.run, env.db, "box-7f3a", None)
    assert {f.path: f.sha256 for f in inputs.local_files} == {
        p: hashlib.sha256(env.local.joinpath(*p.split("/")).read_bytes()).hexdigest() for p in result.files}


async def test_a_file_gone_from_the_box_fails_that_file_with_its_reason(env: Env) -> None:
    await build_manifest(env.transport, env.run, env.db)
    (env.box / "seed0" / "best_metrics.json").unlink()
    result = await pull(env.project, env.run, env.transport, env.db)
    assert not result.ok
    assert [(p.code, p.path) for p in result.failed] == [("missing_on_box", "seed0/best_metrics.json")]
    assert "missing on the box" in result.failed[0].detail
    assert sorted(result.fetched) == sorted(p for p in result.files if p != "seed0/best_metrics.json")


async def test_a_pull_that_cannot_fit_is_refused_with_the_figures_before_any_file(env: Env, tmp_path: Path) -> None:
    """A real small disk: a tmpfs of 1 MiB as the project's runs/ folder, 3 MiB of results on the box."""
    (env.box / "seed0" / "big.bin").write_bytes(os.urandom(3 << 20))
    runs = env.project.root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(runs)], check=True)
    try:
        with pytest.raises(VerbFailed) as refused:
            await pull(env.project, env.run, env.transport, env.db)
        message = str(refused.value)
        assert "the pull needs" in message and "free there" in message
        needed = sum(p.stat().st_size for p in env.box.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
        assert f"{needed:,} bytes" in message
        written = [p.name for p in (runs / env.run.id).rglob("*") if p.is_file()]
        assert written == [], "nothing is written: not the manifest, never a half-fetched file"
    finally:
        subprocess.run(["umount", "-l", str(runs)], check=False)


def test_rgt_pull_exits_1_names_each_failed_file_and_never_logs_finished(project_dir: Path) -> None:
    assert rgt("up", RUN, cwd=project_dir).returncode == 0
    assert rgt("run", RUN, cwd=project_dir).returncode == 0
    assert rgt("watch", RUN, "--interval", "0.2", cwd=project_dir).returncode == 0
    box_root = project_dir / ".rgt" / "sim" / "box" / "workspace" / "rgt" / RUN
    db = StateDB(project_dir / ".rgt" / "state.db")
    transport_root = project_dir / ".rgt" / "sim" / "box"
    from remote_gpu_trainer.config.project import load_project
    from remote_gpu_trainer.providers.transports.local import LocalTransport

    project = load_project(project_dir / "rgt.toml")
    import asyncio

    asyncio.run(build_manifest(LocalTransport(root=transport_root), project.run(RUN), db))
    db.close()
    (box_root / "seed1" / "best.pth").unlink()
    with open(box_root / "seed0" / "best_metrics.json", "a", encoding="utf-8") as handle:
        handle.write(" ")

    pulled = rgt("pull", RUN, cwd=project_dir)
    assert pulled.returncode == 1, pulled.stderr
    assert "✖ seed1/best.pth: missing on the box" in pulled.stderr
    assert "✖ seed0/best_metrics.json:" in pulled.stderr and "changed on the box" in pulled.stderr
    assert "pull of r1 incomplete: 2 of" in pulled.stderr
    events = rgt("events", cwd=project_dir).stdout
    assert "pull_incomplete" in events and "finished" not in events.split("pull of run r1 started", 1)[1]
