"""The teardown gate G1-G5, G7 (docs/gate.md §7): pure cases, then random histories on a real run.

The property: the gate is open exactly when the local copy was verified after its last damage and the
latest approval names this instance and was typed after that verification.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote_gpu_trainer.audits.gate import (
    Approval,
    GateInputs,
    LocalFile,
    VerificationSeen,
    evaluate_evidence_only,
    evaluate_gate,
)
from remote_gpu_trainer.audits.manifest import (
    MANIFEST_SCHEMA,
    MARKER_NAME,
    MarkerCheckpoint,
    canonical_json,
    marker_bytes,
    parse_marker,
)
from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.verify import verify
from remote_gpu_trainer.services.gate import gather_gate_inputs
from support.evidence_helpers import INSTANCE_ID, Env, flip_byte, keep_probe_verdicts, make_env, truncate, write_run

# -- pure cases ---------------------------------------------------------------------------------------------

VERIFIED_AT = datetime(2026, 7, 14, 11, 40, 27, 500000, tzinfo=UTC)
BEFORE_NS = int(datetime(2026, 7, 14, 11, 0, tzinfo=UTC).timestamp()) * 1_000_000_000
CONTENT = {"seed0/best.pth": b"weights zero", "seed0/best_metrics.json": b"{}",
           "seed1/best.pth": b"weights one!", "seed1/best_metrics.json": b"{}"}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(content: dict[str, bytes] = CONTENT, run_id: str = "exp1") -> bytes:
    files = [{"path": path, "bytes": len(data), "sha256": sha(data)}
             for path, data in sorted(content.items())]
    return canonical_json({
        "schema": MANIFEST_SCHEMA, "run_id": run_id, "created_at_utc": "2026-07-14T09:00:00+00:00",
        "top_level_dirs": sorted({path.split("/")[0] for path in content}), "files": files,
        "totals": {"files": len(files), "bytes": sum(len(d) for d in content.values())},
    })


def marker_for(manifest: bytes, **changes: Any) -> bytes:
    fields: dict[str, Any] = {
        "run_id": "exp1", "manifest_sha256": sha(manifest), "verified_at": VERIFIED_AT,
        "verifier_version": "0.1.0+probe1", "files": len(CONTENT),
        "total_bytes": sum(map(len, CONTENT.values())),
        "checkpoints": [MarkerCheckpoint(path, sha(data), "torch-zip", 3, 15, "model_state_dict")
                        for path, data in CONTENT.items() if path.endswith(".pth")],
    }
    fields.update(changes)
    return marker_bytes(**fields)


CONFIG_SHA = "c" * 64


def seen_for(marker: bytes, manifest: bytes, **changes: Any) -> VerificationSeen:
    """The state database's record of the verification that wrote `marker`."""
    fields: dict[str, Any] = {"ok": True, "at": VERIFIED_AT, "manifest_sha256": sha(manifest),
                              "marker_sha256": sha(marker), "config_sha256": CONFIG_SHA}
    fields.update(changes)
    return VerificationSeen(**fields)


def good_inputs() -> GateInputs:
    manifest = manifest_bytes()
    marker = marker_for(manifest)
    return GateInputs(
        verification=seen_for(marker, manifest), config_sha256=CONFIG_SHA,
        launched_at=VERIFIED_AT - timedelta(hours=2), manifest_built_at=VERIFIED_AT - timedelta(hours=1),
        liveness="finished",
        run_id="exp1", roster=("seed0", "seed1"), required=("best.pth", "best_metrics.json"),
        checkpoint_globs=("*.pth",), marker=marker, manifest=manifest,
        manifest_mtime_ns=BEFORE_NS, recorded_manifest_sha256=sha(manifest),
        local_files=tuple(LocalFile(path, len(data), BEFORE_NS, sha(data))
                          for path, data in sorted(CONTENT.items())),
        instance_id="i-123", approval=Approval("i-123", VERIFIED_AT + timedelta(seconds=5)),
        now=VERIFIED_AT + timedelta(seconds=6), action_described=True,
    )


