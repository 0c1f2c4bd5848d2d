"""Pull traps found by trying to break the pull (a hostile box's manifest and files, a careless local
folder): each pull must either bring the manifest's exact bytes home or say it did not.

A hostile box controls its own interpreter, so it can write any manifest it likes; `hostile_manifest`
writes one and records its hash as `rgt pull` would find it after a build.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.manifest import MANIFEST_SCHEMA, canonical_json, path_problems
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool
from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import pull
from support.evidence_helpers import Env, make_env, write_cell
from support.sshd_fixtures import Sshd, settings_for

pytestmark = pytest.mark.sshd


def hostile_manifest(env: Env, files: list[str]) -> dict[str, str]:
    entries = []
    for rel in sorted(files):
        data = (env.box / rel).read_bytes()
        entries.append({"path": rel, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"schema": MANIFEST_SCHEMA, "run_id": env.run.id, "created_at_utc": "2026-12-01T00:00:00+00:00",
                "top_level_dirs": sorted({e["path"].split("/")[0] for e in entries}), "files": entries,
                "totals": {"files": len(entries), "bytes": sum(e["bytes"] for e in entries)}}
    raw = canonical_json(manifest)
    (env.box / "PULL_MANIFEST.json").write_bytes(raw)
    env.db.record_manifest(env.run.id, hashlib.sha256(raw).hexdigest())
    return {e["path"]: e["sha256"] for e in entries}


def ssh_to(server: Sshd, tmp_path: Path) -> SSHTransport:
    return SSHTransport(server.target, settings_for(server, tmp_path / "ssh"), pool=SSHPool())


@pytest.mark.parametrize("name", ["x.part", "x.tmp", "x.partial", "x.swp"])
def test_a_temporary_file_name_is_never_a_manifest_path(name: str) -> None:
    assert path_problems(f"seed0/{name}") == [f"temporary file name {name!r}"]
    assert path_problems("seed0/part.bin") == [] and path_problems("seed0/x.parts") == []


@pytest.mark.parametrize("big", [64 << 20, 1000], ids=["per-file", "batch"])
async def test_entries_x_and_x_part_are_refused_never_pulled_into_one_file(
        tmp_path: Path, sshd: Sshd, ssh_home: Path, big: int) -> None:
    """`x.part` is the name `x` is streamed into: listing both would let one overwrite the other."""
    env = make_env(tmp_path, roster=("seed0",))
    env = env.with_run(remote_root=str(env.box))
    write_cell(env.box, "seed0", 0)
    (env.box / "seed0" / "x").write_bytes(os.urandom(big))
    (env.box / "seed0" / "x.part").write_bytes(os.urandom(500))
    hostile_manifest(env, ["seed0/best.pth", "seed0/best_metrics.json", "seed0/seed0.log", "seed0/x", "seed0/x.part"])
    transport = ssh_to(sshd, tmp_path)
    try:
        with pytest.raises(VerbFailed, match="temporary file name 'x.part'"):
            await pull(env.project, env.run, transport, env.db)
    finally:
        await transport.close()
    assert not (env.local / "seed0" / "x").exists() and not (env.local / "PULL_MANIFEST.json").exists()


async def test_a_hard_linked_part_is_never_written_through(tmp_path: Path) -> None:
    """A `.part` with a second name (a careless `cp -al`): the pull starts a fresh one, the other name
    keeps its bytes."""
    env = make_env(tmp_path, roster=("seed0",))
    write_cell(env.box, "seed0", 0)
    (env.box / "seed0" / "big.bin").write_bytes(b"BOX" * 1000)
    await build_manifest(env.transport, env.run, env.db)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"mine")
    (env.local / "seed0").mkdir(parents=True)
    os.link(outside, env.local / "seed0" / "big.bin.part")
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok, result.failed
    assert outside.read_bytes() == b"mine" and outside.stat().st_nlink == 1
    assert (env.local / "seed0" / "big.bin").read_bytes() == b"BOX" * 1000


@pytest.mark.parametrize("kind", ["symlink-to-dev-zero", "fifo", "folder", "huge"])
async def test_the_box_manifest_is_read_only_when_it_is_a_regular_file_of_sane_size(
        tmp_path: Path, sshd: Sshd, ssh_home: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest that is a link to /dev/zero, a FIFO, a folder, or larger than any manifest can be, is
    refused before it is read (reading one would hang the pull or fill memory)."""
    from remote_gpu_trainer.services.evidence import manifest as box_manifest

    env = make_env(tmp_path, roster=("seed0",))
    env = env.with_run(remote_root=str(env.box))
    write_cell(env.box, "seed0", 0)
    manifest = env.box / "PULL_MANIFEST.json"
    env.db.record_manifest(env.run.id, "0" * 64)
    if kind == "symlink-to-dev-zero":
        manifest.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(manifest)
    elif kind == "folder":
        manifest.mkdir()
    else:
        manifest.write_bytes(json.dumps({"pad": "x" * 5000}).encode())
        monkeypatch.setattr(box_manifest, "MANIFEST_MAX_BYTES", 4096)  # a size limit, not the logic
    transport = ssh_to(sshd, tmp_path)
    try:
        with pytest.raises(VerbFailed, match="manifest on the box"):
            await pull(env.project, env.run, transport, env.db)
    finally:
        await transport.close()
    assert not (env.local / "PULL_MANIFEST.json").exists()
