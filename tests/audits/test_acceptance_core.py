"""The scientific core and the comparison of two acceptances (audits/acceptance.py), on parsed values."""

from __future__ import annotations

import json
from typing import Any

from remote_gpu_trainer.audits.acceptance import (
    DIFF,
    INDEPENDENCE_FAILED,
    MATCH,
    Identity,
    compare,
    metrics_paths,
    parse_record,
    scientific_core,
)

CKPT = "ab" * 32
RESULTS = "cd" * 32


def metrics_json(acc: float, **extra: Any) -> dict[str, Any]:
    body = {"schema": "remote-gpu-trainer/METRICS/v1", "run_id": "r1", "cell": "seed0", "test_id": "main",
            "split": "test", "n": 100, "checkpoint_sha256": CKPT, "created_at": "2026-06-21T01:58:02Z",
            "eval_command": {"argv": ["python", "eval.py", "--out", "/home/alice/out"]},
            "metrics": {"acc": {"value": acc, "direction": "higher_is_better", "aggregate": "mean"},
                        "rewards/margins": {"value": 0.25}}}
    body.update(extra)
    return body


def core_of(acc: float = 0.8125, **extra: Any) -> dict[str, Any]:
    core, problems = scientific_core({"seed0/test/main/metrics.json": metrics_json(acc, **extra),
                                      "seed0/best_metrics.json": {"val_loss": 0.5, "epoch": 3, "seed": 0}},
                                     {"seed0/test/main/results.csv": RESULTS, "seed0/best.pth": CKPT})
    assert problems == []
    return core


def identity(hostname: str = "gpu-a", machine_id: str | None = "m-a", instance: str | None = "a",
             provider: str | None = "ssh") -> Identity:
    return Identity(hostname=hostname, machine_id=machine_id, instance=instance, provider=provider)


def test_the_core_is_what_the_numbers_depend_on() -> None:
    assert core_of() == {
        "seed0/best_metrics/metric/val_loss": 0.5, "seed0/main/checkpoint_sha256": CKPT,
        "seed0/main/metric/acc": 0.8125, "seed0/main/metric/rewards/margins": 0.25, "seed0/main/n": 100,
        "seed0/main/results/results.csv": RESULTS}
    assert metrics_paths(["seed0/best.pth", "seed0/test/main/metrics.json", "seed0/best_metrics.json",
                          "seed0/test/main/results.csv"]) == ["seed0/best_metrics.json", "seed0/test/main/metrics.json"]


def test_core_equality_ignores_timestamps_paths_and_hostnames() -> None:
    moved = core_of(created_at="2027-01-01T00:00:00Z", eval_command={"argv": ["python", "/srv/b/eval.py"]},
                    host="other-box")
    verdict = compare(core_of(), moved, identity(), identity("gpu-b", "m-b", "b"))
    assert verdict.verdict == MATCH and verdict.differences == ()
    assert compare({"k/n": 1}, {"k/n": 1.0}, identity(), identity("gpu-b", "m-b", "b")).verdict == MATCH


def test_a_changed_metric_value_is_a_diff_naming_it() -> None:
    verdict = compare(core_of(), core_of(0.8126), identity(), identity("gpu-b", "m-b", "b"))
    assert verdict.verdict == DIFF
    assert [(d.key, d.a, d.b) for d in verdict.differences] == [("seed0/main/metric/acc", 0.8125, 0.8126)]
    only = compare({"x/y": 1}, {}, identity(), identity("gpu-b", "m-b", "b"))
    assert only.verdict == DIFF and only.differences[0].missing == "b"


def test_the_same_machine_twice_fails_independence() -> None:
    same = compare(core_of(), core_of(), identity(), identity(instance="a-again"))
    assert same.verdict == INDEPENDENCE_FAILED
    by_id = compare(core_of(), core_of(), identity(), identity("renamed", "m-a", "b"))
    assert by_id.verdict == INDEPENDENCE_FAILED, "a shared machine id proves nothing"
    by_host = compare(core_of(), core_of(), identity(machine_id=None), identity(machine_id="m-b"))
    assert by_host.verdict == INDEPENDENCE_FAILED, "a shared hostname proves nothing"
    here = identity("host", "m-host", None, None)
    assert compare(core_of(), core_of(), here, here).verdict == INDEPENDENCE_FAILED


def test_two_sim_boxes_of_one_host_are_told_apart_by_their_instance_name() -> None:
    one, two = identity("host", "m", "spare", "sim"), identity("host", "m", "spare2", "sim")
    assert compare(core_of(), core_of(), one, two).verdict == MATCH
    assert compare(core_of(), core_of(), one, one).verdict == INDEPENDENCE_FAILED
    ssh_to_here = identity("host", "m", "loopback", "ssh")
    assert compare(core_of(), core_of(), identity("host", "m", None, None), ssh_to_here).verdict == INDEPENDENCE_FAILED


def test_a_record_is_read_back_strictly() -> None:
    good = {"schema": "remote-gpu-trainer/ACCEPTANCE/v1", "run": "r1", "machine": "b", "accepted_at": "t",
            "rgt_version": "0", "manifest_sha256": "ef" * 32, "files": {}, "checkpoints": {}, "core": core_of(),
            "problems": [], "ok": True,
            "identity": {"hostname": "gpu-b", "machine_id": None, "instance": "b", "provider": "ssh",
                         "python": "3.11", "torch": None, "platform": "Linux"}}
    record, problems = parse_record(json.dumps(good).encode(), "b.json")
    assert problems == [] and record is not None and record.identity.hostname == "gpu-b"
    for broken in ({**good, "core": {"x/y": True}}, {**good, "extra": 1}, {**good, "identity": {"hostname": 1}}):
        assert parse_record(json.dumps(broken).encode(), "b.json")[0] is None
    assert parse_record(b'{"core": NaN}', "b.json")[0] is None
