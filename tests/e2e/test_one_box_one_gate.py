"""One box under two names, after the fact (issue 24, hole 3; docs/gate.md §7 item 6): a run launched through
one name of a box keeps the gate closed when the box is torn down through another.

The launch log records every identity of the box (host keys trusted for it, resolved addresses, resolved name
and port) and the gate covers a record sharing any of them. Driven through the installed `rgt` against a real
OpenSSH sshd on loopback and the RunPod fake; the refusals that come before any launch are in
test_one_box_two_names.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_one_box_two_names import ALIAS, fingerprint, run_table, twin_sshd, write_project, write_ssh_config

from remote_gpu_trainer.services.instances import host_key_prompts, instance_status, trust_host_key
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support import fake_clouds
from support.fake_clouds import FakeRunPod
from support.gate_helpers import keep_verdicts, rgt, seed_verdicts
from support.helpers import wait_for_liveness
from support.sshd_fixtures import Sshd, free_port

runpod_fake = fake_clouds.runpod_fake
cloud_env = fake_clouds.cloud_env


def launches(root: Path) -> int:
    with sqlite3.connect(root / ".rgt" / "state.db") as conn:
        count = conn.execute("SELECT COUNT(*) FROM launch_log").fetchone()[0]
    conn.close()
    return int(count)


# -- records that predate the second name: the gate covers them -------------------------------------------

async def launch_log_covers(root: Path, instance: str) -> set[str]:
    """The runs the launch log puts on the instance's box (the gate's own box_runs, after the provider was
    asked, as the teardown plan asks it): the box's ledger may cover them too, this is the launch log's word."""
    from remote_gpu_trainer.services.gate import box_runs

    session = open_session(str(root))
    try:
        await instance_status(session, instance)
        return {box_run.run.id for box_run in await box_runs(session, instance) if box_run.launched}
    finally:
        await session.close_transports()
        session.close()


async def _launch(root: Path, run_id: str, instance: str, server: Sshd) -> None:

    session = open_session(str(root))
    try:
        status = await instance_status(session, instance)
        if instance in host_key_prompts(session):
            await trust_host_key(session, instance, fingerprint(server))
        else:
            assert status.state == "running", status
        await launch_run(session, run_id)
        assert await wait_for_liveness(session, run_id) == "finished"
    finally:
        await session.close_transports()
        session.close()


@pytest.mark.sshd
@pytest.mark.parametrize("move", ["localhost-to-alias-of-127.0.0.1", "to-the-box's-other-port"])
async def test_a_run_launched_under_the_old_name_keeps_the_gate_closed_under_the_new_one(
        sshd: Sshd, ssh_home: Path, tmp_path: Path, move: str) -> None:
    """r1 is launched through `box` at its old address and never pulled; its table leaves rgt.toml, and
    `box` is pointed at the same machine by another name (an alias of 127.0.0.1, or the box's other sshd
    port: then only the host key says it is the same box). r2, launched and verified through the new
    name, would open the gate; r1's results on the box keep it closed."""
    twin = twin_sshd(sshd, tmp_path / "twin", free_port()) if move.startswith("to-the") else None
    try:
        write_ssh_config(ssh_home, sshd, alias_port=twin.port if twin else None)
        old = f"localhost:{sshd.port}" if twin is None else f"127.0.0.1:{sshd.port}"
        box = tmp_path / "box"
        root = write_project(tmp_path / "proj", {"box": old}, {"r1": "box"}, box)
        seed_verdicts(root)
        await _launch(root, "r1", "box", sshd)
        write_project(root, {"box": ALIAS}, {"r2": "box"}, box)  # r1 left rgt.toml; box has a new name
        await _launch(root, "r2", "box", twin or sshd)
        for verb in ("pull", "verify"):
            done = rgt(verb, "r2", str(root), cwd=root)
            assert done.returncode == 0, (verb, done.stdout, done.stderr)
        keep_verdicts(root)
        assert launches(root) == 2
        assert await launch_log_covers(root, "box") == {"r1", "r2"}
        result = rgt("down", "r2", str(root), "--confirm", ALIAS, cwd=root)
        assert result.returncode == 3, ("the unpulled run r1 was not covered", result.stdout, result.stderr)
        assert "r1 (no longer in rgt.toml)" in result.stdout + result.stderr
        assert (box / "rgt" / "r1" / "seed0" / "best.pth").is_file()
    finally:
        if twin is not None:
            twin.stop()


@pytest.mark.sshd
async def test_a_pod_and_an_ssh_entry_for_its_address_share_one_gate(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, sshd: Sshd) -> None:
    """The pod's SSH endpoint is also written as an `ssh` entry: r1 runs through that entry and is never
    pulled; r2 runs on the pod and is verified. Terminating the pod would take r1's results: the host key
    both are reached by puts r1 under the pod's gate, and RunPod never sees a DELETE."""
    runpod_fake.add_pod("p1", host=sshd.host, port=sshd.port)
    write_ssh_config(cloud_env, sshd)
    box = tmp_path / "box"
    root = tmp_path / "proj"
    root.mkdir()
    (root / "rgt.toml").write_text(
        '[project]\nname = "pod-and-ssh"\n\n'
        f'[instances.pod]\nprovider = "runpod"\nid = "p1"\napi_base = "{runpod_fake.url}"\n\n'
        f'[instances.direct]\nprovider = "ssh"\nhost = "127.0.0.1:{sshd.port}"\n'
        + run_table("r1", "direct", box) + run_table("r2", "pod", box), encoding="utf-8")
    seed_verdicts(root)
    await _launch(root, "r2", "pod", sshd)
    await _launch(root, "r1", "direct", sshd)
    for verb in ("pull", "verify"):
        done = rgt(verb, "r2", str(root), cwd=root)
        assert done.returncode == 0, (verb, done.stdout, done.stderr)
    keep_verdicts(root)
    assert await launch_log_covers(root, "pod") == {"r1", "r2"}
    assert await launch_log_covers(root, "direct") == {"r1", "r2"}
    result = rgt("down", "r2", str(root), "--confirm", "p1", cwd=root)
    assert result.returncode == 3, ("the pod went with r1's unpulled results", result.stdout, result.stderr)
    assert "r1" in result.stderr, result.stderr
    assert runpod_fake.requests("DELETE") == [] and (box / "rgt" / "r1" / "seed0" / "best.pth").is_file()
