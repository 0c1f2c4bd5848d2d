"""The Transport contract, run against both implementations: LocalTransport on a simulated disk and
SSHTransport to a real OpenSSH sshd on loopback. Services never ask which one they hold, so every
behaviour they rely on is pinned here once and must hold for both.

Both "boxes" are this machine, so each test prepares and inspects the far side through plain files at
`case.local(remote)` (the path `resolve` maps a remote path to).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool


@dataclass
class Case:
    transport: Transport
    base: str  # a remote folder of this test's own

    def local(self, remote: str) -> Path:
        return Path(self.transport.resolve(remote))

    def path(self, name: str) -> str:
        return f"{self.base}/{name}"

    def write(self, name: str, data: bytes) -> Path:
        target = self.local(self.path(name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return target


@pytest.fixture(params=["local", "ssh"])
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Case]:
    if request.param == "local":
        disk = tmp_path / "disk"
        disk.mkdir()
        made = Case(LocalTransport(root=disk), "/box")
    else:
        server, settings = request.getfixturevalue("sshd"), request.getfixturevalue("ssh_settings")
        made = Case(SSHTransport(server.target, settings, pool=SSHPool()), str(tmp_path / "box"))
    made.local(made.base).mkdir(parents=True)
    yield made
    await made.transport.close()


def process_ended(pid: int) -> bool:
    """Gone, or a zombie: PID 1 here never reaps orphans (docs/environment.md §6)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


async def eventually(predicate: object, seconds: float = 5.0) -> bool:
    assert callable(predicate)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return bool(predicate())


# -- run ---------------------------------------------------------------------------------------------------

