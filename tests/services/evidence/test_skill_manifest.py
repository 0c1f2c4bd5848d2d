"""Coming from the skill's own scripts (issue 23, docs/gate.md §2.1): a PULL_MANIFEST.json that the public
remote-gpu-trainer skill's build_pull_manifest.py wrote on the box, and the local copy its download loop made,
are adopted by the real builder, pull and verify over a LocalTransport box; every rule that guards the gate
still refuses what it refused. The skill's files are made by support/skill_bundle.py (which says what it
follows)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.gate import Approval, evaluate_gate
from remote_gpu_trainer.audits.manifest import (
    MANIFEST_NAME,
    MARKER_NAME,
    Adoption,
    adoptable,
    parse_manifest,
    parse_marker,
)
from remote_gpu_trainer.clock import utc_now
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services.evidence.manifest import RemoteManifest, build_manifest, recorded_adoption
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from remote_gpu_trainer.services.gate import gather_gate_inputs
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.opening import open_session
from support.evidence_helpers import INSTANCE_ID, Env, flip_byte
from support.gate_helpers import (
    assert_refused,
    assert_torn_down,
    box_root,
    down,
    keep_verdicts,
    local_root,
    project_text,
    rgt,
    seed_verdicts,
    write_text_project,
)
from support.helpers import FIXTURES, INSTANCE, RUN
from support.skill_bundle import (
    SKILL_RUN_ID,
    add_tool_files,
    download_loop_copy,
    skill_bytes,
    skill_manifest_object,
    write_skill_manifest,
)

SKILL_FILES = 10  # two cells: best.pth, best_metrics.json, a log, and two tool files each


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gate(env: Env, remote: RemoteManifest | None = None) -> tuple[bool, list[str]]:
    """The full gate with the right id typed a moment after everything else; `remote` as the box answers."""
    approval = Approval(INSTANCE_ID, utc_now())
    decision = evaluate_gate(gather_gate_inputs(env.project, env.run, env.db, INSTANCE_ID, approval,
                                                now=utc_now() + timedelta(seconds=1), remote=remote))
    return decision.open, decision.reasons


def box_answers(env: Env) -> RemoteManifest:
    """The box's manifest as G2 re-reads it now."""
    return RemoteManifest(True, sha((env.box / MANIFEST_NAME).read_bytes()))


@pytest.fixture
def skill(env: Env) -> bytes:
    """The env's box as a skill user leaves it: the run's files, two tool folders, the skill's manifest."""
    add_tool_files(env.box)
    return write_skill_manifest(env.box)


def test_the_skills_manifest_is_refused_by_rgts_own_rules_and_adoptable(env: Env, skill: bytes) -> None:
    """The fixture has both differences of the real script: a run id that is no safe name, and files listed by
    path parts (`seed0/tb/` before `seed0/tb-old/`). Without an adoption they are refused, as before; the
    adoption step accepts them and nothing else, and normalises to rgt's model."""
    listed = [entry["path"] for entry in json.loads(skill)["files"]]
    assert listed.index("seed0/tb/events.txt") < listed.index("seed0/tb-old/events.txt")
    assert listed.index("seed1/run/config.yaml") < listed.index("seed1/run.log")
    assert listed != sorted(listed)
    _, strict = parse_manifest(skill, roster=env.run.roster, run_id=env.run.id)
    assert {(p.code, p.detail) for p in strict} == {("run_id", "run_id must be a safe name"),
                                                    ("schema", "files must be sorted by path")}
    adoption, problems = adoptable(skill, roster=env.run.roster, run_id=env.run.id)
    assert problems == [] and adoption == Adoption(sha(skill), SKILL_RUN_ID)
    manifest, problems = parse_manifest(skill, roster=env.run.roster, run_id=env.run.id, adopted=adoption)
    assert problems == [] and manifest is not None
    assert manifest.run_id == env.run.id and manifest.adopted_run_id == SKILL_RUN_ID
    assert manifest.sha256 == sha(skill)  # the identity stays the original bytes' hash
    assert [entry.path for entry in manifest.files] == sorted(listed)