def with_file(inputs: GateInputs, path: str, **changes: Any) -> GateInputs:
    files = tuple(entry._replace(**changes) if entry.path == path else entry for entry in inputs.local_files)
    return replace(inputs, local_files=files)


def test_complete_evidence_and_approval_open_the_gate() -> None:
    decision = evaluate_gate(good_inputs())
    assert decision.open and decision.reasons == []
    assert [w.split(":")[0] for w in decision.warnings] == ["remote not re-checked"]


def test_evidence_only_view_ignores_the_approval_but_not_the_evidence() -> None:
    assert evaluate_evidence_only(replace(good_inputs(), approval=None)).open
    assert not evaluate_gate(replace(good_inputs(), approval=None)).open
    assert not evaluate_evidence_only(replace(good_inputs(), marker=None)).open


ROOT_MANIFEST = manifest_bytes()


@pytest.mark.parametrize("change, reason", [
    (lambda i: replace(i, marker=None), "no PULL_VERIFIED.json: run verify"),
    (lambda i: replace(i, marker=b"{"), "PULL_VERIFIED.json is unreadable"),
    (lambda i: replace(i, marker=b'{"schema": "remote-gpu-trainer/PULL-VERIFIED/v1", "run_id": "exp1"}'),
     "upstream-format marker"),
    (lambda i: replace(i, marker=marker_for(ROOT_MANIFEST, run_id="exp2")), "is for run 'exp2'"),
    (lambda i: replace(i, marker=marker_for(ROOT_MANIFEST, manifest_sha256="0" * 64)), "another manifest"),
    (lambda i: replace(i, marker=marker_for(ROOT_MANIFEST, files=3)), "counts"),
    (lambda i: replace(i, marker=marker_for(ROOT_MANIFEST, checkpoints=[])),
     "seed0/best.pth was not load-verified"),
    (lambda i: replace(i, marker=marker_for(ROOT_MANIFEST, checkpoints=[
        MarkerCheckpoint("seed0/best.pth", "1" * 64, "torch-zip", 1, 1, "model"),
        MarkerCheckpoint("seed1/best.pth", sha(CONTENT["seed1/best.pth"]), "torch-zip", 1, 1, "model")])),
     "seed0/best.pth: the load-verified bytes are not the manifest's"),
    (lambda i: replace(i, manifest=None), "no PULL_MANIFEST.json: run pull"),
    (lambda i: replace(i, recorded_manifest_sha256=None), "no manifest hash recorded"),
    (lambda i: replace(i, recorded_manifest_sha256="f" * 64), "not the manifest recorded at build time"),
    (lambda i: replace(i, remote_checked=True, remote_manifest_sha256="e" * 64), "on the box differs"),
    (lambda i: replace(i, run_id="exp2"), "run_id"),
    (lambda i: replace(i, roster=("seed0", "seed1", "seed2")),
     "manifest cells differ from the roster: missing seed2"),
    (lambda i: replace(i, manifest_mtime_ns=BEFORE_NS * 2), "PULL_MANIFEST.json changed after verification"),
    (lambda i: with_file(i, "seed1/best.pth", mtime_ns=BEFORE_NS * 2),
     "seed1/best.pth changed after verification"),
    (lambda i: with_file(i, "seed1/best.pth", sha256="2" * 64), "seed1/best.pth content differs"),
    (lambda i: with_file(i, "seed1/best.pth", sha256=None), "seed1/best.pth content differs"),
    (lambda i: with_file(i, "seed1/best.pth", size=3), "seed1/best.pth size differs"),
    (lambda i: with_file(i, "seed1/best.pth", regular=False), "seed1/best.pth is not a regular file"),
    (lambda i: replace(i, local_files=i.local_files[1:]), "seed0/best.pth missing locally"),
    (lambda i: replace(i, local_files=(*i.local_files, LocalFile("seed0/x.part", 1, BEFORE_NS, None))),
     "seed0/x.part is not in the manifest"),
    (lambda i: replace(i, approval=None), "not approved: type the instance id i-123"),
    (lambda i: replace(i, approval=Approval("i-124", VERIFIED_AT + timedelta(seconds=5))),
     "approval names 'i-124'"),
    (lambda i: replace(i, approval=Approval("i-123", VERIFIED_AT - timedelta(seconds=1))),
     "approval was given before the latest verification"),
    (lambda i: replace(i, approval=Approval("i-123", VERIFIED_AT + timedelta(days=1))),
     "dated in the future"),
    (lambda i: replace(i, now=VERIFIED_AT - timedelta(seconds=1), approval=Approval("i-123", VERIFIED_AT)),
     "verification in the future"),
    (lambda i: replace(i, action_described=False), "not fully described"),
    # the bindings: the verification record, the configuration, the launches, the job, the box's manifest
    (lambda i: replace(i, verification=None), "not written by a verification recorded in the state database"),
    (lambda i: replace(i, verification=replace(i.verification, ok=False)), "the last verification of exp1 failed"),
    (lambda i: replace(i, verification=replace(i.verification, marker_sha256="9" * 64)),
     "is not the one the last verification wrote"),
    (lambda i: replace(i, config_sha256="d" * 64), "rgt.toml changed since verification: run verify"),
    (lambda i: replace(i, launched_at=VERIFIED_AT + timedelta(seconds=1), manifest_built_at=None),
     "launched again after its verification"),
    (lambda i: replace(i, manifest_built_at=VERIFIED_AT - timedelta(hours=1),
                       launched_at=VERIFIED_AT - timedelta(minutes=30)),
     "launched again after its manifest was built"),
    (lambda i: replace(i, liveness="running"), "run exp1 is running on the box"),
    (lambda i: replace(i, liveness="stalled"), "run exp1 is stalled on the box"),
    (lambda i: replace(i, remote_checked=True, remote_manifest_sha256=None), "the manifest on the box is gone"),
])
def test_each_failed_condition_closes_the_gate_and_says_why(change: Any, reason: str) -> None:
    decision = evaluate_gate(change(good_inputs()))
    assert not decision.open
    assert any(reason in text for text in decision.reasons), decision.reasons


