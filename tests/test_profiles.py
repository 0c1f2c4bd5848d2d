"""Provider profiles (docs/providers.md §11): every shipped file loads strictly, carries the spec's money and
teardown facts with their verified months, gates what the gate spec says, and ages visibly.

The per-platform assertions are written from the spec text (docs/providers.md §2-§8, §10), not from the TOML, so a
profile edit that drifts from the spec fails here.
"""

from __future__ import annotations

import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.profiles import (
    Profile,
    list_profiles,
    load_profile,
    profile_age_text,
    profile_ids,
    stale_facts,
)

SPEC_IDS = {"runpod", "vastai", "lambda", "paperspace", "autodl", "ssh", "slurm", "kubernetes", "local", "sim",
            "matpool", "gpushare", "featurize", "lanrui"}
CN_IDS = ("autodl", "matpool", "gpushare", "featurize", "lanrui")
MONTH = re.compile(r"^(\d{4}-(0[1-9]|1[0-2])|unstamped)$")
TODAY = date(2026, 11, 29)  # 2026-06 stamps are 5 months old; they go stale in 2027-01 (docs/providers.md §0)


@pytest.fixture(scope="module")
def profiles() -> dict[str, Profile]:
    return {profile.id: profile for profile in list_profiles()}


# -- every shipped profile ----------------------------------------------------------------------------------


def test_every_spec_id_ships_and_loads(profiles: dict[str, Profile]) -> None:
    assert set(profile_ids()) == SPEC_IDS
    assert set(profiles) == SPEC_IDS
    for profile_id, profile in profiles.items():
        assert profile.where == f"assets/profiles/{profile_id}.toml"


def test_every_fact_carries_a_verified_month(profiles: dict[str, Profile]) -> None:
    for profile in profiles.values():
        facts = list(profile.facts())
        assert facts, profile.id
        for fact in facts:
            assert MONTH.match(fact.verified), f"{profile.id} {fact.where}: {fact.verified!r}"
        raw_rows = [row for key in ("storage", "actions", "residuals", "danger_clocks", "surface_to_user")
                    for row in profile.raw.get(key, [])]
        assert all("verified" in row for row in raw_rows), profile.id


def test_conflicts_of_section_10_are_recorded(profiles: dict[str, Profile]) -> None:
    runpod_api, vast_api, lambda_api = (profiles[i].control.api for i in ("runpod", "vastai", "lambda"))
    assert runpod_api and runpod_api.conflict and "retired on 2026-11-15" in runpod_api.conflict
    assert vast_api and vast_api.conflict and "/api/v1" in vast_api.conflict
    assert lambda_api and lambda_api.conflict
    assert "Basic" in lambda_api.conflict and "cloud.lambda.ai" in lambda_api.conflict
    paperspace_stop = profiles["paperspace"].action("stop")
    assert paperspace_stop and paperspace_stop.conflict
    autodl_api = profiles["autodl"].control.api
    assert autodl_api and autodl_api.conflict and "Pro" in autodl_api.conflict
    fs = profiles["autodl"].tier("autodl-fs")
    assert fs and fs.inode_cap == 200_000 and fs.conflict


def test_every_down_verb_names_an_action_behind_the_full_gate(profiles: dict[str, Profile]) -> None:
    for profile in profiles.values():
        action = profile.teardown_action()
        if profile.id == "local":
            assert action is None
            continue
        assert action is not None, profile.id
        assert action.needs_gate and profile.raw["verbs"]["down"]["gate"] == "full", profile.id


# -- spec facts, platform by platform ---------------------------------------------------------------------


def test_runpod_stop_keeps_the_volume_billing_at_2x(profiles: dict[str, Profile]) -> None:
    runpod = profiles["runpod"]
    stop, terminate = runpod.action("stop"), runpod.action("terminate")
    assert stop and terminate
    assert stop.stops_compute and stop.stops_storage_billing is False and stop.reversible
    assert stop.destroys == ("container",)
    volume = runpod.tier("volume")
    assert volume and volume.path == "/workspace" and volume.survives_stop and not volume.survives_destroy
    assert volume.billed_while_stopped and volume.verified == "2026-06"
    rate = runpod.pricing.storage_rate("volume")
    assert rate and rate.rate == 0.20 and rate.applies == "stopped"
    assert terminate.destroys == ("container", "volume") and not terminate.reversible and terminate.full_meter_stop
    network = runpod.tier("network-volume")
    assert network and network.survives_destroy and network.attach == "create-only"
    assert [r.what for r in runpod.residuals] == ["network volume"]
    assert {c.id: c.duration for c in runpod.danger_clocks}["stale-stopped"] == timedelta(days=30)
    assert runpod.spot and runpod.spot.grace_s == 5 and runpod.pricing.billed_per == "second"