async def test_pull_adopts_the_skills_manifest_and_verify_opens_the_gate(env: Env, skill: bytes) -> None:
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok and len(result.fetched) == SKILL_FILES and result.adopted_run_id == SKILL_RUN_ID
    assert env.db.recorded_manifest(env.run.id) == sha(skill) == result.manifest_sha256
    assert recorded_adoption(env.db, env.run.id) == Adoption(sha(skill), SKILL_RUN_ID)
    assert (env.box / MANIFEST_NAME).read_bytes() == skill == (env.local / MANIFEST_NAME).read_bytes()
    assert not gate(env, box_answers(env))[0]  # pulled, not verified
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert verified.adopted_run_id == SKILL_RUN_ID and len(verified.files) == SKILL_FILES
    marker, problems = parse_marker((env.local / MARKER_NAME).read_bytes())
    assert problems == [] and marker is not None
    assert marker.run_id == env.run.id and marker.manifest_sha256 == sha(skill)
    assert [c.path for c in marker.checkpoints] == ["seed0/best.pth", "seed1/best.pth"]  # load-verified
    assert gate(env, box_answers(env)) == (True, [])


async def test_a_download_loop_copy_is_adopted_rehashed_and_not_downloaded_again(env: Env, skill: bytes) -> None:
    download_loop_copy(env.box, env.local)
    best = env.local / "seed1" / "best.pth"
    inode = best.stat().st_ino
    assert not gate(env, box_answers(env))[0]  # the skill's own marker is never evidence
    result = await pull(env.project, env.run, env.transport, env.db)
    assert result.ok and result.fetched == [] and len(result.present) == SKILL_FILES
    assert best.stat().st_ino == inode
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors
    assert {item.status for item in verified.files} == {"verified"}
    marker, _ = parse_marker((env.local / MARKER_NAME).read_bytes())
    assert marker is not None and marker.manifest_sha256 == sha(skill)  # rgt's marker replaced the skill's
    assert gate(env, box_answers(env)) == (True, [])


async def test_a_local_file_that_differs_from_the_skills_manifest_keeps_the_gate_shut(
        env: Env, skill: bytes) -> None:
    """The copy was made, adopted and verified; then one byte of a checkpoint changes here with its mtime set
    back. The gate must not open on the skill's manifest, verify must say which file, and only a pull that
    fetches the box's bytes again opens it."""
    download_loop_copy(env.box, env.local)
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    assert (await verify(env.project, env.run, env.db)).ok
    assert gate(env, box_answers(env))[0]
    best = env.local / "seed1" / "best.pth"
    os.chmod(best, 0o644)  # verification sealed the copy read-only
    before = best.stat()
    flip_byte(best)
    os.utime(best, ns=(before.st_atime_ns, before.st_mtime_ns))
    is_open, reasons = gate(env, box_answers(env))
    assert not is_open and any("seed1/best.pth content differs" in reason for reason in reasons), reasons
    failed = await verify(env.project, env.run, env.db)
    assert not failed.ok and [(p.code, p.path) for p in failed.errors] == [("hash_mismatch", "seed1/best.pth")]
    assert not (env.local / MARKER_NAME).exists() and not gate(env, box_answers(env))[0]
    repaired = await pull(env.project, env.run, env.transport, env.db)
    assert repaired.ok and repaired.fetched == ["seed1/best.pth"]
    assert (await verify(env.project, env.run, env.db)).ok
    assert gate(env, box_answers(env)) == (True, [])


async def test_a_manifest_changed_since_its_adoption_closes_the_gate(env: Env, skill: bytes) -> None:
    """The adoption is bound to the bytes recorded: the skill's builder run again (another time, so other bytes)
    on the box, or the local manifest edited, is another manifest, and the adoption relaxes nothing for it."""
    assert (await pull(env.project, env.run, env.transport, env.db)).ok
    assert (await verify(env.project, env.run, env.db)).ok
    assert gate(env, box_answers(env))[0]
    os.unlink(env.box / MANIFEST_NAME)
    rewritten = write_skill_manifest(env.box)
    assert rewritten != skill
    is_open, reasons = gate(env, box_answers(env))
    assert not is_open and any("on the box differs" in reason for reason in reasons), reasons
    local = env.local / MANIFEST_NAME
    os.chmod(local, 0o644)  # verification sealed the copy read-only
    local.write_bytes(rewritten)
    is_open, reasons = gate(env, box_answers(env))
    assert not is_open and any("not the manifest recorded at build time" in reason for reason in reasons), reasons
    assert any("run_id must be a safe name" in reason for reason in reasons), "no adoption for other bytes"
    failed = await verify(env.project, env.run, env.db)
    assert not failed.ok and {"manifest_mismatch", "run_id"} <= {p.code for p in failed.errors}


