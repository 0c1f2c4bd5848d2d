"""Fault injection on the evidence path (issue 9, "Done means"): real `rgt` processes killed with SIGKILL
during a pull, a verification, a teardown and a state write; two rgt processes on one run; the box's
files changing, vanishing and growing while they are pulled; the local disk filling up (a real tmpfs).

After each fault: no marker that opens the gate, `rgt down` refused until a fresh verification passes,
the state database opens and its event log tells what happened (never "finished" for a pull that did
not finish), and running the verb again resumes or repairs.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.manifest import MARKER_NAME
from remote_gpu_trainer.services.evidence.pull import PullProgress
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import instance_status, trust_host_key
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support.gate_helpers import (
    RGT,
    SIM_ID,
    box_root,
    events,
    integrity,
    launch_finished,
    local_root,
    project_text,
    pull_and_verify,
    rgt,
    seed_verdicts,
    sim_disk,
    small_command,
    toml_string,
    write_text_project,
)
from support.helpers import FIXTURES, INSTANCE, RUN, wait_for_liveness
from support.helpers import fill_disk as fill
from support.mounts import tmpfs
from support.sshd_fixtures import Sshd

BIG = 768 << 20  # large enough that pulling and hashing it takes a visible while
WAIT_S = 120.0


class Running:
    """A real `rgt` process whose stderr lines are collected as they come."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.proc = subprocess.Popen([str(RGT), *args], cwd=cwd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_line(self, fragment: str) -> str:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.proc.poll() is None or not self.lines.empty(), f"rgt exited: {self.seen}"
                continue
            self.seen.append(line)
            if fragment in line:
                return line
        raise AssertionError(f"no line with {fragment!r}: {self.seen}")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL


def wait_until(what: str, check: Callable[[], object]) -> object:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def big_command(size: int = BIG) -> str:
    return small_command(f"; if [ {{cell}} = seed0 ]; then truncate -s {size} {{out}}/data.bin; fi")


def down(root: Path) -> subprocess.CompletedProcess[str]:
    return rgt("down", RUN, str(root), "--confirm", SIM_ID, cwd=root)


def assert_gate_closed(root: Path) -> subprocess.CompletedProcess[str]:
    result = down(root)
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert sim_disk(root).is_dir()
    return result


def assert_state_sound(root: Path) -> list[tuple[str, str]]:
    """The database opens (through rgt, and as SQLite) and keeps its append-only event log."""
    assert integrity(root) == "ok"
    listed = rgt("events", str(root), cwd=root)
    assert listed.returncode == 0, listed.stderr
    with sqlite3.connect(root / ".rgt" / "state.db") as conn:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute("DELETE FROM events")
    conn.close()
    return events(root)


def pull_finished(log: list[tuple[str, str]]) -> list[str]:
    return [summary for kind, summary in log if kind == "pull" and "finished" in summary]