def test_an_approval_stamped_in_the_verifications_own_second_counts() -> None:
    """The event log keeps whole seconds, the marker keeps microseconds."""
    same_second = Approval("i-123", VERIFIED_AT.replace(microsecond=0))
    assert evaluate_gate(replace(good_inputs(), approval=same_second)).open


def test_many_changed_files_are_summarised() -> None:
    inputs = good_inputs()
    extras = tuple(LocalFile(f"seed0/extra{i:02d}.txt", 1, BEFORE_NS, None) for i in range(15))
    decision = evaluate_gate(replace(inputs, local_files=inputs.local_files + extras))
    assert sum("is not in the manifest" in reason for reason in decision.reasons) == 11
    assert any(reason.startswith("and 5 more files") for reason in decision.reasons)


# -- random histories on a real run -------------------------------------------------------------------------

@dataclass
class Model:
    """What the gate should say: file states, an extra file, verification freshness, the latest approval."""

    files: dict[str, str]  # path -> ok | flipped | short | gone
    extra: bool = False
    verified: bool = False
    verified_second: datetime | None = None  # the marker's time, in the event log's whole seconds
    approval: Approval | None = None
    log: list[str] = field(default_factory=list)

    def damage(self) -> None:
        self.verified = False

    def gate_should_open(self) -> bool:
        """Verified since the last damage, no extra file present; the latest approval names this instance
        and was typed after that verification (approvals are stamped in whole seconds, so its own second
        counts)."""
        return (self.verified and not self.extra and self.approval is not None
                and self.approval.instance_id == INSTANCE_ID
                and self.verified_second is not None and self.approval.at >= self.verified_second)