async def test_a_pull_refuses_a_box_manifest_that_is_not_the_adopted_one(env: Env, skill: bytes) -> None:
    assert await build_manifest(env.transport, env.run, env.db) == sha(skill)  # adopted, nothing pulled yet
    os.unlink(env.box / MANIFEST_NAME)
    write_skill_manifest(env.box)
    with pytest.raises(VerbFailed, match="not the one recorded at build time"):
        await pull(env.project, env.run, env.transport, env.db)
    assert not (env.local / MANIFEST_NAME).exists()


def late_file(env: Env) -> str:
    (env.box / "seed0" / "epoch=9-step=90.ckpt").write_bytes(b"written after the manifest")
    return "unlisted"


def changed_same_size(env: Env) -> str:
    path = env.box / "seed1" / "best_metrics.json"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"0.26", b"0.91"))  # same size, newer than the manifest
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))
    return "changed_after_manifest"


def removed(env: Env) -> str:
    (env.box / "seed0" / "tb-old" / "events.txt").unlink()
    return "missing_on_box"


def grown(env: Env) -> str:
    path = env.box / "seed1" / "seed1.log"
    info = path.stat()
    with open(path, "ab") as handle:
        handle.write(b"one more line\n")
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    return "size_differs"


def link_planted(env: Env) -> str:
    (env.box / "seed1" / "latest").symlink_to("run")
    return "link"


def loose_file(env: Env) -> str:
    (env.box / "notes.txt").write_text("at the root")  # the skill never lists it; rgt refuses to leave it
    return "loose_file"


@pytest.mark.parametrize("change", [late_file, changed_same_size, removed, grown, link_planted, loose_file])
async def test_a_box_whose_tree_no_longer_matches_the_skills_manifest_is_not_adopted(
        env: Env, skill: bytes, change: object) -> None:
    """Adoption asks the box first: a file written after the manifest, one changed since, one gone, a link the
    manifest cannot list, a file at the root: each is named, nothing is recorded or written, the gate stays
    shut. The box's manifest is never touched."""
    assert callable(change)
    code = change(env)
    with pytest.raises(VerbFailed, match="different manifest already exists") as refused:
        await pull(env.project, env.run, env.transport, env.db)
    assert "cannot be adopted" in str(refused.value) and f"({code})" in str(refused.value), refused.value
    assert env.db.recorded_manifest(env.run.id) is None and env.db.adopted_run_id(env.run.id) is None
    assert not (env.local / MANIFEST_NAME).exists()
    assert (env.box / MANIFEST_NAME).read_bytes() == skill
    assert not gate(env, box_answers(env))[0]


def with_run_id(run_id: str) -> object:
    def change(obj: dict[str, object]) -> None:
        obj["run_id"] = run_id
    return change


def with_path(path: str) -> object:
    def change(obj: dict[str, object]) -> None:
        files = obj["files"]
        assert isinstance(files, list)
        files[-1]["path"] = path
    return change


def with_key(key: str, value: object) -> object:
    def change(obj: dict[str, object]) -> None:
        obj[key] = value
    return change


def with_size(size: object) -> object:
    def change(obj: dict[str, object]) -> None:
        files = obj["files"]
        assert isinstance(files, list)
        files[0]["bytes"] = size
    return change


def shuffled(obj: dict[str, object]) -> None:
    files = obj["files"]
    assert isinstance(files, list)
    files.reverse()


@pytest.mark.parametrize("change, code", [
    (with_path("seed1/../../etc/passwd"), "path_unsafe"),
    (with_path("/etc/passwd"), "path_unsafe"),
    (with_path("seed1/bad\x1b[2Jname.txt"), "path_unsafe"),
    (with_path("seed1/best.pth.part"), "path_unsafe"),
    (with_path("seed1"), "path_unsafe"),
    (with_path("seed9/x.txt"), "schema"),  # a cell outside top_level_dirs
    (with_path("seed0/best.pth"), "duplicate_path"),
    (with_run_id("sweep\x1b]0;pwned\x07"), "run_id"),
    (with_run_id("   "), "run_id"),
    (with_run_id(7), "run_id"),
    (with_size(True), "schema"),
    (with_key("schema", "remote-gpu-trainer/PULL/v2"), "schema"),
    (with_key("created_at_utc", "2026-12-06T10:00:00Z"), "schema"),
    (with_key("links", [{"path": "seed0/x", "target": "/etc", "inside": None}]), "schema"),
    (with_key("cells", {"seed1": {"state": "failed", "exit_code": 1}}), "schema"),
    (with_key("extra", 1), "schema"),
    (with_key("top_level_dirs", ["seed0"]), "roster_mismatch"),
    (with_key("totals", {"files": 1, "bytes": 1}), "totals_mismatch"),
    (shuffled, "schema"),  # neither rgt's order nor the skill's
])
def test_the_adoption_step_keeps_every_other_rule(env: Env, change: object, code: str) -> None:
    """Adopting relaxes the run id's form and the files' order, nothing else: a path that escapes, a control
    character (in a path or in the run id), a temporary name, a bad size, an unknown key, the keys the skill
    never writes, a roster or totals that do not add up, are refused as the skill's too."""
    add_tool_files(env.box)
    obj = skill_manifest_object(env.box)
    assert callable(change)
    change(obj)
    data = skill_bytes(obj)
    adoption, problems = adoptable(data, roster=env.run.roster, run_id=env.run.id)
    assert adoption is None and code in {p.code for p in problems}, problems
    assert all("\x1b" not in p.line() for p in problems)