def test_runpod_api_is_configurable_and_polls_to_404(profiles: dict[str, Profile]) -> None:
    api = profiles["runpod"].control.api
    assert api is not None
    assert (api.base_url, api.base_url_env) == ("https://api.runpod.io/v2", "RUNPOD_API_URL")  # v1 retired
    assert api.auth_scheme == "bearer"
    assert api.auth_env == ("RUNPOD_API_KEY",)
    assert [(f.path, f.key) for f in api.auth_files] == [("~/.runpod/config.toml", "apiKey")]
    terminate = api.endpoint("terminate")
    assert terminate and (terminate.method, terminate.path) == ("DELETE", "/pods/{id}")
    stop = api.endpoint("stop")
    assert stop and (stop.method, stop.path, stop.body) == ("POST", "/pods/{id}/action", '{"action":"stop"}')
    assert api.gone_when == ("http:404", "status:TERMINATED") and api.price_field == "cost"
    assert api.verified == "2026-12"
    assert api.resolved_base_url(None, {}) == "https://api.runpod.io/v2"
    assert api.resolved_base_url(None, {"RUNPOD_API_URL": "https://env.example/v1/"}) == "https://env.example/v1"
    assert api.resolved_base_url("https://inst.example/v1", {"RUNPOD_API_URL": "https://env.example"}) == \
        "https://inst.example/v1"


def test_vastai_stop_keeps_the_disk_billing_until_destroy(profiles: dict[str, Profile]) -> None:
    vast = profiles["vastai"]
    stop, destroy = vast.action("stop"), vast.action("terminate")
    assert stop and destroy
    assert stop.stops_storage_billing is False and stop.destroys == () and not stop.needs_gate
    disk = vast.tier("instance-disk")
    assert disk and disk.survives_stop and not disk.survives_destroy and disk.billed_while_stopped
    assert "negative balance" in (disk.price_note or "")
    assert destroy.destroys == ("instance-disk",) and not destroy.reversible and destroy.label == "Destroy instance"
    residuals = {r.id: r for r in vast.residuals}
    assert residuals["local-volume"].action == "delete-volume" and "bandwidth" in residuals
    api = vast.control.api
    assert api and api.base_url == "https://console.vast.ai/api" and api.base_url_env == "VAST_URL"
    assert api.endpoints["list"].path == "/v1/instances/" and api.endpoints["get"].path == "/v0/instances/{id}/"
    assert api.price_field == "dph_total" and "null:instances" in api.gone_when
    assert "http:404" not in api.gone_when  # vast documents no 404 for a GET: a wrong base URL must not read gone
    assert vast.pricing.hours_per_month == 720 and profiles["runpod"].pricing.hours_per_month == 730
    assert vast.spot and vast.spot.grace_s == 0
    assert vast.raw["detach"]["primitive"] == "onstart"


def test_lambda_has_no_stop_and_nfs_bills_until_deleted(profiles: dict[str, Profile]) -> None:
    lam = profiles["lambda"]
    assert lam.action("stop") is None
    terminate = lam.action("terminate")
    assert terminate and terminate.stops_storage_billing == "partial" and terminate.destroys == ("local",)
    nfs = lam.tier("nfs")
    assert nfs and nfs.survives_destroy and nfs.billed_while_stopped
    rate = lam.pricing.storage_rate("nfs")
    assert rate and (rate.rate, rate.unit, rate.applies) == (0.20, "GiB", "always")
    assert rate.per_hour(100 << 30) == pytest.approx(0.20 * 100 / 730)
    delete_nfs = lam.action("delete-nfs")
    assert delete_nfs and delete_nfs.manual and delete_nfs.requires == ("terminate",)
    shutdown = next(c for c in lam.danger_clocks if c.id == "in-os-shutdown")
    assert "Alert" in shutdown.effect and "billing" in shutdown.effect
    api = lam.control.api
    assert api and api.auth_scheme == "bearer" and api.rate_limit_per_s == 1 and api.price_unit == "USD-cents/h"
    assert lam.pricing.billed_per == "minute" and lam.spot and not lam.spot.available
    assert lam.raw["ssh"]["user"] == "ubuntu"


