"""A real OpenSSH sshd on 127.0.0.1 for the SSH tests (docs/environment.md §5), loaded by conftest.py.

Each server gets its own ed25519 host key, an absolute authorized_keys file and a private sshd_config, and
runs as a non-daemon child (`sshd -D -e`) whose log the tests read: "Accepted publickey" lines prove that
a login did or did not happen. Missing sshd is a failure, never a skip: `.ci/run` installs it.

Nothing here touches the real ~/.ssh: the client fixtures point HOME at a temp folder, drop SSH_AUTH_SOCK,
and hand the transport explicit config, key and known_hosts paths.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest

from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import Backoff, SSHPool, SSHSettings

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 10.0
# No waiting between reconnect attempts and no cool-down: the reconnect tests run in milliseconds.
FAST_BACKOFF = Backoff(attempts=2, first_delay=0.0, cooldown_first=0.0, cooldown_max=0.0)
# Drops CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH for everything the server runs, so root logins meet file
# permissions like any user would (tests and CI run as root).
NO_DAC_OVERRIDE = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


def write_key(path: Path) -> asyncssh.SSHKey:
    """A fresh ed25519 key pair at `path` and `path.pub`, private part 0600 (sshd refuses looser)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    key.write_public_key(str(path) + ".pub")
    os.chmod(path, 0o600)
    return key


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass
class Sshd:
    """One sshd; `start()` again re-listens on the same port (e.g. after swapping the host key)."""

    root: Path
    port: int
    host_key: Path
    client_key: Path
    wrapper: Sequence[str] = ()
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def target(self) -> str:
        return f"root@{LOOPBACK}:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    @property
    def config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def home(self) -> Path:
        """The login's HOME on this box (sshd's SetEnv), not the real /root."""
        return self.root / "home"

    def host_public_key(self) -> asyncssh.SSHKey:
        return asyncssh.read_public_key(str(self.host_key) + ".pub")

    def known_hosts_line(self) -> str:
        key = " ".join(self.host_public_key().export_public_key().decode().split()[:2])
        return f"[{LOOPBACK}]:{self.port} {key}\n"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def logins(self) -> int:
        """Successful logins so far: the proof that a connection did, or did not, get past the key check."""
        return self.log_text().count("Accepted publickey")

    def start(self) -> None:
        self.home.mkdir(exist_ok=True)
        _write_config(self)
        checked = subprocess.run([str(SSHD), "-t", "-f", str(self.config)], capture_output=True, text=True)
        if checked.returncode != 0:
            pytest.fail(f"sshd rejected its test config: {checked.stderr.strip()}")
        seen = len(self.log_text())  # a restart appends to the same log: only new lines count
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*self.wrapper, str(SSHD), "-D", "-e", "-f", str(self.config)],
                                         stdout=log, stderr=subprocess.STDOUT)
        self._wait_listening(seen)

    def _wait_listening(self, seen: int) -> None:
        assert self.proc is not None
        marker = f"Server listening on {LOOPBACK} port {self.port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if marker in self.log_text()[seen:]:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        self.stop()
        pytest.fail(f"sshd did not start on port {self.port}:\n{self.log_text()[-2000:]}")

    def stop(self) -> None:
        """Stop the listener (existing connections keep their own sshd processes)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


def _write_config(server: Sshd) -> None:
    server.config.write_text(
        f"Port {server.port}\n"
        f"ListenAddress {LOOPBACK}\n"
        f"HostKey {server.host_key}\n"
        "PidFile none\n"
        f"AuthorizedKeysFile {server.root / 'authorized_keys'}\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "PermitRootLogin prohibit-password\n"
        "Subsystem sftp internal-sftp\n"
        # each box has a home of its own, as separate machines do: the box's ledger (~/.rgt-ledger,
        # docs/gate.md §7.2) of one test's box never holds another test's runs
        f"SetEnv HOME={server.home}\n"
        "LogLevel VERBOSE\n", encoding="utf-8")


def require_sshd() -> None:
    if not os.access(SSHD, os.X_OK):
        pytest.fail(f"{SSHD} is missing: run .ci/run, which installs openssh-server (docs/environment.md §5)")
    if not PRIVSEP_DIR.is_dir():
        try:
            PRIVSEP_DIR.mkdir(parents=True)
        except OSError as exc:
            pytest.fail(f"{PRIVSEP_DIR} is missing and cannot be created ({exc}): run .ci/run")


def start_sshd(root: Path, *, client_key: Path | None = None, port: int | None = None,
               wrapper: Sequence[str] = ()) -> Sshd:
    """A new sshd in `root` with its own host key; `client_key` (made if absent) is the authorized one."""
    require_sshd()
    root.mkdir(parents=True, exist_ok=True)
    host_key = root / "host_key"
    write_key(host_key)
    if client_key is None:
        client_key = root / "client_key"
        write_key(client_key)
    (root / "authorized_keys").write_text(Path(str(client_key) + ".pub").read_text())
    server = Sshd(root, port or free_port(), host_key, client_key, wrapper)
    server.start()
    return server


def settings_for(server: Sshd, folder: Path, **changes: object) -> SSHSettings:
    """Settings with the server's key pinned in rgt's file, an empty user known_hosts, no ssh config,
    no agent, the server's client key and no reconnect delays; `changes` override any field."""
    folder.mkdir(parents=True, exist_ok=True)
    known = folder / "rgt_known_hosts"
    known.write_text(server.known_hosts_line())
    values: dict[str, object] = {
        "known_hosts_file": known, "user_known_hosts": (folder / "user_known_hosts",), "config_paths": (),
        "client_keys": (server.client_key,), "use_agent": False, "backoff": FAST_BACKOFF,
        "connect_timeout": 5.0,
    }
    values.update(changes)
    return SSHSettings(**values)  # type: ignore[arg-type]


async def session_pid(transport: SSHTransport) -> int:
    """The pid of the sshd process serving this transport's connection (the parent of the login shell):
    killing it drops the connection the way a network cut or a box reboot would."""
    result = await transport.run("echo $PPID")
    assert result.rc == 0, result
    return int(result.text.strip())


@pytest.fixture
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    """One sshd per test (about 20 ms to start): one box per test, with a home of its own, so what one test
    leaves on a box (its ledger, docs/gate.md §7.2) is never another test's box."""
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture
def sshd_factory(tmp_path: Path) -> Iterator[Callable[..., Sshd]]:
    """Private sshd servers for tests that stop, restart or re-key them."""
    started: list[Sshd] = []

    def make(name: str = "sshd", **kwargs: object) -> Sshd:
        server = start_sshd(tmp_path / name, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def ssh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME and no agent: nothing of the developer's own ssh setup can leak into a test."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


@pytest.fixture
def ssh_settings(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> SSHSettings:
    return settings_for(sshd, tmp_path / "ssh")


@pytest.fixture
async def ssh_transport(sshd: Sshd, ssh_settings: SSHSettings) -> AsyncIterator[SSHTransport]:
    transport = SSHTransport(sshd.target, ssh_settings, pool=SSHPool())
    yield transport
    await transport.close()
