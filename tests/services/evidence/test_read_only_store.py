"""The immutable evidence store (docs/deliver.md §1): a verified copy is made read-only, and every path that
writes into runs/<run>/ afterwards still works: a re-pull that repairs a damaged file, a re-pull after the box's
copy changed, a killed pull resumed, a second verification, V33.

Real project, LocalTransport box, real torch checkpoints, real probes, real SQLite (support/evidence_helpers.py).
Read-only is a guard, not a proof: rgt runs as root in CI, where a mode bit stops no write, so these tests
assert the mode bits and what the gate, verification and V33 conclude, never that a write raised.
"""

from __future__ import annotations

import hashlib
import os
import stat
from datetime import timedelta
from pathlib import Path

from remote_gpu_trainer.audits.catalogue.integrity import CHECKS
from remote_gpu_trainer.audits.catalogue.model import CheckResult
from remote_gpu_trainer.audits.catalogue.runner import specs
from remote_gpu_trainer.audits.gate import Approval, evaluate_gate
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME, Manifest
from remote_gpu_trainer.clock import utc_now
from remote_gpu_trainer.services.evidence.local_root import walk_local_root
from remote_gpu_trainer.services.evidence.manifest import local_manifest
from remote_gpu_trainer.services.evidence.pull import PullProgress, pull
from remote_gpu_trainer.services.evidence.read_only import WRITE_BITS, seal_verified
from remote_gpu_trainer.services.evidence.verify import checkpoint_statuses, verify
from remote_gpu_trainer.services.gate import gather_gate_inputs
from remote_gpu_trainer.state.caches import FileKey
from support.capsules import load
from support.evidence_helpers import INSTANCE_ID, Env, status_of
from support.gate_helpers import flip_in_place

CHECKPOINT = "seed1/best.pth"




def manifest(env: Env) -> Manifest:
    found = local_manifest(env.local, env.run)
    assert found is not None
    return found


def writable(env: Env) -> dict[str, bool]:
    """Each listed file (and the manifest itself) -> whether any write bit is set."""
    listed = [*sorted(entry.path for entry in manifest(env).files), MANIFEST_NAME]
    return {path: bool(os.lstat(env.local / path).st_mode & WRITE_BITS) for path in listed}


def gate_open(env: Env) -> tuple[bool, list[str]]:
    approval = Approval(INSTANCE_ID, utc_now())
    decision = evaluate_gate(gather_gate_inputs(env.project, env.run, env.db, INSTANCE_ID, approval,
                                                now=utc_now() + timedelta(seconds=1)))
    return decision.open, decision.reasons


def v33(env: Env) -> CheckResult:
    return CHECKS["V33"](load(env.project.root), specs()["V33"].params)


def user_makes_writable(path: Path) -> None:
    """What a user has to do first to edit a read-only file in place: `chmod u+w`."""
    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IWUSR)


async def verified(env: Env) -> None:
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    result = await verify(env.project, env.run, env.db)
    assert result.ok, result.errors


async def test_verification_makes_the_copy_read_only_and_keeps_its_record_and_cache_current(env: Env) -> None:
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    assert set(writable(env).values()) == {True}, "a pulled copy is not sealed before it is verified"
    steps: list[str] = []
    assert (await verify(env.project, env.run, env.db, lambda step: steps.append(step.text))).ok
    assert writable(env) == dict.fromkeys(writable(env), False) and len(writable(env)) == 7
    assert "6 verified files are read-only now" in steps
    assert stat.S_IMODE(os.lstat(env.local / CHECKPOINT).st_mode) == 0o444  # 0o644 less every write bit
    # the record and the hash cache hold the stat taken after the chmod: the dashboard still says verified,
    # and the gate answers from the cache (no file is hashed again)
    assert [s.status for s in checkpoint_statuses(env.project, env.run, env.db)] == ["verified", "verified"]
    path = env.local / CHECKPOINT
    assert env.db.cached_hash(str(path), FileKey.of(path.stat())) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert gate_open(env) == (True, [])
    assert v33(env).status == "pass"


async def test_verifying_again_moves_no_ctime_and_stays_verified(env: Env) -> None:
    await verified(env)
    before = {p: os.lstat(env.local / p).st_ctime_ns for p in writable(env)}
    assert (await verify(env.project, env.run, env.db)).ok
    assert {p: os.lstat(env.local / p).st_ctime_ns for p in writable(env)} == before
    assert set(writable(env).values()) == {False} and (env.local / MARKER_NAME).is_file()