def test_paperspace_residuals_are_ip_storage_and_snapshots(profiles: dict[str, Profile]) -> None:
    paperspace = profiles["paperspace"]
    whats = " ".join(r.what for r in paperspace.residuals)
    assert "IP" in whats and "storage" in whats and "snapshots" in whats
    stop, destroy = paperspace.action("stop"), paperspace.action("terminate")
    assert stop and stop.stops_compute and stop.stops_storage_billing is False and stop.reversible
    assert destroy and destroy.requires == ("stop",) and destroy.destroys == ("block",)
    for action_id in ("release-ip", "delete-storage", "delete-snapshot"):
        action = paperspace.action(action_id)
        assert action and action.needs_gate and action.manual, action_id
    release = paperspace.action("release-ip")
    assert release and paperspace.destroys_text(release) == ["static public IP"]
    snapshots = paperspace.pricing.storage_rate("snapshots")
    assert snapshots and snapshots.rate == 0.29
    notebook = paperspace.pricing.storage_rate("notebook-storage")
    assert notebook and notebook.per_hour(5 * 10**9) == 0.0  # the first 5 GB are free
    clocks = {c.id: c.duration for c in paperspace.danger_clocks}
    assert clocks["auto-shutdown-free-notebook"] == timedelta(hours=6)
    assert clocks["auto-shutdown-paid-notebook"] == timedelta(hours=12)


def test_autodl_is_console_only_with_a_15_day_release_clock(profiles: dict[str, Profile]) -> None:
    autodl = profiles["autodl"]
    assert autodl.control.mode == "console" and autodl.pricing.currency == "CNY"
    stop, release = autodl.action("stop"), autodl.action("terminate")
    assert stop and stop.reversible and not stop.needs_gate and stop.manual
    assert release and release.needs_gate and release.manual and "释放" in release.label
    assert release.destroys == ("system", "data-disk") and release.stops_storage_billing == "partial"
    assert {c.id: c.duration for c in autodl.danger_clocks}["stopped-auto-release"] == timedelta(days=15)
    data_disk, fs = autodl.tier("data-disk"), autodl.tier("autodl-fs")
    assert data_disk and data_disk.billed_while_stopped and not data_disk.survives_destroy
    assert fs and fs.survives_destroy and autodl.durable_survives() is True
    api = autodl.control.api
    assert api and api.auth_scheme == "raw-header" and api.endpoint("terminate") is None
    assert autodl.raw["network"]["proxy_hook"] == "source /etc/network_turbo"


def test_chinese_family_billing_and_clocks(profiles: dict[str, Profile]) -> None:
    gpushare, lanrui, featurize, matpool = (profiles[i] for i in ("gpushare", "lanrui", "featurize", "matpool"))
    assert {c.id: c.duration for c in gpushare.danger_clocks}["stopped-auto-release"] == timedelta(days=10)
    no_gpu = gpushare.action("no-gpu")
    assert no_gpu and not no_gpu.needs_gate
    datadisk = lanrui.tier("datadisk")
    assert datadisk and datadisk.billed_while_stopped
    lanrui_down = lanrui.action("terminate")
    assert lanrui_down and "datadisk" in lanrui_down.destroys and lanrui_down.stops_storage_billing is True
    featurize_down = featurize.action("terminate")
    assert featurize_down and featurize_down.destroys == ("system",)
    assert all(t.survives_destroy for t in featurize.storage if t.name in ("work", "cloud"))
    netdisk = matpool.tier("netdisk")
    assert netdisk and netdisk.billed_while_stopped and netdisk.path == "/mnt"
    for profile_id in CN_IDS:
        profile = profiles[profile_id]
        assert profile.control.mode == "console" and profile.family == "cn"
        assert all(action.manual for action in profile.actions), profile_id
        assert profile.pricing.currency == "CNY" and profile.pricing.source == "user"


def test_kubernetes_teardown_needs_the_node_pool_scaled_down(profiles: dict[str, Profile]) -> None:
    k8s = profiles["kubernetes"]
    delete_job, scale = k8s.action("terminate"), k8s.action("scale-down")
    assert delete_job and not delete_job.full_meter_stop and delete_job.needs_gate
    assert scale and scale.full_meter_stop and scale.requires == ("terminate",)
    assert any("node pool" in r.what for r in k8s.residuals)
    assert k8s.raw["detach"]["primitive"] == "k8s-job"


# -- the gate per action (docs/gate.md §7) ----------------------------------------------------------


