"""The approval inbox renting on a cloud (the local RunPod fake serving the shapes RunPod publishes): an allowance lets
a rent within it reach the provider's create call and keeps one above it pending with nothing sent, and a rent whose
executing face goes away mid-way ends `failed` with the reason, never stuck `executing`."""

from __future__ import annotations

import asyncio
import shlex
import sys
from pathlib import Path

from remote_gpu_trainer.services import opening
from remote_gpu_trainer.services.inbox import allowances
from remote_gpu_trainer.services.inbox.decide import INTERRUPTED
from remote_gpu_trainer.services.inbox.model import RequestKind, agent_actor, person_actor
from remote_gpu_trainer.services.inbox.requests import file_request, get_request
from remote_gpu_trainer.services.session import Session
from support import fake_clouds
from support.fake_clouds import FakeRunPod

runpod_fake = fake_clouds.runpod_fake
cloud_env = fake_clouds.cloud_env
AGENT = agent_actor("claude-code")
PERSON = person_actor("/dev/pts/4")
PY = shlex.quote(sys.executable)
LAUNCH = 'launch = { gpu = "NVIDIA A40", max_price_per_hour = 0.8, image = "runpod/pytorch", disk_gb = 50 }'


def _project(root: Path, url: str, smoke: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "rgt.toml").write_text(
        f'[project]\nname = "inbox-cloud"\n\n[instances.gpu]\nprovider = "runpod"\napi_base = "{url}"\n{LAUNCH}\n\n'
        '[runs.train]\ninstance = "gpu"\nworkdir = "/workspace/proj"\ncommand = "python train.py"\n'
        f'remote_root = "/workspace/rgt/train"\nroster = ["seed0"]\nsmoke = {smoke!r}\n', encoding="utf-8")
    return root


async def _closing(session: Session) -> None:
    await session.close_transports()
    session.close()


async def test_an_allowance_lets_a_cloud_rent_within_it_reach_the_provider_and_not_one_above(
        tmp_path: Path, runpod_fake: FakeRunPod, cloud_env: None) -> None:
    root = _project(tmp_path / "p", runpod_fake.url, f"{PY} -c 'pass'")
    session = opening.open_session(str(root))
    try:
        allowances.grant(session, actor=PERSON, max_price_per_hour=0.50, total=5.0, hours=1)
        above = await file_request(session, RequestKind.RENT, actor=AGENT, why="train", run_id="train")
        assert above.state == "pending" and above.plan.price_per_hour == 0.8  # RunPod quotes nothing: the ceiling
        assert runpod_fake.requests("POST", "/pods") == []
        allowances.grant(session, actor=PERSON, max_price_per_hour=1.00, total=5.0, hours=1)
        within = await file_request(session, RequestKind.RENT, actor=AGENT, why="train", run_id="train",
                                    params={"hours": 2})
        assert within.state == "done" and within.allowance == "A-000002", within.outcome
        [posted] = runpod_fake.requests("POST", "/pods")
        assert posted.body["gpu"] == {"id": "NVIDIA A40", "count": 1}
        [approval] = session.db.events(kind="approval")
        assert approval.actor == f"{AGENT} (allowance A-000002)" and approval.run_id == "train"
        assert runpod_fake.requests("DELETE") == []
    finally:
        await _closing(session)


async def test_a_rent_whose_face_goes_away_mid_way_ends_failed_with_the_reason_not_stuck(
        tmp_path: Path, runpod_fake: FakeRunPod, cloud_env: None) -> None:
    root = _project(tmp_path / "p", runpod_fake.url, f"{PY} -c 'import time; time.sleep(60)'")
    session = opening.open_session(str(root))
    try:
        allowances.grant(session, actor=PERSON, max_price_per_hour=1.0, total=5.0, hours=1)
        filing = asyncio.create_task(file_request(session, RequestKind.RENT, actor=AGENT, why="x", run_id="train"))
        while not session.db.request_rows() or session.db.request_rows()[0].state != "executing":
            await asyncio.sleep(0.05)  # the allowance took it: the smoke gate runs
        filing.cancel()
        await asyncio.gather(filing, return_exceptions=True)
        request = get_request(session, "Q-000001")
        assert request.state == "failed" and request.outcome == INTERRUPTED
        assert runpod_fake.requests("POST", "/pods") == []
    finally:
        await _closing(session)
