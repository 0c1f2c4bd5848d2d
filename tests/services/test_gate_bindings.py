"""Each binding of the teardown gate (issue 9, "What must hold" §1), end to end on a real sim project:
a marker file alone never opens the gate. Every test here passes a check that the marker-only gate did
not make: the marker stays in place (or is put back) and `rgt down` must still exit 3.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.gate import CONFIG_CHANGED
from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, MARKER_NAME
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services import instances, teardown
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support.gate_helpers import (
    SIM_ID,
    assert_refused,
    assert_torn_down,
    box_root,
    copy_project,
    down,
    flip_in_place,
    launch_finished,
    local_root,
    project_text,
    pull_and_verify,
    refused_reasons,
    relaunch_finished,
    replace_in,
    rgt,
    run_table,
    seed_verdicts,
    sim_disk,
    small_command,
    verified_project,
    write_text_project,
)
from support.helpers import INSTANCE, RUN, wait_for_liveness

# -- the launch ------------------------------------------------------------------------------------------

async def test_a_launch_after_the_verification_is_not_covered_by_it(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    marker = (local_root(root) / MARKER_NAME).read_bytes()
    refused = rgt("run", RUN, str(root), "--ack", "test box", cwd=root)  # the CLI refuses a reused run id
    assert refused.returncode == 1 and "run ids are append-only" in refused.stderr, refused.stderr
    await relaunch_finished(root)  # launched again all the same, below the Session's refusal
    session = open_session(str(root))
    try:
        assert await wait_for_liveness(session) == "finished"
        assert len(session.db.launch_history(RUN)) == 2
    finally:
        session.close()
    assert (local_root(root) / MARKER_NAME).read_bytes() == marker  # nothing local changed
    reasons = assert_refused(root, f"run {RUN} was launched again after its manifest was built")
    assert all("no PULL_VERIFIED" not in reason for reason in reasons)
    await pull_and_verify(root)  # verified again: still the copy of a manifest that predates the launch
    assert_refused(root, f"run {RUN} was launched again after its manifest was built")


async def test_a_relaunch_that_writes_new_results_keeps_the_gate_closed_until_they_are_home(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    config = root / "rgt.toml"
    # the second launch trains differently: its seed0/best.pth is seed1's weights and vice versa
    replace_in(config, "{cell}/best.pth", "$(test {cell} = seed0 && echo seed1 || echo seed0)/best.pth")
    replace_in(config, "cp ", "cp -f ")
    await relaunch_finished(root)
    new_on_box = (box_root(root) / "seed0" / "best.pth").read_bytes()
    assert new_on_box != (local_root(root) / "seed0" / "best.pth").read_bytes()  # the box holds new results
    assert down(root).returncode == 3  # "launched again after its verification: ... pull and verify them"
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    result = down(root)
    home = (local_root(root) / "seed0" / "best.pth").read_bytes() == new_on_box
    assert result.returncode == 3 or home, ("the box with unpulled results was destroyed", result.stdout)
    assert "launched again after its manifest was built" in result.stderr, result.stderr


async def test_a_job_still_running_keeps_the_gate_closed_whatever_the_marker_says(tmp_path: Path) -> None:
    """The results are written, pulled and verified while the job still runs: a marker bound to all of it,
    and still the job may write more, so the gate stays closed until it has ended."""
    from remote_gpu_trainer.services.evidence.pull import pull

    root = tmp_path / "proj"
    write_text_project(root, project_text(command=small_command("; if [ {cell} = seed1 ]; then sleep 300; fi")))
    seed_verdicts(root)
    session = open_session(str(root))
    try:
        await create_instance(session, INSTANCE)
        detail = await launch_run(session, RUN)
        assert await wait_for_liveness(session, states=("running",)) == "running"
        while not (box_root(root) / "seed1" / "best_metrics.json").exists():  # seed1 wrote, now it sleeps
            await asyncio.sleep(0.05)
        with pytest.raises(VerbFailed, match="still running"):
            await pull_run(session, RUN)  # rgt pull waits for the end; the service below it does not
        run = run_config(session, RUN)
        assert (await pull(session.project, run, await instances.remote(session, INSTANCE), session.db)).ok
        assert (await verify_run(session, RUN)).ok
        reasons = assert_refused(root, f"run {RUN} is running on the box")
        assert reasons == [f"run {RUN} is running on the box: its results are not final"], reasons
        os.killpg(int(detail["pid"]), signal.SIGKILL)
        assert await wait_for_liveness(session, states=("dead",)) == "dead"
    finally:
        await session.close_transports()
        session.close()
    assert_torn_down(root)  # it ended: what it wrote is home and verified


# -- the bytes -------------------------------------------------------------------------------------------

async def test_bytes_changed_in_place_with_the_mtime_restored_are_a_hash_mismatch(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    target = local_root(root) / "seed0" / "best.pth"
    before = os.stat(target)
    flip_in_place(target)
    after = os.stat(target)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert_refused(root, "seed0/best.pth content differs from the manifest (sha256)")  # the gate's own check
    verified = rgt("verify", RUN, str(root), cwd=root)
    assert verified.returncode == 1
    assert "hash_mismatch  seed0/best.pth" in verified.stdout and "first: hash_mismatch seed0/best.pth" in \
        verified.stderr
    assert not (local_root(root) / MARKER_NAME).exists()
    result = down(root)
    assert result.returncode == 3 and "no PULL_VERIFIED.json" in result.stderr
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0  # the damaged copy is fetched again
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert_torn_down(root)


# -- the verification record -----------------------------------------------------------------------------

async def test_an_old_marker_put_back_after_a_failed_verification_is_refused(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    marker_path = local_root(root) / MARKER_NAME
    good_marker = marker_path.read_bytes()
    target = local_root(root) / "seed1" / "best_metrics.json"
    original, stamp = target.read_bytes(), os.stat(target)
    target.write_bytes(original.replace(b"0.", b"9.", 1))  # same size, other bytes
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 1
    assert not marker_path.exists()
    target.write_bytes(original)  # the file as it was, mtime too
    os.utime(target, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    marker_path.write_bytes(good_marker)  # and the good marker copied back
    reasons = assert_refused(root, f"the last verification of {RUN} failed")
    assert len(reasons) == 1, reasons  # nothing else is wrong: the record alone keeps the gate closed
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert_torn_down(root)


async def test_a_hand_edited_or_older_good_marker_is_refused(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    marker_path = local_root(root) / MARKER_NAME
    first = marker_path.read_bytes()
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0  # a second good verification
    second = marker_path.read_bytes()
    assert first != second
    marker_path.write_bytes(first)  # the first verification's marker: good once, not the last one
    reasons = assert_refused(root, "is not the one the last verification wrote")
    assert len(reasons) == 1, reasons
    marker_path.write_bytes(second.replace(b'"files"', b'"files" ', 1))  # same content, edited bytes
    assert_refused(root, "is not the one the last verification wrote")
    marker_path.write_bytes(second)
    assert_torn_down(root)


# -- the configuration -----------------------------------------------------------------------------------

CONFIG_EDITS = {
    "remote_root": ('remote_root = "/workspace/rgt/r1"', 'remote_root = "/workspace/rgt/r1-moved"'),
    "roster": ('roster = ["seed0", "seed1"]\nrequired', 'roster = ["seed0"]\nrequired'),
    "required": ('required = ["best.pth", "best_metrics.json"]', 'required = ["best.pth"]'),
    "checkpoint_globs": ("python = ", 'checkpoint_globs = ["*.pth"]\npython = '),
    "state_keys": ("python = ", 'state_keys = ["model_state_dict", "weights"]\npython = '),
    "allowed_globals": ("python = ", 'allowed_globals = ["collections.OrderedDict"]\npython = '),
}


@pytest.fixture(scope="module")
def verified_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import asyncio

    return asyncio.run(verified_project(tmp_path_factory.mktemp("template") / "proj"))


@pytest.mark.parametrize("key", sorted(CONFIG_EDITS))
def test_an_evidence_key_edited_after_verification_closes_the_gate(verified_template: Path, tmp_path: Path,
                                                                   key: str) -> None:
    root = copy_project(verified_template, tmp_path / "proj")
    old, new = CONFIG_EDITS[key]
    replace_in(root / "rgt.toml", old, new)
    result = down(root)
    assert result.returncode == 3, result.stderr
    assert CONFIG_CHANGED in refused_reasons(root)
    replace_in(root / "rgt.toml", new, old)  # the configuration the evidence was verified under, again
    assert_torn_down(root)


def test_a_harmless_key_edited_after_verification_keeps_the_gate_open(verified_template: Path,
                                                                      tmp_path: Path) -> None:
    root = copy_project(verified_template, tmp_path / "proj")
    replace_in(root / "rgt.toml", "python = ", "gpus = 0\nstall_after = 60\npython = ")
    assert_torn_down(root)


# -- the physical box ------------------------------------------------------------------------------------

async def test_a_run_removed_from_rgt_toml_still_keeps_its_box(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(second_run=True))
    seed_verdicts(root)
    await launch_finished(root)  # r1 ran on the box; its results were never pulled
    await launch_finished(root, "r2", create=False)
    await pull_and_verify(root, "r2")
    text = (root / "rgt.toml").read_text()
    start = text.index(f"[runs.{RUN}]")
    (root / "rgt.toml").write_text(text[:start] + text[text.index("[runs.r2]"):], encoding="utf-8")
    reasons = assert_refused(root, f"{RUN} (no longer in rgt.toml): no PULL_VERIFIED.json", run_id="r2")
    assert not any(reason.startswith("r2:") for reason in reasons), reasons  # r2 itself is fine
    assert (box_root(root) / "seed0" / "best.pth").is_file()


def test_two_entries_with_one_provider_id_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    text = project_text(instance_extra='id = "gpu-1"', extra='\n[instances.again]\nprovider = "sim"\nid = "gpu-1"\n')
    write_text_project(root, text)
    for args in (("down", RUN, str(root), "--confirm", "gpu-1"), ("pull", RUN, str(root)), ("--report", str(root))):
        result = rgt(*args, cwd=root)
        assert result.returncode == 2, (args, result.stderr)
        assert "instances.again" in result.stderr and "names the same box as instances.box" in result.stderr
    assert not (root / "runs").exists()


def test_two_ssh_entries_reaching_one_host_and_port_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host gpu-box\n  HostName 127.0.0.1\n  Port 2299\n  User root\n")
    text = f"""\
