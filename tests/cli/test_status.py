"""`rgt status` when something cannot be asked (docs/remote-ops.md §9.3): a hung box, a deleted or broken project,
a cloud account whose list call fails, and bad usage. Run in-process through `cli.main` on real sim projects,
a local server that accepts TCP and never speaks (conftest.silent_server), and a local fake of RunPod's API.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.fleet_views import ORPHAN_MARK
from remote_gpu_trainer.services import project_registry
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeRunPod, assert_no_key
from support.fleet_projects import cloud_pods, cloud_project, named, sim_project
from support.helpers import HUNG, RUN, two_box_project
from support.json_shapes import assert_status_document
from support.sshd_fixtures import free_port

runpod_fake = fake_clouds.runpod_fake


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def up_and_finished(capsys: pytest.CaptureFixture[str], root: Path) -> None:
    for argv in (("up", RUN, str(root)), ("run", RUN, str(root)), ("watch", RUN, str(root), "--interval", "0.2")):
        assert rgt(capsys, *argv)[0] == 0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def test_a_hung_box_reads_unknown_while_every_other_box_is_listed(
        tmp_path: Path, home: Path, silent_server: int, capsys: pytest.CaptureFixture[str]) -> None:
    hung = named(two_box_project(tmp_path / "hung", silent_server, home) / "rgt.toml", "withhung")
    calm = sim_project(tmp_path / "calm", "calm")
    for root in (hung, calm):
        up_and_finished(capsys, root)
    code, out, _ = rgt(capsys, "status", "--all", "--timeout", "2", "--format", "json")
    document = json.loads(out)
    assert_status_document(document)
    boxes = {(b["project"], b["name"]): b for b in document["instances"]}
    assert boxes[("withhung", HUNG)]["state"] == "unknown"
    assert boxes[("withhung", HUNG)]["note"] == ("no answer within 2 s; state unknown: the last known rate (or the "
                                                 "price listed with it) is assumed, an estimate")
    # never asked successfully: an unknown state is not a free box, it bills the user's price as an estimate
    assert (boxes[("withhung", HUNG)]["burn_per_hour"], boxes[("withhung", HUNG)]["estimate"]) == (1.25, True)
    assert boxes[("withhung", HUNG)]["runs"] == []
    assert (boxes[("withhung", "box")]["state"], boxes[("withhung", "box")]["burn_per_hour"]) == ("running", 0.89)
    assert boxes[("calm", "box")]["runs"] == [{"id": RUN, "liveness": "finished",
                                               "detail": "exit 0, artifacts present"}]
    assert [p["status"] for p in document["projects"]] == ["ok", "ok"]
    assert code == 1 and document["complete"] is False  # a box that could not be asked
    code, out, _ = rgt(capsys, "status", "--all", "--timeout", "2")
    assert any(line.startswith(f"  withhung/{HUNG}: no answer within 2 s; state unknown") for line in out.splitlines())


def test_a_deleted_or_broken_project_is_a_row_and_exit_1(
        tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kept, gone, broken = (sim_project(tmp_path / name, name) for name in ("kept", "gone", "broken"))
    up_and_finished(capsys, kept)
    for root in (gone, broken):
        assert rgt(capsys, "up", RUN, str(root))[0] == 0  # opened once by a verb: registered
    shutil.rmtree(gone)
    (broken / "rgt.toml").write_text("[project\nname = ", encoding="utf-8")
    assert {p.root for p in project_registry.known_projects()} == {kept, gone, broken}

    code, out, err = rgt(capsys, "status", "--all", "--format", "json")
    document = json.loads(out)
    assert_status_document(document)
    rows = {Path(p["root"]).name: p for p in document["projects"]}
    assert (rows["gone"]["status"], rows["gone"]["name"], rows["gone"]["instances"]) == ("gone", None, 0)
    assert rows["gone"]["detail"].startswith("no rgt.toml there any more")
    assert rows["broken"]["status"] == "unreadable" and "rgt.toml could not be read" in rows["broken"]["detail"]
    assert (rows["kept"]["status"], rows["kept"]["name"], rows["kept"]["instances"]) == ("ok", "kept", 1)
    assert [b["project"] for b in document["instances"]] == ["kept"]
    assert document["errors"] == [f"{p['root']}: {p['detail']}" for p in document["projects"] if p["status"] != "ok"]
    assert len(document["errors"]) == 2
    assert code == 1 and err == ""
    code, out, _ = rgt(capsys, "status", "--all")
    assert code == 1 and f"  gone       {gone}  ?: no rgt.toml there any more" in out


def test_an_account_that_cannot_be_listed_is_said_and_exit_1(
        tmp_path: Path, home: Path, runpod_fake: FakeRunPod, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", FAKE_KEY)
    monkeypatch.delenv("RUNPOD_API_URL", raising=False)
    root = cloud_project(tmp_path / "cloud", runpod_fake.url)
    cloud_pods(runpod_fake, free_port())
    runpod_fake.fail("GET", "/pods", 403, runpod_fake.error_body(403, f"key {FAKE_KEY} may not list"), times=10)
    code, out, err = rgt(capsys, "status", str(root), "--timeout", "10", "--format", "json")
    document = json.loads(out)
    assert_status_document(document)
    assert code == 1 and document["orphans"] == []
    [error] = document["errors"]
    assert error.startswith(f"runpod account at {runpod_fake.url} (key from env RUNPOD_API_KEY): could not be "
                            "listed: ") and "403" in error
    assert [b["state"] for b in document["instances"]] == ["running", "running"]  # the boxes themselves answer
    code, out, err = rgt(capsys, "status", str(root), "--timeout", "10")
    assert code == 1 and "accounts not listed:" in out and ORPHAN_MARK not in out
    assert_no_key(out, err)
    assert {r.method for r in runpod_fake.requests()} == {"GET"}


@pytest.mark.parametrize(("argv", "message"), [
    (("status", "somewhere", "--all"), "rgt status: give PROJECT or --all, not both"),
    (("status", "--timeout", "0"), "rgt status: --timeout must be more than 0 seconds, not 0"),
    (("status", "--format", "yaml"), "invalid choice: 'yaml'"),
    (("status",), "no rgt.toml in"),
])
def test_bad_usage_is_one_line_and_exit_2(home: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                         message: str) -> None:
    code, out, err = rgt(capsys, *argv)
    assert code == 2 and out == "" and message in err and len(err.splitlines()) == 1


def test_two_projects_with_one_name_are_told_apart_by_their_folder(
        tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two clones of one repository carry the same [project] name: each row adds its folder, so the user can
    tell which box is which before tearing one down; a project whose name is unique stays as it is."""
    first = sim_project(tmp_path / "clone-a", "twin")
    second = sim_project(tmp_path / "clone-b", "twin")
    deep = sim_project(tmp_path / "elsewhere" / "clone-a", "twin")  # even the folder's name is shared
    single = sim_project(tmp_path / "solo", "solo")
    for root in (first, second, deep, single):
        assert rgt(capsys, "up", RUN, str(root))[0] == 0
    code, out, _ = rgt(capsys, "status", "--all")
    lines = out.splitlines()
    assert lines[1].startswith("PROJECT ")
    projects = sorted(line.split("  ")[0].rstrip() for line in lines[2:6])
    assert projects == sorted([f"twin ({first})", "twin (clone-b)", f"twin ({deep})", "solo"])
    code, out, _ = rgt(capsys, "status", "--all", "--format", "json")
    document = json.loads(out)
    assert_status_document(document)
    assert sorted(b["project"] for b in document["instances"]) == ["solo", "twin", "twin", "twin"]  # JSON unchanged
