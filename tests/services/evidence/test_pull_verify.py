"""Pull and verification end to end: a LocalTransport box, real torch checkpoints, real load checks, real SQLite.

Each kind of damage must give its checkpoint status, leave no PULL_VERIFIED.json and keep the gate closed.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from remote_gpu_trainer import __version__
from remote_gpu_trainer.audits.gate import Approval, evaluate_gate
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME, canonical_json, parse_marker
from remote_gpu_trainer.clock import utc_now
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.isolated.load_check import LOAD_CHECK_VERSION
from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import PullProgress, pull
from remote_gpu_trainer.services.evidence.verify import VerifyResult, VerifyStep, checkpoint_statuses, verify
from remote_gpu_trainer.services.gate import gather_gate_inputs
from remote_gpu_trainer.state.caches import FileKey
from support.evidence_helpers import (
    INSTANCE_ID,
    Env,
    flip_byte,
    status_of,
    truncate,
    write_cell,
)


def gate_open(env: Env) -> tuple[bool, list[str]]:
    """The full gate with a correct approval typed a moment after everything else."""
    approval = Approval(INSTANCE_ID, utc_now())
    decision = evaluate_gate(gather_gate_inputs(env.project, env.run, env.db, INSTANCE_ID, approval,
                                                now=utc_now() + timedelta(seconds=1)))
    return decision.open, decision.reasons


async def pulled_and_verified(env: Env) -> VerifyResult:
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok, result.failed
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    return verified


async def test_verify_steps_count_the_bytes_hashed_for_a_progress_bar(env: Env) -> None:
    """Each hashing step names its file and the bytes hashed before it; the total is every listed byte."""
    pulled = await pull(env.project, env.run, env.transport, env.db)
    steps: list[VerifyStep] = []
    assert (await verify(env.project, env.run, env.db, steps.append)).ok
    listed = [(f["path"], f["bytes"]) for f in json.loads((env.local / MANIFEST_NAME).read_bytes())["files"]]
    sizes = dict(listed)
    hashing = [step for step in steps if step.text.startswith("hashing ")]
    assert [step.path for step in hashing] == [path for path, _ in listed] and pulled.ok
    assert {step.total for step in hashing} == {sum(sizes.values())}
    assert [step.hashed for step in hashing] == [sum(size for _, size in listed[:i]) for i in range(len(listed))]
    assert steps[-1].hashed == steps[-1].total == sum(sizes.values())


async def test_pull_then_verify_writes_a_bound_marker(env: Env) -> None:
    seen: list[PullProgress] = []
    result = await pull(env.project, env.run, env.transport, env.db, seen.append)
    assert result.ok and len(result.fetched) == 6 and result.present == []
    assert result.manifest_sha256 == env.db.recorded_manifest(env.run.id)
    assert (env.local / "seed1" / "best.pth").read_bytes() == (env.box / "seed1" / "best.pth").read_bytes()
    assert {p.phase for p in seen} >= {"downloading", "done"}
    assert not list(env.local.rglob("*.part"))
    ok, reasons = gate_open(env)
    assert not ok and any("no PULL_VERIFIED.json" in reason for reason in reasons)

    texts: list[str] = []
    verified = await verify(env.project, env.run, env.db, lambda step: texts.append(step.text))
    assert verified.ok and verified.errors == []
    assert {item.status for item in verified.files} == {"verified"} and len(verified.files) == 6
    assert any("load-verifying seed0/best.pth" in text for text in texts)
    marker, problems = parse_marker((env.local / MARKER_NAME).read_bytes())
    assert problems == [] and marker is not None
    assert marker.run_id == env.run.id and marker.manifest_sha256 == result.manifest_sha256
    assert marker.verifier_version == f"{__version__}+{LOAD_CHECK_VERSION}"
    assert marker.files == 6
    assert [(c.path, c.format, c.state_key, c.tensors) for c in marker.checkpoints] == [
        ("seed0/best.pth", "torch-zip", "model_state_dict", 3),
        ("seed1/best.pth", "torch-zip", "model_state_dict", 3),
    ]
    record = env.db.last_verification(env.run.id)
    assert record is not None and record["ok"] and len(record["files"]) == 6
    assert gate_open(env) == (True, [])
    assert [s.status for s in checkpoint_statuses(env.project, env.run, env.db)] == ["verified", "verified"]


def damage_flip(env: Env) -> None:
    flip_byte(env.local / "seed1" / "best.pth")


def damage_truncate(env: Env) -> None:
    truncate(env.local / "seed1" / "best.pth")


def damage_delete(env: Env) -> None:
    (env.local / "seed1" / "best.pth").unlink()


@pytest.mark.parametrize("damage, status, code", [
    (damage_flip, "hash_mismatch", "hash_mismatch"),
    (damage_truncate, "size_mismatch", "size_mismatch"),
    (damage_delete, "missing", "missing_local"),
])
async def test_local_damage_gives_its_status_and_removes_the_old_marker(
        env: Env, damage: Callable[[Env], None], status: str, code: str) -> None:
    await pulled_and_verified(env)
    (env.local / ".rgt-tmp-PULL_VERIFIED.4242").write_text("half a marker")
    damage(env)
    assert not gate_open(env)[0]
    result = await verify(env.project, env.run, env.db)
    assert not result.ok
    assert status_of(result.files, "seed1/best.pth") == status
    assert status_of(result.files, "seed0/best.pth") == "verified"
    assert [(p.code, p.path) for p in result.errors] == [(code, "seed1/best.pth")]
    assert not (env.local / MARKER_NAME).exists(), "a stale success must not survive a failed verify"
    assert not (env.local / ".rgt-tmp-PULL_VERIFIED.4242").exists()
    ok, reasons = gate_open(env)
    assert not ok and any("no PULL_VERIFIED.json" in reason for reason in reasons)
    assert any("seed1/best.pth" in reason for reason in reasons)
    record = env.db.last_verification(env.run.id)
    assert record is not None and not record["ok"] and record["errors"][0]["code"] == code
    statuses = {s.path: s.status for s in checkpoint_statuses(env.project, env.run, env.db)}
    assert statuses["seed1/best.pth"] == ("pending" if status == "missing" else status)


async def test_an_extra_local_file_fails_verification(env: Env) -> None:
    await pulled_and_verified(env)
    (env.local / "seed0" / "notes.txt").write_text("mine")
    assert not gate_open(env)[0]
    result = await verify(env.project, env.run, env.db)
    assert not result.ok
    assert [(p.code, p.path) for p in result.errors] == [("unexpected_local", "seed0/notes.txt")]
    assert {item.status for item in result.files} == {"verified"}
    assert not (env.local / MARKER_NAME).exists()
    ok, reasons = gate_open(env)
    assert not ok and any("seed0/notes.txt" in reason for reason in reasons)


async def test_pull_never_deletes_local_extras(env: Env) -> None:
    (env.local / "seed0").mkdir(parents=True)
    (env.local / "seed0" / "notes.txt").write_text("mine")
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok
    assert (env.local / "seed0" / "notes.txt").read_text() == "mine"


async def test_nan_checkpoint_is_nonfinite(env: Env) -> None:
    write_cell(env.box, "seed1", 1, nan=True)
    await pull(env.project, env.run, env.transport, env.db)
    result = await verify(env.project, env.run, env.db)
    assert not result.ok
    assert status_of(result.files, "seed1/best.pth") == "nonfinite"
    assert status_of(result.files, "seed0/best.pth") == "verified"
    problem = next(p for p in result.errors if p.path == "seed1/best.pth")
    assert problem.code == "ckpt_nonfinite" and "model_state_dict.encoder.0.weight" in problem.detail
    assert not (env.local / MARKER_NAME).exists()
    assert not gate_open(env)[0]


async def test_a_pickle_that_would_run_code_is_unloadable_and_never_runs(env: Env, tmp_path: Path) -> None:
    detonated = tmp_path / "detonated"
    write_cell(env.box, "seed0", 0, detonator=detonated)
    await pull(env.project, env.run, env.transport, env.db)
    for _ in range(2):  # the second verdict comes from the load-check cache: still refused, still not run
        result = await verify(env.project, env.run, env.db)
        assert not result.ok
        assert status_of(result.files, "seed0/best.pth") == "unloadable"
        problem = next(p for p in result.errors if p.path == "seed0/best.pth")
        assert problem.code == "ckpt_blocked_global"
        assert f"{os.system.__module__}.system" in problem.detail
        assert not detonated.exists()
        assert not (env.local / MARKER_NAME).exists()
        assert not gate_open(env)[0]


@pytest.mark.parametrize("payload, code", [
    ({"weights": {"w": torch.ones(2)}, "epoch": 3}, "ckpt_no_state_key"),
    ({"model_state_dict": {}, "epoch": 3}, "ckpt_no_tensors"),
    (b"PK\x03\x04 this is not a zip archive", "ckpt_crash"),
])
async def test_other_unloadable_checkpoints(env: Env, payload: object, code: str) -> None:
    target = env.box / "seed1" / "best.pth"
    if isinstance(payload, bytes):
        target.write_bytes(payload)
    else:
        torch.save(payload, target)
    await pull(env.project, env.run, env.transport, env.db)
    result = await verify(env.project, env.run, env.db)
    assert status_of(result.files, "seed1/best.pth") == "unloadable"
    assert [(p.code, p.path) for p in result.errors] == [(code, "seed1/best.pth")]
    assert not (env.local / MARKER_NAME).exists()


async def test_legacy_and_safetensors_checkpoints_verify(env: Env) -> None:
    write_cell(env.box, "seed1", 1, legacy=True)
    write_safetensors(env.box / "seed0" / "ema.safetensors", {"w": torch.randn(3, 2), "n": torch.arange(3)})
    await pulled_and_verified(env)
    marker, _ = parse_marker((env.local / MARKER_NAME).read_bytes())
    assert marker is not None
    formats = {c.path: (c.format, c.state_key) for c in marker.checkpoints}
    assert formats == {"seed0/best.pth": ("torch-zip", "model_state_dict"),
                       "seed0/ema.safetensors": ("safetensors", "."),
                       "seed1/best.pth": ("torch-legacy", "model_state_dict")}


async def test_nonfinite_safetensors(env: Env) -> None:
    write_safetensors(env.box / "seed0" / "ema.safetensors", {"w": torch.tensor([1.0, float("inf")])})
    await pull(env.project, env.run, env.transport, env.db)
    result = await verify(env.project, env.run, env.db)
    assert status_of(result.files, "seed0/ema.safetensors") == "nonfinite"


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """The safetensors layout by hand: 8-byte header length, JSON header, raw little-endian data."""
    names = {torch.float32: "F32", torch.int64: "I64"}
    header: dict[str, object] = {}
    blob = b""
    for name, tensor in tensors.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": names[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + blob)


async def test_an_interrupted_pull_resumes_and_verifies(env: Env) -> None:
    await pull(env.project, env.run, env.transport, env.db)
    target = env.local / "seed1" / "best.pth"
    full = target.read_bytes()
    target.unlink()
    part = target.with_name("best.pth.part")
    part.write_bytes(full[:700])  # what a killed pull leaves behind
    early = await verify(env.project, env.run, env.db)
    assert ("incomplete_part", "seed1/best.pth.part") in {(p.code, p.path) for p in early.errors}
    assert status_of(early.files, "seed1/best.pth") == "missing"

    seen: list[PullProgress] = []
    result = await pull(env.project, env.run, env.transport, env.db, seen.append)
    assert result.ok and result.fetched == ["seed1/best.pth"] and len(result.present) == 5
    first = next(p for p in seen if p.path == "seed1/best.pth" and p.phase == "downloading")
    assert first.done == 700, "the pull must resume after the existing prefix, not start again"
    assert target.read_bytes() == full and not part.exists()
    assert (await verify(env.project, env.run, env.db)).ok


async def test_a_stale_part_beside_a_correct_copy_is_cleared_by_the_next_pull(env: Env) -> None:
    """A pull killed after its rename (or a copy put back by hand) leaves `x.part` beside a correct `x`: verify
    asks for a pull, and the pull, finding `x` right, clears the leftover instead of saying "already here"
    forever (issue 24's evidence path)."""
    await pull(env.project, env.run, env.transport, env.db)
    part = env.local / "seed1" / "best.pth.part"
    part.write_bytes((env.local / "seed1" / "best.pth").read_bytes()[:300])
    early = await verify(env.project, env.run, env.db)
    assert ("incomplete_part", "seed1/best.pth.part") in {(p.code, p.path) for p in early.errors}
    again = await pull(env.project, env.run, env.transport, env.db)
    assert again.ok and again.fetched == [] and "seed1/best.pth" in again.present
    assert not part.exists()
    assert (await verify(env.project, env.run, env.db)).ok


async def test_a_corrupt_or_oversized_part_is_fetched_again(env: Env) -> None:
    await pull(env.project, env.run, env.transport, env.db)
    for name, make in (("best.pth", lambda data: bytes([data[0] ^ 1]) + data[1:600]),
                       ("best_metrics.json", lambda data: data + b"trailing garbage")):
        target = env.local / "seed0" / name
        full = target.read_bytes()
        target.unlink()
        target.with_name(name + ".part").write_bytes(make(full))
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok and sorted(result.fetched) == ["seed0/best.pth", "seed0/best_metrics.json"]
    assert (await verify(env.project, env.run, env.db)).ok


async def test_a_different_local_manifest_is_never_mixed(env: Env) -> None:
    await pull(env.project, env.run, env.transport, env.db)
    manifest = env.local / MANIFEST_NAME
    obj = json.loads(manifest.read_bytes())
    obj["created_at_utc"] = "2020-01-01T00:00:00+00:00"
    manifest.write_bytes(canonical_json(obj))
    with pytest.raises(VerbFailed, match="different manifest"):
        await pull(env.project, env.run, env.transport, env.db)
    result = await verify(env.project, env.run, env.db)
    assert "manifest_mismatch" in {p.code for p in result.errors}
    assert not gate_open(env)[0]


async def test_a_remote_manifest_that_is_not_the_recorded_one_is_refused(env: Env) -> None:
    env.db.record_manifest(env.run.id, "0" * 64)
    (env.box / MANIFEST_NAME).write_bytes(b"{}\n")
    with pytest.raises(VerbFailed, match="not the one recorded"):
        await pull(env.project, env.run, env.transport, env.db)
    assert not (env.local / MANIFEST_NAME).exists()


async def test_a_remote_file_changed_after_the_manifest_fails_that_file(env: Env) -> None:
    await build_manifest(env.transport, env.run, env.db)
    (env.box / "seed0" / "seed0.log").write_text("rewritten after the manifest, longer than before\n")
    result = await pull(env.project, env.run, env.transport, env.db)
    assert not result.ok
    assert [p.path for p in result.failed] == ["seed0/seed0.log"]
    assert "changed after the manifest" in result.failed[0].detail
    assert not (env.local / "seed0" / "seed0.log").exists()
    assert len(result.fetched) == 5


async def test_a_symlinked_local_folder_is_never_written_through(env: Env, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env.local.mkdir(parents=True)
    (env.local / "seed0").symlink_to(elsewhere, target_is_directory=True)
    result = await pull(env.project, env.run, env.transport, env.db)
    assert {p.path for p in result.failed} == {"seed0/best.pth", "seed0/best_metrics.json", "seed0/seed0.log"}
    assert {p.code for p in result.failed} == {"path_unsafe"}
    assert list(elsewhere.iterdir()) == []
    verified = await verify(env.project, env.run, env.db)
    assert ("symlink", "seed0") in {(p.code, p.path) for p in verified.errors}


async def test_required_files_and_metrics_are_checked(env: Env) -> None:
    (env.box / "seed1" / "best_metrics.json").write_text('{"val_loss": NaN}')
    await pull(env.project, env.run, env.transport, env.db)
    strict = env.with_run(required=("best.pth", "best_metrics.json", "last.pth"))
    result = await verify(strict.project, strict.run, strict.db)
    found = {(p.code, p.path) for p in result.errors}
    assert ("metrics_invalid", "seed1/best_metrics.json") in found
    assert {("required_missing", "seed0/last.pth"), ("required_missing", "seed1/last.pth")} <= found
    assert status_of(result.files, "seed0/last.pth") == "missing"
    assert status_of(result.files, "seed1/best_metrics.json") == "unloadable"
    assert not (env.local / MARKER_NAME).exists()


async def test_a_load_check_timeout_is_unloadable_and_not_cached(env: Env) -> None:
    write_cell(env.box, "seed0", 40)  # bytes no earlier test load-checked, so the load check really runs
    write_cell(env.box, "seed1", 41)
    await pull(env.project, env.run, env.transport, env.db)
    result = await verify(env.project, env.run, env.db, load_check_timeout=0.05)
    assert {(p.code, p.path) for p in result.errors} == {("ckpt_timeout", "seed0/best.pth"),
                                                         ("ckpt_timeout", "seed1/best.pth")}
    assert status_of(result.files, "seed0/best.pth") == "unloadable"
    assert (await verify(env.project, env.run, env.db)).ok


async def test_verification_seeds_the_hash_cache_for_the_gate(env: Env) -> None:
    await pulled_and_verified(env)
    path = env.local / "seed0" / "best.pth"
    cached = env.db.cached_hash(str(path), FileKey.of(path.stat()))
    assert cached is not None
    assert cached == hashlib.sha256(path.read_bytes()).hexdigest()


async def test_bytes_changed_in_place_with_the_mtime_set_back_are_a_hash_mismatch(env: Env) -> None:
    """A careless restore (or a hostile tool) edits a checkpoint and sets its mtime back: same size, same
    mtime, same inode. The gate's cache is keyed on ctime too, and verification never asks the cache."""
    await pulled_and_verified(env)
    path = env.local / "seed1" / "best.pth"
    before = path.stat()
    with open(path, "r+b") as handle:  # in place: the inode stays
        handle.seek(before.st_size // 2)
        byte = handle.read(1)
        handle.seek(before.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    ok, reasons = gate_open(env)
    assert not ok and any("seed1/best.pth content differs" in reason for reason in reasons), reasons
    result = await verify(env.project, env.run, env.db)
    assert not result.ok and status_of(result.files, "seed1/best.pth") == "hash_mismatch"


async def test_a_poisoned_hash_cache_never_makes_a_verdict(env: Env) -> None:
    """Even a cache row that claims the manifest's hash for the damaged file's exact key is ignored by
    verification: it re-hashes every listed file from its bytes."""
    await pulled_and_verified(env)
    path = env.local / "seed1" / "best.pth"
    good = hashlib.sha256(path.read_bytes()).hexdigest()
    flip_byte(path)
    env.db.store_hash(str(path), FileKey.of(path.stat()), good)
    result = await verify(env.project, env.run, env.db)
    assert not result.ok and status_of(result.files, "seed1/best.pth") == "hash_mismatch"
    assert not (env.local / MARKER_NAME).exists()


async def test_checkpoint_statuses_follow_the_evidence(env: Env) -> None:
    pending = checkpoint_statuses(env.project, env.run, env.db)
    assert [(s.path, s.status) for s in pending] == [("seed0/best.pth", "pending"),
                                                     ("seed1/best.pth", "pending")]
    await pull(env.project, env.run, env.transport, env.db)
    assert {s.status for s in checkpoint_statuses(env.project, env.run, env.db)} == {"pulled"}
    await verify(env.project, env.run, env.db)
    assert {s.status for s in checkpoint_statuses(env.project, env.run, env.db)} == {"verified"}
    target = env.local / "seed1" / "best.pth"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 1_000_000_000))
    statuses = {s.path: s.status for s in checkpoint_statuses(env.project, env.run, env.db)}
    assert statuses == {"seed0/best.pth": "verified", "seed1/best.pth": "pulled"}


async def test_a_recorded_manifest_with_an_escaping_path_is_refused_before_any_write(
        env: Env, tmp_path: Path) -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    files = [{"path": "seed0/../../../escaped.txt", "bytes": 1, "sha256": digest},
             {"path": "seed1/best.pth", "bytes": 1, "sha256": digest}]
    data = canonical_json({
        "schema": "remote-gpu-trainer/PULL/v1", "run_id": env.run.id, "created_at_utc": "2026-07-14T09:00:00+00:00",
        "top_level_dirs": ["seed0", "seed1"], "files": files, "totals": {"files": 2, "bytes": 2}})
    (env.box / MANIFEST_NAME).write_bytes(data)
    env.db.record_manifest(env.run.id, hashlib.sha256(data).hexdigest())
    with pytest.raises(VerbFailed, match="manifest refused: .*'..' component"):
        await pull(env.project, env.run, env.transport, env.db)
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not (env.local / "seed1" / "best.pth").exists()
    assert not (env.local / MANIFEST_NAME).exists(), "a refused manifest never becomes the local one"
