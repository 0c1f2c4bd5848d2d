"""The whole arc on a sim box through the services: launch, watch, pull, verify, gate, teardown."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import GateRefused
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance, instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch.liveness import run_state
from support.helpers import INSTANCE, RUN, launched_and_finished, wait_for_liveness, write_project


async def test_arc_gate_opens_only_after_verify_and_the_typed_id(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    disk = project_dir / ".rgt" / "sim" / INSTANCE
    assert (disk / "workspace" / "rgt" / RUN / "seed0" / "best.pth").is_file()

    plan = await teardown.plan(session, INSTANCE)
    assert not plan.gate_open
    assert any("PULL_VERIFIED" in reason for reason in plan.reasons)
    with pytest.raises(GateRefused):
        await teardown.execute(session, INSTANCE, plan.provider_id, plan.lines)
    assert disk.is_dir()

    await pull_run(session, RUN)
    plan = await teardown.plan(session, INSTANCE)
    assert not plan.gate_open, "pulled but not verified must keep the gate closed"

    result = await verify_run(session, RUN)
    assert result.ok, result.errors
    overview = await observe_and_build(session)
    run = overview.run(RUN)
    assert run is not None and run.gate.open and run.evidence_state == "pull_verified"
    assert {c.status for c in run.checkpoints} == {"verified"}

    plan = await teardown.plan(session, INSTANCE)
    assert plan.gate_open
    with pytest.raises(GateRefused, match="does not match"):
        await teardown.execute(session, INSTANCE, "wrong-id", plan.lines)
    assert disk.is_dir()

    outcome = await teardown.execute(session, INSTANCE, plan.provider_id, plan.lines)
    assert outcome.confirmed and outcome.final_state == "terminated"
    assert not disk.exists()
    assert (project_dir / "runs" / RUN / "PULL_VERIFIED.json").is_file()

    kinds = [e.kind for e in session.db.events()]
    assert kinds.count("refused") == 2
    approval = next(e for e in session.db.events(kind="approval") if "terminate" in e.summary)
    assert approval.detail["typed_id"] == plan.provider_id
    assert approval.detail["shown"] == list(plan.lines)
    assert kinds.index("approval", kinds.index("verify")) < kinds.index("action") < kinds.index("torn_down")
    overview = await observe_and_build(session)
    instance = overview.instance(INSTANCE)
    assert instance is not None and instance.state == "terminated" and instance.burn_per_hour == 0
    session.close()


async def test_damage_after_verification_closes_the_gate(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    await pull_run(session, RUN)
    assert (await verify_run(session, RUN)).ok
    target = project_dir / "runs" / RUN / "seed1" / "best.pth"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    plan = await teardown.plan(session, INSTANCE)
    assert not plan.gate_open
    assert any("seed1/best.pth" in reason for reason in plan.reasons)
    session.close()


async def test_killed_job_is_dead_and_reopening_reattaches(project_dir: Path) -> None:
    write_project(project_dir, command="sleep 30")
    session = open_session(str(project_dir))
    await create_instance(session, INSTANCE)
    detail = await launch_run(session, RUN)
    assert await wait_for_liveness(session, states=("running",)) == "running"
    session.close()

    reopened = open_session(str(project_dir))  # a new TUI or CLI process re-attaches from the state db
    assert (await run_state(reopened, RUN)).liveness.state == "running"
    ctl = project_dir / ".rgt" / "sim" / INSTANCE / "workspace" / "job" / ".rgt" / RUN
    pgid = int((ctl / "pgid").read_text())
    assert pgid == detail["pid"]
    os.killpg(pgid, signal.SIGKILL)
    state = await wait_for_liveness(reopened, states=("dead",))
    assert state == "dead"
    assert (await run_state(reopened, RUN)).liveness.detail.startswith("no exit code")
    reopened.close()


async def test_failing_job_reports_its_exit_code(project_dir: Path) -> None:
    write_project(project_dir, command="echo boom; exit 7")
    session = open_session(str(project_dir))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("dead",))
    state = await run_state(session, RUN)
    assert state.liveness.detail == "exit 7"
    overview = await observe_and_build(session)
    run = overview.run(RUN)
    assert run is not None and run.evidence_state == "failed"
    session.close()


async def test_unreachable_box_is_unknown_never_dead(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    import shutil

    shutil.rmtree(project_dir / ".rgt" / "sim" / INSTANCE)  # the disk vanished behind rgt's back
    state = await run_state(session, RUN)
    assert state.liveness.state == "unknown"
    status = await instance_status(session, INSTANCE)
    assert status.state == "unknown"
    session.close()


async def test_report_json_has_the_contract_keys(project_dir: Path) -> None:
    from remote_gpu_trainer.report import render

    session = open_session(str(project_dir))
    await launched_and_finished(session)
    data = json.loads(render(await observe_and_build(session), "json"))
    contract = ["schema", "generated_at", "project", "meter", "instances", "runs"]
    assert [key for key in data if key in contract] == contract  # in the contract's order, keys added between
    assert list(data).index("results") < list(data).index("instances")  # results first (docs/deliver.md §8)
    assert data["schema"] == "rgt-report/v1"
    assert set(data["meter"]) == {"currency", "total", "burn_per_hour"}
    instance_keys = {"name", "provider", "id", "state", "gpu", "price_per_hour", "price_source", "billing",
                     "cost_so_far", "verified_month", "stale"}
    assert instance_keys <= set(data["instances"][0])
    run = data["runs"][0]
    assert {"id", "instance", "evidence_state", "liveness", "checkpoints", "gate", "findings",
            "checklist"} <= set(run)
    assert set(run["gate"]) == {"open", "action", "destroys", "reasons"}
    assert run["gate"]["open"] is False and run["liveness"] == "finished"
    assert {"id", "title", "status", "note"} == set(run["checklist"][0])
    assert data["instances"][0]["state"] == "running" and data["instances"][0]["price_source"] == "profile"
    session.close()


async def test_a_changed_manifest_on_the_box_refuses_at_call_time(project_dir: Path) -> None:
    """G2 re-reads the box's manifest right before the call: evidence for other bytes never counts."""
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    await pull_run(session, RUN)
    assert (await verify_run(session, RUN)).ok
    plan = await teardown.plan(session, INSTANCE)
    assert plan.gate_open
    remote = project_dir / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt" / RUN / "PULL_MANIFEST.json"
    remote.write_text(remote.read_text().replace('"files"', '"files" ', 1))
    with pytest.raises(GateRefused, match="on the box differs"):
        await teardown.execute(session, INSTANCE, plan.provider_id, plan.lines)
    assert (project_dir / ".rgt" / "sim" / INSTANCE).is_dir()
    assert session.db.events(kind="refused")[-1].detail["reasons"] == [
        "the PULL_MANIFEST.json on the box differs from the local one"]
    session.close()