def children_running(pid: int, fragment: str) -> list[int]:
    """Live processes started (directly or not) by `pid` whose command line holds `fragment`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if fragment in cmdline and _descends(int(entry.name), pid, stat):
            found.append(int(entry.name))
    return found


def _descends(child: int, ancestor: int, stat: str) -> bool:
    while child > 1:
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == ancestor:
            return True
        child = parent
        try:
            stat = Path(f"/proc/{child}/stat").read_text()
        except OSError:
            return False
    return False


# -- kill -9 during a pull -------------------------------------------------------------------------------

async def test_kill_9_during_a_pull_leaves_a_part_the_next_pull_resumes(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(command=big_command()))
    seed_verdicts(root)
    await launch_finished(root)
    part = local_root(root) / "seed0" / "data.bin.part"
    puller = Running("pull", RUN, str(root), cwd=root)
    wait_until("a .part of the big file with bytes in it",
               lambda: part.exists() and 0 < part.stat().st_size < BIG)
    puller.kill()
    assert 0 < part.stat().st_size < BIG, "the pull was not killed mid-file"
    assert not (local_root(root) / "seed0" / "data.bin").exists()
    assert not (local_root(root) / MARKER_NAME).exists()

    log = assert_state_sound(root)
    assert ("pull", f"pull of run {RUN} started") in log
    assert pull_finished(log) == []  # a killed pull is never recorded as finished
    assert_gate_closed(root)
    verified = rgt("verify", RUN, str(root), cwd=root)
    assert verified.returncode == 1 and "incomplete_part" in verified.stdout + verified.stderr
    assert_gate_closed(root)

    again = rgt("pull", RUN, str(root), cwd=root)
    assert again.returncode == 0, again.stderr
    assert "resuming" in again.stderr  # from the .part, not from zero
    assert not part.exists() and (local_root(root) / "seed0" / "data.bin").stat().st_size == BIG
    assert len(pull_finished(events(root))) == 1
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    result = down(root)
    assert result.returncode == 0, result.stderr
    assert not sim_disk(root).exists()


# -- kill -9 during a verification -----------------------------------------------------------------------

async def test_kill_9_while_hashing_leaves_no_marker_behind(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(command=big_command()))
    seed_verdicts(root)
    await launch_finished(root)
    await pull_and_verify(root)
    assert (local_root(root) / MARKER_NAME).exists()  # a good marker, before the verification is killed
    verifier = Running("verify", RUN, str(root), cwd=root)
    verifier.wait_line("hashing seed0/data.bin")
    verifier.kill()
    assert not (local_root(root) / MARKER_NAME).exists()  # step 0 removed the old success first
    assert [p.name for p in local_root(root).iterdir() if p.name.startswith(".rgt-tmp")] == []
    log = assert_state_sound(root)
    assert [s for k, s in log if k == "verify"] == [f"verification of run {RUN} passed"]  # only the first one
    assert_gate_closed(root)
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert down(root).returncode == 0


async def test_kill_9_while_a_checkpoint_is_load_verified(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text(run_extra='state_keys = ["model_state_dict", "fault-injection"]'))
    await launch_finished(root)  # no verdicts handed over: every checkpoint meets a real probe
    session = open_session(str(root))
    try:
        assert (await pull_run(session, RUN)).ok
    finally:
        session.close()
    verifier = Running("verify", RUN, str(root), cwd=root)
    probes = wait_until("the checkpoint probe subprocess",
                        lambda: children_running(verifier.proc.pid, "remote_gpu_trainer.isolated.load_check"))
    verifier.kill()
    for pid in probes:  # the probe runs in its own process group: end it as the killed rgt cannot
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not (local_root(root) / MARKER_NAME).exists()
    log = assert_state_sound(root)
    assert [s for k, s in log if k == "verify"] == []
    session = open_session(str(root))
    try:
        assert session.db.last_verification_record(RUN) is None
    finally:
        session.close()
    assert_gate_closed(root)
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert down(root).returncode == 0


# -- kill -9 during a state write ------------------------------------------------------------------------

async def test_kill_9_while_waiting_to_write_the_state_database(tmp_path: Path) -> None:
    """Another writer holds SQLite's write lock: rgt verify blocks in its first write, and is killed there."""
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    seed_verdicts(root)
    await launch_finished(root)
    await pull_and_verify(root)
    holder = sqlite3.connect(root / ".rgt" / "state.db", isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    try:
        verifier = Running("verify", RUN, str(root), cwd=root)
        verifier.wait_line("hashing seed0/best.pth (1/")  # the marker is gone; the hash's record waits
        verifier.kill()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not (local_root(root) / MARKER_NAME).exists()
    log = assert_state_sound(root)
    assert [s for k, s in log if k == "verify"] == [f"verification of run {RUN} passed"]
    assert_gate_closed(root)
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert down(root).returncode == 0


# -- kill -9 during a teardown ---------------------------------------------------------------------------

def ssh_project(root: Path, server: Sshd, home: Path, teardown_command: str) -> None:
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    (ssh_dir / "config").write_text(f"Host gpu-box\n  HostName 127.0.0.1\n  Port {server.port}\n  User root\n"
                                    f"  IdentityFile {server.client_key}\n  IdentitiesOnly yes\n")
    box = root.parent / "box"
    text = f"""\
[project]
name = "ssh-teardown"

[instances.{INSTANCE}]
provider = "ssh"
host = "gpu-box"
price_per_hour = 1.5
teardown_command = {toml_string(teardown_command)}

[runs.{RUN}]
instance = "{INSTANCE}"
workdir = {toml_string(str(box / "job"))}
command = {toml_string(small_command())}
log = "train.log"
remote_root = {toml_string(str(box / "rgt" / RUN))}
roster = ["seed0", "seed1"]
required = ["best.pth", "best_metrics.json"]
python = {toml_string(sys.executable)}
"""
    write_text_project(root, text)


async def test_kill_9_during_the_teardown_command(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root, flags = tmp_path / "proj", tmp_path / "flags"
    flags.mkdir()
    script = (f"test -e {flags}/quick && exit 0; echo $$ > {flags}/pid.tmp && mv {flags}/pid.tmp {flags}/pid; "
              "exec sleep 600")
    ssh_project(root, sshd, ssh_home, f"/bin/sh -c {shlex_quote(script)}")
    seed_verdicts(root)
    session = open_session(str(root))
    try:
        await instance_status(session, INSTANCE)
        await trust_host_key(session, INSTANCE, sshd.host_public_key().get_fingerprint("sha256"))
        await launch_run(session, RUN)
        await wait_for_liveness(session)
        assert (await pull_run(session, RUN)).ok
        assert (await verify_run(session, RUN)).ok
    finally:
        await session.close_transports()
        session.close()

    downer = Running("down", RUN, str(root), "--confirm", "gpu-box", cwd=root)
    pid_file = flags / "pid"
    wait_until("the teardown command to start", pid_file.exists)
    downer.kill()
    os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the command rgt started, orphaned by the kill
    log = assert_state_sound(root)
    kinds = [kind for kind, _ in log]
    assert kinds[-2:] == ["approval", "action"], log[-3:]  # approved and requested, nothing claimed after
    assert "torn_down" not in kinds and not (root / ".rgt" / "ssh" / f"{INSTANCE}.json").exists()
    report = rgt("--report", str(root), "--format", "json", cwd=root)
    assert '"state": "running"' in report.stdout, report.stdout[:2000]

    (flags / "quick").touch()  # the next teardown command ends at once
    again = rgt("down", RUN, str(root), "--confirm", "gpu-box", cwd=root)
    assert again.returncode == 0, again.stderr
    assert "terminated" in again.stdout
    assert [kind for kind, _ in events(root)].count("torn_down") == 1


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# -- two rgt processes on one run ------------------------------------------------------------------------

HOLDER = """\
import sys, time
from pathlib import Path
from remote_gpu_trainer.fsutil import run_lock
with run_lock(Path(sys.argv[1]), sys.argv[2], "pulling"):
    print("holding", flush=True)
    time.sleep(600)
"""


async def test_a_second_rgt_on_a_locked_run_refuses_and_kill_9_frees_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    seed_verdicts(root)
    await launch_finished(root)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root / ".rgt"), RUN], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        expected = f"another rgt (pid {holder.pid}) is pulling {RUN}"
        for args in (("pull", RUN, str(root)), ("verify", RUN, str(root)),
                     ("down", RUN, str(root), "--confirm", SIM_ID)):
            result = rgt(*args, cwd=root)
            assert result.returncode == 1, (args, result.stderr)
            assert expected in result.stderr, (args, result.stderr)
        assert not local_root(root).exists()  # nothing was pulled or verified meanwhile
        assert [s for k, s in events(root) if k == "approval" and "terminate" in s] == []
        assert sim_disk(root).is_dir()
    finally:
        holder.kill()
        holder.wait(30)
    assert holder.returncode == -signal.SIGKILL
    pulled = rgt("pull", RUN, str(root), cwd=root)
    assert pulled.returncode == 0, pulled.stderr
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0


