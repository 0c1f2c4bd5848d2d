"""rgt.toml's audit catalogue tables (`[metrics]`, `[verify.*]`): good declarations parsed, every bad one a
problem naming its key and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.audits.catalogue import metric_registry, metric_sanity
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError

HEAD = '[project]\nname = "t"\n'


def load(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "rgt.toml"
    path.write_text(HEAD + body, encoding="utf-8")
    return load_project(path)


def test_declarations_are_parsed(tmp_path: Path) -> None:
    project = load(tmp_path, '[metrics]\nscore = "max"\nerr = { direction = "min", chance = "one" }\n'
                             '[verify.seed_count]\nmin_seeds = 5\n[verify.V11]\nrelative = 0.05\n'
                             '[[verify.compare]]\nrun = "a"\ncontrol = "b"\nvary = ["lr"]\n')
    verify = project.audit
    assert verify.metrics["score"].direction == "max" and verify.metrics["err"].chance == "one"
    assert verify.overrides == {"V04": {"min_seeds": 5}, "V11": {"relative": 0.05}}
    assert [(c.run, c.control, c.vary) for c in verify.comparisons] == [("a", "b", ("lr",))]


@pytest.mark.parametrize(("body", "message"), [
    ("[verify.seed_count]\nmin_seeds = -1\n", "verify.seed_count.min_seeds: must be a whole number of 0 or more"),
    ("[verify.seed_count]\nmin_seeds = 1e400\n", "verify.seed_count.min_seeds: must be a whole number"),
    ("[verify.seed_count]\nmin_seeds = 2.5\n", "verify.seed_count.min_seeds: must be a whole number"),
    ("[verify.chance_floor]\nrelative = nan\n", "verify.chance_floor.relative: must be a finite number"),
    ("[verify.seed_count]\nmin_sed = 2\n", "not a param of this check (did you mean 'min_seeds'?)"),
    ("[verify.seed_cnt]\nx = 1\n", "no VERIFY check named 'seed_cnt' (did you mean 'seed_count'?)"),
    ('[metrics]\nacc = { direction = "max", chance = "x" }\n', "metrics.acc: chance must name how the floor"),
    ('[metrics]\nacc = "up"\n', 'metrics.acc: must be "max", "min" or "monitor"'),
    ('[[verify.compare]]\nrun = "a"\ncontrol = "a"\n', "must name another run than `run`"),
])
def test_a_bad_declaration_is_a_problem_naming_its_key(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(tmp_path, body)
    assert message in str(error.value), str(error.value)
    assert "rgt.toml:" in str(error.value)


def test_every_chance_kind_has_a_floor_and_every_shipped_rule_names_one() -> None:
    assert set(metric_sanity.FLOORS) == set(metric_registry.CHANCE_KINDS)
    assert {r.chance for r in metric_registry.shipped() if r.chance} <= set(metric_registry.CHANCE_KINDS)
