"""The names real tools write go through pull, verify and the gate (issue: "paths as the tools write them",
docs/gate.md §2): Lightning's `epoch=3-step=64.ckpt`, Hydra's `.hydra/`, MLflow's `mlruns/.trash/`, a space,
non-ASCII, an editor's `~` backup, an NFS `.nfs*` file and a `.#` lock, on the sim box through the CLI and over a
real sshd. The gate stays closed until they are verified, and what stays refused is refused in one pass:
control characters, bytes that are not UTF-8, rgt's own temporary names."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_ssh_arc import INSTANCE, ssh_project, trusted_session, wait_for

from remote_gpu_trainer.errors import GateRefused
from remote_gpu_trainer.services import teardown
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.watch.liveness import run_state
from support.helpers import FIXTURES, write_project
from support.sshd_fixtures import Sshd

TOOL_FILES = ("epoch=3-step=64.ckpt", ".hydra/config.yaml", ".hydra/overrides.yaml", "mlruns/.trash/.keep",
              "mlruns/0/meta.yaml", "my results/val set.csv", "naïve-Ø.txt", "notes.txt~", ".nfs0000000000abc",
              ".#lock", "lightning_logs/version_0/hparams.yaml")


CELL_FILES = ("best.pth", "best_metrics.json", "epoch_001.pth")  # tests/fixtures/cells/<cell>/


def tool_job() -> str:
    """A job that copies the committed cell (real checkpoints), writes one of them again under Lightning's
    default name and the other files the tools leave, then logs like a trainer."""
    cells = shlex.quote(str(FIXTURES / "cells"))
    makes = " && ".join(f"mkdir -p \"$(dirname {{out}}/{shlex.quote(name)})\" && echo {shlex.quote(name)} > "
                        f"{{out}}/{shlex.quote(name)}" for name in TOOL_FILES if not name.endswith(".ckpt"))
    html = shlex.quote(HTML_NAME)
    return (f"cp -R {cells}/{{cell}}/. {{out}}/ && cp {{out}}/best.pth {{out}}/epoch=3-step=64.ckpt && "
            f"cp {{out}}/best.pth {{out}}/{html} && {makes} && echo 'epoch=3 step=64/64 loss=0.25'")


HTML_NAME = "<img src=x onerror=alert(1)>[c](javascript:alert(1)).pth"  # a checkpoint the Markdown report lists


BAD_NAMES = """\
import os, sys
out = os.fsencode(sys.argv[1])
for name in (b"bad\\x01name.txt", b"x.part", b".rgt-tmp-1", b"\\xff.bin", "ckpt\\u2028epoch.tmp".encode(),
             b"L" * 251):
    open(out + b"/" + name, "wb").close()