async def test_a_failed_verification_seals_nothing(env: Env) -> None:
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    (env.local / "seed0" / "notes.txt").write_text("not in the manifest\n", encoding="utf-8")
    result = await verify(env.project, env.run, env.db)
    assert not result.ok and [p.code for p in result.errors] == ["unexpected_local"]
    assert set(writable(env).values()) == {True}


async def test_an_edit_after_chmod_u_w_is_caught_and_a_re_pull_replaces_the_read_only_file(env: Env) -> None:
    await verified(env)
    path = env.local / CHECKPOINT
    good = path.read_bytes()
    user_makes_writable(path)
    flip_in_place(path)  # same size, mtime set back: only the bytes (and ctime) tell
    ok, reasons = gate_open(env)
    assert not ok and any(f"{CHECKPOINT} content differs" in reason for reason in reasons), reasons
    (finding,) = [f for f in v33(env).findings if f.subject == "capsule:exp1/seed1"]
    assert finding.severity == "critical" and finding.values == {"changed": [CHECKPOINT]}
    failed = await verify(env.project, env.run, env.db)
    assert status_of(failed.files, CHECKPOINT) == "hash_mismatch" and not (env.local / MARKER_NAME).exists()

    repaired = await pull(env.project, env.run, env.transport, env.db)
    assert repaired.ok and repaired.fetched == [CHECKPOINT] and path.read_bytes() == good
    assert writable(env)[CHECKPOINT] is True  # a fresh copy, renamed over the old one: not verified yet
    assert (await verify(env.project, env.run, env.db)).ok
    assert set(writable(env).values()) == {False} and gate_open(env) == (True, [])
    assert v33(env).status == "pass"


async def test_a_re_pull_after_the_box_copy_changed_never_touches_the_verified_copy(env: Env) -> None:
    await verified(env)
    local = (env.local / CHECKPOINT).read_bytes()
    (env.box / CHECKPOINT).write_bytes(b"overwritten on the box after the manifest")
    again = await pull(env.project, env.run, env.transport, env.db)
    assert again.ok and again.fetched == [] and len(again.present) == 6
    assert (env.local / CHECKPOINT).read_bytes() == local and set(writable(env).values()) == {False}
    assert (await verify(env.project, env.run, env.db)).ok
    # the local copy is deleted as well: the box's changed bytes are refused, never written in its place
    (env.local / CHECKPOINT).unlink()
    refused = await pull(env.project, env.run, env.transport, env.db)
    assert [p.path for p in refused.failed] == [CHECKPOINT]
    assert "changed after the manifest" in refused.failed[0].detail
    assert not (env.local / CHECKPOINT).exists() and not gate_open(env)[0]


async def test_a_killed_pull_resumes_into_a_sealed_root(env: Env) -> None:
    await verified(env)
    target = env.local / CHECKPOINT
    full = target.read_bytes()
    target.unlink()  # a read-only file can still be deleted: the folder is writable (the gate catches it)
    assert not gate_open(env)[0]
    target.with_name("best.pth.part").write_bytes(full[:700])  # what a killed pull leaves
    seen: list[PullProgress] = []
    resumed = await pull(env.project, env.run, env.transport, env.db, seen.append)
    assert resumed.ok and resumed.fetched == [CHECKPOINT]
    assert next(p for p in seen if p.path == CHECKPOINT and p.phase == "downloading").done == 700
    assert target.read_bytes() == full
    assert (await verify(env.project, env.run, env.db)).ok and set(writable(env).values()) == {False}


async def test_a_file_written_between_its_hash_and_the_seal_is_refused(env: Env) -> None:
    """The seal re-keys the hash cache only for a file whose stat (ctime included) is still the one the walk
    saw before hashing; a write in between makes the file a hash_mismatch instead of a verified one."""
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    listed = manifest(env)
    walked = dict(walk_local_root(env.local))
    hashed = {e.path: hashlib.sha256((env.local / e.path).read_bytes()).hexdigest() for e in listed.files}
    flip_in_place(env.local / CHECKPOINT)  # after the hash, before the seal
    sealed = seal_verified(env.local, listed, hashed, walked, env.db)
    assert [(p.code, p.path) for p in sealed.changed] == [("hash_mismatch", CHECKPOINT)]
    assert sorted(sealed.stats) == sorted(e.path for e in listed.files if e.path != CHECKPOINT)
    path = env.local / CHECKPOINT
    assert env.db.cached_hash(str(path), FileKey.of(path.stat())) is None  # never cached as the good hash