[project]
name = "two-entries"

[instances.a]
provider = "ssh"
host = "gpu-box"

[instances.b]
provider = "ssh"
host = "ubuntu@127.0.0.1:2299"
{run_table(RUN, small_command(), instance="b")}"""
    write_text_project(root, text)
    result = rgt("down", RUN, str(root), "--confirm", "x", cwd=root, env={**os.environ, "HOME": str(home)})
    assert result.returncode == 2, result.stderr
    assert "instances.b: names the same box as instances.a" in result.stderr and "127.0.0.1:2299" in result.stderr


async def test_a_second_entry_for_the_same_sim_box_shares_its_gate(tmp_path: Path) -> None:
    """`box` has no id (its provider id is sim-box); `twin` names that id: one box, one gate."""
    root = tmp_path / "proj"
    text = project_text(extra=f'\n[instances.twin]\nprovider = "sim"\nid = "{SIM_ID}"\n'
                        + run_table("r2", small_command(), instance="twin"))
    write_text_project(root, text)
    seed_verdicts(root)
    await launch_finished(root)  # r1 on `box`, never pulled
    await launch_finished(root, "r2")  # r2 through `twin`, pulled and verified
    await pull_and_verify(root, "r2")
    reasons = assert_refused(root, f"{RUN}: no PULL_VERIFIED.json", run_id="r2")
    assert any(reason.startswith(f"{RUN}:") for reason in reasons)


# -- the box's manifest ----------------------------------------------------------------------------------

async def test_the_manifest_gone_from_the_box_closes_the_gate(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    remote = box_root(root) / MANIFEST_NAME
    kept = remote.read_bytes()
    remote.unlink()
    assert_refused(root, "the manifest on the box is gone")
    remote.mkdir()  # a folder in its place is not the manifest either
    assert_refused(root, "the manifest on the box is gone")
    remote.rmdir()
    remote.write_bytes(kept.replace(b'"files"', b'"files" ', 1))  # replaced by other bytes
    assert_refused(root, f"the {MANIFEST_NAME} on the box differs from the local one")
    remote.write_bytes(kept)
    assert_torn_down(root)


async def test_an_unreachable_box_is_a_warning_and_never_a_pass(tmp_path: Path) -> None:
    root = await verified_project(tmp_path / "proj")
    parked = tmp_path / "parked"
    sim_disk(root).rename(parked)  # the box stops answering
    session = open_session(str(root))
    try:
        plan = await teardown.plan(session, INSTANCE)
        assert not plan.gate_open
        assert any("remote not re-checked" in warning for warning in plan.warnings), plan.warnings
        assert any(line.startswith("Warning:   remote not re-checked") for line in plan.lines)
    finally:
        session.close()
    assert down(root).returncode == 3
    parked.rename(sim_disk(root))  # it answers again: re-checked, and the evidence holds
    session = open_session(str(root))
    try:
        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open and plan.warnings == (), plan
    finally:
        session.close()
    assert_torn_down(root)