@pytest.mark.parametrize(("profile_id", "action_id", "gated"), [
    ("runpod", "terminate", True),  # irreversible
    ("runpod", "stop", True),  # wipes the container disk
    ("vastai", "stop", False),  # reversible parking, nothing destroyed
    ("vastai", "delete-volume", True),
    ("lambda", "terminate", True),
    ("paperspace", "stop", False),
    ("paperspace", "release-ip", True),
    ("autodl", "stop", False),  # 关机: plain confirmation with its danger clock
    ("autodl", "terminate", True),  # 释放
    ("gpushare", "no-gpu", False),  # 无卡启动
    ("gpushare", "stop", True),  # 关机 resets /
    ("lanrui", "stop", True),  # the system disk is lost on stop
    ("kubernetes", "scale-down", False),
    ("slurm", "cancel", True),
    ("sim", "stop", False),
    ("ssh", "terminate", True),
])
def test_gate_requirement_per_action(profiles: dict[str, Profile], profile_id: str, action_id: str,
                                     gated: bool) -> None:
    action = profiles[profile_id].action(action_id)
    assert action is not None and action.needs_gate is gated


def test_gate_rule_is_irreversible_or_destroying(profiles: dict[str, Profile]) -> None:
    for profile in profiles.values():
        for action in profile.actions:
            assert action.needs_gate == (not action.reversible or bool(action.destroys)), (profile.id, action.id)


# -- staleness ------------------------------------------------------------------------------------------------


def test_seven_months_is_stale_five_is_not(profiles: dict[str, Profile]) -> None:
    lam = profiles["lambda"]  # every money fact stamped 2026-06
    assert not lam.is_stale(date(2026, 11, 1)) and lam.is_stale(date(2027, 1, 1))
    assert not lam.is_stale(date(2026, 12, 31))  # 6 months: not yet
    assert profile_age_text(lam, date(2026, 11, 1)) == "verified 2026-06 (5 months ago)"
    assert profile_age_text(lam, date(2027, 1, 1)) == \
        "verified 2026-06 (7 months ago) — STALE, re-check the provider's pricing page"
    stale_later = {f.where: f.months_old for f in stale_facts(lam, date(2027, 1, 1))}
    assert stale_later["actions[terminate]"] == 7 and stale_later["storage[nfs]"] == 7
    assert all(f.months_old is None for f in stale_facts(lam, date(2026, 11, 1)))  # only the unstamped ones


def test_unstamped_facts_are_flagged_stale_unknown(profiles: dict[str, Profile]) -> None:
    runpod = profiles["runpod"]
    flagged = {f.where: f for f in stale_facts(runpod, TODAY)}
    unstamped = [f for f in flagged.values() if f.verified == "unstamped"]  # the GraphQL spot-bid note
    assert unstamped and all(f.months_old is None and "unstamped" in f.text for f in unstamped)
    rp15 = next(where for where, f in flagged.items() if f.verified == "2026-04")  # RP15, v2026-04
    assert flagged[rp15].months_old == 7
    ssh = profiles["ssh"]
    assert ssh.oldest_verified() == "unstamped" and ssh.is_stale(TODAY)
    assert "STALE" in profile_age_text(ssh, TODAY) and "unstamped" in profile_age_text(ssh, TODAY)
    vast = profiles["vastai"]  # every money fact stamped (the API facts verified 2026-12): the oldest month shows
    assert profile_age_text(vast, TODAY) == "verified 2026-06 (5 months ago)"


def test_existing_profiles_keep_their_behaviour(profiles: dict[str, Profile]) -> None:
    sim = profiles["sim"]
    assert sim.oldest_verified() == "2026-11" and not sim.is_stale(TODAY) and not sim.gpu_sampling
    assert (sim.pricing.compute_per_hour, sim.pricing.storage_per_hour, sim.pricing.source) == (0.89, 0.02, "profile")
    terminate = sim.action("terminate")
    assert terminate and sim.destroys_text(terminate) == ["disk (/)"] and sim.durable_survives() is False
    assert profiles["local"].actions == () and profiles["local"].durable_survives() is True
    assert [r.get("what") for r in profiles["runpod"].residuals] == ["network volume"]  # dict-style reads
    assert profiles["runpod"].storage[1]["path"] == "/workspace"


# -- strict loading -------------------------------------------------------------------------------------------

