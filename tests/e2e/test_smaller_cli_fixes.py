"""The smaller command-line defects of issue 26, item 16, each through the installed console script:

- `rgt info` on an rgt.toml holding a secret-looking key refuses it as every other verb does (exit 2, one line,
  the value never shown). Chosen over "shown redacted with a non-zero exit": info names that file as the project
  file, and a file every other verb refuses is not a project; one behaviour for one file.
- private-key text (`-----BEGIN ... PRIVATE KEY-----`) in any rgt.toml value, an array's strings included, is
  refused without being echoed;
- `rgt pull` of a run never launched says so (before anything is written or logged), not "missing_dir";
- a refusal of an unknown host key names the exact `rgt trust` command, and that command works as printed;
- signature S48's fix reads as an action, not a developer's note (no shipped fix cites a spec section).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.log.signatures import load_catalogue
from remote_gpu_trainer.config.project import load_project_text
from remote_gpu_trainer.errors import ConfigError
from support.fleet_projects import sim_project, ssh_project
from support.gate_helpers import events, rgt
from support.helpers import RUN
from support.sshd_fixtures import Sshd

KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ"


def test_info_refuses_a_secret_in_rgt_toml_as_every_other_verb_does(tmp_path: Path) -> None:
    root = sim_project(tmp_path / "p", "secretive")
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write('\n[instances.other]\nprovider = "sim"\napi_key = "not-shown-7f3a9c"\n')
    for argv in (("info", str(root)), ("info", str(root), "--format", "json"), ("events", str(root))):
        done = rgt(*argv, cwd=tmp_path)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stdout == "" and done.stderr.count("\n") == 1, (argv, done.stdout, done.stderr)
        assert "instances.other.api_key: looks like a secret" in done.stderr, (argv, done.stderr)
        assert "not-shown-7f3a9c" not in done.stderr
    assert rgt("info", cwd=tmp_path).returncode == 0  # outside any project: versions and paths, as before


@pytest.mark.parametrize("where", ["command", "roster", "storage row"])
def test_private_key_text_in_any_value_is_refused_unshown(tmp_path: Path, where: str) -> None:
    root = sim_project(tmp_path / "p")
    text = (root / "rgt.toml").read_text(encoding="utf-8")
    armoured = f"-----BEGIN OPENSSH PRIVATE KEY-----\\n{KEY_BODY}\\n-----END OPENSSH PRIVATE KEY-----"
    if where == "command":
        text = re.sub(r"(?m)^command = .*$", lambda _: f'command = "echo {armoured} > k"', text)
    elif where == "roster":
        text = text.replace('roster = ["seed0", "seed1"]', f'roster = ["seed0", "{armoured}"]')
    else:
        text += f'\n[[runs.{RUN}.storage]]\nname = "keys"\nnote = "{armoured}"\n'
    with pytest.raises(ConfigError) as refused:
        load_project_text(root / "rgt.toml", text)
    said = "\n".join([str(refused.value), *getattr(refused.value, "problems", [])])
    assert "value holds private-key text" in said, said
    assert KEY_BODY not in said


def test_pull_of_a_run_never_launched_says_so(tmp_path: Path) -> None:
    root = sim_project(tmp_path / "p")
    assert rgt("up", RUN, str(root), cwd=root).returncode == 0  # the box is there; the run never ran on it
    done = rgt("pull", RUN, str(root), cwd=root)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"rgt: run {RUN} was not launched yet: nothing to pull"), done.stderr
    assert f"`rgt run {RUN}`" in done.stderr and "missing_dir" not in done.stderr, done.stderr
    assert not (root / "runs" / RUN).exists()  # nothing written
    assert not [kind for kind, _ in events(root) if kind.startswith("pull")]  # nothing logged


def test_an_unknown_host_key_refusal_names_the_exact_trust_command(tmp_path: Path, sshd: Sshd,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copyfile(sshd.client_key, home / ".ssh" / "id_ed25519")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    root = ssh_project(tmp_path / "p q", sshd.target, tmp_path / "box")  # a space: the command quotes it
    fingerprint = sshd.host_public_key().get_fingerprint("sha256")
    command = f"rgt trust box {shlex.quote(str(root))} --fingerprint {fingerprint}"
    for argv in (("up", RUN, str(root)), ("run", RUN, str(root), "--ack", "host-key test")):
        refused = rgt(*argv, cwd=tmp_path)
        assert refused.returncode == 1, (argv, refused.stdout, refused.stderr)
        assert f"then run `{command}`" in refused.stderr, (argv, refused.stderr)
    trusted = rgt(*shlex.split(command)[1:], cwd=tmp_path)  # as printed, from anywhere
    assert trusted.returncode == 0 and f"trusted ssh-ed25519 {fingerprint} for box" in trusted.stdout, \
        trusted.stderr
    assert rgt("up", RUN, str(root), cwd=tmp_path).returncode == 0


def test_s48_fix_is_an_action_and_no_shipped_fix_is_a_developer_note() -> None:
    catalogue = load_catalogue()
    s48 = catalogue["S48"].fix
    assert s48.startswith("Read the traceback's last line") and "then run again" in s48, s48
    notes = {row.id: row.fix for row in catalogue.rows.values() if "§" in row.fix}
    assert notes == {}, notes  # a spec section is for rgt's developers, not for a user with a failed run
