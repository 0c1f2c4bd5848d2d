"""`rgt up` renting a GPU (services/launcher.py and the `up` verb) against the local fake provider APIs.

What must hold: nothing is rented unless the run's smoke command passed here and the typed price is the one the
plan stated; the approval is in the event log before the create request reaches the provider (checked from
inside the fake server, over its own connection to the state database); the new id is recorded; a pod created
above the ceiling is reported and left for `rgt down`; a provider without a launch API and a bad constraint
are refused with one clear line. Smoke commands are real local processes; HTTP goes to real local servers.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer import text
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from remote_gpu_trainer.providers.cloud.client import UnsupportedAction
from remote_gpu_trainer.providers.cloud.http import HttpOptions
from remote_gpu_trainer.providers.cloud.provider import CloudProvider
from remote_gpu_trainer.services import opening
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.launch import rent as launcher
from remote_gpu_trainer.services.session import Session
from support import fake_clouds
from support.fake_clouds import (
    FAKE_KEY,
    FakeCloud,
    FakeLambda,
    FakePaperspace,
    FakeRunPod,
    FakeVast,
    Reply,
    VirtualTime,
)

runpod_fake = fake_clouds.runpod_fake
vast_fake = fake_clouds.vast_fake
lambda_fake = fake_clouds.lambda_fake
paperspace_fake = fake_clouds.paperspace_fake
vtime = fake_clouds.vtime

PY = shlex.quote(sys.executable)
PASS = f'{PY} -c "import sys; sys.exit(0)"'
FAIL = f'{PY} -c "import sys; print(\\"smoke: loss is nan\\", file=sys.stderr); sys.exit(3)"'
RUNPOD_LAUNCH = 'launch = { gpu = "NVIDIA A40", max_price_per_hour = 0.8, image = "runpod/pytorch", disk_gb = 50 }'
CREATE = {"runpod": ("POST", "/pods"), "lambda": ("POST", "/instance-operations/launch")}


cloud_env = fake_clouds.cloud_env
pytestmark = pytest.mark.usefixtures("cloud_env")


def write_project(root: Path, provider: str, url: str, launch: str, smoke: str | None = PASS,
                  instance_extra: str = "") -> Path:
    """A one-run project on one cloud instance; `launch` is the instance's launch line(s) as written."""
    root.mkdir(parents=True, exist_ok=True)
    smoke_line = f"smoke = {json.dumps(smoke)}\n" if smoke is not None else ""  # a TOML basic string
    text = (f'[project]\nname = "launch-test"\n\n[instances.gpu]\nprovider = "{provider}"\napi_base = "{url}"\n'
            f"{instance_extra}{launch}\n\n[runs.train]\ninstance = \"gpu\"\nworkdir = \"/workspace/proj\"\n"
            f'command = "python train.py"\nremote_root = "/workspace/rgt/train"\nroster = ["seed0"]\n{smoke_line}')
    (root / "rgt.toml").write_text(text, encoding="utf-8")
    return root


def event_kinds(db: Path) -> list[str]:
    """The committed event log, read over a separate read-only connection (what another process would see)."""
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [row[0] for row in conn.execute("SELECT kind FROM events ORDER BY seq")]


