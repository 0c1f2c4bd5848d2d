"""One box under two names (issue 24, hole 3; docs/gate.md §7 item 6): a second entry for a box is refused
before anything is launched through it.

Each SSH case is driven through the installed `rgt` (or the Session the TUI uses) against a real OpenSSH sshd
on loopback: the second entry is refused when the project is opened (same address and port, or a host key
both are trusted with), at first contact before its key is trusted, and at launch when the key was trusted
behind an open session. A cloud box under two entry names is refused when rgt.toml is read, before any call
reaches the provider's (fake) API. Runs launched before the second name existed: test_one_box_one_gate.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support import fake_clouds
from support.fake_clouds import FakeCloud, FakeRunPod, FakeVast
from support.gate_helpers import rgt, small_command
from support.helpers import toml_string
from support.sshd_fixtures import Sshd, free_port

runpod_fake = fake_clouds.runpod_fake
vast_fake = fake_clouds.vast_fake
cloud_env = fake_clouds.cloud_env

ALIAS = "gpu-box"


def hosts_name() -> str:
    """A name other than localhost that this machine resolves to 127.0.0.1 through /etc/hosts (never
    edited here), else `127.1`, the short numeric form the resolver also turns into 127.0.0.1."""
    try:
        lines = Path("/etc/hosts").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split("#", 1)[0].split()
        if fields[:1] == ["127.0.0.1"]:
            names = [name for name in fields[1:] if not name.startswith("localhost")]
            if names:
                return names[0]
    return "127.1"


def write_ssh_config(home: Path, server: Sshd, alias_host: str = "127.0.0.1", alias_port: int | None = None) -> None:
    """~/.ssh/config of the temp HOME: `gpu-box` goes to `alias_host`, and every host logs in as root with
    the server's client key."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    (ssh / "config").write_text(
        f"Host {ALIAS}\n  HostName {alias_host}\n  Port {alias_port or server.port}\n\n"
        f"Host *\n  User root\n  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n")


def run_table(run_id: str, instance: str, box: Path) -> str:
    return f"""
[runs.{run_id}]
instance = "{instance}"
workdir = {toml_string(str(box / f"job-{run_id}"))}
command = {toml_string(small_command())}
log = "train.log"
remote_root = {toml_string(str(box / "rgt" / run_id))}
roster = ["seed0", "seed1"]
required = ["best.pth", "best_metrics.json"]
python = {toml_string(sys.executable)}
"""


def write_project(root: Path, entries: dict[str, str], runs: dict[str, str], box: Path) -> Path:
    """ssh entries (name -> host) and runs (id -> entry name)."""
    root.mkdir(parents=True, exist_ok=True)
    text = '[project]\nname = "one-box"\n'
    for name, host in entries.items():
        text += f'\n[instances.{name}]\nprovider = "ssh"\nhost = "{host}"\n'
    for run_id, instance in runs.items():
        text += run_table(run_id, instance, box)
    (root / "rgt.toml").write_text(text, encoding="utf-8")
    return root


def fingerprint(server: Sshd) -> str:
    return server.host_public_key().get_fingerprint("sha256")


def twin_sshd(server: Sshd, root: Path, port: int) -> Sshd:
    """The same box answering on a second port (sshd on 22 and 2222, or a NAT port forward): a second sshd
    with the first one's host key, client key, filesystem and login home."""
    twin = Sshd(root, port, server.host_key, server.client_key)
    root.mkdir(parents=True, exist_ok=True)
    twin.home.symlink_to(server.home, target_is_directory=True)
    (root / "authorized_keys").write_text(Path(str(server.client_key) + ".pub").read_text())
    twin.start()
    return twin


# -- refused when the project is opened: one address and port ----------------------------------------------

PAIRS = {
    "localhost-and-127.0.0.1": ("root@localhost:{port}", "root@127.0.0.1:{port}"),
    "alias-to-127.0.0.1-and-localhost": ("localhost:{port}", ALIAS),
    "hosts-name-and-alias": ("{hosts}:{port}", ALIAS),
    "ipv4-mapped-ipv6-and-localhost": ("root@[::ffff:127.0.0.1]:{port}", "localhost:{port}"),
}


@pytest.mark.sshd
@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_two_names_for_one_address_are_refused_when_the_project_opens(sshd: Sshd, ssh_home: Path,
                                                                      tmp_path: Path, pair: str) -> None:
    write_ssh_config(ssh_home, sshd)
    first, second = (host.format(port=sshd.port, hosts=hosts_name()) for host in PAIRS[pair])
    root = write_project(tmp_path / "proj", {"a": first, "b": second}, {"r1": "b"}, tmp_path / "box")
    text = (root / "rgt.toml").read_text().splitlines()
    line_a, line_b = text.index("[instances.a]") + 1, text.index("[instances.b]") + 1
    for args in (("--report", str(root)), ("down", "r1", str(root), "--confirm", second),
                 ("run", "r1", str(root), "--ack", "test box")):
        result = rgt(*args, cwd=root)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert (f"rgt.toml:{line_b}: instances.b: names the same box as instances.a (line {line_a}): "
                f"both reach 127.0.0.1:{sshd.port}") in result.stderr, result.stderr
    assert sshd.logins() == 0 and not (tmp_path / "box").exists()  # nothing reached the box


# -- refused at first contact: one host key ---------------------------------------------------------------