# -- the box's files changing while they are pulled ------------------------------------------------------

def change_in_place(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(path, "r+b") as handle:
        handle.write(bytes(data))


def vanish(path: Path) -> None:
    path.unlink()


def grow(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(b"\0" * 4096)


@pytest.mark.parametrize(("change", "reason"), [(change_in_place, "changed_on_box"), (vanish, "missing_on_box"),
                                                (grow, "changed_on_box")], ids=["changed", "vanished", "grown"])
async def test_a_box_file_that_changes_while_it_is_pulled_is_never_accepted(
        tmp_path: Path, change: Callable[[Path], None], reason: str) -> None:
    root = tmp_path / "proj"
    write_text_project(root, project_text())
    seed_verdicts(root)
    await launch_finished(root)
    target = "seed1/best.pth"
    remote = box_root(root) / target
    changed: list[PullProgress] = []

    def progress(step: PullProgress) -> None:
        if step.path == target and step.phase == "downloading" and not changed:
            changed.append(step)
            change(remote)  # the box's file changes at the moment its download starts

    session = open_session(str(root))
    try:
        result = await pull_run(session, RUN, progress=progress)
        assert changed and changed[0].done == 0
        assert [problem.code for problem in result.failed] == [reason], result.failed
        assert result.failed[0].path == target
        assert sorted(result.fetched) == ["seed0/best.pth", "seed0/best_metrics.json", "seed1/best_metrics.json"]
        assert not (local_root(root) / target).exists()
        part = local_root(root) / (target + ".part")
        assert not part.exists() or part.stat().st_size == 0  # no byte of other content kept
        kinds = [event.kind for event in session.db.events(run_id=RUN)]
        assert kinds[-1] == "pull_incomplete" and pull_finished(events(root)) == []
        assert not (await verify_run(session, RUN)).ok
    finally:
        session.close()
    assert_gate_closed(root)
    cli = rgt("pull", RUN, str(root), cwd=root)  # the box still holds other bytes: still not accepted
    assert cli.returncode == 1 and f"✖ {target}:" in cli.stderr, cli.stderr
    remote.write_bytes((FIXTURES / "cells" / target).read_bytes())  # the box's file as the manifest says
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert down(root).returncode == 0


# -- the local disk filling up ---------------------------------------------------------------------------

@pytest.fixture
def small_runs(tmp_path: Path) -> Iterator[Path]:
    """The project's runs/ folder on a real 4 MiB tmpfs (tests and CI run as root)."""
    runs = tmp_path / "proj" / "runs"
    runs.mkdir(parents=True)
    with tmpfs(runs, "4m"):
        yield runs




async def test_a_pull_that_cannot_fit_is_refused_with_the_figures(small_runs: Path) -> None:
    root = small_runs.parent
    write_text_project(root, project_text(command=big_command(6 << 20)))  # 6 MiB for a 4 MiB disk
    seed_verdicts(root)
    await launch_finished(root)
    result = rgt("pull", RUN, str(root), cwd=root)
    assert result.returncode == 1, result.stderr
    figures = re.search(r"the pull needs 6\.0 MiB more \(([\d,]+) bytes of 6\.0 MiB listed\), only ([\d.]+) MiB "
                        r"\(([\d,]+) bytes\) are free there", result.stderr)
    assert figures is not None, result.stderr
    assert int(figures[1].replace(",", "")) > 6 << 20 > int(figures[3].replace(",", ""))
    written = sorted(str(p.relative_to(small_runs)) for p in small_runs.rglob("*") if p.is_file())
    assert written == [], written  # nothing: not the manifest, no file of the run, no .part
    kinds = [kind for kind, _ in assert_state_sound(root)]
    assert kinds[-1] == "pull_failed" and pull_finished(events(root)) == []
    assert_gate_closed(root)
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_runs)], check=True)
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert down(root).returncode == 0


