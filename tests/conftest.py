"""Shared fixtures: a fixed clock, sim projects built from committed real checkpoints, an isolated cwd."""

from __future__ import annotations

import os
import time

# What the developer's shell exports never changes a result (docs/environment.md §9): set before any
# test, its subprocesses and the jobs they launch read the environment.
UNSET = (
    "NO_COLOR",  # would turn every snapshot monochrome (docs/environment.md §7)
    "SOURCE_DATE_EPOCH",  # would stamp builds and reports with the shell's date (clock.report_now)
    "COLUMNS", "LINES",  # would wrap CLI output at the developer's width
    # would override the demo's own pins (assets/demo/train.py) and the survey's nproc (remote/env_survey.sh);
    # tests that train under a capability set it themselves (support/cpu_capability.py)
    "ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "OMP_THREAD_LIMIT",
    # would send the local fake provider APIs and webhook receivers through a proxy
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
)
for _name in UNSET:
    os.environ.pop(_name, None)
os.environ["LC_ALL"] = "C.UTF-8"  # one collation and a UTF-8 terminal (text.utf8_terminal: braille charts)
os.environ["TZ"] = "UTC"  # rgt works in UTC; a test that varies TZ says so
time.tzset()

import socket  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from support.helpers import FIXED_NOW, FixedClock, write_project  # noqa: E402

pytest_plugins = ["support.sshd_fixtures", "support.slurm_fixtures", "support.cpu_capability"]

@pytest.fixture(scope="session", autouse=True)
def room_on_the_temp_disk(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The sim boxes' disks are folders under the temp directory, and the sentinel reports a durable disk at
    DISK_FULL_PERCENT used as `disk_full`: on a nearly full machine the notification tests would see an event
    they do not expect. Said once, plainly, instead of as a dozen puzzling failures."""
    from remote_gpu_trainer.remote.rgt_sentinel import disk_percent
    from remote_gpu_trainer.services.launch.sentinel import DISK_FULL_PERCENT

    used = disk_percent(str(tmp_path_factory.getbasetemp())) or 0.0  # as the sentinel itself measures it
    if used >= DISK_FULL_PERCENT - 2:
        pytest.fail(f"{tmp_path_factory.getbasetemp()}: its disk is {used:.0f} % used; the tests need it under "
                    f"{DISK_FULL_PERCENT - 2} % (free some space)", pytrace=False)


@pytest.fixture(scope="session")
def user_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One $XDG_CACHE_HOME for the session (the dataclass code cache, remote_gpu_trainer/dataclass_code.py): the
    `rgt` processes tests start share it, as a user's do."""
    return tmp_path_factory.mktemp("user-cache")


@pytest.fixture(autouse=True)
def isolated_user_config(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, user_cache_home: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ~/.config/rgt (signatures.d, ...), registry of opened projects and caches never
    change a test's result. The registry lives beside the test's folder, not in it: tests that list what a
    command left in tmp_path would otherwise find it there."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("user-state")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_cache_home))


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(FIXED_NOW)


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh sim project whose job copies committed checkpoints; cwd is the project (config isolation)."""
    root = tmp_path / "proj"
    write_project(root)
    monkeypatch.chdir(root)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield root


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts every connection and never sends a byte (an sshd stuck before its banner)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()
