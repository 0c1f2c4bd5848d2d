"""The host, GPU and save-claim rules fire in a live run, through the watcher's own path (the log followed, the
run's state probed, services/run_logs.evaluate_rules), over real processes, files and filesystems: a small tmpfs
that fills (S68) and the wrapper's disk-budget gate, a claimed checkpoint that is not on the box (S64), a
relaunch whose step went back (S65), and recorded nvidia-smi answers (S91-S93). None of it stops, terminates or
deletes anything: the box's files stay, and the teardown gate still refuses.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.gpu_health import SAMPLE_FIELDS
from remote_gpu_trainer.audits.rules.signals import ClaimedSave
from remote_gpu_trainer.services.box_layout import ctl_dir
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.log_monitor import Alert
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from remote_gpu_trainer.services.watch.run_logs import evaluate_rules, follow_log, take_alerts
from remote_gpu_trainer.text import size_iec, span
from support.helpers import FIXED_NOW, FIXTURES, RUN, FixedClock, run_rgt, wait_for_liveness, write_project

LOCAL = 'provider = "local"'
GPU = FIXTURES / "gpu"


async def watch_pass(session: Session) -> dict[str, Alert]:
    """One pass of `rgt watch`: the log followed, the state probed, the rules run; their alerts by row."""
    await follow_log(session, RUN)
    state = await run_state(session, RUN)
    await evaluate_rules(session, RUN, state)
    return {a.signature: a for a in take_alerts(session)}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs holding the run's result root (tests and CI run as root)."""
    mount = tmp_path / "box" / "rgt"
    mount.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the disk test (needs root, as in .ci/run): {done.stderr}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_filling_disk_raises_s68_and_the_budget_gate_stops_the_next_cell(small_disk: Path,
                                                                                 tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    write_project(root, "head -c 4050000 /dev/zero > {out}/fill.bin && echo 'cell {cell} wrote 4050000 bytes'",
                  instance_body=LOCAL, box=box)
    session = open_session(str(root))
    try:
        await launch_run(session, RUN)
        assert await wait_for_liveness(session, states=("dead", "finished")) == "dead"
        state = await run_state(session, RUN)
        alerts = await watch_pass(session)
    finally:
        session.close()
    result_root = small_disk / RUN
    assert state.exit_code == 75
    assert state.liveness.detail == ("exit 75 (disk budget: the next cell was not started, too little free space "
                                     "on the result root)")
    ctl = Path(ctl_dir(session.project.run(RUN)))
    assert (ctl / "seed0.exit_code").read_text() == "0\n" and (ctl / "seed1.exit_code").read_text() == "75\n"
    assert (ctl / "exit_code").read_text() == "75\n" and not (ctl / "DONE").exists()
    du_kib = int(subprocess.run(["du", "-sk", str(result_root / "seed0")], capture_output=True, text=True,
                                check=True).stdout.split()[0])
    vfs = os.statvfs(small_disk)
    free, used = vfs.f_bavail * vfs.f_frsize, (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
    refused = [line for line in (box / "job" / "train.log").read_text().splitlines() if "not started" in line]
    assert refused == [f"== rgt: cell seed1 not started: disk budget {du_kib * 12288 // 10} bytes exceeds the "
                       f"{free} bytes free on the mount of {result_root} (exit 75)"]
    assert alerts["S68"].severity == "warn"
    assert alerts["S68"].message == f"bytes {100 * used / (used + free):.0f}% used on {result_root}"
    # the gate refuses to start; it never deletes: the first cell's output is all there, the second never began
    assert (result_root / "seed0" / "fill.bin").stat().st_size == 4050000
    assert not (result_root / "seed1").exists()


async def test_a_configured_disk_budget_gates_the_first_cell_too(small_disk: Path, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    write_project(root, "echo 'cell {cell} ran' > {out}/ran.txt", roster=("seed0",), instance_body=LOCAL,
                  box=tmp_path / "box", extra_run='disk_budget = "1GB"')
    session = open_session(str(root))
    try:
        assert session.project.run(RUN).disk_budget == 1_000_000_000
        await launch_run(session, RUN)
        assert await wait_for_liveness(session, states=("dead", "finished")) == "dead"
        state = await run_state(session, RUN)
    finally:
        session.close()
    assert (state.exit_code, state.liveness.detail.split(" (")[0]) == (75, "exit 75")
    assert not (small_disk / RUN / "seed0").exists()
    log = (tmp_path / "box" / "job" / "train.log").read_text()
    assert "== rgt: cell seed0 not started: disk budget 1000000000 bytes exceeds the " in log


def test_disk_budget_accepts_bytes_and_units_and_names_a_bad_value(tmp_path: Path) -> None:
    from remote_gpu_trainer.config.project import load_project
    from remote_gpu_trainer.errors import ConfigError

    for value, expected in (("0", 0), ("123456", 123456), ('"20GB"', 20 * 10**9), ('"512 MiB"', 512 * 2**20),
                            ('"1.5GiB"', 3 * 2**29)):
        path = write_project(tmp_path / f"p{expected}", extra_run=f"disk_budget = {value}")
        assert load_project(path).run(RUN).disk_budget == expected
    path = write_project(tmp_path / "bad", extra_run='disk_budget = "20 parsecs"')
    with pytest.raises(ConfigError) as caught:
        load_project(path)
    assert "runs.r1.disk_budget" in str(caught.value) and 'a size like "20GB"' in str(caught.value)
    assert str(path) in str(caught.value)


async def test_a_claimed_checkpoint_missing_on_the_box_raises_s64_after_the_grace(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    cells = FIXTURES / "cells"
    command = (f"cp -R {cells}/{{cell}}/. {{out}}/ && echo Saved checkpoint to {{out}}/best.pth "
               "&& echo 'Epoch 3: val/loss improved to 0.3120, saved best.pth' "
               "&& echo Saved checkpoint to {out}/epoch_3.pt")
    write_project(root, command, roster=("seed0",))
    clock = FixedClock(FIXED_NOW)
    session = open_session(str(root), clock=clock)
    try:
        status = await create_instance(session, "box")
        await launch_run(session, RUN)
        assert await wait_for_liveness(session) == "finished"
        first = await watch_pass(session)
        clock.advance(seconds=61)  # a claim may be logged before the file is written: absent twice, 60 s apart
        second = await watch_pass(session)
        history = opened_monitor(session, RUN).host
    finally:
        await session.close_transports()
        session.close()
    assert "S64" not in first
    verdicts = {c.path: c for c in (claim.verdict for claim in history.claims.values()) if c is not None}
    missing = [path for path, c in verdicts.items() if c.exists is False]
    assert len(missing) == 1 and missing[0].endswith("/seed0/epoch_3.pt")
    present = {path: c for path, c in verdicts.items() if c.exists}
    best = next(path for path in present if path.endswith("/seed0/best.pth"))
    assert present["best.pth"] == ClaimedSave("best.pth", "S56", exists=True, size=Path(best).stat().st_size)
    assert second["S64"].severity == "critical"
    assert second["S64"].message == f"1 claimed save(s) fail the check: {missing[0]} (S56 claim): absent"
    # reported, never acted on: the box is still there and the teardown gate still refuses
    refused = run_rgt("down", RUN, "--confirm", status.provider_id, cwd=root)
    assert refused.returncode == 3, refused.stderr
    assert Path(best).stat().st_size > 0


async def test_a_relaunch_whose_step_went_back_raises_s65(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    command = ("if [ -f resumed ]; then echo 'epoch=1 step=10/100 loss=0.900000 lr=0.001'; "
               "else echo 'epoch=1 step=50/100 loss=0.500000 lr=0.001'; touch resumed; exit 1; fi")
    write_project(root, command, roster=("seed0",), instance_body=LOCAL, box=tmp_path / "box")
    session = open_session(str(root))
    try:
        await launch_run(session, RUN)
        assert await wait_for_liveness(session, states=("dead",)) == "dead"
        assert "S65" not in await watch_pass(session)  # reads step 50 into the series
        detail = await launch_run(session, RUN, resume=True)
        assert await wait_for_liveness(session, states=("dead",)) == "dead"
        alerts = await watch_pass(session)
    finally:
        session.close()
    assert detail["step_before"] == 50
    assert alerts["S65"].severity == "error"
    assert alerts["S65"].message == ("first step after the relaunch is 10, below step 50 reached before it: "
                                     "saved state not restored")


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """tests/fixtures/gpu/fake_nvidia_smi.sh as `nvidia-smi` on the box's PATH (the box is this machine)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_bytes((GPU / "fake_nvidia_smi.sh").read_bytes())
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVSMI_SAMPLE_QUERY", ",".join(SAMPLE_FIELDS))
    monkeypatch.setenv("FAKE_NVSMI_INVENTORY_QUERY", "index,uuid,name,pci.bus_id,memory.total")
    return bin_dir


WAIT_FOR_STOP = "for i in $(seq 300); do [ -f stop ] && break; sleep 0.2; done"


async def _gpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: str, command: str, gpus: int,
                   ready: Path | None = None) -> tuple[dict[str, Alert], dict[str, Alert], str]:
    """A live job with `gpus` declared and the recorded `scenario` answering nvidia-smi; two watcher passes 130 s
    apart on the watcher's clock, the launch set 2 minutes back on the box. Returns both passes' alerts and
    the wrapper's pid."""
    monkeypatch.setenv("FAKE_NVSMI_DIR", str(GPU / scenario))
    root, box = tmp_path / "proj", tmp_path / "box"
    write_project(root, command, roster=("seed0",), instance_body=LOCAL, box=box, extra_run=f"gpus = {gpus}")
    clock = FixedClock(FIXED_NOW)
    session = open_session(str(root), clock=clock)
    ctl = Path(ctl_dir(session.project.run(RUN)))
    try:
        await launch_run(session, RUN)
        await wait_for_liveness(session, states=("running",))
        while ready is not None and len(ready.read_text().split() if ready.exists() else []) < 2:
            await asyncio.sleep(0.05)
        then = (ctl / "launch.json").stat().st_mtime - 120
        os.utime(ctl / "launch.json", (then, then))
        first = await watch_pass(session)
        clock.advance(seconds=130)
        second = await watch_pass(session)
    finally:
        (box / "job" / "stop").touch()
        await wait_for_liveness(session, states=("dead", "finished"))
        session.close()
    return first, second, (ctl / "pid").read_text().strip()


async def test_gpu_memory_held_with_no_process_listed_raises_s91(fake_gpus: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, _ = await _gpu_run(tmp_path, monkeypatch, "orphan", WAIT_FOR_STOP, gpus=1)
    assert "S91" not in first  # one look is no stretch of time
    assert second["S91"].severity == "warn"
    assert second["S91"].message == (f"GPU 1: {size_iec(2048 * 2**20, 1, 'GiB')} used with no compute process "
                                     f"listed for {span(130.0)}")
    assert "S92" not in second and "S93" not in second  # someone holds memory: not proof of a CPU run


async def test_a_trainer_on_no_gpu_raises_s92(fake_gpus: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    first, _, wrapper = await _gpu_run(tmp_path, monkeypatch, "cpu", WAIT_FOR_STOP, gpus=1)
    assert first["S92"].severity == "error"
    message = first["S92"].message
    assert message.startswith(f"trainer pid(s) {wrapper}, ")
    assert message.endswith("after start and no GPU memory in use: training on CPU")
    assert " absent from the compute processes 2m after start" in message


async def test_every_rank_on_one_gpu_raises_s93(fake_gpus: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "box" / "job" / "ranks.pids"
    monkeypatch.setenv("FAKE_NVSMI_PIDS", str(pids))
    ranks = f"for r in 0 1; do ( echo $BASHPID >> ranks.pids; {WAIT_FOR_STOP} ) & done; wait"
    first, _, _ = await _gpu_run(tmp_path, monkeypatch, "ranks", ranks, gpus=2, ready=pids)
    assert first["S93"].severity == "warn"
    assert first["S93"].message == "all 2 trainer processes on GPU 0 (2 declared)"
    assert "S92" not in first