async def test_a_disk_that_fills_during_the_pull_names_no_space_and_a_rerun_completes(small_runs: Path) -> None:
    root = small_runs.parent
    write_text_project(root, project_text(command=big_command(2 << 20)))
    seed_verdicts(root)
    await launch_finished(root)
    filler = small_runs / "filler.bin"

    def progress(step: PullProgress) -> None:
        if step.path == "seed0/data.bin" and step.phase == "downloading" and not filler.exists():
            assert fill(filler) > 0  # someone else fills the disk as the big file starts

    session = open_session(str(root))
    try:
        result = await pull_run(session, RUN, progress=progress)
        assert not result.ok
        assert {problem.code for problem in result.failed} == {"no_space"}, result.failed
        assert "seed0/data.bin" in [problem.path for problem in result.failed]
        assert all("no space left" in problem.detail for problem in result.failed)
        assert session.db.events(run_id=RUN)[-1].kind == "pull_incomplete"
    finally:
        session.close()
    assert not (local_root(root) / "seed0" / "data.bin").exists()
    cli = rgt("pull", RUN, str(root), cwd=root)  # still full: refused, with the figures
    assert cli.returncode == 1 and "free space, then pull again" in cli.stderr, cli.stderr
    assert_gate_closed(root)
    filler.unlink()
    again = rgt("pull", RUN, str(root), cwd=root)
    assert again.returncode == 0, again.stderr
    assert rgt("verify", RUN, str(root), cwd=root).returncode == 0
    assert pull_finished(events(root)) and down(root).returncode == 0


# -- one state database, several pull workers ------------------------------------------------------------

async def test_pulling_again_after_the_project_moved_rehashes_every_file_and_succeeds(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    many = "; for i in $(seq 300); do echo {cell}-$i > {out}/part-$i.txt; done"
    write_text_project(root, project_text(command=small_command(many)))
    seed_verdicts(root)
    await launch_finished(root)
    assert rgt("pull", RUN, str(root), cwd=root).returncode == 0
    moved = tmp_path / "moved"
    root.rename(moved)  # the project folder moved: every cached hash is keyed on the old paths
    again = rgt("pull", RUN, str(moved), cwd=moved)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "604 already here" in again.stderr, again.stderr[-500:]
