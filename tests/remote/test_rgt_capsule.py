"""The capsule helper a training script imports (remote/rgt_capsule.py), run as a user runs it: a training-like
script in its own stdlib-only interpreter (`python -S`, no site-packages), in a real git repository, clean and
dirty, writing runs/<run>/<cell>/ that the VERIFY loader then reads back.

Every hash the capsule states is recomputed here from its definition (the dirty diff from git itself, the
provenance hash from the run.json fields), never by calling the helper's own functions.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from remote_gpu_trainer.audits.catalogue.load import load_project
from remote_gpu_trainer.remote import rgt_capsule
from support.capsules import write_split
from support.helpers import run_rgt

HELPER = Path(rgt_capsule.__file__)
CONFIG = {"model": {"width": 64, "depth": 2, "act": "gelu"}, "optim": {"lr": 1e-05, "betas": [0.9, 0.999]},
          "epochs": 3, "seed": 0, "name": "tiny: yes", "tags": [], "extra": {}, "on": True}
TRAIN_SCRIPT = '''
import json, os, sys
import rgt_capsule

out = sys.argv[1]
config = json.loads(sys.argv[2])
cap = rgt_capsule.Capsule(out, run_id="r1", cell="seed0", config=config, seed=0, task="classification",
                          split_manifest="splits/main.json", env_lock="requirements.lock",
                          determinism=["use_deterministic_algorithms=True", "cudnn.benchmark=False"],
                          overrides=["optim.lr=1e-05"])
for epoch in range(1, 4):
    cap.log_step(step=epoch * 100, epoch=epoch, loss=1.0 / epoch, lr=1e-05, grad_norm=0.5,
                 val={"acc": 0.5 + 0.1 * epoch})
    with open(os.path.join(out, "best.pth"), "wb") as handle:
        handle.write(("weights of epoch %d" % epoch).encode())
    cap.checkpoint("best", os.path.join(out, "best.pth"), epoch=epoch, step=epoch * 100)
items = [{"item_id": "t%02d" % i, "target": i % 3, "pred": i % 3 if i < 8 else (i + 1) % 3,
          "acc": 1.0 if i < 8 else 0.0} for i in range(10)]
cap.write_test("main", split="test", protocol_id="p1", metrics={"acc": (0.8, "higher_is_better", "mean", "acc")},
               items=items)
cap.close(selection={"criterion": "acc", "split": "val", "direction": "higher_is_better", "epoch": 3,
                     "step": 300, "value": 0.8},
          training={"world_size": 1, "per_device_batch": 4, "grad_accum": 1, "effective_batch": 4, "epochs": 3,
                    "steps": 300, "precision": "fp32"})
print("closed", sorted(sys.modules.keys() & {"torch", "yaml", "pandas", "numpy"}))
'''


def git(repo: Path, *args: str) -> bytes:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository that is also the project root: the script, the helper (copied by `rgt capsule
    --write`), a split manifest over real files, a lock file; runs/ is ignored. Everything is committed."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "rgt.toml").write_text("# project\n")
    (root / "train.py").write_text(TRAIN_SCRIPT)
    (root / "requirements.lock").write_text("numpy==2.0.0\n")
    (root / ".gitignore").write_text("runs/\n*.log\n__pycache__/\n")
    write_split(root, "main", {"train": [("a.bin", b"a" * 10), ("b.bin", b"b")], "val": [("c.bin", b"c")],
                               "test": [("d.bin", b"d"), ("e.bin", b"e")]})
    copied = run_rgt("capsule", "--write", str(root), cwd=root)
    assert copied.returncode == 0, copied.stderr
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return root


def run_training(root: Path, out: str = "runs/r1/seed0") -> subprocess.CompletedProcess[str]:
    """The script in an interpreter without site-packages (-S -s -E): only the stdlib is importable."""
    return subprocess.run([sys.executable, "-S", "-s", "-E", "train.py", out, json.dumps(CONFIG)], cwd=root,
                          capture_output=True, text=True, timeout=120)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def expected_dirty_hash(root: Path) -> str | None:
    """§3.1 from scratch: `git diff --binary HEAD`, then `path NUL sha256 LF` per untracked file, sorted."""
    body = git(root, "diff", "--binary", "HEAD")
    untracked = sorted(p for p in git(root, "ls-files", "--others", "--exclude-standard", "-z").split(b"\0") if p)
    for name in untracked:
        body += name + b"\0" + sha((root / os.fsdecode(name)).read_bytes()).encode() + b"\n"
    return sha(body) if body else None


def expected_provenance_hash(prov: dict[str, Any]) -> str:
    body = {"config_sha256": prov["config"]["sha256"], "code_commit": prov["code"]["commit"],
            "dirty_diff_sha256": prov["code"]["dirty_diff_sha256"], "data_sha256": prov["data"]["data_sha256"],
            "split_manifest_sha256": prov["data"]["split_manifest_sha256"], "seed": prov["seed"],
            "determinism_flags": sorted(prov["determinism"]["flags"]), "env_lock_sha256": prov["env_lock"]["sha256"],
            "hardware": {k: prov["hardware"][k] for k in ("gpu", "count", "driver", "cuda", "torch")}}
    return "sha256:" + sha(canonical(body))


def read_run(root: Path) -> dict[str, Any]:
    return json.loads((root / "runs/r1/seed0/run.json").read_text())


REQUIRED = ("schema", "run_id", "cell", "exp_id", "created_at", "selection")
REQUIRED_PROVENANCE = ("provenance_hash", "config", "code", "data", "seed", "determinism", "env_lock", "hardware",
                       "command")


def test_a_clean_tree_writes_every_required_field_with_hashes_that_recompute(project: Path) -> None:
    done = run_training(project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed []"  # stdlib only: no torch, yaml, pandas or numpy was imported
    record = read_run(project)
    for key in REQUIRED:
        assert record[key] not in (None, ""), key
    prov = record["provenance"]
    for key in REQUIRED_PROVENANCE:
        assert key in prov, key
    assert record["schema"] == "remote-gpu-trainer/RUN/v1" and record["exp_id"] == "r1"
    assert record["checkpoints"]["best"]["path"] == "best.pth" and record["checkpoints"]["best"]["epoch"] == 3
    assert record["checkpoints"]["best"]["sha256"] == sha((project / "runs/r1/seed0/best.pth").read_bytes())
    assert len(record["tests"]) == 1 and record["tests"][0]["test_id"] == "main" and record["tests"][0]["n"] == 10
    assert record["selection"]["split"] == "val"
    head = git(project, "rev-parse", "HEAD").decode().strip()
    assert prov["code"] == {"repo": None, "commit": head, "dirty": False, "dirty_diff_sha256": None}
    assert prov["config"] == {"path": "config.yaml", "sha256": sha(canonical(CONFIG))}
    assert prov["env_lock"] == {"path": "requirements.lock", "sha256": sha(b"numpy==2.0.0\n")}
    manifest = json.loads((project / "splits/main.json").read_text())
    lines = sorted(f"{split}\t{row['id']}\t{row['sha256']}\n" for split, rows in manifest["members"].items()
                   for row in rows)
    assert prov["data"] == {"dataset": "synthetic", "split_manifest": "splits/main.json",
                            "split_manifest_sha256": sha((project / "splits/main.json").read_bytes()),
                            "data_sha256": sha("".join(lines).encode())}
    assert prov["seed"] == 0
    assert prov["determinism"] == {"declared": True, "flags": ["cudnn.benchmark=False",
                                                               "use_deterministic_algorithms=True"]}
    assert prov["hardware"] == {"gpu": "cpu", "count": 0, "driver": None, "cuda": None, "torch": None}
    assert prov["command"]["argv"] == ["python", "train.py", "runs/r1/seed0", json.dumps(CONFIG)]
    assert prov["command"]["overrides"] == ["optim.lr=1e-05"]
    assert prov["provenance_hash"] == expected_provenance_hash(prov)


def test_a_dirty_tree_with_an_untracked_file_hashes_the_diff_as_git_defines_it(project: Path) -> None:
    with (project / "train.py").open("a") as handle:
        handle.write("# a local edit\n")
    (project / "requirements.lock").write_bytes(b"\x00binary\xff\n")  # a binary change: --binary matters
    (project / "notes.txt").write_text("untracked\n")
    (project / "sub").mkdir()
    (project / "sub" / "zz.txt").write_text("untracked too\n")
    (project / "debug.log").write_text("ignored: not counted\n")
    expected = expected_dirty_hash(project)
    done = run_training(project)
    assert done.returncode == 0, done.stderr
    code = read_run(project)["provenance"]["code"]
    assert code["dirty"] is True and expected is not None and code["dirty_diff_sha256"] == expected
    (project / "debug.log").write_text("an ignored file changes nothing\n")
    assert expected_dirty_hash(project) == expected


def test_an_untracked_file_alone_makes_the_tree_dirty(project: Path) -> None:
    (project / "notes.txt").write_text("x")
    done = run_training(project)
    assert done.returncode == 0, done.stderr
    code = read_run(project)["provenance"]["code"]
    assert code["dirty"] is True
    assert code["dirty_diff_sha256"] == sha(b"notes.txt\0" + sha(b"x").encode() + b"\n")


def test_the_config_yaml_reads_back_as_the_config_and_its_hash(project: Path) -> None:
    assert run_training(project).returncode == 0
    text = (project / "runs/r1/seed0/config.yaml").read_text()
    assert yaml.safe_load(text) == CONFIG
    assert sha(canonical(yaml.safe_load(text))) == read_run(project)["provenance"]["config"]["sha256"]


@pytest.mark.parametrize("config", [
    {"f": 1e-05, "g": 1e16, "h": -0.0, "i": 5e-324, "j": 1.5e300, "big": 12345678901234567890123},
    {"yes": "no", "on": "off", "null": "~", "y": "n", "": "", "1": "2", "a b": "c: d # e", "- x": "[y]"},
    {"s": "line\nbreak\ttab\r\x00\x7f\x85\u2028\u2029\ufeff é 中 😀 'q' \"dq\" \\"},
    {"l": [1, [2, [3, {}]], {"x": [{"y": 1, "z": [[]]}]}, None, True, False], "e": {}, "el": []},
    {},
])
def test_the_yaml_emitter_round_trips_through_pyyaml(config: dict[str, Any]) -> None:
    assert yaml.safe_load(rgt_capsule.to_yaml(rgt_capsule.plain_config(config))) == config


@pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": math.inf}, {1: "int key"}, {"x": {1, 2}},
                                 {"x": Path("p")}])
def test_a_config_yaml_cannot_hold_the_same_is_refused(bad: dict[Any, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        rgt_capsule.plain_config(bad)


def test_the_files_are_read_back_by_the_verify_loader(project: Path) -> None:
    assert run_training(project).returncode == 0
    evidence = load_project(project)
    assert evidence.problems == ()
    (capsule,) = evidence.capsules
    assert capsule.key == "r1/seed0" and capsule.source == "capsule"
    assert capsule.run_record == read_run(project)
    assert capsule.config == CONFIG
    assert capsule.train is not None and list(capsule.train["step"]) == [100, 200, 300]
    assert list(capsule.train.columns) == ["step", "epoch", "loss", "lr", "grad_norm", "val/acc"]
    assert capsule.train["val/acc"].tolist() == [0.5 + 0.1 * e for e in (1, 2, 3)]  # full precision
    test = capsule.tests["main"]
    assert test.metrics is not None and test.metrics["schema"] == "remote-gpu-trainer/METRICS/v1"
    assert test.metric_block("acc") == {"value": 0.8, "direction": "higher_is_better", "unit": None,
                                        "aggregate": "mean", "column": "acc"}
    assert test.metrics["checkpoint_sha256"] == capsule.run_record["checkpoints"]["best"]["sha256"]
    assert test.results is not None and test.results["acc"].mean() == test.metric_value("acc")
    assert list(test.results["item_id"]) == [f"t{i:02d}" for i in range(10)]
    assert set(test.results["split"]) == {"test"}
    assert evidence.splits[0].sha256 == capsule.prov("data", "split_manifest_sha256")
    leftovers = [p for p in (project / "runs").rglob("*") if p.name.startswith(".rgt-tmp")]
    assert leftovers == []


# -- refusals: each leaves every file as it was -------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def open_capsule(tmp_path: Path, **extra: Any) -> rgt_capsule.Capsule:
    lock = tmp_path / "requirements.lock"
    lock.write_text("x==1\n")
    kwargs: dict[str, Any] = {"run_id": "r1", "cell": "c0", "config": {"lr": 0.1}, "seed": 1,
                              "env_lock": str(lock), "code_dir": str(tmp_path),
                              "hardware_info": {"gpu": "cpu", "count": 0, "driver": None, "cuda": None,
                                                "torch": None}}
    kwargs.update(extra)
    return rgt_capsule.Capsule(str(tmp_path / "cap"), **kwargs)


def with_best(cap: rgt_capsule.Capsule, data: bytes = b"w") -> None:
    Path(cap.path("best.pth")).write_bytes(data)
    cap.checkpoint("best", cap.path("best.pth"), epoch=1)


def test_a_non_increasing_step_is_refused_naming_it_and_train_csv_is_unchanged(tmp_path: Path) -> None:
    cap = open_capsule(tmp_path)
    cap.log_step(10, loss=1.0)
    cap.log_step(20, loss=0.5)
    before = snapshot(tmp_path / "cap")
    for step in (20, 5):
        with pytest.raises(ValueError, match=rf"step {step} is not after the last logged step 20"):
            cap.log_step(step, loss=0.1)
    with pytest.raises(ValueError, match="not an integer"):
        cap.log_step(True)  # type: ignore[arg-type]
    assert snapshot(tmp_path / "cap") == before
    assert before["train.csv"] == b"step,loss\n10,1.0\n20,0.5\n"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "0.9", True])
def test_a_metric_that_is_not_a_finite_number_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                                value: Any) -> None:
    cap = open_capsule(tmp_path)
    with_best(cap)
    before = snapshot(tmp_path / "cap")
    with pytest.raises(ValueError, match="metric acc: value .* is not a finite number"):
        cap.write_test("main", n=3, metrics={"acc": (value, "higher_is_better", "mean", None)})
    assert snapshot(tmp_path / "cap") == before and not (tmp_path / "cap" / "test").exists()


def test_a_duplicate_item_id_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    cap = open_capsule(tmp_path)
    with_best(cap)
    items = [{"item_id": "a", "acc": 1.0}, {"item_id": "b", "acc": 0.0}, {"item_id": "a", "acc": 1.0}]
    with pytest.raises(ValueError, match="item_id 'a' appears twice"):
        cap.write_test("main", metrics={"acc": (0.5, "max", "mean", "acc")}, items=items)
    assert not (tmp_path / "cap" / "test").exists()


@pytest.mark.parametrize("spec, message", [
    ((0.5, "sideways", "mean", "acc"), "direction 'sideways'"),
    ((0.5, "max", "trimmed", "acc"), "aggregate 'trimmed'"),
    ((0.5, "max", "mean", "nope"), "names column 'nope', which no item has"),
    ((0.5,), "give \\(value, direction"),
])
def test_a_malformed_metric_is_refused(tmp_path: Path, spec: Any, message: str) -> None:
    cap = open_capsule(tmp_path)
    with_best(cap)
    with pytest.raises(ValueError, match=message):
        cap.write_test("main", metrics={"acc": spec}, items=[{"item_id": "a", "acc": 1.0}])
    assert not (tmp_path / "cap" / "test").exists()


def test_the_metric_dict_form_and_max_min_directions_are_written_in_the_long_form(tmp_path: Path) -> None:
    cap = open_capsule(tmp_path)
    with_best(cap)
    cap.write_test("main", n=4, metrics={"loss": {"value": 2, "direction": "min", "unit": "nats"}})
    body = json.loads((tmp_path / "cap/test/main/metrics.json").read_text())
    assert body["metrics"]["loss"] == {"value": 2, "direction": "lower_is_better", "unit": "nats",
                                       "aggregate": "mean", "column": None}
    assert body["n"] == 4 and not (tmp_path / "cap/test/main/results.csv").exists()
    with pytest.raises(ValueError, match="already written"):
        cap.write_test("main", n=4, metrics={})


def test_metrics_bind_the_file_the_evaluation_loaded_when_it_is_named(tmp_path: Path) -> None:
    cap = open_capsule(tmp_path)
    with_best(cap, b"best weights")
    Path(cap.path("last.pth")).write_bytes(b"last weights")
    cap.write_test("bound", n=1, metrics={})
    cap.write_test("stale", n=1, metrics={}, evaluated=cap.path("last.pth"))
    bound = json.loads((tmp_path / "cap/test/bound/metrics.json").read_text())
    stale = json.loads((tmp_path / "cap/test/stale/metrics.json").read_text())
    assert bound["checkpoint_sha256"] == sha(b"best weights") and stale["checkpoint_sha256"] == sha(b"last weights")


def test_close_refuses_a_capsule_missing_a_required_part_and_writes_no_run_json(tmp_path: Path) -> None:
    cap = open_capsule(tmp_path)
    selection = {"criterion": "acc", "split": "val", "direction": "higher_is_better"}
    with pytest.raises(ValueError, match="no 'best' checkpoint"):
        cap.close(selection=selection)
    with pytest.raises(ValueError, match="checkpoint 'best' is not bound yet"):
        cap.write_test("main", n=1, metrics={})
    with_best(cap)
    with pytest.raises(ValueError, match="no test written"):
        cap.close(selection=selection)
    cap.write_test("main", n=1, metrics={})
    with pytest.raises(ValueError, match="selection lacks direction"):
        cap.close(selection={"criterion": "acc", "split": "val"})
    Path(cap.path("best.pth")).write_bytes(b"saved again, not bound again")
    with pytest.raises(ValueError, match="best.pth changed after it was bound"):
        cap.close(selection=selection)
    assert not (tmp_path / "cap" / "run.json").exists()
    cap.checkpoint("best", cap.path("best.pth"), epoch=2)
    cap.close(selection=selection)
    assert json.loads((tmp_path / "cap/run.json").read_text())["checkpoints"]["best"]["epoch"] == 2
    with pytest.raises(RuntimeError, match="closed"):
        cap.log_step(1)


def test_a_folder_that_already_holds_a_capsule_is_refused(tmp_path: Path) -> None:
    open_capsule(tmp_path)
    with pytest.raises(FileExistsError, match="already holds config.yaml"):
        open_capsule(tmp_path)


def test_a_checkpoint_outside_the_capsule_folder_is_refused(tmp_path: Path) -> None:
    cap = open_capsule(tmp_path)
    (tmp_path / "elsewhere.pth").write_bytes(b"w")
    with pytest.raises(ValueError, match="outside the capsule folder"):
        cap.checkpoint("best", str(tmp_path / "elsewhere.pth"))


def test_a_crash_while_writing_leaves_the_old_file_whole_and_no_temp_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cap = open_capsule(tmp_path)
    cap.log_step(1, loss=1.0)
    before = snapshot(tmp_path / "cap")

    def crash(src: str, dst: str) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(rgt_capsule.os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        cap.log_step(2, loss=0.5)
    assert snapshot(tmp_path / "cap") == before
    assert [p.name for p in (tmp_path / "cap").iterdir() if p.name.startswith(".rgt-tmp")] == []


# -- provenance without git, without a lock file, with torch ------------------------------------------------

def test_no_repository_and_no_git_give_null_code_fields_not_a_crash(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    nulls = {"repo": None, "commit": None, "dirty": None, "dirty_diff_sha256": None}
    assert rgt_capsule.code_provenance(str(tmp_path)) == nulls  # a folder that is no repository
    git(tmp_path, "init", "-q")
    assert rgt_capsule.code_provenance(str(tmp_path)) == nulls  # a repository without a commit
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-bin"))
    cap = open_capsule(tmp_path)
    assert cap.provenance["code"] == nulls


def test_without_a_lock_file_the_env_lock_is_the_hash_of_pip_freeze(tmp_path: Path) -> None:
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, check=True).stdout
    assert rgt_capsule.env_lock_provenance(None) == {"path": None, "sha256": sha(frozen)}


def test_the_hardware_comes_from_torch_when_it_is_importable() -> None:
    torch = pytest.importorskip("torch")
    found = rgt_capsule.hardware()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert found["torch"] == str(torch.__version__) and found["cuda"] == torch.version.cuda
    assert found["count"] == count
    assert found["gpu"] == (torch.cuda.get_device_name(0) if count else "cpu")


# -- shipping ---------------------------------------------------------------------------------------------------

def test_the_helper_imports_only_the_standard_library() -> None:
    tree = ast.parse(HELPER.read_text(encoding="utf-8"))
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top |= {node.module.split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}
    assert top - {"__future__"} <= sys.stdlib_module_names, top - sys.stdlib_module_names
    inner = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} - top
    assert inner == {"torch"}  # imported inside hardware() only, and only when it is there
    isolated = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                               "import rgt_capsule; print(rgt_capsule.RUN_SCHEMA)", str(HELPER.parent)],
                              capture_output=True, text=True, timeout=60)
    assert isolated.returncode == 0 and isolated.stdout.strip() == "remote-gpu-trainer/RUN/v1", isolated.stderr
