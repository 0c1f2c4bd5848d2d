"""The far-side manifest builder, run for real through a LocalTransport box (docs/gate.md §3)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.audits.manifest import MANIFEST_NAME, parse_manifest
from remote_gpu_trainer.errors import VerbFailed
from remote_gpu_trainer.services.evidence.manifest import build_manifest, builder_stdin
from support.evidence_helpers import Env, make_env, write_run

BUILDER = Path(__file__).parents[3] / "remote_gpu_trainer" / "remote" / "build_manifest.py"




async def run_builder(env: Env, **overrides: Any) -> tuple[int, str, str]:
    params: dict[str, Any] = {"root": str(env.box), "run_id": env.run.id, "roster": list(env.run.roster),
                              "required": list(env.run.required)}
    params.update(overrides)
    result = await env.transport.run(f"{shlex.quote(sys.executable)} -", stdin=builder_stdin(params))
    return result.rc, result.text, result.error_text


def problem_codes(stderr: str) -> set[tuple[str, str]]:
    return {(item["code"], item["path"]) for item in json.loads(stderr.strip().splitlines()[-1])}


async def test_builds_a_manifest_the_local_parser_accepts(env: Env) -> None:
    sha = await build_manifest(env.transport, env.run, env.db)
    data = (env.box / MANIFEST_NAME).read_bytes()
    assert sha == hashlib.sha256(data).hexdigest()
    assert env.db.recorded_manifest(env.run.id) == sha
    manifest, problems = parse_manifest(data, roster=env.run.roster, run_id=env.run.id)
    assert problems == [] and manifest is not None
    assert [entry.path for entry in manifest.files] == [
        "seed0/best.pth", "seed0/best_metrics.json", "seed0/seed0.log",
        "seed1/best.pth", "seed1/best_metrics.json", "seed1/seed1.log",
    ]
    best = manifest.by_path()["seed1/best.pth"]
    assert best.sha256 == hashlib.sha256((env.box / "seed1" / "best.pth").read_bytes()).hexdigest()
    assert not [name for name in os.listdir(env.box) if name.startswith(".rgt-tmp")]


async def test_prints_the_hash_and_the_path(env: Env) -> None:
    rc, out, _ = await run_builder(env)
    assert rc == 0
    digest = hashlib.sha256((env.box / MANIFEST_NAME).read_bytes()).hexdigest()
    assert f"MANIFEST_SHA256={digest}" in out.splitlines()
    assert f"WROTE {env.box / MANIFEST_NAME}" in out.splitlines()


async def test_refuses_to_overwrite_an_existing_manifest(env: Env) -> None:
    sha = await build_manifest(env.transport, env.run, env.db)
    before = (env.box / MANIFEST_NAME).read_bytes()
    (env.box / "seed0" / "late.txt").write_text("written after the manifest")
    rc, out, _ = await run_builder(env)
    assert rc == 4
    assert f"MANIFEST_SHA256={sha}" in out.splitlines()
    assert (env.box / MANIFEST_NAME).read_bytes() == before
    # the client accepts exit 4 only for the manifest it recorded itself
    assert await build_manifest(env.transport, env.run, env.db) == sha


async def test_a_foreign_existing_manifest_is_a_failure(env: Env) -> None:
    (env.box / MANIFEST_NAME).write_text("{}\n")
    with pytest.raises(VerbFailed, match="different manifest already exists"):
        await build_manifest(env.transport, env.run, env.db)
    assert (env.box / MANIFEST_NAME).read_text() == "{}\n"
    assert env.db.recorded_manifest(env.run.id) is None


async def test_every_problem_is_gathered_and_nothing_is_written(env: Env) -> None:
    (env.box / "seed0" / "alias.pth").symlink_to("best\x1b[2J.pth")  # a link is recorded; this target is not
    (env.box / "seed1" / "linked").symlink_to(env.box / "seed0", target_is_directory=True)  # fine: recorded
    (env.box / "seed0" / "ckpt.pth.part").write_bytes(b"half")
    (env.box / "seed0" / "notes.txt~").write_bytes(b"x")
    (env.box / "seed0" / ".rgt-tmp-x").write_bytes(b"x")
    (env.box / "seed1" / "best_metrics.json").write_bytes(b"")
    (env.box / "seed1" / "best.pth").unlink()
    (env.box / "loose.txt").write_text("at the root")
    (env.box / ".rgt-tmp-PULL_MANIFEST.99").write_text("left by a killed build")
    (env.box / "seed9").mkdir()
    (env.box / "seed1" / "bad\x1bname.txt").write_text("x")  # an escape code in a name: refused, shown escaped
    with open(os.fsencode(env.box / "seed1") + b"/\xff.bin", "wb"):  # not UTF-8: the manifest is UTF-8 JSON
        pass
    (env.box / "seed1" / "a b=c, .d~").write_text("x")  # a space, '=', ',' and a '~' backup are fine names
    os.mkfifo(env.box / "seed1" / "pipe")
    rc, _, err = await run_builder(env, roster=["seed0", "seed1", "seed2"])
    assert rc == 1
    assert problem_codes(err) >= {
        ("link_unsafe", "seed0/alias.pth"), ("temp_file", "seed0/ckpt.pth.part"),
        ("temp_file", "seed0/.rgt-tmp-x"),
        ("required_empty", "seed1/best_metrics.json"), ("required_missing", "seed1/best.pth"),
        ("loose_file", "loose.txt"), ("temp_file", ".rgt-tmp-PULL_MANIFEST.99"),
        ("unexpected_dir", "seed9"), ("missing_dir", "seed2"),
        ("path_unsafe", "seed1/bad\\x1bname.txt"), ("path_unsafe", "seed1/\\udcff.bin"), ("not_regular", "seed1/pipe"),
    }
    listed = {path for _, path in problem_codes(err)}
    assert "seed0/notes.txt~" not in listed and "seed1/a b=c, .d~" not in listed and "seed1/linked" not in listed
    assert "\x1b" not in err and "\udcff" not in err.encode("utf-8", "backslashreplace").decode()
    assert not (env.box / MANIFEST_NAME).exists()


async def test_links_are_recorded_as_links_never_followed(env: Env, tmp_path: Path) -> None:
    """W&B's `latest-run` (relative) and `debug.log` (absolute) links, a link out of the root, one that leaves
    through another link, a loop, a dangling one: each recorded with its target and where the box resolves it,
    none followed, none blocking the manifest (docs/gate.md §2)."""
    secret = tmp_path / "outside.txt"
    secret.write_text("never pulled")
    run_dir = env.box / "seed0" / "wandb" / "run-20261206_1200-abc"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "debug.log").write_text("wandb debug\n")
    (env.box / "seed0" / "wandb" / "latest-run").symlink_to("run-20261206_1200-abc", target_is_directory=True)
    (env.box / "seed0" / "wandb" / "debug.log").symlink_to(run_dir / "logs" / "debug.log")
    (env.box / "seed0" / "out").symlink_to(secret)
    (env.box / "seed1" / "up").symlink_to(tmp_path, target_is_directory=True)
    (env.box / "seed0" / "hop").symlink_to("../seed1/up/outside.txt")  # inside by its words, out in fact
    (env.box / "seed0" / "loop-a").symlink_to("loop-b")
    (env.box / "seed0" / "loop-b").symlink_to("loop-a")
    (env.box / "seed0" / "dangling").symlink_to("not-there.pth")
    await build_manifest(env.transport, env.run, env.db)
    data = (env.box / MANIFEST_NAME).read_bytes()
    manifest, problems = parse_manifest(data, roster=env.run.roster, run_id=env.run.id)
    assert problems == [] and manifest is not None
    links = {link.path: (link.target, link.inside) for link in manifest.links}
    assert links == {
        "seed0/dangling": ("not-there.pth", "seed0/not-there.pth"),
        "seed0/hop": ("../seed1/up/outside.txt", None),
        "seed0/loop-a": ("loop-b", links["seed0/loop-a"][1]),
        "seed0/loop-b": ("loop-a", links["seed0/loop-b"][1]),
        "seed0/out": (str(secret), None),
        "seed0/wandb/debug.log": (str(run_dir / "logs" / "debug.log"),
                                  "seed0/wandb/run-20261206_1200-abc/logs/debug.log"),
        "seed0/wandb/latest-run": ("run-20261206_1200-abc", "seed0/wandb/run-20261206_1200-abc"),
        "seed1/up": (str(tmp_path), None),
    }
    assert {link.path for link in manifest.links_out} == {"seed0/hop", "seed0/out", "seed1/up"}
    assert "seed0/wandb/run-20261206_1200-abc/logs/debug.log" in manifest.by_path()  # the real file, once
    assert b"never pulled" not in data and not set(links) & set(manifest.by_path())


async def test_root_must_be_a_real_directory(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    write_run(env.box)
    real = env.box.with_name("real")
    env.box.rename(real)
    env.box.symlink_to(real, target_is_directory=True)
    rc, _, err = await run_builder(env)
    assert rc == 1 and ("root", str(env.box)) in problem_codes(err)
    assert not (real / MANIFEST_NAME).exists()


async def test_parameters_are_data_never_code(env: Env, tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    rc, _, err = await run_builder(env, run_id=f"x'; touch {canary}; echo '", roster=["seed0", "$(touch x)"])
    assert rc == 1
    assert ("run_id", f"x'; touch {canary}; echo '") in problem_codes(err)
    assert not canary.exists()


async def test_malformed_params_are_a_usage_error(env: Env) -> None:
    rc, _, err = await run_builder(env, roster="seed0", unexpected=1)
    assert rc == 2 and "PARAMS.roster" in err and "unexpected" in err


async def test_an_empty_run_is_refused(tmp_path: Path) -> None:
    env = make_env(tmp_path, required=())
    for cell in env.run.roster:
        (env.box / cell).mkdir()
    rc, _, err = await run_builder(env)
    assert rc == 1 and ("no_files", "") in problem_codes(err)


def test_builder_source_is_python_3_8_and_stdlib_only() -> None:
    tree = ast.parse(BUILDER.read_text(encoding="utf-8"), feature_version=(3, 8))
    nodes = list(ast.walk(tree))
    imported = {alias.name.split(".")[0]
                for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    imported |= {str(node.module).split(".")[0] for node in nodes if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names)
    assert "__future__" not in imported  # the PARAMS line goes first, so a future import could not
    for node in nodes:  # signature annotations run at def time on 3.8: no list[str], no X | Y
        if isinstance(node, ast.FunctionDef):
            for annotation in [arg.annotation for arg in node.args.args] + [node.returns]:
                assert isinstance(annotation, ast.Constant | ast.Name | None), node.name
