"""rgt.toml: valid projects load; every kind of bad input is one error naming file, key and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.config.project import load_project, resolve_project_file
from remote_gpu_trainer.errors import ConfigError

GOOD = """\
[project]
name = "p"

[instances.box]
provider = "sim"

[runs.exp1]
instance = "box"
workdir = "/workspace/proj"
command = "python train.py --seed {cell} --out {out}"
remote_root = "/workspace/rgt/exp1"
roster = ["seed0", "seed1"]
metric = { name = "val_loss", direction = "min" }
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rgt.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_project(write(tmp_path, text))
    return str(info.value)


def test_valid_project_loads_into_typed_values(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, GOOD))
    run = project.runs["exp1"]
    assert project.name == "p"
    assert project.instances["box"].provider == "sim"
    assert run.roster == ("seed0", "seed1")
    assert run.required == ("best.pth", "best_metrics.json")
    assert run.metric is not None and run.metric.direction == "min"
    assert project.state_db == tmp_path.resolve() / ".rgt" / "state.db"


def test_malformed_toml_names_file_and_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('name = "p"', 'name = "p'))
    assert "rgt.toml" in message and "malformed TOML" in message and "line 2" in message


def test_unknown_key_suggests_and_names_line(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('remote_root =', 'remote_rot = "/x"\nremote_root ='))
    assert "rgt.toml:11: runs.exp1.remote_rot: unknown key (did you mean 'remote_root'?)" in message


def test_unknown_provider_is_refused_with_a_hint(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('provider = "sim"', 'provider = "runpd"'))
    assert "rgt.toml:5: instances.box.provider: unknown provider 'runpd'" in message
    assert "did you mean 'runpod'" in message


def test_all_problems_are_collected(tmp_path: Path) -> None:
    bad = GOOD.replace('instance = "box"', 'instance = "nope"').replace('"/workspace/proj"', '"relative"')
    with pytest.raises(ConfigError) as info:
        load_project(write(tmp_path, bad))
    problems = info.value.problems  # type: ignore[attr-defined]
    assert any("no instance named 'nope'" in p for p in problems)
    assert any("workdir: must be an absolute path" in p for p in problems)
    assert "and 1 more problem" in str(info.value)


def test_roster_must_be_safe_and_unique(tmp_path: Path) -> None:
    message = error_of(tmp_path, GOOD.replace('["seed0", "seed1"]', '["seed0", "../x", "seed0"]'))
    assert "cell '../x' is not a safe name" in message


def test_secrets_in_the_project_file_are_refused_without_echoing_them(tmp_path: Path) -> None:
    secret = "rpa_ABCDEFGHIJKLMNOPQRSTUVWXYZ123456"
    message = error_of(tmp_path, GOOD.replace('provider = "sim"', f'provider = "sim"\nid = "{secret}"'))
    assert "looks like an API key" in message
    assert secret not in message
    message = error_of(tmp_path, GOOD.replace('[project]', '[project]\napi_key = "x"'))
    assert "looks like a secret" in message


LAMBDA_ID = "0920582c7ff041399e34823a0be62549"  # Lambda Cloud instance ids are 32 hex digits (its API spec)


def test_identifiers_that_are_long_are_not_taken_for_secrets(tmp_path: Path) -> None:
    """A real Lambda id and a project named by a UUID load: a secret is told by its shape, not its length."""
    text = GOOD.replace('name = "p"', 'name = "3f2a9c1d-5b7e-4c1a-9d2e-8f6b0a4c7e21"').replace(
        'provider = "sim"', f'provider = "lambda"\nid = "{LAMBDA_ID}"')
    project = load_project(write(tmp_path, text))
    assert project.instances["box"].id == LAMBDA_ID and len(project.name) == 36


@pytest.mark.parametrize(("key", "value"), [
    ("id", "secret_rgt-user_0123456789abcdef0123456789abcdef.ABCDEFGH12345678"),  # Lambda's key prefix
    ("teardown_command", "runpodctl remove pod p1 --apiKey rpa_ABCDEFGHIJKLMNOPQRSTUV0123456789"),
    ("teardown_command", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),  # a vast key's shape
    ("teardown_command", "curl -H 'Authorization: Bearer abcdefghijklmnop0123456789' https://x"),
])
def test_real_shaped_secrets_are_refused_anywhere_without_echoing_them(tmp_path: Path, key: str, value: str) -> None:
    message = error_of(tmp_path, GOOD.replace('provider = "sim"', f'provider = "sim"\n{key} = "{value}"'))
    assert f"instances.box.{key}" in message and "looks like an API key or token" in message, message
    assert value not in message and value.split()[-1] not in message


def test_missing_project_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such project file"):
        resolve_project_file(str(tmp_path / "nowhere"))


def test_nearest_project_file_is_found_upward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, GOOD)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert resolve_project_file(None) == path


def test_a_bound_run_keeps_its_launch_places_and_its_drift_through_a_record() -> None:
    """A verification stores the bound run (docs/gate.md §7, "Launch-time bindings"); read back, it is the same
    run with the same evidence hash, which stays the hash of what rgt.toml stated (binding 4)."""
    import json

    from remote_gpu_trainer.audits.gate import config_sha256
    from remote_gpu_trainer.config.project import RunConfig
    from remote_gpu_trainer.run_records import bind_to_launch, run_config_from_record, run_config_record

    launched = RunConfig(id="r1", instance="box", workdir="/w", command="train {cell}", log="train.log",
                         remote_root="/results/r1", roster=("seed0", "seed1"))
    now = RunConfig(id="r1", instance="box", workdir="/w2", command="train {cell}", log="train.log",
                    remote_root="/results/r1-moved", roster=("seed0",), gpus=1)
    bound = bind_to_launch(now, launched)
    assert (bound.workdir, bound.remote_root, bound.roster, bound.gpus) == ("/w", "/results/r1", ("seed0", "seed1"), 1)
    assert [d.key for d in bound.location_drift] == ["workdir", "remote_root", "roster"]
    assert bound.as_configured() == now and config_sha256(bound) == config_sha256(now) != config_sha256(launched)
    assert run_config_from_record(json.loads(json.dumps(run_config_record(bound)))) == bound
    assert "location_drift" not in run_config_record(launched)  # a launch record is written as before
    assert bind_to_launch(now, None) is now  # never launched: rgt.toml as it is
