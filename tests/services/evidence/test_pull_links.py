"""Links between the manifest and the pull (docs/gate.md §2): a link the manifest recorded that the box replaces
by a file, and a listed file the box replaces by a link, while the pull runs. The manifest is the results: a
link is never fetched or followed, and bytes that are not the manifest's never land as a listed file."""

from __future__ import annotations

import os
from pathlib import Path

from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from support.evidence_helpers import Env, make_env, write_cell


def two_cells(tmp_path: Path) -> Env:
    env = make_env(tmp_path)
    for seed, cell in enumerate(env.run.roster):
        write_cell(env.box, cell, seed)
    return env


async def test_a_recorded_link_replaced_by_a_file_is_not_pulled_and_nothing_is_followed(tmp_path: Path) -> None:
    env = two_cells(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("not results")
    (env.box / "seed0" / "data").symlink_to(secret)
    await build_manifest(env.transport, env.run, env.db)
    (env.box / "seed0" / "data").unlink()
    (env.box / "seed0" / "data").write_text("written after the manifest")
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok, result.failed
    assert not os.path.lexists(env.local / "seed0" / "data")  # a recorded link is never fetched
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert secret.read_text() == "not results"


async def test_a_listed_file_replaced_by_a_link_out_is_never_followed(tmp_path: Path) -> None:
    env = two_cells(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"the machine's own file" * 100)
    await build_manifest(env.transport, env.run, env.db)
    log = env.box / "seed0" / "seed0.log"
    log.unlink()
    log.symlink_to(secret)
    result = await pull(env.project, env.run, env.transport, env.db)
    assert not result.ok and [p.path for p in result.failed] == ["seed0/seed0.log"]
    landed = env.local / "seed0" / "seed0.log"
    assert not os.path.lexists(landed) or b"own file" not in landed.read_bytes()
    assert not (await verify(env.project, env.run, env.db)).ok


async def test_a_forged_manifest_naming_a_lone_surrogate_is_refused_in_words(tmp_path: Path) -> None:
    """A hostile box's manifest may name `seed0/\\ud800x` (JSON can carry a lone surrogate, no file system can):
    refused as not UTF-8, the name escaped in the error and the event log, never an internal error."""
    import hashlib

    from remote_gpu_trainer.audits.manifest import MANIFEST_SCHEMA, canonical_json
    from remote_gpu_trainer.errors import VerbFailed

    env = two_cells(tmp_path)
    data = (env.box / "seed0" / "seed0.log").read_bytes()
    entry = {"path": "seed0/SURROGATEx", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    raw = canonical_json({"schema": MANIFEST_SCHEMA, "run_id": env.run.id,
                          "created_at_utc": "2026-12-01T00:00:00+00:00", "top_level_dirs": ["seed0", "seed1"],
                          "files": [entry], "totals": {"files": 1, "bytes": len(data)}}).replace(
        b"SURROGATE", b"\\ud800")  # the JSON escape: valid UTF-8 bytes that decode to a lone surrogate
    (env.box / "PULL_MANIFEST.json").write_bytes(raw)
    env.db.record_manifest(env.run.id, hashlib.sha256(raw).hexdigest())
    try:
        await pull(env.project, env.run, env.transport, env.db)
    except VerbFailed as exc:
        message = str(exc)
    else:
        raise AssertionError("a manifest naming a lone surrogate was accepted")
    assert "seed0/\\ud800x" in message and "not valid UTF-8" in message, message
    message.encode("utf-8")
    assert not os.path.lexists(env.local / "PULL_MANIFEST.json")
