"""What only the SSH transport has: strict host keys, authentication, ssh config, reconnects, backoff.

All against real OpenSSH servers on loopback. sshd's own log is the witness for "nothing logged in":
every successful login writes an "Accepted publickey" line.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
import pytest

from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import ConfigError, TransportError
from remote_gpu_trainer.providers.ssh import SSHProvider
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_hostkeys import (
    HostKeyMismatch,
    HostKeyUnknown,
    accept_host_key,
    trusted_fingerprints,
)
from remote_gpu_trainer.providers.transports.ssh_pool import AuthFailed, Backoff, SSHPool, SSHSettings, Target
from support.sshd_fixtures import Sshd, free_port, session_pid, settings_for, write_key

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def fingerprint(public_key_file: Path) -> str:
    """OpenSSH's own reading of a key's fingerprint, to check ours against."""
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(public_key_file)],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def transport(server: Sshd, settings: SSHSettings, target: str | None = None) -> SSHTransport:
    return SSHTransport(target or server.target, settings, pool=SSHPool())


async def settled_logins(server: Sshd) -> int:
    """The login count once sshd has had a moment to write its log."""
    await asyncio.sleep(0.05)
    return server.logins()


# -- targets -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("gpu-box", Target("gpu-box")),
    ("ubuntu@10.0.0.5", Target("10.0.0.5", "ubuntu")),
    ("root@ssh5.vast.ai:41022", Target("ssh5.vast.ai", "root", 41022)),
    ("me@[::1]:2222", Target("::1", "me", 2222)),
    ("[fe80::1]", Target("fe80::1")),
])
def test_targets_parse_aliases_and_user_host_port(text: str, expected: Target) -> None:
    assert Target.parse(text) == expected
    assert Target.parse(str(expected)) == expected


@pytest.mark.parametrize("text", ["", "user@", "a b", "host:0", "host:99999", "host:x", "[::1]x"])
def test_malformed_targets_are_configuration_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        Target.parse(text)


# -- host keys -----------------------------------------------------------------------------------------------

async def test_an_unknown_host_key_is_refused_with_its_fingerprint_before_any_login(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    settings = settings_for(sshd, tmp_path / "ssh")
    settings.known_hosts_file.unlink()
    before = await settled_logins(sshd)
    with pytest.raises(HostKeyUnknown) as caught:
        await transport(sshd, settings).run("touch should-not-exist")
    error = caught.value
    assert (error.host, error.port, error.key_type) == ("127.0.0.1", sshd.port, "ssh-ed25519")
    assert error.fingerprint_sha256 == fingerprint(Path(f"{sshd.host_key}.pub"))
    assert error.fingerprint_sha256 in str(error) and "\n" not in str(error)
    assert isinstance(error, TransportError)
    assert await settled_logins(sshd) == before, "nothing may log in before the key is accepted"
    assert not settings.known_hosts_file.exists(), "never added automatically"
    assert not settings.user_known_hosts[0].exists()


async def test_accepting_the_key_records_a_receipt_and_then_connects(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    settings = settings_for(sshd, tmp_path / "ssh")
    settings.known_hosts_file.unlink()
    with pytest.raises(HostKeyUnknown) as caught:
        await transport(sshd, settings).run("true")
    error = caught.value
    receipt = accept_host_key(settings.known_hosts_file, error.host, error.port, error.key, now=NOW)
    assert receipt == {
        "host": "127.0.0.1", "port": sshd.port, "key_type": "ssh-ed25519",
        "fingerprint_sha256": fingerprint(Path(f"{sshd.host_key}.pub")),
        "observed_at": "2026-11-29T12:00:00+00:00", "first_contact_authenticated": False,
    }
    assert settings.known_hosts_file.read_text() == sshd.known_hosts_line()
    accept_host_key(settings.known_hosts_file, error.host, error.port, error.key, now=NOW)
    assert settings.known_hosts_file.read_text() == sshd.known_hosts_line(), "accepting twice adds nothing"
    before = await settled_logins(sshd)
    client = transport(sshd, settings)
    assert (await client.run("echo connected")).text == "connected\n"
    await client.close()
    assert await settled_logins(sshd) == before + 1


def test_accepting_a_different_key_for_a_recorded_host_needs_replace(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    old, new = asyncssh.generate_private_key("ssh-ed25519"), asyncssh.generate_private_key("ssh-ed25519")
    accept_host_key(known, "gpu.example", 22, old)
    accept_host_key(known, "gpu.example", 2222, old)
    with pytest.raises(HostKeyMismatch) as caught:
        accept_host_key(known, "gpu.example", 22, new)
    assert caught.value.expected_fingerprints == [old.get_fingerprint("sha256")]
    assert known.read_text().count("\n") == 2
    receipt = accept_host_key(known, "gpu.example", 22, new, replace=True, instance_id="box-1")
    assert receipt["instance_id"] == "box-1" and receipt["fingerprint_sha256"] == new.get_fingerprint("sha256")
    lines = known.read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["[gpu.example]:2222", "gpu.example"]
    assert lines[1].split()[2] == new.export_public_key().decode().split()[1]


def test_a_known_hosts_file_changed_in_place_is_read_again(tmp_path: Path) -> None:
    """known_hosts files are parsed once and kept while they stay the same file (ssh_hostkeys._known_hosts):
    an edit in place with a line of the very same length, even with its modification time put back, is
    seen by the next lookup (its change time moved), as is a file written within the last seconds."""
    user_file, rgt_file = tmp_path / "user_known_hosts", tmp_path / "rgt_known_hosts"
    first, second = asyncssh.generate_private_key("ssh-ed25519"), asyncssh.generate_private_key("ssh-ed25519")

    def line(key: asyncssh.SSHKey) -> str:
        return f"[gpu.example]:2222 {key.export_public_key().decode().strip()}\n"

    def trusted() -> frozenset[str]:
        return trusted_fingerprints(rgt_file, (user_file,), "gpu.example", 2222)

    user_file.write_text(line(first))
    assert trusted() == {first.get_fingerprint("sha256")}  # fresh: read, not kept
    os.utime(user_file, ns=(1_000_000_000, 1_000_000_000))  # long settled: kept from here on
    settled = user_file.stat()
    assert trusted() == trusted() == {first.get_fingerprint("sha256")}
    with open(user_file, "r+") as handle:  # in place: same inode, same size
        handle.write(line(second))
    os.utime(user_file, ns=(settled.st_atime_ns, settled.st_mtime_ns))
    assert (user_file.stat().st_ino, user_file.stat().st_size) == (settled.st_ino, settled.st_size)
    assert trusted() == {second.get_fingerprint("sha256")}
    user_file.unlink()
    accept_host_key(rgt_file, "gpu.example", 2222, first)
    assert trusted() == {first.get_fingerprint("sha256")}


async def test_the_users_known_hosts_wins_and_is_never_written(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    settings = settings_for(sshd, tmp_path / "ssh")  # rgt's file holds the right key
    user_file = settings.user_known_hosts[0]
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    user_file.write_text(f"# mine\nnot a valid line\n[127.0.0.1]:{sshd.port} "
                         f"{stranger.export_public_key().decode().strip()}\n")
    written = user_file.read_bytes(), user_file.stat().st_mtime_ns
    before = await settled_logins(sshd)
    with pytest.raises(HostKeyMismatch) as caught:
        await transport(sshd, settings).run("true")
    assert caught.value.source == user_file
    assert caught.value.expected_fingerprints == [stranger.get_fingerprint("sha256")]
    assert (user_file.read_bytes(), user_file.stat().st_mtime_ns) == written
    assert await settled_logins(sshd) == before

    user_file.write_text(sshd.known_hosts_line())  # the right key, stored hashed as ssh does by default
    subprocess.run(["ssh-keygen", "-H", "-f", str(user_file)], check=True, capture_output=True)
    assert str(sshd.port) not in user_file.read_text()
    settings.known_hosts_file.unlink()
    client = transport(sshd, settings)
    assert (await client.run("true")).rc == 0
    await client.close()
    assert not settings.known_hosts_file.exists(), "a host the user knows is never copied into rgt's file"


async def test_a_port_22_entry_never_vouches_for_another_port(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """Rented boxes share one host name across many ports (vast.ai): as in OpenSSH, `host` alone means
    port 22, so even the right key recorded without a port leaves this port unknown."""
    settings = settings_for(sshd, tmp_path / "ssh")
    settings.known_hosts_file.write_text(sshd.known_hosts_line().replace(f"[127.0.0.1]:{sshd.port}", "127.0.0.1"))
    with pytest.raises(HostKeyUnknown):
        await transport(sshd, settings).run("true")


async def test_a_changed_host_key_is_refused_naming_both_fingerprints(
        sshd_factory: Callable[..., Sshd], ssh_home: Path, tmp_path: Path) -> None:
    server = sshd_factory()
    settings = settings_for(server, tmp_path / "ssh")
    old_print = fingerprint(Path(f"{server.host_key}.pub"))
    client = transport(server, settings)
    assert (await client.run("true")).rc == 0
    await client.close()
    server.stop()
    write_key(server.host_key)  # the box was re-created: same host and port, new key
    server.start()
    recorded = settings.known_hosts_file.read_bytes()
    before = await settled_logins(server)
    for _ in range(2):  # refused every time, never cached as a success
        with pytest.raises(HostKeyMismatch) as caught:
            await client.run("touch should-not-exist")
        error = caught.value
        assert error.expected_fingerprints == [old_print]
        assert error.presented_fingerprint == fingerprint(Path(f"{server.host_key}.pub")) != old_print
        assert old_print in str(error) and str(error.presented_fingerprint) in str(error)
        assert "\n" not in str(error)
    assert await settled_logins(server) == before
    assert settings.known_hosts_file.read_bytes() == recorded, "the old key is kept"


# -- reachability and authentication ------------------------------------------------------------------------

class Recorder:
    """An injected sleep and clock: backoff is observed without waiting for it."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.now = 1000.0

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def clock(self) -> float:
        return self.now


