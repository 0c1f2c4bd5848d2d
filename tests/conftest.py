"""Shared fixtures: a fixed clock, sim projects built from committed real checkpoints, an isolated cwd."""

from __future__ import annotations

import os

os.environ.pop("NO_COLOR", None)  # NO_COLOR would turn every snapshot monochrome (docs/environment.md §7)

import socket  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from support.helpers import FIXED_NOW, FixedClock, write_project  # noqa: E402

pytest_plugins = ["support.sshd_fixtures", "support.slurm_fixtures", "support.cpu_capability"]

@pytest.fixture(autouse=True)
def isolated_user_config(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ~/.config/rgt (signatures.d, ...) and registry of opened projects never change a
    test's result. The registry lives beside the test's folder, not in it: tests that list what a command left
    in tmp_path would otherwise find it there."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("user-state")))


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