async def test_a_skill_run_id_with_a_control_character_is_refused_end_to_end(env: Env) -> None:
    """The box's tree matches the manifest exactly, so only the parser's adoption step can refuse it."""
    add_tool_files(env.box)
    write_skill_manifest(env.box, run_id="sweep\x1b[31m red")
    with pytest.raises(VerbFailed, match=r"cannot be adopted.*control character") as refused:
        await pull(env.project, env.run, env.transport, env.db)
    assert "\x1b" not in str(refused.value)
    assert env.db.recorded_manifest(env.run.id) is None


def test_an_adoption_relaxes_nothing_for_other_bytes(env: Env, skill: bytes) -> None:
    """The adoption of one manifest's hash does not let another skill-form manifest through (say, one copied
    from another run's box), and the run id it names must be the one recorded."""
    other = skill_bytes(dict(json.loads(skill), run_id="another sweep"))
    _, problems = parse_manifest(other, roster=env.run.roster, run_id=env.run.id,
                                 adopted=Adoption(sha(skill), SKILL_RUN_ID))
    assert {"run_id", "schema"} <= {p.code for p in problems}
    _, problems = parse_manifest(skill, roster=env.run.roster, run_id=env.run.id,
                                 adopted=Adoption(sha(skill), "another sweep"))
    assert [p.code for p in problems] == ["run_id"]


# -- the whole arc as a skill user types it: `rgt verify`, then `rgt down`, on a sim box ---------------------

async def skill_project(root: Path) -> Path:
    """A sim box the skill's scripts worked on: the run's cells written there (not launched by rgt), the
    skill's manifest built on it, and the download loop's copy in runs/r1/."""
    write_text_project(root, project_text())
    seed_verdicts(root)
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
    finally:
        await session.close_transports()
        session.close()
    box = box_root(root)
    for cell in ("seed0", "seed1"):
        (box / cell).mkdir(parents=True)
        for name in ("best.pth", "best_metrics.json"):
            shutil.copy2(FIXTURES / "cells" / cell / name, box / cell / name)
    add_tool_files(box)
    write_skill_manifest(box)
    download_loop_copy(box, local_root(root))
    return root


async def test_rgt_verify_adopts_the_download_loops_copy_and_the_gate_opens(tmp_path: Path) -> None:
    root = await skill_project(tmp_path / "proj")
    assert down(root).returncode == 3  # nothing recorded, the skill's marker is no evidence
    verified = rgt("verify", RUN, str(root), cwd=root)
    assert verified.returncode == 0, verified.stderr
    assert "manifest adopted" in verified.stderr and "bound to run r1" in verified.stderr
    keep_verdicts(root)
    assert_torn_down(root)


async def test_rgt_verify_refuses_to_adopt_when_the_box_holds_more_and_the_gate_stays_shut(tmp_path: Path) -> None:
    """The copy matches the skill's manifest, byte for byte, but the box now holds a checkpoint the manifest does
    not list: adopting would let `rgt down` destroy it."""
    root = await skill_project(tmp_path / "proj")
    (box_root(root) / "seed1" / "last.pth").write_bytes(b"saved after the manifest")
    verified = rgt("verify", RUN, str(root), cwd=root)
    assert verified.returncode == 1 and "manifest_unrecorded" in verified.stderr, verified.stderr
    assert "seed1/last.pth" in verified.stderr
    pulled = rgt("pull", RUN, str(root), cwd=root)
    assert pulled.returncode == 1 and "cannot be adopted" in pulled.stderr, pulled.stderr
    assert_refused(root, "no manifest hash recorded")
    assert (box_root(root) / "seed1" / "last.pth").exists()