GOOD = """\
schema = "remote-gpu-trainer/PROFILE/v1"
id = "good"
display_name = "Good"
kind = "cloud-api"
[[storage]]
name = "disk"
path = "/"
survives_stop = true
survives_destroy = false
billed_while_stopped = true
verified = "2026-06"

[[actions]]
id = "stop"
label = "Stop"
endpoint = "stop"
stops_compute = true
stops_storage_billing = false
destroys = []
reversible = true
verified = "2026-04"

[[actions]]
id = "terminate"
label = "Terminate"
endpoint = "terminate"
stops_compute = true
stops_storage_billing = true
destroys = ["disk"]
reversible = false
verified = "2026-06"

[[danger_clocks]]
id = "idle"
trigger = "stopped"
after = "P15D"
effect = "released"
verified = "2026-06"

[control]
mode = "api"

[control.api]
base_url = "https://api.example.com/v1"
auth_scheme = "bearer"
auth_env = ["EXAMPLE_KEY"]
verified = "2026-06"

[control.api.endpoints]
stop = { method = "POST", path = "/i/{id}/stop" }
terminate = { method = "DELETE", path = "/i/{id}" }

[pricing]
currency = "USD"
source = "api"
verified = "2026-06"

[detach]
primitive = "tmux"

[verbs]
up = { via = "api", action = "create" }
push = { via = "ssh", action = "sftp" }
run = { via = "ssh", action = "detach" }
watch = { via = "ssh", action = "probe" }
pull = { via = "ssh", action = "resumable-pull" }
down = { via = "api", action = "terminate", gate = "full" }
"""


def write(tmp_path: Path, text: str, name: str = "good") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads_through_the_same_loader(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, GOOD))
    assert profile.id == "good" and profile.stale_after_months == 6
    assert {c.id: c.duration for c in profile.danger_clocks} == {"idle": timedelta(days=15)}
    # the stop action is stamped 2026-04: in 2026-11 it is 7 months old, the rest 5
    assert [(f.where, f.months_old) for f in stale_facts(profile, TODAY)] == [("actions[stop]", 7)]
    assert profile.is_stale(TODAY)


@pytest.mark.parametrize(("old", "new", "key"), [
    ('kind = "cloud-api"', 'kind = "cloud-api"\ncolour = "red"', "colour"),
    ("billed_while_stopped = true\n", "billed_while_stopped = true\ncolour = 1\n", "storage[0].colour"),
    ('label = "Stop"\n', "", "actions[0].label"),
    ('display_name = "Good"\n', "", "display_name"),
    ('kind = "cloud-api"', 'kind = "mainframe"', "kind"),
    ('mode = "api"', 'mode = "telepathy"', "control.mode"),
    ('auth_scheme = "bearer"', 'auth_scheme = "query"', "control.api.auth_scheme"),
    ('primitive = "tmux"', 'primitive = "screen"', "detach.primitive"),
    ('stops_storage_billing = false', 'stops_storage_billing = "maybe"', "actions[0].stops_storage_billing"),
    ('verified = "2026-04"', 'verified = "2026-13"', "actions[0].verified"),
    ('effect = "released"\nverified = "2026-06"', 'effect = "released"\nverified = "June 2026"',
     "danger_clocks[0].verified"),
    ('billed_while_stopped = true\nverified = "2026-06"\n', "billed_while_stopped = true\n", "storage[0].verified"),
    ('after = "P15D"', 'after = "fifteen days"', "danger_clocks[0].after"),
    ('destroys = ["disk"]', 'destroys = ["volume"]', "actions[1].destroys"),
    ('down = { via = "api", action = "terminate", gate = "full" }', 'down = { via = "api", action = "terminate" }',
     "verbs.down.gate"),
    ('terminate = { method = "DELETE", path = "/i/{id}" }', 'terminate = { method = "ZAP", path = "/i/{id}" }',
     "control.api.endpoints.terminate.method"),
    ('base_url = "https://api.example.com/v1"', 'base_url = "https://api.example.com/v1?api_key=x"',
     "control.api.base_url"),
    ('id = "good"', 'id = "other"', "id"),
    ('auth_env = ["EXAMPLE_KEY"]\n', "", "control.api.auth_env"),
    ('source = "api"', 'source = "guess"', "pricing.source"),
    ("survives_stop = true", 'survives_stop = "yes"', "storage[0].survives_stop"),
])
def test_bad_profiles_give_one_line_errors_naming_file_and_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ConfigError) as raised:
        load_profile(path)
    message = str(raised.value)
    assert "\n" not in message
    located = re.match(rf"{re.escape(str(path))}(?::(\d+))?: {re.escape(key)}:", message)
    assert located is not None, message
    if located[1] is None:  # only an absent top-level key has no line to point at
        assert "missing required key" in message and "." not in key, message
        return
    line = GOOD.replace(old, new, 1).splitlines()[int(located[1]) - 1]
    parts = [part.split("[")[0] for part in key.split(".")]
    assert any(part in line for part in parts) or line.lstrip().startswith("{"), (line, message)


def test_malformed_toml_and_unknown_ids(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "\nthis is not toml\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: malformed TOML"):
        load_profile(path)
    with pytest.raises(ConfigError, match="no billing profile for provider 'nope'"):
        load_profile("nope")
    with pytest.raises(ConfigError, match="no billing profile"):
        load_profile("../sim")
