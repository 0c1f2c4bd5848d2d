"""The installed console script in a real terminal (tmux), read back as a person would read it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.services.opening import open_session
from support.helpers import HUNG, launched_and_finished, two_box_project

pytestmark = pytest.mark.tmux


class Terminal:
    def __init__(self, socket: Path) -> None:
        self.socket = socket

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", *self.options(), *args], capture_output=True, text=True, check=True).stdout

    def options(self) -> list[str]:
        """A private server that reads no tmux.conf: the machine's /etc/tmux.conf and ~/.tmux.conf (a status
        line, another default size, mouse mode) never change what the pane shows."""
        return ["-S", str(self.socket), "-f", "/dev/null"]

    def start(self, command: str, width: int, height: int) -> None:
        """Size the window first, then start the app in it, so its first frame has the final size."""
        self.tmux("new-session", "-d", "-s", "ui", "-x", str(width), "-y", str(height), "sleep 600")
        self.tmux("respawn-pane", "-k", "-t", "ui", command)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "ui")

    def wait_until(self, done: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
        """The first screen for which `done` holds. Panels draw separately (a table sizes itself when the app is
        idle), so a test waits for every text it then asserts on, not for one and hopes for the rest."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if done(screen):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{what} never appeared; screen was:\n{self.screen()}")

    def wait_for(self, *texts: str, timeout: float = 60.0) -> str:
        """The first screen that shows all of `texts` at once."""
        return self.wait_until(lambda screen: all(text in screen for text in texts),
                               " and ".join(repr(text) for text in texts), timeout)

    def keys(self, *keys: str, literal: bool = False) -> None:
        self.tmux("send-keys", "-t", "ui", *(["-l"] if literal else []), *keys)
        time.sleep(0.2)  # a person's pace: Textual waits ESCDELAY to tell Escape from a sequence

    def alive(self) -> bool:
        return subprocess.run(["tmux", *self.options(), "has-session", "-t", "ui"],
                              capture_output=True).returncode == 0


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    assert shutil.which("tmux"), "tmux is missing: run .ci/run, which installs it"
    # the socket in a short folder of its own: a unix socket's path is at most 107 bytes, and tmp_path under a
    # long TMPDIR can be longer
    folder = Path(tempfile.mkdtemp(prefix="rgt-tmux-", dir="/tmp"))
    term = Terminal(folder / "sock")
    yield term
    subprocess.run(["tmux", *term.options(), "kill-server"], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def rgt_command(project: Path) -> str:
    # The pane's shell may export COLUMNS/LINES from before the window was sized; Textual would trust them.
    return f"env -u COLUMNS -u LINES TERM=xterm-256color {sys.executable} -m remote_gpu_trainer {project}"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
async def test_dashboard_in_a_real_terminal(project_dir: Path, terminal: Terminal, size: tuple[int, int]) -> None:
    session = open_session(str(project_dir))
    await launched_and_finished(session)
    session.close()
    terminal.start(rgt_command(project_dir), *size)
    screen = terminal.wait_for("GATE CLOSED", "Terminate", "box (sim)", "$0.89")
    assert "Terminate" in screen and "box (sim)" in screen and "$0.89" in screen
    terminal.keys("p")
    terminal.wait_for("GATE CLOSED 1")  # pulled: only the missing marker remains
    terminal.keys("v")
    screen = terminal.wait_for("GATE OPEN")
    if size[0] < 120:
        terminal.keys("2")
    screen = terminal.wait_until(lambda shown: "seed1/best.pth" in shown and shown.count("✔ verified") >= 4,
                                 "seed1/best.pth and four '✔ verified'")
    assert screen.count("✔ verified") >= 4
    terminal.keys("t")
    screen = terminal.wait_for("Type the instance id", "IRREVERSIBLE", "Burning")
    assert "IRREVERSIBLE" in screen and "Burning" in screen
    terminal.keys("BTab")  # from Cancel back to the id field
    terminal.keys("sim-box", literal=True)
    terminal.keys("Enter")
    terminal.wait_for("terminated", timeout=30)
    disk = project_dir / ".rgt" / "sim" / "box"
    eventually(lambda: not disk.exists(), timeout=30)
    assert not disk.exists()
    terminal.keys("q")
    eventually(lambda: not terminal.alive(), timeout=10)
    assert not terminal.alive()


async def test_a_hung_box_in_a_real_terminal_leaves_the_other_rows_drawn(
        tmp_path: Path, silent_server: int, terminal: Terminal, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80x24, the console script as installed: the sim row is drawn and priced while the hung box is still
    being asked, and the hung row names its timeout once it passes (the SSH connect's 15 s, which comes before
    the 20 s provider timeout now that a timed-out connect is not retried at once)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = two_box_project(tmp_path / "p", silent_server, tmp_path / "home")
    session = open_session(str(root))
    await launched_and_finished(session)
    session.close()
    terminal.start(f"env HOME={tmp_path / 'home'} " + rgt_command(root), 80, 24)
    screen = terminal.wait_for("box (sim)", "$0.89", HUNG)
    assert "no answer within" not in screen, "the sim row waited for the hung box"
    terminal.wait_for("no answer within 15 s", timeout=60)
    terminal.keys("q")
    eventually(lambda: not terminal.alive(), timeout=15)
    assert not terminal.alive()


def eventually(condition: Callable[[], bool], timeout: float) -> None:
    """Poll `condition` until it holds or `timeout` passes; the caller asserts it either way."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