"""


def rgt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "remote_gpu_trainer", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=180, env=dict(os.environ))


def test_the_names_tools_write_are_pulled_verified_and_gate_the_teardown(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_project(root, tool_job(), roster=("seed0",))
    toml = root / "rgt.toml"
    toml.write_text(toml.read_text().replace('required = ["best.pth", "best_metrics.json"]',
                                             'required = ["epoch=3-step=64.ckpt", ".hydra/config.yaml"]'))
    assert rgt("up", "r1", cwd=root).returncode == 0
    assert rgt("run", "r1", cwd=root).returncode == 0
    assert rgt("watch", "r1", "--interval", "0.2", cwd=root).returncode == 0
    pulled = rgt("pull", "r1", cwd=root)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    manifest = json.loads((root / "runs" / "r1" / "PULL_MANIFEST.json").read_text(encoding="utf-8"))
    assert sorted(entry["path"] for entry in manifest["files"]) == sorted(
        f"seed0/{name}" for name in (*TOOL_FILES, *CELL_FILES, HTML_NAME))
    refused = rgt("down", "r1", "--confirm", "sim-box", cwd=root)
    assert refused.returncode == 3, refused.stderr  # pulled is not verified
    verified = rgt("verify", "r1", cwd=root)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    marker = json.loads((root / "runs" / "r1" / "PULL_VERIFIED.json").read_text(encoding="utf-8"))
    assert [c["path"] for c in marker["checkpoints"]] == [f"seed0/{HTML_NAME}", "seed0/best.pth",
                                                          "seed0/epoch=3-step=64.ckpt", "seed0/epoch_001.pth"]
    assert (root / "runs" / "r1" / "seed0" / "naïve-Ø.txt").read_text() == "naïve-Ø.txt\n"
    markdown = rgt("--report", "--format", "markdown", cwd=root).stdout
    assert r"&lt;img src=x onerror=alert(1)&gt;[c]\(javascript:alert(1)).pth" in markdown  # its text, not HTML
    assert "<img" not in markdown and "[c](javascript" not in markdown

    junk = os.fsencode(root / "runs" / "r1" / "seed0") + b"/\xffjunk"  # not UTF-8, left here by some tool
    with open(junk, "wb"):
        pass
    reverified = rgt("verify", "r1", cwd=root)
    assert reverified.returncode == 1 and "internal error" not in reverified.stderr + reverified.stdout
    assert "seed0/\\udcffjunk" in reverified.stdout + reverified.stderr
    refused = rgt("down", "r1", "--confirm", "sim-box", cwd=root)
    assert refused.returncode == 3, refused.stderr  # the gate refuses, in one line
    os.unlink(junk)
    assert rgt("verify", "r1", cwd=root).returncode == 0
    assert rgt("down", "r1", "--confirm", "sim-box", cwd=root).returncode == 0


def test_what_stays_refused_is_refused_in_one_pass_and_shown_escaped(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    script = tmp_path / "bad_names.py"
    script.write_text(BAD_NAMES, encoding="utf-8")
    write_project(root, f"cp -R {shlex.quote(str(FIXTURES / 'cells'))}/{{cell}}/. {{out}}/ && "
                  f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{out}}", roster=("seed0",))
    assert rgt("up", "r1", cwd=root).returncode == 0
    assert rgt("run", "r1", cwd=root).returncode == 0
    assert rgt("watch", "r1", "--interval", "0.2", cwd=root).returncode == 0
    pulled = rgt("pull", "r1", cwd=root)
    assert pulled.returncode == 1
    assert len(pulled.stderr.strip().splitlines()) == 1 and "\x01" not in pulled.stderr
    for shown in ("seed0/.rgt-tmp-1: temporary file", "seed0/LLLL", "seed0/bad\\x01name.txt: control character",
                  "(and 3 more)"):  # the others (\xff.bin, x.part, ckpt\u2028epoch.tmp): test_build_manifest
        assert shown in pulled.stderr, pulled.stderr
    assert not (root / "runs" / "r1" / "PULL_MANIFEST.json").exists()


@pytest.mark.sshd
async def test_the_names_tools_write_over_a_real_sshd(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    ssh_project(root, box, sshd, ssh_home, tool_job())
    session = await trusted_session(root, sshd)
    try:
        await launch_run(session, "r1")
        assert await wait_for(session, ("finished",)) == "finished"
        await pull_run(session, "r1")
        with pytest.raises(GateRefused):
            await teardown.execute(session, INSTANCE, "gpu-box", ["test"])
        result = await verify_run(session, "r1")
        assert result.ok, result.errors
        listed = {p.relative_to(root / "runs" / "r1").as_posix() for p in (root / "runs" / "r1").rglob("*")
                  if p.is_file()}
        assert {f"{cell}/{name}" for cell in ("seed0", "seed1") for name in TOOL_FILES} <= listed
        plan = await teardown.plan(session, INSTANCE)
        assert plan.gate_open
    finally:
        await session.close_transports()
        session.close()


def wandb_job(outside: Path) -> str:
    """What a W&B run leaves in its folder: `latest-run` (a relative link to the run's folder), `debug.log` (an
    absolute link into it), plus one link out of the result root, to a file the box holds elsewhere."""
    cells = shlex.quote(str(FIXTURES / "cells"))
    run = "{out}/wandb/run-20261206_120000-abc"
    return (f"cp -R {cells}/{{cell}}/. {{out}}/ && mkdir -p {run}/logs && echo history > {run}/logs/debug.log && "
            f"ln -s run-20261206_120000-abc {{out}}/wandb/latest-run && "
            f"ln -s \"$(cd {run}/logs && pwd)/debug.log\" {{out}}/wandb/debug.log && "
            f"ln -s {shlex.quote(str(outside))} {{out}}/shared-data && echo 'epoch=1 step=1/1 loss=0.5'")


async def test_links_are_listed_pulled_as_nothing_and_named_in_the_teardown_plan(tmp_path: Path) -> None:
    outside = tmp_path / "dataset.bin"
    outside.write_bytes(b"the box's own data, outside the results")
    root = tmp_path / "proj"
    write_project(root, wandb_job(outside), roster=("seed0",))
    session = open_session(str(root))
    try:
        await create_instance(session, "box")
        await launch_run(session, "r1")
        for _ in range(600):
            if (await run_state(session, "r1")).liveness.state == "finished":
                break
            await asyncio.sleep(0.1)
        await pull_run(session, "r1")
        with pytest.raises(GateRefused):
            await teardown.execute(session, "box", "sim-box", ["test"])
        assert (await verify_run(session, "r1")).ok
        local = root / "runs" / "r1" / "seed0"
        made = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_symlink())
        assert made == ["wandb/debug.log", "wandb/latest-run"]  # the links to results, made again locally
        assert (local / "wandb" / "debug.log").read_text() == "history\n"
        assert (local / "wandb" / "run-20261206_120000-abc" / "logs" / "debug.log").read_text() == "history\n"
        assert not (local / "shared-data").exists() and b"own data" not in b"".join(
            p.read_bytes() for p in local.rglob("*") if p.is_file())
        plan = await teardown.plan(session, "box")
        assert plan.gate_open, plan.reasons
        links = [line for line in plan.lines if line.startswith("Links:") or line.startswith("  seed0/shared")]
        assert links == ["Links:     run r1: 3 link(s) recorded, 2 re-created in the local copy; 1 lead out of the "
                         "result root (their targets are not results and are not pulled):",
                         f"  seed0/shared-data -> {outside}"]
        outcome = await teardown.execute(session, "box", "sim-box", plan.lines)
        assert outcome.confirmed
        assert outside.read_bytes() == b"the box's own data, outside the results"  # nothing followed a link
    finally:
        await session.close_transports()
        session.close()
