"""Unknown is never empty on a generic SSH box (docs/gate.md §7.2), against a real OpenSSH sshd on loopback and
the installed `rgt`: a box whose ledger is garbage, and a box whose sshd has stopped answering.

r1 is launched, pulled and verified through entry `box` (an ssh-config alias); r2 is declared on the same box
and was never launched by this rgt. Whether another copy of rgt launched r2 there is unknown once the box's
ledger cannot be read, so `rgt down` exits 3 until the person types r2's name with `--accept-loss`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_one_box_one_gate import _launch
from test_one_box_two_names import ALIAS, write_project, write_ssh_config

from remote_gpu_trainer.services.opening import open_session
from support.gate_helpers import keep_verdicts, rgt, seed_verdicts
from support.sshd_fixtures import Sshd

pytestmark = pytest.mark.sshd


async def verified_r1_with_r2_declared(sshd: Sshd, home: Path, tmp_path: Path) -> Path:
    write_ssh_config(home, sshd)
    root = write_project(tmp_path / "proj", {"box": ALIAS}, {"r1": "box", "r2": "box"}, tmp_path / "box")
    seed_verdicts(root)
    await _launch(root, "r1", "box", sshd)
    for verb in ("pull", "verify"):
        done = rgt(verb, "r1", str(root), cwd=root)
        assert done.returncode == 0, (verb, done.stdout, done.stderr)
    keep_verdicts(root)
    return root


def waived(root: Path) -> dict[str, list[str]]:
    session = open_session(str(root))
    try:
        return dict(session.db.events(kind="approval")[-1].detail["accepted_loss"])
    finally:
        session.close()


async def test_a_garbage_ledger_on_a_real_ssh_box_is_not_an_empty_one(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root = await verified_r1_with_r2_declared(sshd, ssh_home, tmp_path)
    project_id = (root / ".rgt" / "project-id").read_text().strip()
    entry = sshd.home / ".rgt-ledger" / project_id / "r1.json"
    assert json.loads(entry.read_bytes())["run_id"] == "r1"  # written over SSH into the login's home
    entry.write_text('{"schema": "rgt-ledger/v1"}')
    refused = rgt("down", "r1", str(root), "--confirm", ALIAS, cwd=root)
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "r2: the box's ledger could not be read" in refused.stderr and "--accept-loss r2" in refused.stderr
    done = rgt("down", "r1", str(root), "--confirm", ALIAS, "--accept-loss", "r2", cwd=root)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert list(waived(root)) == ["r2"]


async def test_a_real_ssh_box_that_stopped_answering_is_not_taken_as_empty(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root = await verified_r1_with_r2_declared(sshd, ssh_home, tmp_path)
    sshd.stop()  # the listener is gone: every new connection is refused (the generic box's state is then unknown)
    refused = rgt("down", "r1", str(root), "--confirm", ALIAS, cwd=root)
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "unknown is not empty" in refused.stderr and "--accept-loss r2" in refused.stderr, refused.stderr
    # r2's loss accepted, what no name waives still holds: rgt cannot see the box, so it cannot record it gone
    still = rgt("down", "r1", str(root), "--confirm", ALIAS, "--accept-loss", "r2", cwd=root)
    assert still.returncode == 3, (still.stdout, still.stderr)
    assert "instance state is unknown" in still.stderr and "r2" not in still.stderr, still.stderr
