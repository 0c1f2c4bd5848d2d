"""rgt.toml `[grid]` (docs/formats.md): the points it renders, and every mistake refused at load with its key
and line, through the real config loader and the real CLI (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.errors import ConfigError


def write(root: Path, grid: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "rgt.toml"
    path.write_text(f'[project]\nname = "g"\n\n[grid]\n{grid}', encoding="utf-8")
    return path


def test_the_points_are_the_product_in_dims_order(tmp_path: Path) -> None:
    path = write(tmp_path, 'dims = { dataset = ["set5", "set14"], method = ["base", "ours"], seed = [0, 1] }\n'
                           'capsule = "{method}/seed{seed}"\ntest_id = "{dataset}"\n')
    grid = load_project(path).grid
    assert grid is not None and grid.split == "test"
    assert [(p.label, p.capsule, p.test_id) for p in grid.points][:3] == [
        ("dataset=set5 method=base seed=0", "base/seed0", "set5"),
        ("dataset=set5 method=base seed=1", "base/seed1", "set5"),
        ("dataset=set5 method=ours seed=0", "ours/seed0", "set5")]
    assert len(grid.points) == 8 and grid.points[-1].as_dict() == {"dataset": "set14", "method": "ours", "seed": 1}
    assert (grid.points[-1].run_id, grid.points[-1].cell) == ("ours", "seed1")


def test_a_grid_in_its_own_tables_and_a_validation_split(tmp_path: Path) -> None:
    path = write(tmp_path, 'capsule = "r/{seed}"\ntest_id = "main"\nsplit = "val"\n\n[grid.dims]\nseed = ["a", "b"]\n')
    grid = load_project(path).grid
    assert grid is not None and grid.split == "val" and [p.capsule for p in grid.points] == ["r/a", "r/b"]


@pytest.mark.parametrize(("grid", "problem"), [
    ('dims = { seed = [0, 1] }\ncapsule = "r/seed{sed}"\ntest_id = "main"\n',
     "rgt.toml:6: grid.capsule: {sed} is not a dimension of [grid] dims (dims: seed)"),
    ('dims = { seed = [0, 1] }\ncapsule = "seed{seed}"\ntest_id = "main"\n',
     "rgt.toml:6: grid.capsule: renders 'seed0' for seed=0: it must be <run-id>/<cell>, two safe names"),
    ('dims = { dataset = ["set 5"], seed = [0] }\ncapsule = "r/seed{seed}"\ntest_id = "{dataset}"\n',
     "rgt.toml:7: grid.test_id: renders 'set 5' for dataset=set 5 seed=0: not a safe test id"),
    ('dims = { dataset = ["a", "b"], seed = [0] }\ncapsule = "r/seed{seed}"\ntest_id = "main"\n',
     "rgt.toml:5: grid.dims: dataset=a seed=0 and dataset=b seed=0 both map to capsule r/seed0 test main: "
     "use every dimension in capsule or test_id"),
    ('dims = { seed = [0, true] }\ncapsule = "r/{seed}"\ntest_id = "main"\n',
     "rgt.toml:5: grid.dims.seed: must be a non-empty list of strings or whole numbers"),
    ('dims = { seed = [0, 0] }\ncapsule = "r/{seed}"\ntest_id = "main"\n',
     "rgt.toml:5: grid.dims.seed: lists a value twice"),
    ('dims = {}\ncapsule = "r/c"\ntest_id = "main"\n',
     "rgt.toml:5: grid.dims: must be a table of dimension = [values]"),
    ('capsule = "r/c"\ntest_id = "main"\n', "rgt.toml:4: grid.dims: missing required key 'dims'"),
    ('dims = { seed = [0] }\ncapsule = "r/{seed}"\ntest_ids = "main"\n',
     "rgt.toml:7: grid.test_ids: unknown key (did you mean 'test_id'?)"),
    ('dims = { seed = [0] }\ncapsule = "r/{seed}}"\ntest_id = "main"\n',
     "rgt.toml:6: grid.capsule: 'r/{seed}}' has an unmatched brace"),
    ('dims = { seed = [0] }\ncapsule = "r/{seed}"\ntest_id = "main"\nsplit = "../test"\n',
     "rgt.toml:8: grid.split: '../test' is not a split name"),
    ('dims = { a = [' + ", ".join(str(i) for i in range(400)) + '], b = [' + ", ".join(str(i) for i in range(400))
     + '] }\ncapsule = "r/{a}-{b}"\ntest_id = "main"\n',
     "rgt.toml:5: grid.dims: spans 160000 points, more than 100000"),
])
def test_every_mistake_names_its_key_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], grid: str,
                                               problem: str) -> None:
    path = write(tmp_path / "p", grid)
    with pytest.raises(ConfigError) as raised:
        load_project(path)
    assert any(line.endswith(problem) or problem in line for line in raised.value.problems)  # type: ignore[attr-defined]
    assert main(["completeness", str(tmp_path / "p")]) == 2
    assert problem.split(": ", 1)[1] in capsys.readouterr().err
    assert not (tmp_path / "p" / "completeness.json").exists()
