"""vast.ai's recorded bodies through the whole CLI (issue 25): `rgt --report --format json`, `rgt status` and
`rgt down`, in-process through `cli.main`, on a project whose box is served by the local vast.ai fake with the
bodies recorded from vast's own docs (tests/fixtures/providers/vastai/). The box's SSH is a loopback port
nothing listens on, so nothing reaches it and the gate cannot read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli import main
from support import fake_clouds
from support.fake_clouds import FakeVast, assert_no_key
from support.helpers import RUN, toml_string, write_project
from support.json_shapes import assert_status_document
from support.recorded import recorded
from support.sshd_fixtures import free_port

vast_fake = fake_clouds.vast_fake
cloud_env = fake_clouds.cloud_env

ID = "883"  # the recorded instance's own id
PRICE = 1.0020740740740741  # its dph_total, the same in every recorded state
DISK_PER_HOUR = 0.002074074074074074  # its storage_total_cost: what a stopped instance bills
JUPYTER_TOKEN = recorded("vastai", "v0_get_instance_running")["instances"]["jupyter_token"]

# recorded GET body → (state, the meter bills the API's price as an estimate)
STATES: dict[str, tuple[str, bool]] = {
    "v0_get_instance_provisioning_null_status": ("pending", False),
    "v0_get_instance_loading": ("pending", False),
    "v0_get_instance_running": ("running", False),
    "v0_get_instance_stopped": ("stopped", False),
    "v0_get_instance_frozen": ("unknown", True),
    "v0_get_instance_exited": ("unknown", True),
    "v0_get_instance_rebooting": ("unknown", True),
    "v0_get_instance_unknown": ("unknown", True),
    "v0_get_instance_offline": ("unknown", True),
}


def serve(fake: FakeVast, name: str, ident: str = ID) -> None:
    row: dict[str, Any] = recorded("vastai", name)["instances"]
    row["id"] = int(ident)
    fake.instances[ident] = row


def vast_project(root: Path, url: str) -> Path:
    """Instance `gpu` = vast.ai instance 883, run r1 on it (declared, never pulled)."""
    body = (f'provider = "vastai"\nid = "{ID}"\napi_base = {toml_string(url)}\n'
            f'host = "root@127.0.0.1:{free_port()}"')
    return write_project(root, instance="gpu", instance_body=body).parent


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", sorted(STATES))
def test_report_json_shows_each_recorded_state_at_the_apis_price(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """Before issue 25 an `exited` box read `stopped` and a null status `unknown` in the report."""
    serve(vast_fake, name)
    root = vast_project(tmp_path / "p", vast_fake.url)
    code, out, err = rgt(capsys, "--report", str(root), "--format", "json")
    assert code == 0, err
    [box] = json.loads(out)["instances"]
    state, estimate = STATES[name]
    # a running box's GPU is sampled over SSH; unreachable here, so the API's gpu_name stands, as in every state
    gpu = "RTX A5000"
    assert (box["provider"], box["id"], box["state"], box["gpu"]) == ("vastai", ID, state, gpu)
    assert (box["price_per_hour"], box["price_source"]) == (PRICE, "api")
    if estimate:  # a state rgt does not map bills the API's price, marked as an estimate, never $0
        assert (box["burn_per_hour"], box["estimate"]) == (round(PRICE, 6), True)
    assert box["gate"]["open"] is False and box["gate"]["at_risk"] == [RUN]
    assert_no_key(out, err)
    assert {r.method for r in vast_fake.requests()} == {"GET"}


def test_status_prices_vast_orphans_by_what_they_bill(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, capsys: pytest.CaptureFixture[str]) -> None:
    """The account lists the project's box and three it does not name. The stopped orphan bills its disk
    (vast's storage_total_cost), not dph_total; the exited and frozen ones are `unknown` at the API's price
    (before issue 25 exited read stopped, and the stopped disk was spread over 730 h: 0.0020457)."""
    serve(vast_fake, "v0_get_instance_running")
    for name, ident in (("v0_get_instance_stopped", "884"), ("v0_get_instance_exited", "885"),
                        ("v0_get_instance_frozen", "886")):
        serve(vast_fake, name, ident)
    root = vast_project(tmp_path / "p", vast_fake.url)
    code, out, err = rgt(capsys, "status", str(root), "--timeout", "10", "--format", "json")
    document = json.loads(out)
    assert_status_document(document)
    assert code == 1 and document["errors"] == []  # orphans bill
    orphans = {o["id"]: o for o in document["orphans"]}
    assert set(orphans) == {"884", "885", "886"}
    assert all((o["provider"], o["price_per_hour"], o["price_source"], o["bills"]) == ("vastai", PRICE, "api", True)
               for o in orphans.values())
    stopped = orphans["884"]
    assert stopped["state"] == "stopped" and stopped["burn_per_hour"] == DISK_PER_HOUR
    assert stopped["estimate"] is False
    for ident in ("885", "886"):
        assert (orphans[ident]["state"], orphans[ident]["burn_per_hour"], orphans[ident]["estimate"]) == (
            "unknown", PRICE, True)
    listed = vast_fake.requests("GET", "/v1/instances/")
    assert listed and vast_fake.requests("GET", "/v0/instances/") == []
    assert {r.method for r in vast_fake.requests()} == {"GET"}
    assert JUPYTER_TOKEN not in out and JUPYTER_TOKEN not in err  # an API field, never shown
    assert_no_key(out, err)


@pytest.mark.parametrize("name", ["v0_get_instance_running", "v0_get_instance_exited", "v0_get_instance_frozen"])
def test_down_with_unpulled_results_is_refused_and_nothing_is_destroyed(
        tmp_path: Path, cloud_env: Path, vast_fake: FakeVast, capsys: pytest.CaptureFixture[str], name: str) -> None:
    serve(vast_fake, name)
    root = vast_project(tmp_path / "p", vast_fake.url)
    code, out, err = rgt(capsys, "down", RUN, str(root), "--confirm", ID)
    assert code == 3, (out, err)
    assert "unknown is not empty" in err and f"--accept-loss {RUN}" in err, err
    assert [r for r in vast_fake.requests() if r.method != "GET"] == []  # no DELETE, no stop
    assert ID not in vast_fake.deleted
    assert_no_key(out, err)