@dataclass
class World:
    env: Env
    paths: list[str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    env = make_env(tmp_path_factory.mktemp("gate-world"))
    write_run(env.box)
    asyncio.run(build_manifest(env.transport, env.run, env.db))
    paths = sorted(str(p.relative_to(env.box)) for p in env.box.rglob("*") if p.is_file()
                   and p.parent != env.box)
    yield World(env, paths)
    keep_probe_verdicts(env)


def later(path: Path) -> None:
    """Stamp a modification with the fine-grained clock: kernel file times come from a coarse clock and
    could otherwise equal a timestamp taken a few milliseconds earlier."""
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def approve(env: Env, typed: str) -> Approval:
    """As the teardown service does: the approval is an event-log entry, and its time is the entry's."""
    event = env.db.append_event("approval", f"approved terminate ({typed})", instance="box", actor="test",
                                detail={"typed_id": typed})
    return Approval(typed, event.at)


def apply(world: World, model: Model, op: str, index: int) -> None:
    env = world.env
    path = world.paths[index % len(world.paths)]
    target = env.local.joinpath(*path.split("/"))
    state = model.files[path]
    extra = env.local / "seed0" / "extra.txt"
    if op == "pull":
        asyncio.run(pull(env.project, env.run, env.transport, env.db))
        model.files = {p: "ok" for p in model.files}  # a damaged local copy is fetched again: pull repairs
    elif op == "verify":
        result = asyncio.run(verify(env.project, env.run, env.db))
        expected = all(s == "ok" for s in model.files.values()) and not model.extra
        assert result.ok == expected, (model.log, result.errors)
        model.verified = expected
        if expected:
            marker, _ = parse_marker((env.local / MARKER_NAME).read_bytes())
            assert marker is not None
            model.verified_second = marker.verified_at.replace(microsecond=0)
    elif op == "flip" and state != "gone":
        flip_byte(target)
        later(target)
        model.files[path] = {"ok": "flipped", "flipped": "ok", "short": "short"}[state]
        model.damage()
    elif op == "truncate" and state != "gone":
        truncate(target)
        later(target)
        model.files[path] = "short"
        model.damage()
    elif op == "delete" and state != "gone":
        target.unlink()
        model.files[path] = "gone"
        model.damage()
    elif op == "touch" and state != "gone":
        later(target)
        model.damage()
    elif op == "extra":
        extra.parent.mkdir(parents=True, exist_ok=True)
        extra.write_text("not from the box")
        later(extra)
        model.extra = True  # closes the gate while present; removing it restores the verified state
    elif op == "unextra" and model.extra:
        extra.unlink()
        model.extra = False
    elif op == "unmark":
        (env.local / MARKER_NAME).unlink(missing_ok=True)
        model.damage()
    elif op == "approve":
        model.approval = approve(env, INSTANCE_ID)
    elif op == "approve_wrong":
        model.approval = approve(env, "i-not-this-one")


# Non-damaging steps appear twice so that verified-and-approved states, where the gate may open, are common.
OPS = ["pull", "verify", "verify", "approve", "approve", "approve_wrong", "flip", "truncate", "delete", "extra",
       "unextra", "unmark", "touch"]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 63)), min_size=1, max_size=14))
def test_gate_opens_only_after_fresh_verification_and_the_right_approval(
        world: World, steps: list[tuple[str, int]]) -> None:
    env = world.env
    shutil.rmtree(env.local, ignore_errors=True)
    model = Model(files={path: "gone" for path in world.paths})
    # the interesting histories start from a verified copy, so two thirds of them get one first
    if steps[0][1] % 3:
        steps = [("pull", 0), ("verify", 0), ("approve", 0), *steps]
    for op, index in steps:
        model.log.append(f"{op}:{world.paths[index % len(world.paths)]}")
        apply(world, model, op, index)
        inputs = gather_gate_inputs(env.project, env.run, env.db, INSTANCE_ID, model.approval)
        decision = evaluate_gate(inputs)
        assert decision.open == model.gate_should_open(), (model.log, decision.reasons)
