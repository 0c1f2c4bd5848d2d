"""Projects for `rgt status` tests (docs/remote-ops.md §9.3): a sim project, an ssh project, and a cloud project
whose account (a fake RunPod API) holds a box named in rgt.toml, a box `rgt up` rented, and a box no project
names."""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.state import events
from remote_gpu_trainer.state.db import StateDB
from support.fake_clouds import FakeRunPod
from support.helpers import INSTANCE, toml_string, write_project


def named(path: Path, name: str) -> Path:
    """The project at `path` (its rgt.toml) renamed, so three projects are told apart in one listing."""
    path.write_text(path.read_text(encoding="utf-8").replace('name = "test-project"', f'name = "{name}"'),
                    encoding="utf-8")
    return path.parent


def sim_project(root: Path, name: str = "simproj") -> Path:
    return named(write_project(root), name)


def ssh_project(root: Path, target: str, box: Path, name: str = "sshproj") -> Path:
    """Instance `box` over SSH at `target` (user@host:port), billed at the user's price of 1.50/h."""
    body = f'provider = "ssh"\nhost = {toml_string(target)}\nprice_per_hour = 1.5'
    return named(write_project(root, instance=INSTANCE, instance_body=body, box=box), name)


def cloud_project(root: Path, api: str, name: str = "cloudproj") -> Path:
    """Instance `pod` (RunPod p1 by rgt.toml's id, run r1 on it) and `rented` (no id: `rgt up` rented p2,
    recorded as rgt up records it, a LAUNCHED event)."""
    body = f'provider = "runpod"\nid = "p1"\napi_base = {toml_string(api)}'
    path = write_project(root, instance="pod", instance_body=body)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(f'\n[instances.rented]\nprovider = "runpod"\napi_base = {toml_string(api)}\n')
    db = StateDB(load_project(path).state_db)
    try:
        events.instance_rented(db, over_budget=False, run_id="r1", instance="rented", provider="runpod",
                               provider_id="p2", state="running", raw_state="RUNNING", price_per_hour=0.44,
                               price_shown="$0.44", price_source="api", config_line='id = "p2"')
    finally:
        db.close()
    return named(path, name)


def cloud_pods(fake: FakeRunPod, ssh_port: int) -> None:
    """p1 and p2 (the project's), p9 (nobody's): SSH at a loopback port nothing listens on, so the provider's
    one SSH check per box is refused at once."""
    for pod_id in ("p1", "p2", "p9"):
        fake.add_pod(pod_id, host="127.0.0.1", port=ssh_port)