async def test_an_unreachable_host_fails_fast_then_backs_off(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    backoff = Backoff(attempts=3, first_delay=0.5, factor=2.0, cooldown_first=15.0, jitter=0.1,
                      sleep=recorder.sleep, clock=recorder.clock)
    settings = settings_for(sshd, tmp_path / "ssh", backoff=backoff)
    closed = SSHTransport(f"root@127.0.0.1:{free_port()}", settings, pool=SSHPool())
    started = time.monotonic()
    with pytest.raises(TransportError) as caught:
        await closed.run("true")
    assert time.monotonic() - started < 2.0
    assert type(caught.value) is TransportError and "127.0.0.1" in str(caught.value)
    assert len(recorder.sleeps) == 2
    assert 0.45 <= recorder.sleeps[0] <= 0.55 and 0.9 <= recorder.sleeps[1] <= 1.1

    with pytest.raises(TransportError, match="next attempt in"):  # cooling down: no new connection storm
        await closed.stat("/")
    assert len(recorder.sleeps) == 2
    recorder.now += 20.0
    with pytest.raises(TransportError, match="cannot connect"):
        await closed.stat("/")
    assert len(recorder.sleeps) == 4


async def test_a_host_that_never_answers_times_out(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts TCP (backlog) but never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings = settings_for(sshd, tmp_path / "ssh", connect_timeout=0.5,
                                backoff=Backoff(attempts=1, cooldown_first=0.0))
        started = time.monotonic()
        with pytest.raises(TransportError, match="no answer within 0.5 s"):
            await SSHTransport(f"root@127.0.0.1:{silent.getsockname()[1]}", settings, pool=SSHPool()).run("true")
        assert time.monotonic() - started < 3.0


async def test_a_connect_that_timed_out_is_not_retried_at_once(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """It already waited the whole timeout: a quick retry would only wait as long again (a silent box made
    `rgt down` wait three timeouts before it could say the box is unknown). One connection, then the cool-down."""
    recorder = Recorder()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings = settings_for(sshd, tmp_path / "ssh", connect_timeout=0.5,
                                backoff=Backoff(attempts=3, sleep=recorder.sleep, clock=recorder.clock))
        box = SSHTransport(f"root@127.0.0.1:{silent.getsockname()[1]}", settings, pool=SSHPool())
        with pytest.raises(TransportError, match="no answer within 0.5 s"):
            await box.run("true")
        with pytest.raises(TransportError, match=r"unreachable since .*\(no answer within 0.5 s\)"):  # the cool-down
            await box.run("true")
        silent.setblocking(False)
        accepted = 0
        while True:
            try:
                conn, _ = silent.accept()
            except BlockingIOError:
                break
            conn.close()
            accepted += 1
    assert accepted == 1 and recorder.sleeps == []


async def test_a_wrong_client_key_is_an_auth_failure_and_never_retried(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    wrong = tmp_path / "wrong_key"
    write_key(wrong)
    settings = settings_for(sshd, tmp_path / "ssh", client_keys=(wrong,),
                            backoff=Backoff(attempts=3, sleep=recorder.sleep, clock=recorder.clock))
    with pytest.raises(AuthFailed) as caught:
        await transport(sshd, settings).run("true")
    message = str(caught.value)
    assert message.startswith(f"root@127.0.0.1:{sshd.port}: authentication refused") and "\n" not in message
    assert recorder.sleeps == []


# -- ssh config ----------------------------------------------------------------------------------------------

def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def test_an_ssh_config_alias_supplies_host_port_user_and_identity(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    entry = f"  HostName 127.0.0.1\n  Port {sshd.port}\n  IdentityFile {sshd.client_key}\n"
    config = write_config(tmp_path / "config", f"Host rgt-box\n{entry}  User root\n"
                                               f"Host rgt-other\n{entry}  User rgt-ghost\n"
                                               f"Host rgt-nokey\n  HostName 127.0.0.1\n  Port {sshd.port}\n")
    settings = settings_for(sshd, tmp_path / "ssh", config_paths=(config,), client_keys=None)
    box = transport(sshd, settings, "rgt-box")
    assert (await box.run("whoami")).text == "root\n"
    await box.close()

    with pytest.raises(AuthFailed) as caught:  # the config's User is the one sent to the server
        await transport(sshd, settings, "rgt-other").run("true")
    assert str(caught.value).startswith(f"rgt-ghost@127.0.0.1:{sshd.port}:")
    await asyncio.sleep(0.05)
    assert "Invalid user rgt-ghost from 127.0.0.1" in sshd.log_text()

    with pytest.raises(AuthFailed):  # same host and port, no IdentityFile: no key to offer
        await transport(sshd, settings, "rgt-nokey").run("true")


async def test_proxyjump_hops_are_connected_under_the_same_host_key_policy(
        sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    entry = f"  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n  IdentityFile {sshd.client_key}\n"
    config = write_config(tmp_path / "config", f"Host jump\n{entry}Host inner\n{entry}  ProxyJump jump\n")
    settings = settings_for(sshd, tmp_path / "ssh", config_paths=(config,), client_keys=None)
    before = await settled_logins(sshd)
    inner = transport(sshd, settings, "inner")
    assert (await inner.run("echo through")).text == "through\n"
    await inner.close()
    assert await settled_logins(sshd) == before + 2, "one login on the jump host, one on the target"

    settings.known_hosts_file.unlink()
    with pytest.raises(HostKeyUnknown):  # the hop itself is never trusted blindly
        await transport(sshd, settings, "inner").run("true")
    assert await settled_logins(sshd) == before + 2


# -- one connection, many channels ----------------------------------------------------------------------------

async def test_many_concurrent_calls_share_one_connection(sshd: Sshd, ssh_transport: SSHTransport) -> None:
    before = await settled_logins(sshd)
    commands = [ssh_transport.run(f"sleep 0.2; echo {index}") for index in range(24)]
    results, listing = await asyncio.gather(asyncio.gather(*commands), ssh_transport.listdir("/"))
    assert [result.text for result in results] == [f"{index}\n" for index in range(24)]
    assert "tmp" in listing
    assert await settled_logins(sshd) == before + 1, "sshd allows 10 sessions per connection: rgt must queue"


# -- dropped connections -------------------------------------------------------------------------------------

async def test_after_the_connection_drops_the_next_call_reconnects(sshd: Sshd, ssh_transport: SSHTransport) -> None:
    assert await ssh_transport.stat("/") is not None
    before = await settled_logins(sshd)
    os.kill(await session_pid(ssh_transport), signal.SIGKILL)
    await asyncio.sleep(0.1)
    assert (await ssh_transport.run("echo again")).text == "again\n"
    stat = await ssh_transport.stat("/")
    assert stat is not None and stat.kind == "dir"
    assert await settled_logins(sshd) == before + 1


async def test_a_connection_lost_mid_command_is_a_transport_error_not_a_result(
        sshd: Sshd, ssh_transport: SSHTransport) -> None:
    pid = await session_pid(ssh_transport)
    running = asyncio.create_task(ssh_transport.run("sleep 5; echo late", timeout=10))
    await asyncio.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(TransportError, match="outcome unknown"):
        await running
    assert time.monotonic() - started < 3.0
    assert (await ssh_transport.run("echo back")).text == "back\n"



# -- status checks and reads that cost the box as little as possible -----------------------------------------

def commands_started(server: Sshd) -> int:
    return server.log_text().count("Starting session: command")


async def wait_for_log(server: Sshd, predicate: Callable[[str], bool], timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while not predicate(text := server.log_text()):
        assert time.monotonic() < deadline, text[-2000:]
        await asyncio.sleep(0.02)
    return text


async def test_status_checks_reuse_one_connection_and_start_no_process_on_the_box(
        sshd_factory: Callable[..., Sshd], ssh_home: Path, tmp_path: Path) -> None:
    """`SSHProvider.get` is one SFTP request over the pooled connection: no login shell per check."""
    sshd = sshd_factory()
    provider = SSHProvider(tmp_path / "state", settings=settings_for(sshd, tmp_path / "ssh"))
    box = InstanceConfig(name="box", provider="ssh", host=sshd.target, price_per_hour=1.0)
    try:
        states = [(await provider.get(box)).state for _ in range(5)]
        assert states == ["running"] * 5
        # a command afterwards is logged after anything the checks started: its line is the only one
        assert (await provider.transport(box).run("true")).rc == 0
        text = await wait_for_log(sshd, lambda log: commands_started(sshd) >= 1)
        assert text.count("Starting session: command") == 1
        assert text.count("Accepted publickey") == 1
        assert text.count("Starting session: subsystem 'sftp'") == 1
        os.kill(await session_pid(provider.transport(box)), signal.SIGKILL)  # the connection drops
        assert (await provider.get(box)).state == "running"  # reconnected for this check
        await wait_for_log(sshd, lambda log: log.count("Accepted publickey") == 2)
        sshd.stop()
        os.kill(await session_pid(provider.transport(box)), signal.SIGKILL)
        gone = await provider.get(box)
        assert gone.state == "unknown" and gone.detail["error"]
    finally:
        await provider.close()


class ReadLog:
    """Counts the SFTP read requests asyncssh sends (a spy on the real client file; reads still happen)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests: list[tuple[int, int]] = []
        real = asyncssh.SFTPClientFile.read

        async def read(handle: asyncssh.SFTPClientFile, size: int = -1, offset: int | None = None) -> object:
            self.requests.append((size, offset or 0))
            return await real(handle, size, offset)

        monkeypatch.setattr(asyncssh.SFTPClientFile, "read", read)


async def read_all(transport: SSHTransport, path: Path, offset: int = 0, expect: int | None = None) -> bytes:
    return b"".join([chunk async for chunk in transport.read_chunks(str(path), offset, expect=expect)])


async def test_a_small_file_is_read_with_one_request_when_its_size_is_known(
        ssh_transport: SSHTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(100_000)
    (tmp_path / "small.bin").write_bytes(data)
    reads = ReadLog(monkeypatch)
    assert await read_all(ssh_transport, tmp_path / "small.bin", expect=len(data)) == data
    assert reads.requests == [(len(data) + 1, 0)]  # the bytes and one more, which tells the end
    reads.requests.clear()
    assert await read_all(ssh_transport, tmp_path / "small.bin") == data
    assert len(reads.requests) > 8, "without a size, the read-ahead window is asked for (the old cost)"


async def test_a_large_file_is_never_asked_for_bytes_past_its_expected_end(
        ssh_transport: SSHTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(9 << 20)
    (tmp_path / "big.bin").write_bytes(data)
    reads = ReadLog(monkeypatch)
    assert await read_all(ssh_transport, tmp_path / "big.bin", 1234, expect=len(data)) == data[1234:]
    assert max(offset + size for size, offset in reads.requests) == len(data) + 1
    covered = sorted(reads.requests, key=lambda request: request[1])
    assert covered[0][1] == 1234 and all(  # back to back, no holes, no overlaps
        left[1] + left[0] == right[1] for left, right in zip(covered, covered[1:], strict=False))


@pytest.mark.parametrize("expect_delta", [-5000, -1, 1, 70_000], ids=["grew", "grew-by-one", "shrank", "shrank-more"])
async def test_a_wrong_expected_size_never_shortens_or_pads_what_is_read(
        ssh_transport: SSHTransport, tmp_path: Path, expect_delta: int) -> None:
    data = os.urandom(300_000)
    (tmp_path / "moved.bin").write_bytes(data)
    assert await read_all(ssh_transport, tmp_path / "moved.bin", expect=len(data) + expect_delta) == data