def witness(fake: FakeCloud, db: Path, method: str, prefix: str) -> list[list[str]]:
    """For each create request the fake receives, the event kinds already committed at that moment."""
    seen: list[list[str]] = []
    route = fake.route

    def watching(verb: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Reply:
        if verb == method and "/".join(parts).startswith(prefix):
            seen.append(event_kinds(db))
        return route(verb, parts, query, body)

    fake.route = watching  # type: ignore[method-assign, assignment]
    return seen


@pytest.fixture
async def open_session(vtime: VirtualTime) -> AsyncIterator[Callable[[Path], Session]]:
    """Sessions whose cloud clients run on virtual time (Lambda's 1 req/s pacing does not wait) without the
    SSH probe; the adapters are the real ones, built by the session, configured through their public options."""
    opened: list[Session] = []

    def build(root: Path) -> Session:
        session = Session(load_project(root / "rgt.toml"))
        provider = session.provider("gpu")
        assert isinstance(provider, CloudProvider)
        provider.http_options = HttpOptions(sleep=vtime.sleep, clock=vtime.clock, jitter=lambda: 1.0)
        provider.check_ssh = False
        opened.append(session)
        return session

    yield build
    for session in opened:
        await session.close_transports()
        session.close()


async def smoke_of(session: Session) -> launcher.SmokeResult:
    return await launcher.run_smoke(session.project, run_config(session, "train"))


# -- the smoke gate ---------------------------------------------------------------------------------------------

async def test_the_smoke_command_runs_here_on_the_cpu_in_the_project_root(tmp_path: Path) -> None:
    check = ("import os, sys; print('line', 1); print('last line'); "
             "sys.exit(0 if os.environ['CUDA_VISIBLE_DEVICES'] == '' and os.environ['RGT_SMOKE'] == '1' "
             "and os.path.exists('rgt.toml') else 9)")
    root = write_project(tmp_path / "p", "runpod", "http://127.0.0.1:9/v1", RUNPOD_LAUNCH,
                         smoke=f'{PY} -c "{check}"')
    project = load_project(root / "rgt.toml")
    result = await launcher.run_smoke(project, project.run("train"))
    assert (result.passed, result.returncode, result.timed_out) == (True, 0, False)
    assert result.output_tail.splitlines()[-1] == "last line"


async def test_a_failing_slow_or_missing_smoke_command_does_not_pass(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", "runpod", "http://127.0.0.1:9/v1", RUNPOD_LAUNCH, smoke=FAIL)
    project = load_project(root / "rgt.toml")
    failed = await launcher.run_smoke(project, project.run("train"))
    assert (failed.passed, failed.returncode) == (False, 3) and "loss is nan" in failed.output_tail
    assert "exited 3" in failed.summary()

    slow = write_project(tmp_path / "q", "runpod", "http://127.0.0.1:9/v1", RUNPOD_LAUNCH,
                         smoke=f'{PY} -c "import time; time.sleep(30)"')
    text = (slow / "rgt.toml").read_text() + "smoke_timeout = 0.5\n"
    (slow / "rgt.toml").write_text(text)
    project = load_project(slow / "rgt.toml")
    stuck = await launcher.run_smoke(project, project.run("train"))
    assert (stuck.passed, stuck.timed_out, stuck.returncode) == (False, True, None)
    assert stuck.duration_s < 10

    missing = write_project(tmp_path / "r", "runpod", "http://127.0.0.1:9/v1", RUNPOD_LAUNCH,
                            smoke="/nonexistent/rgt-smoke --quick")
    project = load_project(missing / "rgt.toml")
    absent = await launcher.run_smoke(project, project.run("train"))
    assert not absent.passed and "did not start" in absent.summary()


async def test_a_run_without_a_smoke_command_is_refused_by_name(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", "runpod", "http://127.0.0.1:9/v1", RUNPOD_LAUNCH, smoke=None)
    project = load_project(root / "rgt.toml")
    with pytest.raises(ConfigError, match=r"runs\.train: no smoke command: add smoke = "):
        await launcher.run_smoke(project, project.run("train"))


# -- the CLI on RunPod: smoke, plan, approval, launch -------------------------------------------------------------

def test_a_failing_smoke_gate_rents_nothing_and_approves_nothing(
        tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_project(tmp_path / "p", "runpod", runpod_fake.url, RUNPOD_LAUNCH, smoke=FAIL)
    assert main(["up", "train", str(root), "--approve-price", "0.80"]) == 1
    err = capsys.readouterr().err
    assert "smoke gate failed" in err and "exited 3" in err and "loss is nan" in err
    assert runpod_fake.requests() == []
    assert "approval" not in event_kinds(root / ".rgt" / "state.db")


def test_without_the_typed_price_the_plan_is_shown_and_nothing_rented(
        tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_project(tmp_path / "p", "runpod", runpod_fake.url, RUNPOD_LAUNCH)
    assert main(["up", "train", str(root)]) == 1
    out, err = capsys.readouterr()
    assert "Request:   1x NVIDIA A40, image runpod/pytorch, disk 50 GB" in out
    assert "Approve:   type 0.80 (USD per hour)" in out
    assert "--approve-price 0.80" in err and len(err.strip().splitlines()) == 2  # progress line + the error

    assert main(["up", "train", str(root), "--approve-price", "0.44"]) == 1
    assert "typed price '0.44' is not the stated 0.80" in capsys.readouterr().err
    assert runpod_fake.requests("POST", "/pods") == []
    kinds = event_kinds(root / ".rgt" / "state.db")
    assert "approval" not in kinds and kinds.count("launch_refused") == 1


def test_the_stated_price_launches_once_after_the_approval_is_logged(
        tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_project(tmp_path / "p", "runpod", runpod_fake.url, RUNPOD_LAUNCH)
    db = root / ".rgt" / "state.db"
    seen = witness(runpod_fake, db, "POST", "pods")
    assert main(["up", "train", str(root), "--approve-price", "$0.800/h"]) == 0
    out = capsys.readouterr().out
    [posted] = runpod_fake.requests("POST", "/pods")
    assert posted.body["gpu"] == {"id": "NVIDIA A40", "count": 1} and posted.body["mounts"]["persistent"]["size"] == 50
    assert seen == [["approval", "action"]]  # both committed before the create request arrived
    assert 'id = "new1"' in out and "rgt down train --confirm new1" in out
    assert event_kinds(db) == ["approval", "action", "launched"]

    session = opening.open_session(str(root))
    try:
        assert launcher.launched_id(session.db, "gpu") == "new1"
        [approval] = session.db.events(kind="approval")
        assert approval.run_id == "train" and approval.detail["typed_price"] == "$0.800/h"
        assert "Approve:   type 0.80 (USD per hour)" in approval.detail["shown"]
        assert approval.detail["smoke"]["passed"] is True and approval.detail["request"]["max_price_per_hour"] == 0.8
        snapshot = session.db.last_snapshot("gpu")
        assert snapshot is not None
        assert (snapshot.provider_id, snapshot.state, snapshot.price_per_hour) == ("new1", "pending", 0.44)
    finally:
        session.close()

    # rgt.toml still names no id: a second `up` knows the launched pod (the state database keeps its id),
    # rents no second one, and goes on to the environment audit of that pod (unreachable here: exit 1)
    assert main(["up", "train", str(root), "--approve-price", "0.80"]) == 1
    assert "gpu: pending (new1)" in capsys.readouterr().out
    assert len(runpod_fake.requests("POST", "/pods")) == 1


def test_a_bad_constraint_is_one_line_with_its_line_number_and_writes_nothing(
        tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    bad = 'launch = { gpu = "NVIDIA A40", max_price_per_hour = "cheap", image = "runpod/pytorch" }'
    root = write_project(tmp_path / "p", "runpod", runpod_fake.url, bad)
    assert main(["up", "train", str(root), "--approve-price", "0.80"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{root / 'rgt.toml'}:7: instances.gpu.launch.max_price_per_hour: must be a number > 0" in err

    table = "\n[instances.gpu.launch]\ngpu = \"NVIDIA A40\"\nmax_price_per_hour = 0.8\ncolour = \"red\"\n"
    root = write_project(tmp_path / "q", "runpod", runpod_fake.url, table)
    assert main(["up", "train", str(root)]) == 2
    err = capsys.readouterr().err
    assert ":11: instances.gpu.launch.colour: unknown key" in err and "(and 1 more problem(s))" in err
    assert not (tmp_path / "p" / ".rgt").exists() and not (tmp_path / "q" / ".rgt").exists()
    assert runpod_fake.requests() == []


def test_a_missing_key_or_smoke_command_is_refused_before_the_smoke_runs(
        tmp_path: Path, runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "smoke-ran"
    touch = f'{PY} -c "import pathlib; pathlib.Path({str(marker)!r}).touch()"'
    root = write_project(tmp_path / "p", "runpod", runpod_fake.url, RUNPOD_LAUNCH, smoke=touch)
    monkeypatch.delenv("RUNPOD_API_KEY")
    assert main(["up", "train", str(root)]) == 2
    assert "RUNPOD_API_KEY" in capsys.readouterr().err and not marker.exists()
    monkeypatch.setenv("RUNPOD_API_KEY", FAKE_KEY)
    root = write_project(tmp_path / "q", "runpod", runpod_fake.url, RUNPOD_LAUNCH, smoke=None)
    assert main(["up", "train", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs.train: no smoke command" in err
    assert runpod_fake.requests() == []


def test_launch_constraints_are_checked_per_provider(tmp_path: Path) -> None:
    cases = {
        ("paperspace", 'launch = { gpu = "A100", max_price_per_hour = 2.0 }'): "has no launch API in rgt",
        ("lambda", 'launch = { gpu = "A100", max_price_per_hour = 2.0 }'): "needs 'ssh_keys' to launch",
        ("lambda", 'launch = { gpu = "A100", max_price_per_hour = 2, ssh_keys = ["me"], interruptible = true }'):
            "Lambda has no spot instances",
        ("vastai", 'launch = { gpu = "RTX 4090", max_price_per_hour = 0, image = "x" }'): "must be a number > 0",
        ("runpod", 'launch = { max_price_per_hour = 1.0, image = "x", count = 0 }'): "missing required key 'gpu'",
    }
    for (provider, line), message in cases.items():
        root = write_project(tmp_path / provider / str(len(line)), provider, "http://127.0.0.1:9/v1", line)
        with pytest.raises(ConfigError, match=message) as caught:
            load_project(root / "rgt.toml")
        assert ":7: instances.gpu.launch" in str(caught.value)


# -- over budget, double launch, no launch API, a stale smoke ------------------------------------------------------

async def test_a_pod_created_above_the_ceiling_is_reported_recorded_and_left_for_rgt_down(
        tmp_path: Path, runpod_fake: FakeRunPod, open_session: Callable[[Path], Session]) -> None:
    line = 'launch = { gpu = "NVIDIA A40", max_price_per_hour = 0.4, image = "runpod/pytorch" }'
    session = open_session(write_project(tmp_path / "p", "runpod", runpod_fake.url, line))
    smoke = await smoke_of(session)
    plan = await launcher.plan_launch(session, "gpu")
    assert plan.price_text == "0.40" and plan.expected is None
    with pytest.raises(VerbFailed) as caught:
        await launcher.launch(session, plan, "train", "0.40", smoke, actor="test")
    message = str(caught.value)
    assert "OVER BUDGET" in message and "new1 at $0.44/h" in message and "BILLING NOW" in message
    assert "rgt down train --confirm new1" in message and "\n" not in message
    [over] = session.db.events(kind="launch_over_budget")
    assert over.detail["provider_id"] == "new1" and over.detail["price_per_hour"] == 0.44
    assert launcher.launched_id(session.db, "gpu") == "new1"
    assert runpod_fake.requests("DELETE") == []  # only the teardown service removes instances
    with pytest.raises(VerbFailed, match=r'runpod instance new1 \(pending\): rgt launches no second one'):
        await launcher.plan_launch(session, "gpu")
    assert len(runpod_fake.requests("POST", "/pods")) == 1


async def test_a_configured_id_that_still_runs_is_not_launched_again(
        tmp_path: Path, runpod_fake: FakeRunPod, open_session: Callable[[Path], Session]) -> None:
    runpod_fake.add_pod("p1", host=None, port=None)
    session = open_session(write_project(tmp_path / "p", "runpod", runpod_fake.url, RUNPOD_LAUNCH,
                                         instance_extra='id = "p1"\n'))
    assert not await launcher.wants_launch(session, "gpu")  # `rgt up` audits the running pod instead
    with pytest.raises(VerbFailed, match=r"already has runpod instance p1 \(running\)"):
        await launcher.plan_launch(session, "gpu")
    runpod_fake.deleted.add("p1")  # gone (404): a new launch is fine
    assert await launcher.wants_launch(session, "gpu")
    assert (await launcher.plan_launch(session, "gpu")).price_text == "0.80"
    assert runpod_fake.requests("POST") == []


async def test_launch_accepts_only_a_passed_smoke_of_this_run(
        tmp_path: Path, runpod_fake: FakeRunPod, open_session: Callable[[Path], Session]) -> None:
    session = open_session(write_project(tmp_path / "p", "runpod", runpod_fake.url, RUNPOD_LAUNCH, smoke=FAIL))
    plan = await launcher.plan_launch(session, "gpu")
    failed = await smoke_of(session)
    with pytest.raises(VerbFailed, match="smoke gate failed"):
        await launcher.launch(session, plan, "train", "0.80", failed)
    other = launcher.SmokeResult("train", PASS, 0, False, 0.1, "")  # passed, but not the configured command
    with pytest.raises(VerbFailed, match="smoke result is for run train"):
        await launcher.launch(session, plan, "train", "0.80", other)
    assert runpod_fake.requests("POST") == [] and session.db.events() == []


async def test_a_provider_without_a_launch_api_is_refused_with_the_console_step(
        tmp_path: Path, paperspace_fake: FakePaperspace, open_session: Callable[[Path], Session]) -> None:
    session = open_session(write_project(tmp_path / "p", "paperspace", paperspace_fake.url, ""))
    assert not await launcher.wants_launch(session, "gpu")  # `rgt up` keeps its status + audit behaviour
    with pytest.raises(UnsupportedAction, match="Paperspace.*no launch API.*pspace machine create"):
        await launcher.plan_launch(session, "gpu")
    assert paperspace_fake.requests() == [] and session.db.events() == []


async def test_a_cloud_instance_without_a_constraint_or_id_names_the_missing_key(
        tmp_path: Path, runpod_fake: FakeRunPod, open_session: Callable[[Path], Session]) -> None:
    session = open_session(write_project(tmp_path / "p", "runpod", runpod_fake.url, ""))
    with pytest.raises(ConfigError, match=r"instances\.gpu: nothing to launch from: add launch = "):
        await launcher.plan_launch(session, "gpu")


# -- vast.ai and Lambda: the API's own price is what the user approves --------------------------------------------

async def test_vast_rents_the_cheapest_offer_at_the_approved_price(
        tmp_path: Path, vast_fake: FakeVast, open_session: Callable[[Path], Session]) -> None:
    vast_fake.offers = [
        {"id": 11, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.35},
        {"id": 12, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.52},
        {"id": 13, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.95},
        {"id": 14, "gpu_name": "A100 SXM4", "num_gpus": 1, "dph_total": 0.20},
    ]
    line = 'launch = { gpu = "RTX 4090", max_price_per_hour = 0.6, image = "pytorch/pytorch", disk_gb = 30 }'
    root = write_project(tmp_path / "p", "vastai", vast_fake.url, line)
    session = open_session(root)
    seen = witness(vast_fake, root / ".rgt" / "state.db", "PUT", "v0/asks")
    smoke = await smoke_of(session)
    plan = await launcher.plan_launch(session, "gpu")
    assert (plan.price_text, plan.expected, plan.ceiling) == ("0.35", 0.35, 0.6)
    assert any("vast.ai offer 11, the cheapest of 2 matching" in text for text in plan.lines)
    with pytest.raises(VerbFailed, match="not the stated 0.35"):
        await launcher.launch(session, plan, "train", "0.6", smoke)
    assert vast_fake.requests("PUT") == []
    created = await launcher.launch(session, plan, "train", "0.35", smoke)
    [rented] = vast_fake.requests("PUT")
    assert rented.path == "/v0/asks/11/" and rented.body["image"] == "pytorch/pytorch" and rented.body["disk"] == 30
    assert seen == [["launch_refused", "approval", "action"]]
    assert launcher.launched_id(session.db, "gpu") == created.provider_id == "5001"


async def test_vast_never_rents_above_the_approved_price_when_the_offer_is_gone(
        tmp_path: Path, vast_fake: FakeVast, open_session: Callable[[Path], Session]) -> None:
    vast_fake.offers = [{"id": 11, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.35},
                        {"id": 12, "gpu_name": "RTX 4090", "num_gpus": 1, "dph_total": 0.52}]
    line = 'launch = { gpu = "RTX 4090", max_price_per_hour = 0.6, image = "pytorch/pytorch" }'
    session = open_session(write_project(tmp_path / "p", "vastai", vast_fake.url, line))
    smoke = await smoke_of(session)
    plan = await launcher.plan_launch(session, "gpu")
    vast_fake.offers = vast_fake.offers[1:]  # rented by someone else between the plan and the approval
    with pytest.raises(VerbFailed, match=r"no rentable offer .* under \$0\.350/h"):
        await launcher.launch(session, plan, "train", "0.35", smoke)
    assert vast_fake.requests("PUT") == []
    assert [e.kind for e in session.db.events()] == ["approval", "action", "action_failed"]
    assert launcher.launched_id(session.db, "gpu") is None


async def test_lambda_launches_the_priced_instance_type_after_the_approval(
        tmp_path: Path, lambda_fake: FakeLambda, open_session: Callable[[Path], Session]) -> None:
    lambda_fake.add_type("gpu_1x_a100", "A100 (40 GB SXM4)", 1, 129, ["us-east-1"])
    lambda_fake.add_type("gpu_8x_a100", "A100 (40 GB SXM4)", 8, 1032, ["us-east-1"])
    lambda_fake.add_type("gpu_1x_h100", "H100 (80 GB PCIe)", 1, 249, ["us-west-1"])
    line = 'launch = { gpu = "A100", max_price_per_hour = 2.0, ssh_keys = ["me"] }'
    root = write_project(tmp_path / "p", "lambda", lambda_fake.url, line)
    session = open_session(root)
    seen = witness(lambda_fake, root / ".rgt" / "state.db", *CREATE["lambda"][:1], "instance-operations/launch")
    smoke = await smoke_of(session)
    plan = await launcher.plan_launch(session, "gpu")
    assert plan.price_text == "1.29" and any("gpu_1x_a100 in us-east-1" in text for text in plan.lines)
    created = await launcher.launch(session, plan, "train", "1.29", smoke)
    [posted] = lambda_fake.requests(*CREATE["lambda"])
    assert posted.body["instance_type_name"] == "gpu_1x_a100" and posted.body["ssh_key_names"] == ["me"]
    assert seen == [["approval", "action"]]
    [launched] = lambda_fake.launched  # a Lambda id: 32 hex digits
    assert (created.provider_id, created.state, created.price_per_hour) == (launched, "pending", 1.29)
    assert launcher.launched_id(session.db, "gpu") == launched


# -- the typed price ----------------------------------------------------------------------------------------------

def test_prices_are_stated_and_compared_as_numbers() -> None:
    assert [text.price_text(x) for x in (0.44, 0.4, 2, 0.347, 1.23456)] == ["0.44", "0.40", "2.00", "0.347",
                                                                                 "1.2346"]
    assert launcher.price_matches("0.440", "0.44") and launcher.price_matches(" $0.44/h ", "0.44")
    for typed in ("", "0.45", "yes", "NaN", "0.44 USD"):
        assert not launcher.price_matches(typed, "0.44")
