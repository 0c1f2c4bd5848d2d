"""`rgt status --all` over three real projects (docs/remote-ops.md §9.3): a sim box whose run finished, an ssh box
on a real loopback sshd, and a RunPod account (a local fake of its API) holding the project's box, a box `rgt up`
rented for it, and one box no project names. Run in-process through `cli.main`, as a user runs it.

Shows: every box of every project with its state, burn, cost and idle time; the orphan marked exactly; the text
and the JSON (its schema checked at every level); the API key in no output; the account's list endpoint asked
once per status; and that status changes nothing: the fake saw only reads, the sim box still runs, and the
teardown that was refused before is refused after.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.fleet_views import ORPHAN_MARK
from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeRunPod, assert_no_key
from support.fleet_projects import cloud_pods, cloud_project, sim_project, ssh_project
from support.helpers import RUN
from support.json_shapes import assert_status_document
from support.sshd_fixtures import Sshd, free_port

pytestmark = pytest.mark.sshd
runpod_fake = fake_clouds.runpod_fake


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert_no_key(out, err)
    return code, out + err


@pytest.fixture
def three(tmp_path: Path, sshd: Sshd, runpod_fake: FakeRunPod, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    """The three projects, each opened once by a verb (which registers it), the sim run finished."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copyfile(sshd.client_key, home / ".ssh" / "id_ed25519")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RUNPOD_API_KEY", FAKE_KEY)
    for name in ("SSH_AUTH_SOCK", "RUNPOD_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    roots = {"sim": sim_project(tmp_path / "sim"), "ssh": ssh_project(tmp_path / "ssh", sshd.target, tmp_path / "box"),
             "cloud": cloud_project(tmp_path / "cloud", runpod_fake.url)}
    cloud_pods(runpod_fake, free_port())
    for argv in (("up", RUN, str(roots["sim"])), ("run", RUN, str(roots["sim"])),
                 ("watch", RUN, str(roots["sim"]), "--interval", "0.2")):
        assert rgt(capsys, *argv)[0] == 0
    fingerprint = sshd.host_public_key().get_fingerprint("sha256")
    assert rgt(capsys, "trust", "box", str(roots["ssh"]), "--fingerprint", fingerprint)[0] == 0
    return roots


def test_status_all_lists_every_box_of_three_projects_and_the_orphan(
        three: dict[str, Path], runpod_fake: FakeRunPod, capsys: pytest.CaptureFixture[str]) -> None:
    refused, _ = rgt(capsys, "down", RUN, str(three["sim"]), "--confirm", "sim-box")
    assert refused == 3  # nothing pulled: the gate is closed

    # the cloud project alone registers it (and already finds the orphan: exit 1)
    code, text = rgt(capsys, "status", str(three["cloud"]), "--timeout", "10")
    assert code == 1 and ORPHAN_MARK in text
    lists_before = len(runpod_fake.requests("GET", "/pods"))

    code, text = rgt(capsys, "status", "--all", "--timeout", "10")
    assert code == 1  # an orphan bills
    assert len(runpod_fake.requests("GET", "/pods")) == lists_before + 1  # one account, asked once
    lines = text.splitlines()
    assert lines[0].endswith("3 project(s) · 4 instance(s) · burning $3.71/h")  # 0.89 + 1.50 + 0.44 × 3
    assert lines[1].split() == ["PROJECT", "INSTANCE", "PROVIDER", "ID", "STATE", "BURN", "COST", "IDLE", "RUNS"]
    rows = {tuple(line.split()[:2]): line.split() for line in lines[2:6]}
    assert rows[("simproj", "box")][2:6] == ["sim", "sim-box", "running", "$0.89/h"]
    assert rows[("simproj", "box")][-2:] == [RUN, "finished"]
    assert rows[("sshproj", "box")][2:6] == ["ssh", "root@127.0.0.1:" + str(three_port(three)), "running",
                                             "$1.50/h"]
    assert rows[("cloudproj", "pod")][2:6] == ["runpod", "p1", "running", "$0.44/h"]
    assert rows[("cloudproj", "rented")][2:6] == ["runpod", "p2", "running", "$0.44/h"]
    orphans = lines[lines.index("orphans (listed by a cloud account, named by no project):") + 2]
    assert orphans.split()[:5] == ["runpod", "p9", "pod-p9", "running", "$0.44/h"]
    assert orphans.endswith(ORPHAN_MARK)

    code, out = rgt(capsys, "status", "--all", "--timeout", "10", "--format", "json")
    document = json.loads(out)
    assert code == 1
    assert_status_document(document)
    boxes = {(b["project"], b["name"]): b for b in document["instances"]}
    assert set(boxes) == {("simproj", "box"), ("sshproj", "box"), ("cloudproj", "pod"), ("cloudproj", "rented")}
    assert {k: (b["state"], b["burn_per_hour"]) for k, b in boxes.items()} == {
        ("simproj", "box"): ("running", 0.89), ("sshproj", "box"): ("running", 1.5),
        ("cloudproj", "pod"): ("running", 0.44), ("cloudproj", "rented"): ("running", 0.44)}
    sim = boxes[("simproj", "box")]
    assert sim["runs"] == [{"id": RUN, "liveness": "finished", "detail": "exit 0, artifacts present"}]
    assert sim["idle_s"] is not None and sim["idle_s"] >= 0 and sim["cost_so_far"] > 0
    assert boxes[("sshproj", "box")]["idle_s"] is None  # no run on it ever finished
    assert document["orphans"] == [{
        "provider": "runpod", "account": f"runpod account at {runpod_fake.url} (key from env RUNPOD_API_KEY)",
        "id": "p9", "name": "pod-p9", "state": "running", "price_per_hour": 0.44, "price_source": "api",
        "currency": "USD", "bills": True, "mark": ORPHAN_MARK, "burn_per_hour": 0.44, "estimate": False,
        "unknown_price": False}]
    assert [p["status"] for p in document["projects"]] == ["ok", "ok", "ok"]
    assert document["errors"] == [] and document["complete"] is False
    assert document["burn_per_hour"] == pytest.approx(0.89 + 1.5 + 0.44 * 3)

    # the orphan goes: everything was listed and nothing unknown bills
    runpod_fake.deleted.add("p9")
    code, out = rgt(capsys, "status", "--all", "--timeout", "10", "--format", "json")
    assert code == 0 and json.loads(out)["orphans"] == [] and json.loads(out)["complete"] is True

    # status changed nothing: only reads reached the API, the sim box runs, the gate still refuses
    assert {(r.method, r.path) for r in runpod_fake.requests()} <= {("GET", "/pods"), ("GET", "/pods/p1"),
                                                                    ("GET", "/pods/p2")}
    assert runpod_fake.deleted == {"p9"}  # deleted by the test itself, never by rgt
    assert rgt(capsys, "down", RUN, str(three["sim"]), "--confirm", "sim-box")[0] == 3
    code, out = rgt(capsys, "status", str(three["sim"]), "--format", "json")
    assert json.loads(out)["instances"][0]["state"] == "running"


def three_port(three: dict[str, Path]) -> int:
    """The sshd's port, as the ssh project's rgt.toml names it."""
    text = (three["ssh"] / "rgt.toml").read_text()
    return int(text.split('host = "root@127.0.0.1:', 1)[1].split('"', 1)[0])
