"""`rgt watch RUN` over a real sshd on a vast.ai box (a local fake of its API): while the box answers, the run is
running; once the box cannot be reached, `--once` says unknown and exits 1 (nobody knows what it is doing);
once vast.ai says the instance was outbid, the one-run watch calls the run preempted as the patrol does, and
the continuous watch ends (exit 1: the run did not finish) instead of polling a box that will not come back.
Nothing is stopped or torn down: the fake API sees GETs only."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.services.instances import instance_status, trust_host_key
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support import fake_clouds
from support.fake_clouds import FakeVast
from support.helpers import RUN, toml_string, write_project
from support.recover_cloud import ALIAS, point_alias
from support.sshd_fixtures import Sshd, free_port

pytestmark = pytest.mark.sshd
vast_fake = fake_clouds.vast_fake
cloud_env = fake_clouds.cloud_env

INSTANCE, VAST_ID = "gpu", "7"
OUTBID = "Instance outbid, paused"


def vast_project(root: Path, box: Path, api: str) -> Path:
    body = f'provider = "vastai"\nid = "{VAST_ID}"\napi_base = {toml_string(api)}\nhost = "{ALIAS}"'
    write_project(root, "echo started && sleep 120", roster=("seed0",), instance=INSTANCE, instance_body=body,
                  box=box)
    return root


def launch(root: Path, server: Sshd) -> int:
    """Trust the box's host key as a user would, launch the run, close everything; returns the job's pid."""
    async def go() -> int:
        session = open_session(str(root))
        try:
            await instance_status(session, INSTANCE)  # first contact: rgt asks before it trusts
            await trust_host_key(session, INSTANCE, server.host_public_key().get_fingerprint("sha256"))
            detail = await launch_run(session, RUN)
            return int(str(detail["pid"]))
        finally:
            await session.close_transports()
            session.close()
    return asyncio.run(go())


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_watch_calls_an_outbid_box_preempted_and_stops_following_it(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, sshd: Sshd,
        capsys: pytest.CaptureFixture[str]) -> None:
    vast_fake.add_instance(VAST_ID)
    point_alias(cloud_env, sshd, sshd.port)
    root = vast_project(tmp_path / "proj", tmp_path / "box", vast_fake.url)
    pid = launch(root, sshd)
    try:
        code, out = rgt(capsys, "watch", RUN, str(root), "--once")
        assert code == 0 and f"run {RUN}: running (" in out, out

        point_alias(cloud_env, sshd, free_port())  # the box stops answering; the API still says running
        code, out = rgt(capsys, "watch", RUN, str(root), "--once")
        assert code == 1 and f"run {RUN}: unknown (" in out and "preempted" not in out, out

        vast_fake.instances[VAST_ID].update(status_msg=OUTBID)  # vast.ai's word for the lost bid
        said = f"preempted: the provider says '{OUTBID}'"
        code, out = rgt(capsys, "watch", RUN, str(root), "--once", "--format", "json")
        document = json.loads(out)
        assert code == 0 and (document["state"], document["detail"]) == ("unknown", said), out
        code, out = rgt(capsys, "watch", RUN, str(root), "--interval", "0.2")  # ends at once: nothing to wait for
        assert code == 1 and out.count(f"run {RUN}: unknown ({said})") == 1, out
        code, out = rgt(capsys, "watch", "--all", str(root), "--once")
        assert f"run=unknown({said})" in out, out
        assert {r.method for r in vast_fake.requests()} == {"GET"}  # watching never stops or destroys
    finally:
        os.killpg(pid, signal.SIGKILL)  # the test's own job