async def test_run_returns_exit_status_and_both_streams(case: Case) -> None:
    result = await case.transport.run("echo out; echo err >&2; exit 3")
    assert (result.rc, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
    assert (await case.transport.run("true")).rc == 0


async def test_run_is_bash_and_reports_a_signal_as_its_negative_number(case: Case) -> None:
    result = await case.transport.run('[[ -n "$BASH_VERSION" ]] && echo "$0"; kill -TERM $$')
    assert result.stdout == b"bash\n"
    assert result.rc == -15


async def test_run_feeds_stdin_and_carries_large_output_both_ways(case: Case) -> None:
    data = os.urandom(3 << 20)
    result = await case.transport.run("sha256sum; head -c 5000000 /dev/zero", stdin=data)
    assert result.rc == 0
    assert result.stdout.startswith(hashlib.sha256(data).hexdigest().encode())
    assert len(result.stdout) == 64 + len("  -\n") + 5_000_000
    script = b'set -u\necho "args:$1,$2"\n'
    result = await case.transport.run("bash -s -- 'a b' c", stdin=script)
    assert result.text == "args:a b,c\n"


async def test_run_without_stdin_reads_end_of_file(case: Case) -> None:
    result = await case.transport.run("cat; echo done", timeout=5)
    assert result.text == "done\n"


async def test_run_in_a_working_directory(case: Case) -> None:
    case.local(case.path("work")).mkdir()
    result = await case.transport.run("pwd -P", cwd=case.path("work"))
    assert result.text.strip() == str(case.local(case.path("work")).resolve())
    with pytest.raises(OSError):
        await case.transport.run("true", cwd=case.path("absent"))


async def test_run_timeout_kills_the_whole_process_group(case: Case) -> None:
    pids = case.local(case.path("pids"))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await case.transport.run(f"echo $$ > {pids}; sleep 30 & echo $! >> {pids}; wait", timeout=1.0)
    assert time.monotonic() - started < 5
    shell, child = (int(line) for line in pids.read_text().split())
    assert await eventually(lambda: process_ended(shell) and process_ended(child))


# -- stat, listdir ----------------------------------------------------------------------------------------

async def test_stat_reports_files_folders_and_symlinks_without_following_them(case: Case) -> None:
    target = case.write("a/file.bin", b"x" * 1234)
    os.symlink(target, case.local(case.path("a/link")))
    os.symlink("nowhere", case.local(case.path("a/dangling")))
    file_stat = await case.transport.stat(case.path("a/file.bin"))
    assert file_stat is not None and (file_stat.kind, file_stat.size) == ("file", 1234)
    assert abs(file_stat.mtime - target.stat().st_mtime) < 1.0
    folder = await case.transport.stat(case.path("a"))
    assert folder is not None and folder.kind == "dir"
    link = await case.transport.stat(case.path("a/link"))
    assert link is not None and link.kind == "symlink"
    dangling = await case.transport.stat(case.path("a/dangling"))
    assert dangling is not None and dangling.kind == "symlink"
    assert await case.transport.stat(case.path("a/absent")) is None
    assert await case.transport.stat(case.path("absent/deeper")) is None


async def test_listdir_is_sorted_and_empty_for_a_missing_folder(case: Case) -> None:
    for name in ("b.txt", "a.txt", ".hidden", "sub/c.txt"):
        case.write(f"d/{name}", b"")
    os.symlink("a.txt", case.local(case.path("d/link")))
    assert await case.transport.listdir(case.path("d")) == [".hidden", "a.txt", "b.txt", "link", "sub"]
    assert await case.transport.listdir(case.path("absent")) == []


# -- tail, sha256, read_chunks ----------------------------------------------------------------------------

async def test_tail_follows_a_growing_file_and_restarts_when_it_shrinks(case: Case) -> None:
    log = case.write("train.log", b"line 1\nline 2\n")
    data, offset = await case.transport.tail(case.path("train.log"), 0)
    assert (data, offset) == (b"line 1\nline 2\n", 14)
    with open(log, "ab") as handle:
        handle.write(b"line 3\n")
    assert await case.transport.tail(case.path("train.log"), offset) == (b"line 3\n", 21)
    assert await case.transport.tail(case.path("train.log"), 21) == (b"", 21)
    assert await case.transport.tail(case.path("train.log"), 0, limit=4) == (b"line", 4)
    log.write_bytes(b"new\n")  # truncated and rewritten: start again from the top
    assert await case.transport.tail(case.path("train.log"), 21) == (b"new\n", 4)
    assert await case.transport.tail(case.path("absent.log"), 7) == (b"", 7)


async def test_sha256_is_computed_on_the_far_side(case: Case) -> None:
    data = os.urandom(1 << 20)
    case.write("ckpt/best.pth", data)
    assert await case.transport.sha256(case.path("ckpt/best.pth")) == hashlib.sha256(data).hexdigest()
    case.write("odd name\\with 'quotes'", b"abc")
    assert await case.transport.sha256(case.path("odd name\\with 'quotes'")) == hashlib.sha256(b"abc").hexdigest()
    with pytest.raises(FileNotFoundError):
        await case.transport.sha256(case.path("absent.pth"))


@pytest.mark.parametrize("offset", [0, 1, 5000, 9999, 10_000, 20_000])
async def test_read_chunks_streams_from_any_offset(case: Case, offset: int) -> None:
    data = os.urandom(10_000)
    case.write("blob", data)
    chunks = [chunk async for chunk in case.transport.read_chunks(case.path("blob"), offset, 3000)]
    assert b"".join(chunks) == data[offset:]
    assert all(0 < len(chunk) <= 3000 for chunk in chunks)


async def test_read_chunks_of_a_large_file_with_the_default_chunk(case: Case) -> None:
    data = os.urandom((9 << 20) + 12345)
    case.write("big.pth", data)
    chunks = [chunk async for chunk in case.transport.read_chunks(case.path("big.pth"), 1_234_567)]
    assert b"".join(chunks) == data[1_234_567:]
    assert len(chunks) >= 2 and all(len(chunk) <= 4 << 20 for chunk in chunks)


async def test_read_chunks_of_a_missing_file_fails_as_not_found(case: Case) -> None:
    with pytest.raises(FileNotFoundError):
        async for _ in case.transport.read_chunks(case.path("absent"), 0):
            pass


# -- put_bytes --------------------------------------------------------------------------------------------

async def test_put_bytes_creates_folders_sets_the_mode_and_replaces_atomically(case: Case) -> None:
    remote = case.path("ctl/run/wrapper.sh")
    await case.transport.put_bytes(b"old contents", remote, mode=0o700)
    target = case.local(remote)
    assert target.read_bytes() == b"old contents"
    assert target.stat().st_mode & 0o777 == 0o700
    with open(target, "rb") as reader:  # a reader holding the old file keeps seeing all of it
        before = os.fstat(reader.fileno()).st_ino
        await case.transport.put_bytes(b"new", remote)
        assert reader.read() == b"old contents"
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != before, "replaced by rename, not rewritten in place"
    assert target.stat().st_mode & 0o777 == 0o644
    assert sorted(os.listdir(target.parent)) == ["wrapper.sh"], "no temp file left behind"


# -- detached launch --------------------------------------------------------------------------------------

async def test_a_detached_job_survives_the_connection_closing(case: Case) -> None:
    ctl = case.path("ctl")
    script = "echo $$ > pid.tmp && mv pid.tmp pid\nsleep 1\necho finished > out\necho 0 > exit_code\n"
    pid = await case.transport.launch_detached(script, ctl)
    assert case.local(f"{ctl}/pid").read_text().strip() == str(pid)
    await case.transport.close()
    assert not case.local(f"{ctl}/out").exists(), "still running when the connection closed"
    assert await eventually(lambda: case.local(f"{ctl}/out").exists(), 10)
    assert case.local(f"{ctl}/out").read_text() == "finished\n"
    assert await eventually(lambda: process_ended(pid))
    result = await case.transport.run("cat exit_code", cwd=ctl)  # usable again after close
    assert result.text == "0\n"
