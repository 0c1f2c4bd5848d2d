"""The host sample over a real sshd: remote/mem_monitor.py shipped on stdin to the box's interpreter through the
ssh provider, as the watcher does it. A tmpfs result root that the job fills raises S68 in a dashboard refresh
(the overview), the disk-budget gate stops the next cell with exit 75, and the box is still there afterwards.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_ssh_arc import INSTANCE, RUN, ssh_project, trusted_session, wait_for

from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch.monitors import opened_monitor
from remote_gpu_trainer.services.watch.run_logs import follow_log, take_alerts
from support.sshd_fixtures import Sshd

pytestmark = pytest.mark.sshd


async def test_s68_and_the_disk_gate_over_ssh(sshd: Sshd, ssh_home: Path, tmp_path: Path) -> None:
    root, box = tmp_path / "proj", tmp_path / "box"
    mount = box / "rgt"
    mount.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the disk test (needs root, as in .ci/run): {done.stderr}")
    try:
        ssh_project(root, box, sshd, ssh_home, "head -c 4050000 /dev/zero > {out}/fill.bin")
        session = await trusted_session(root, sshd)
        try:
            await launch_run(session, RUN)
            assert await wait_for(session, ("dead", "finished")) == "dead"
            await follow_log(session, RUN)  # the dashboard follows the run's log; its monitor keeps the history
            overview = await observe_and_build(session)
            alerts = {a.signature: a for a in take_alerts(session)}
            history = opened_monitor(session, RUN).host
        finally:
            await session.close_transports()
            session.close()
        vfs = os.statvfs(mount)
        free, used = vfs.f_bavail * vfs.f_frsize, (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
        assert alerts["S68"].message == f"bytes {100 * used / (used + free):.0f}% used on {mount / RUN}"
        assert history.last is not None and history.last.disks[0].free_bytes == free
        assert (box / "job" / ".rgt" / RUN / "exit_code").read_text() == "75\n"
        assert (box / "job" / ".rgt" / RUN / "mem.tsv").read_text().startswith("t\trss_bytes\tsys_used_bytes\t")
        assert (mount / RUN / "seed0" / "fill.bin").stat().st_size == 4050000
        assert overview.instance(INSTANCE).state == "running"  # reported, never stopped
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