@pytest.mark.sshd
def test_a_second_entry_presenting_a_trusted_key_is_refused_before_it_is_trusted(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """Different ports, so nothing tells the entries apart offline; the host key `b` presents is the one
    `a` was trusted with, so `b` is refused before its key is recorded and nothing runs through it."""
    twin = twin_sshd(sshd, tmp_path / "twin", free_port())
    try:
        write_ssh_config(ssh_home, sshd, alias_port=twin.port)
        root = write_project(tmp_path / "proj", {"a": f"127.0.0.1:{sshd.port}", "b": ALIAS}, {"r1": "b"},
                             tmp_path / "box")
        key = fingerprint(sshd)
        trusted = rgt("trust", "a", str(root), "--fingerprint", key, cwd=root)
        assert trusted.returncode == 0, trusted.stderr
        refused = rgt("trust", "b", str(root), "--fingerprint", key, cwd=root)
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert re.search(r"instances\.b: names the same box as instances\.a \(line \d+\): both present host key "
                         + re.escape(key), refused.stderr), refused.stderr
        assert "nothing was trusted" in refused.stderr
        assert f"{twin.port}]" not in (root / ".rgt" / "known_hosts").read_text()
        launched = rgt("run", "r1", str(root), "--ack", "test box", cwd=root)
        assert launched.returncode != 0, launched.stdout
        assert twin.logins() == 0 and not (tmp_path / "box").exists()
    finally:
        twin.stop()


@pytest.mark.sshd
def test_two_entries_the_user_trusted_with_one_key_are_refused_when_the_project_opens(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """The user's own ~/.ssh/known_hosts lists the box under both of its ports (plain ssh to each): the
    project is refused when opened, before any connection."""
    twin = twin_sshd(sshd, tmp_path / "twin", free_port())
    try:
        write_ssh_config(ssh_home, sshd, alias_port=twin.port)
        line = sshd.known_hosts_line()
        (ssh_home / ".ssh" / "known_hosts").write_text(line + line.replace(f"]:{sshd.port} ", f"]:{twin.port} "))
        root = write_project(tmp_path / "proj", {"a": f"127.0.0.1:{sshd.port}", "b": ALIAS}, {"r1": "b"},
                             tmp_path / "box")
        for args in (("--report", str(root)), ("run", "r1", str(root), "--ack", "test box")):
            result = rgt(*args, cwd=root)
            assert result.returncode == 2, (args, result.stdout, result.stderr)
            assert f"both present host key {fingerprint(sshd)}" in result.stderr, result.stderr
        assert sshd.logins() == twin.logins() == 0
    finally:
        twin.stop()


@pytest.mark.sshd
async def test_a_key_trusted_while_the_project_is_open_stops_the_launch(sshd: Sshd, ssh_home: Path,
                                                                        tmp_path: Path) -> None:
    """The TUI stays open while the user ssh's to both ports by hand: the next launch through `b` is refused
    before anything starts, as opening the project would now refuse it."""
    from remote_gpu_trainer.errors import ConfigError

    twin = twin_sshd(sshd, tmp_path / "twin", free_port())
    try:
        write_ssh_config(ssh_home, sshd, alias_port=twin.port)
        root = write_project(tmp_path / "proj", {"a": f"127.0.0.1:{sshd.port}", "b": ALIAS}, {"r1": "b"},
                             tmp_path / "box")
        session = open_session(str(root))
        try:
            line = sshd.known_hosts_line()
            (ssh_home / ".ssh" / "known_hosts").write_text(
                line + line.replace(f"]:{sshd.port} ", f"]:{twin.port} "))
            with pytest.raises(ConfigError, match=r"instances\.b: names the same box as instances\.a .*"
                               r"both present host key .*nothing was launched"):
                await launch_run(session, "r1")
            assert session.db.launch_history() == []
        finally:
            await session.close_transports()
            session.close()
        assert not (tmp_path / "box").exists()
    finally:
        twin.stop()


# -- one cloud box under two entry names ------------------------------------------------------------------

CLOUD_FORMS = {
    "runpod-id-in-another-case": ("runpod", "abc123", "ABC123"),
    "vast-id-with-leading-zeros": ("vastai", "4242", "004242"),
}


@pytest.mark.parametrize("form", sorted(CLOUD_FORMS))
def test_one_cloud_box_under_two_entry_names_is_refused_before_any_call(
        tmp_path: Path, cloud_env: Path, runpod_fake: FakeRunPod, vast_fake: FakeVast, form: str) -> None:
    provider, first, second = CLOUD_FORMS[form]
    fake: FakeCloud = runpod_fake if provider == "runpod" else vast_fake
    if isinstance(fake, FakeRunPod):
        fake.add_pod(first)
    else:
        fake.add_instance(first)
    root = tmp_path / "proj"
    root.mkdir()
    entries = "".join(f'\n[instances.{name}]\nprovider = "{provider}"\nid = "{ident}"\napi_base = "{fake.url}"\n'
                      for name, ident in (("a", first), ("b", second)))
    (root / "rgt.toml").write_text('[project]\nname = "one-cloud-box"\n' + entries
                                   + run_table("r1", "b", Path("/workspace")), encoding="utf-8")
    lines = (root / "rgt.toml").read_text().splitlines()
    line_a = lines.index("[instances.a]") + 1
    line_b = lines.index(f'id = "{second}"') + 1
    for args in (("down", "r1", str(root), "--confirm", second), ("--report", str(root))):
        result = rgt(*args, cwd=root)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert (f"rgt.toml:{line_b}: instances.b.id: names the same box as instances.a (line {line_a})"
                in result.stderr), result.stderr
    assert fake.requests() == []  # refused before any call: nothing was asked, stopped or destroyed