async def test_gpu_samples_feed_the_instances_panel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `local` box whose nvidia-smi replays recorded 8×H100 samples (an external tool's stand-in)."""
    import shutil
    import stat

    from remote_gpu_trainer.audits import gpu_health

    gpu = Path(__file__).parents[1] / "fixtures" / "gpu"
    bin_dir, data = tmp_path / "bin", tmp_path / "nvsmi"
    bin_dir.mkdir()
    data.mkdir()
    shutil.copy(gpu / "fake_nvidia_smi.sh", bin_dir / "nvidia-smi")
    (bin_dir / "nvidia-smi").chmod(stat.S_IRWXU)
    first_sample = (gpu / "h100x8_load_samples.csv").read_text().splitlines(keepends=True)[:8]  # one per GPU
    (data / "samples.csv").write_text("".join(first_sample))
    shutil.copy(gpu / "h100x8_inventory.csv", data / "inventory.csv")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVSMI_DIR", str(data))
    monkeypatch.setenv("FAKE_NVSMI_INVENTORY_QUERY", ",".join(gpu_health.INVENTORY_FIELDS))
    monkeypatch.setenv("FAKE_NVSMI_SAMPLE_QUERY", ",".join(gpu_health.SAMPLE_FIELDS))
    root = tmp_path / "proj"
    write_project(root)
    config = root / "rgt.toml"
    config.write_text(config.read_text().replace('provider = "sim"', 'provider = "local"'))
    session = open_session(str(root))
    overview = await observe_and_build(session)
    instance = overview.instance(INSTANCE)
    samples = gpu_health.parse_gpu_samples("".join(first_sample))
    hottest = max(s.temperature_c for s in samples if s.temperature_c is not None)
    assert instance is not None and instance.gpu.startswith("8× util ")
    assert instance.gpu.endswith(f"{hottest:.0f}°C") and "/80 GiB" in instance.gpu
    session.close()
