"""The pull's small-file path: batches through one command on the box, accepted only by their hash.

Three layers, each real: the record parser on byte strings (what a broken or hostile box might send);
the on-box streamer (remote/stream_files.py) run by a real interpreter against real files, FIFOs and
symlinks; and whole pulls over a real sshd, counting the SFTP opens a spy sees, with the box's files
changed before the pull and with a hostile interpreter in place of the streamer.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
import torch

from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool
from remote_gpu_trainer.remote import program_stdin
from remote_gpu_trainer.services.evidence import pull_batches
from remote_gpu_trainer.services.evidence.manifest import build_manifest
from remote_gpu_trainer.services.evidence.pull import pull
from remote_gpu_trainer.services.evidence.pull_batches import Wanted, parse
from remote_gpu_trainer.services.evidence.verify import verify
from support.evidence_helpers import Env, keep_probe_verdicts, make_env, status_of, write_cell
from support.sshd_fixtures import Sshd, settings_for

pytestmark = pytest.mark.sshd

SMALL = 120  # small files in the run, beside each cell's checkpoint
BIG = "seed0/best.pth"


# -- the parser ---------------------------------------------------------------------------------------------

def record(path: str, data: bytes, trailer: bytes = b"OK", size: int | None = None) -> bytes:
    header = json.dumps({"path": path, "size": len(data) if size is None else size}).encode()
    return header + b"\n" + data + trailer + b"\n"


def wanted(*pairs: tuple[str, bytes]) -> list[Wanted]:
    return [Wanted(path, len(data)) for path, data in pairs]


def test_clean_records_are_returned_in_the_order_asked() -> None:
    files = [("a/1.bin", b"one"), ("a/2.bin", b""), ("b/3.bin", os.urandom(5000))]
    stream = b"".join(record(path, data) for path, data in files)
    assert {path: bytes(data) for path, data in parse(stream, wanted(*files)).items()} == dict(files)


def test_an_error_record_or_a_changed_trailer_skips_that_file_only() -> None:
    files = [("a", b"aaa"), ("b", b"bbb"), ("c", b"ccc"), ("d", b"ddd")]
    stream = (record("a", b"aaa") + json.dumps({"path": "b", "error": "missing"}).encode() + b"\n"
              + record("c", b"cc\0", b"ERR changed") + record("d", b"ddd"))
    assert {path: bytes(data) for path, data in parse(stream, wanted(*files)).items()} == {"a": b"aaa", "d": b"ddd"}


def test_a_size_other_than_the_manifests_is_never_returned() -> None:
    got = parse(record("a", b"aaaa") + record("b", b"bb"), wanted(("a", b"aaa"), ("b", b"bb")))
    assert {path: bytes(data) for path, data in got.items()} == {"b": b"bb"}


@pytest.mark.parametrize("stream", [
    record("z", b"zzz") + record("a", b"aaa"),  # a file nobody asked for, first
    record("a", b"aa", size=3),  # shorter than it claims: the trailer would be inside the next record
    record("a", b"aaa", trailer=b"YES"),  # not a trailer of ours
    b"{not json}\n" + record("a", b"aaa"),
    b"x" * (70 << 10),  # no header line at all
    record("a", b"aaa", size=-1),
    json.dumps({"path": "a", "size": True}).encode() + b"\naaaOK\n",
    json.dumps(["a", 3]).encode() + b"\naaaOK\n",
], ids=["other-path", "short", "bad-trailer", "garbage", "endless-header", "negative", "bool-size", "list"])
def test_the_first_record_that_is_not_what_was_asked_ends_the_parse(stream: bytes) -> None:
    asked = wanted(("a", b"aaa"), ("b", b"bbb"))
    assert parse(stream + record("b", b"bbb"), asked) == {}


def test_batches_are_bounded_by_count_and_bytes() -> None:
    many = [Wanted(f"f{index}", 1000) for index in range(pull_batches.BATCH_FILES * 2 + 1)]
    groups = pull_batches.batches(many)
    assert [len(group) for group in groups] == [pull_batches.BATCH_FILES, pull_batches.BATCH_FILES, 1]
    heavy = [Wanted(f"h{index}", pull_batches.BATCH_BYTES // 2 + 1) for index in range(3)]
    assert [len(group) for group in pull_batches.batches(heavy)] == [1, 1, 1]
    assert [item for group in groups for item in group] == many


# -- the streamer on real files ------------------------------------------------------------------------------

def run_streamer(root: Path, files: list[list[object]]) -> bytes:
    done = subprocess.run([sys.executable, "-"], input=program_stdin("stream_files.py", {"root": str(root),
                          "files": files}), capture_output=True, timeout=60, check=True)
    return done.stdout


def test_the_streamer_sends_regular_files_and_names_everything_else(tmp_path: Path) -> None:
    (tmp_path / "cell").mkdir()
    data = os.urandom(3 << 20)  # more than one read block
    (tmp_path / "cell" / "ok.bin").write_bytes(data)
    (tmp_path / "cell" / "empty.bin").write_bytes(b"")
    os.mkfifo(tmp_path / "cell" / "fifo")  # opening it for reading must not block the batch
    (tmp_path / "cell" / "link").symlink_to(tmp_path / "cell" / "ok.bin")
    (tmp_path / "cell" / "dir").mkdir()
    names = ["cell/ok.bin", "cell/empty.bin", "cell/fifo", "cell/link", "cell/dir", "cell/gone", "../etc/passwd",
             "cell/ok.bin"]
    out = run_streamer(tmp_path, [[name, 0] for name in names])
    got = parse(out, [Wanted(name, len(data) if name == "cell/ok.bin" else 0) for name in names])
    assert {path: bytes(body) for path, body in got.items()} == {"cell/ok.bin": data, "cell/empty.bin": b""}
    errors = [json.loads(line) for line in out.split(b"\n") if line.startswith(b'{"path"') and b"error" in line]
    assert [(e["path"], e["error"]) for e in errors] == [
        ("cell/fifo", "not_regular"), ("cell/link", "not_regular"), ("cell/dir", "not_regular"),
        ("cell/gone", "missing"), ("../etc/passwd", "unsafe_path")]


def test_the_streamer_writes_the_same_records_where_the_kernel_refuses_sendfile(tmp_path: Path) -> None:
    """sendfile(2) refuses an output opened for appending (EINVAL): the streamer then reads and writes the
    bytes itself, and the records are the very ones it sends down a pipe."""
    (tmp_path / "cell").mkdir()
    files = {"cell/a.bin": os.urandom(3 << 20), "cell/b.bin": os.urandom(100 << 10), "cell/c.bin": b""}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    asked = [[name, len(data)] for name, data in files.items()] + [["cell/gone", 0]]
    piped = run_streamer(tmp_path, asked)
    appended = tmp_path / "out.bin"
    with open(appended, "ab") as sink:
        subprocess.run([sys.executable, "-"], input=program_stdin("stream_files.py", {"root": str(tmp_path),
                       "files": asked}), stdout=sink, timeout=60, check=True)
    assert appended.read_bytes() == piped
    got = parse(piped, [Wanted(name, size) for name, size in asked])  # type: ignore[arg-type]
    assert {path: bytes(body) for path, body in got.items()} == files


def test_malformed_params_exit_2_and_send_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-"], input=program_stdin("stream_files.py", {"root": 5}),
                          capture_output=True, timeout=60)
    assert done.returncode == 2 and done.stdout == b"" and b"PARAMS" in done.stderr


# -- whole pulls over SSH ----------------------------------------------------------------------------------

@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    """Two cells with their checkpoints and SMALL small files each (a per-item results folder)."""
    made = make_env(tmp_path)
    for seed, cell in enumerate(made.run.roster):
        write_cell(made.box, cell, seed)
        items = made.box / cell / "items"
        items.mkdir()
        for index in range(SMALL // 2):
            (items / f"{index:04d}.json").write_bytes(os.urandom(100 + index * 37))
    torch.save({"model_state_dict": {"w": torch.randn(1 << 19)}}, made.box / BIG)  # 2 MiB: the per-file path
    made = made.with_run(remote_root=str(made.box))
    yield made
    keep_probe_verdicts(made)


class Opens:
    """Counts the files asyncssh opens over SFTP (a spy on the real client; the opens still happen)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        real = asyncssh.SFTPClient.open

        async def spy(client: asyncssh.SFTPClient, path: object, *args: object, **kwargs: object) -> object:
            self.paths.append(str(path))
            return await real(client, path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(asyncssh.SFTPClient, "open", spy)


def ssh_to(server: Sshd, tmp_path: Path) -> SSHTransport:
    return SSHTransport(server.target, settings_for(server, tmp_path / "ssh"), pool=SSHPool())


async def test_small_files_come_in_batches_and_verify(env: Env, sshd: Sshd, ssh_home: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    transport = ssh_to(sshd, tmp_path)
    await build_manifest(transport, env.run, env.db)
    opens = Opens(monkeypatch)
    result = await pull(env.project, env.run, transport, env.db)
    await transport.close()
    assert result.ok, result.failed
    listed = len(result.files)
    assert len(result.fetched) == listed == SMALL + 6
    assert sorted(Path(path).name for path in opens.paths) == ["PULL_MANIFEST.json", "best.pth"], \
        "only the manifest and the 2 MiB checkpoint were opened over SFTP"
    for path in result.fetched:
        assert (env.local / path).read_bytes() == (env.box / path).read_bytes(), path
    assert not list(env.local.rglob("*.part"))
    verified = await verify(env.project, env.run, env.db)
    assert verified.ok, verified.errors


async def test_box_files_that_differ_from_the_manifest_are_named_and_never_accepted(
        env: Env, sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    transport = ssh_to(sshd, tmp_path)
    await build_manifest(transport, env.run, env.db)
    items = env.box / "seed1" / "items"
    flipped, fifo, link, gone, grown = (items / f"{index:04d}.json" for index in range(5))
    data = bytearray(flipped.read_bytes())
    data[0] ^= 0xFF
    flipped.write_bytes(bytes(data))  # same size, other bytes
    fifo.unlink()
    os.mkfifo(fifo)  # would block a reader that opened it without care
    link.unlink()
    link.symlink_to(items / "0010.json")
    gone.unlink()
    with open(grown, "ab") as handle:
        handle.write(b"more")
    result = await pull(env.project, env.run, transport, env.db)
    await transport.close()
    reasons = {problem.path.rsplit("/", 1)[-1]: problem.code for problem in result.failed}
    assert reasons == {"0000.json": "changed_on_box", "0001.json": "changed_on_box",
                       "0002.json": "changed_on_box", "0003.json": "missing_on_box",
                       "0004.json": "changed_on_box"}, result.failed
    for name in reasons:
        assert not (env.local / "seed1" / "items" / name).exists()
    assert len(result.fetched) == len(result.files) - 5
    verified = await verify(env.project, env.run, env.db)
    assert not verified.ok and status_of(verified.files, "seed1/items/0000.json") != "verified"


async def test_a_symlinked_local_folder_is_never_written_through_by_a_batch(
        env: Env, sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    """A batch judges each local folder once for all its files (pull_local._local_target): one cell's
    folder a symlink out of the local root refuses every file under it, the other cell's files, in the same
    batches, still land."""
    transport = ssh_to(sshd, tmp_path)
    await build_manifest(transport, env.run, env.db)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env.local.mkdir(parents=True)
    symlinked, clean = env.run.roster[0], env.run.roster[1]
    (env.local / symlinked).symlink_to(elsewhere, target_is_directory=True)
    result = await pull(env.project, env.run, transport, env.db)
    await transport.close()
    under = {path for path in result.files if path.startswith(f"{symlinked}/")}
    assert {problem.path for problem in result.failed} == under and len(under) > SMALL // 2
    assert {problem.code for problem in result.failed} == {"path_unsafe"}
    assert list(elsewhere.iterdir()) == []
    assert sorted(result.fetched) == sorted(path for path in result.files if path.startswith(f"{clean}/"))
    for path in result.fetched:
        assert (env.local / path).read_bytes() == (env.box / path).read_bytes(), path


HOSTILE = r"""#!/bin/sh
# stands in for the box's python: ignores its program and answers with records of its own
cat > /dev/null
printf '{"path": "../../escape.txt", "size": 4}\nevilOK\n'
"""


def lying_interpreter(folder: Path, env: Env) -> Path:
    """An 'interpreter' that answers every batch with the right path and size but other bytes."""
    listing = json.loads((env.box / "PULL_MANIFEST.json").read_text())["files"]
    first = next(entry for entry in listing if entry["bytes"] < pull_batches.BATCH_FILE_MAX)
    header = json.dumps({"path": first["path"], "size": first["bytes"]})
    script = folder / "liar.sh"
    script.write_text(f"#!/bin/sh\ncat > /dev/null\nprintf '%s\\n' '{header}'\n"
                      f"head -c {first['bytes']} /dev/zero\nprintf 'OK\\n'\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("kind", ["escape", "liar", "missing"])
async def test_a_hostile_streamer_slows_the_pull_and_never_changes_what_is_accepted(
        env: Env, sshd: Sshd, ssh_home: Path, tmp_path: Path, kind: str) -> None:
    transport = ssh_to(sshd, tmp_path)
    await build_manifest(transport, env.run, env.db)
    if kind == "escape":
        script = tmp_path / "hostile.sh"
        script.write_text(HOSTILE)
        script.chmod(0o755)
    elif kind == "liar":
        script = lying_interpreter(tmp_path, env)
    else:
        script = tmp_path / "no-such-python"
    result = await pull(env.project, env.with_run(python=str(script)).run, transport, env.db)
    await transport.close()
    assert result.ok, result.failed  # every file came down the per-file path instead
    for path in result.files:
        expected = (env.box / path).read_bytes()
        assert (env.local / path).read_bytes() == expected
        listed = json.loads((env.local / "PULL_MANIFEST.json").read_text())["files"]
        assert {e["path"]: e["sha256"] for e in listed}[path] == hashlib.sha256(expected).hexdigest()
    assert not (env.project.root / "escape.txt").exists() and not (env.local.parent / "escape.txt").exists()
    assert not list(tmp_path.rglob("escape.txt"))


async def test_a_box_whose_batches_hang_gets_one_timeout_not_one_per_batch(
        tmp_path: Path, sshd: Sshd, ssh_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter that never answers (hostile, or stuck on a hung mount): the batches in flight time
    out, no further batch is started, and every file still comes home by the per-file path."""
    made = make_env(tmp_path / "many", roster=("seed0",))
    made = made.with_run(remote_root=str(made.box))
    write_cell(made.box, "seed0", 0)
    items = made.box / "seed0" / "items"
    items.mkdir()
    for index in range(pull_batches.BATCH_FILES * 5):  # five batches' worth
        (items / f"{index:05d}.json").write_bytes(b"{}")
    transport = ssh_to(sshd, tmp_path)
    await build_manifest(transport, made.run, made.db)
    started = tmp_path / "started"
    stall = tmp_path / "stall-python"
    stall.write_text(f"#!/bin/sh\necho batch >> {started}\nexec sleep 100000\n")
    stall.chmod(0o755)
    monkeypatch.setattr(pull_batches, "BATCH_TIMEOUT_S", 2.0)  # a waiting constant, not the logic
    result = await pull(made.project, made.with_run(python=str(stall)).run, transport, made.db)
    await transport.close()
    assert result.ok, result.failed
    assert len(result.fetched) == len(result.files)
    assert 1 <= len(started.read_text().split()) <= pull_batches.BATCH_PARALLEL
    made.db.close()
