"""Nothing is printed that the user did not cause (issue 26, item 14): the SSH and cloud verbs and `rgt status`,
run as the installed console script in its own process against a real loopback sshd and the RunPod fake, print
nothing on stderr when they succeed (pull: its own progress lines only); above all no library's warnings.
asyncssh makes cryptography warn about DSA once per touch of its DSA classes: at import (ten lines before the
first word of rgt's), and on every connection of a user whose ~/.ssh still holds an old id_dsa, which asyncssh
loads with the default keys; the HOME here holds one, beside the ed25519 key the boxes accept.

A subprocess on purpose: pytest installs its own warning filters in-process, which would hide exactly the lines
this test looks for. The child runs with the interpreter's default filters (PYTHONWARNINGS unset) and, as a
control, with `-W default` (PYTHONWARNINGS=default), the setting under which Python shows every warning once
per place: a user's environment may carry it, and rgt's filter must still hold.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from support import fake_clouds
from support.fake_clouds import FAKE_KEY, FakeRunPod
from support.gate_helpers import rgt
from support.helpers import copy_command, toml_string
from support.sshd_fixtures import Sshd

pytestmark = pytest.mark.sshd
runpod_fake = fake_clouds.runpod_fake

def run_table(run_id: str, instance: str, box: Path) -> str:
    return f"""
[runs.{run_id}]
instance = "{instance}"
workdir = {toml_string(str(box / "job"))}
command = {toml_string(copy_command())}
log = "train.log"
remote_root = {toml_string(str(box / "rgt" / run_id))}
roster = ["seed0", "seed1"]
required = ["best.pth", "best_metrics.json"]
python = {toml_string(sys.executable)}
"""


def project(root: Path, ssh: Sshd, pod_api: str, boxes: Path) -> Path:
    """`box` over SSH at one sshd, `pod` a RunPod pod (the fake's p1) whose SSH is a second sshd."""
    root.mkdir(parents=True)
    (root / "rgt.toml").write_text(
        '[project]\nname = "quiet"\n\n'
        f'[instances.box]\nprovider = "ssh"\nhost = {toml_string(ssh.target)}\n\n'
        f'[instances.pod]\nprovider = "runpod"\nid = "p1"\napi_base = {toml_string(pod_api)}\n'
        + run_table("r1", "box", boxes / "box") + run_table("c1", "pod", boxes / "pod"), encoding="utf-8")
    return root


def old_dsa_key(path: Path) -> None:
    """A 1024-bit DSA key in OpenSSH's format, as ssh-keygen -t dsa wrote them for years."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import dsa

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # this test's own use of DSA
        key = dsa.generate_private_key(1024)
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                           serialization.NoEncryption()))
    path.chmod(0o600)


@pytest.fixture
def env(tmp_path: Path, sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A HOME holding the sshd's client key, the fake's key in the environment, no agent, no warning filter."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copyfile(sshd.client_key, home / ".ssh" / "id_ed25519")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    old_dsa_key(home / ".ssh" / "id_dsa")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RUNPOD_API_KEY", FAKE_KEY)
    for name in ("SSH_AUTH_SOCK", "RUNPOD_API_URL", "PYTHONWARNINGS"):
        monkeypatch.delenv(name, raising=False)
    return dict(os.environ)


@pytest.mark.parametrize("filters", ["interpreter default", "PYTHONWARNINGS=default"])
def test_ssh_and_cloud_verbs_and_status_print_nothing_on_stderr(
        tmp_path: Path, sshd: Sshd, sshd_factory: Callable[..., Sshd], runpod_fake: FakeRunPod,
        env: dict[str, str], filters: str) -> None:
    if filters != "interpreter default":
        env = {**env, "PYTHONWARNINGS": "default"}
    pod_sshd = sshd_factory("pod-sshd", client_key=sshd.client_key)
    runpod_fake.add_pod("p1", host=pod_sshd.host, port=pod_sshd.port)
    root = project(tmp_path / "proj", sshd, runpod_fake.url, tmp_path / "boxes")
    said: list[tuple[tuple[str, ...], int, str]] = []

    def call(*argv: str) -> str:
        done = rgt(*argv, cwd=root, env=env)
        said.append((argv, done.returncode, done.stderr))
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done.stdout

    proj = str(root)
    call("trust", "box", proj, "--fingerprint", sshd.host_public_key().get_fingerprint("sha256"))
    call("trust", "pod", proj, "--fingerprint", pod_sshd.host_public_key().get_fingerprint("sha256"))
    for run_id in ("r1", "c1"):
        call("up", run_id, proj)
        call("run", run_id, proj, "--ack", "quiet-stderr test on a CPU box")
    for run_id in ("r1", "c1"):
        deadline = time.monotonic() + 120
        while "finished" not in call("watch", run_id, proj, "--once"):
            assert time.monotonic() < deadline, f"{run_id} did not finish"
            time.sleep(0.3)
        call("pull", run_id, proj)
    call("status", proj, "--timeout", "10")
    call("--report", proj)
    call("events", proj)

    assert [argv[0] for argv, _, _ in said].count("pull") == 2 and len(runpod_fake.requests()) > 0
    for argv, _, err in said:
        assert "Warning" not in err, (argv, err)
        if argv[0] == "pull":  # its progress, then its summary: rgt's own lines, each caused by the pull
            lines = err.splitlines()
            assert lines[-1].startswith("pulled 6 file(s) into "), (argv, err)
            assert all(line.startswith("done  ") for line in lines[:-1]), (argv, err)
        else:
            assert err == "", (argv, err)


def test_only_asyncssh_s_dsa_warnings_are_filtered(tmp_path: Path) -> None:
    """The filter is exact: after rgt's asyncssh import, a warning of rgt's own and cryptography's DSA warning
    raised from any code but asyncssh's still show, once each, as Python shows them."""
    script = (
        "from remote_gpu_trainer.providers.transports.quiet_asyncssh import asyncssh\n"
        "import warnings\n"
        "warnings.warn('a warning of rgt', UserWarning)\n"
        "from cryptography.hazmat.primitives.asymmetric import dsa\n"
        "dsa.DSAParameterNumbers\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    shown = [line for line in done.stderr.splitlines() if "Warning: " in line]
    assert len(shown) == 2, done.stderr
    assert shown[0].startswith("<string>:3: UserWarning: a warning of rgt"), done.stderr
    assert shown[1].startswith("<string>:5: CryptographyDeprecationWarning: DSA is deprecated"), done.stderr
