"""Links between the manifest and the pull (docs/gate.md §2): a link the manifest recorded that the box replaces
by a file, and a listed file the box replaces by a link, while the pull runs. The manifest is the results: a
link is never fetched or followed, and bytes that are not the manifest's never land as a listed file."""

from __future__ import annotations

import json
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


# -- links re-created locally (docs/gate.md §2) ---------------------------------------------------------------
def gate_open(env: Env) -> tuple[bool, list[str]]:
    from datetime import timedelta

    from remote_gpu_trainer.audits.gate import Approval, evaluate_gate
    from remote_gpu_trainer.clock import utc_now
    from remote_gpu_trainer.services.gate import gather_gate_inputs
    from support.evidence_helpers import INSTANCE_ID

    decision = evaluate_gate(gather_gate_inputs(env.project, env.run, env.db, INSTANCE_ID,
                                                Approval(INSTANCE_ID, utc_now()),
                                                now=utc_now() + timedelta(seconds=1)))
    return decision.open, decision.reasons


async def test_links_inside_the_root_are_re_created_and_the_rest_are_only_recorded(tmp_path: Path) -> None:
    """W&B's shape: `latest-run` to a run folder and `debug.log` to a file inside the cell are made again
    locally, relative; a link to the box's own files and a loop are recorded and never made; the gate opens."""
    env = two_cells(tmp_path)
    wandb = env.box / "seed0" / "wandb"
    (wandb / "offline-run-1" / "logs").mkdir(parents=True)
    (wandb / "offline-run-1" / "logs" / "debug.log").write_text("wandb debug\n")
    (wandb / "latest-run").symlink_to("offline-run-1")
    (wandb / "debug.log").symlink_to(wandb / "offline-run-1" / "logs" / "debug.log")  # absolute, as wandb writes
    (env.box / "seed0" / "etc").symlink_to("/etc")
    (env.box / "seed1" / "a").symlink_to("b")
    (env.box / "seed1" / "b").symlink_to("a")
    await build_manifest(env.transport, env.run, env.db)
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok, result.failed
    local = env.local / "seed0" / "wandb"
    assert os.readlink(local / "latest-run") == "offline-run-1"
    assert os.readlink(local / "debug.log") == "offline-run-1/logs/debug.log"  # relative, from `inside`
    assert (local / "debug.log").read_text() == "wandb debug\n"
    for never in ("seed0/etc", "seed1/a", "seed1/b"):
        assert not os.path.lexists(env.local / never), never
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert gate_open(env) == (True, [])


async def test_a_local_link_that_is_not_the_recorded_one_closes_the_gate(tmp_path: Path) -> None:
    """Someone re-points a re-created link (or plants one where a link was recorded but not made): it is not
    the manifest's link, so verification fails and the gate stays closed."""
    env = two_cells(tmp_path)
    (env.box / "seed0" / "last").symlink_to("best.pth")
    (env.box / "seed0" / "out").symlink_to("/etc")
    await build_manifest(env.transport, env.run, env.db)
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    assert (await verify(env.project, env.run, env.db)).ok
    assert gate_open(env)[0]
    last = env.local / "seed0" / "last"
    last.unlink()
    last.symlink_to("seed0.log")
    assert not gate_open(env)[0]
    verified = await verify(env.project, env.run, env.db)
    assert not verified.ok and [(p.code, p.path) for p in verified.errors] == [("symlink", "seed0/last")]
    last.unlink()
    last.symlink_to("best.pth")
    (env.local / "seed0" / "out").symlink_to("/etc")  # recorded, leads out: never made, so never accepted
    verified = await verify(env.project, env.run, env.db)
    assert [(p.code, p.path) for p in verified.errors] == [("symlink", "seed0/out")]
    assert not gate_open(env)[0]


async def test_a_forged_inside_cannot_make_a_local_link_lead_out(tmp_path: Path) -> None:
    """A hostile box's manifest may claim any `inside`: a link is made only to a listed file or a folder of
    listed files, by a relative target computed from that path, so nothing made can lead out of the root."""
    import hashlib

    from remote_gpu_trainer.audits.manifest import canonical_json

    env = two_cells(tmp_path)
    (env.box / "seed0" / "ok").symlink_to("best.pth")
    await build_manifest(env.transport, env.run, env.db)
    manifest = json.loads((env.box / "PULL_MANIFEST.json").read_text())
    manifest["links"] = [{"path": "seed0/ok", "target": "best.pth", "inside": "seed1/nothing-here"},
                         {"path": "seed0/up", "target": "../../..", "inside": None},
                         {"path": "seed1/self", "target": "self", "inside": "seed1/self"}]
    data = canonical_json(manifest)
    (env.box / "PULL_MANIFEST.json").write_bytes(data)
    env.db.record_manifest(env.run.id, hashlib.sha256(data).hexdigest())
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    for never in ("seed0/ok", "seed0/up", "seed1/self"):
        assert not os.path.lexists(env.local / never), never
    assert (await verify(env.project, env.run, env.db)).ok
