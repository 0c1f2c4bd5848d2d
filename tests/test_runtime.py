"""The interpreter settings every rgt process runs with (remote_gpu_trainer/runtime.py, docs/architecture.md §5):
read from fresh Python processes, since a test process may already have been tuned by an earlier test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEFAULTS = "(700, 10, 10) 0.005 0"
TUNED = "(50000, 20, 100) 0.001"


def settings_after(body: str, cwd: Path) -> list[str]:
    """What a fresh interpreter prints: its GC thresholds, switch interval and frozen count before and after
    `body` (each line `THRESHOLDS INTERVAL FROZEN`)."""
    show = "print(); print(gc.get_threshold(), sys.getswitchinterval(), gc.get_freeze_count(), flush=True)"
    script = f"import gc, sys\n{show}\n{body}\n{show}\n"
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if line.startswith("(")]


def test_the_cli_entry_point_tunes_the_process_once(project_dir: Path) -> None:
    body = ("from remote_gpu_trainer.cli import main\n"
            "assert main(['completion', 'bash']) == 0\n"
            "frozen = gc.get_freeze_count()\n"
            "garbage = [[n] for n in range(10_000)]\n"
            "assert main(['completion', 'bash']) == 0\n"
            "assert gc.get_freeze_count() == frozen, 'a second call froze later objects'\n"
            "import dataclasses\n"
            "assert dataclasses.exec.__module__ == 'remote_gpu_trainer.dataclass_code'")  # dataclass_code.py
    before, after = settings_after(body, project_dir)
    assert before == DEFAULTS
    settings, frozen = after.rsplit(" ", 1)
    assert settings == TUNED and int(frozen) > 1_000  # the start-up objects, frozen


def test_an_app_opened_without_the_cli_gets_the_same_settings(project_dir: Path) -> None:
    body = ("from remote_gpu_trainer.app import RgtApp\n"
            "from remote_gpu_trainer.services.opening import open_session\n"
            f"RgtApp(open_session({str(project_dir)!r}, read_only=True))")
    before, after = settings_after(body, project_dir)
    assert before == DEFAULTS
    settings, frozen = after.rsplit(" ", 1)
    assert settings == TUNED and int(frozen) > 10_000  # textual's objects too


def test_the_exit_does_not_walk_the_objects_once_more(project_dir: Path) -> None:
    """The teardown's collection is skipped by freezing what is alive at exit (runtime.py): a cycle left at exit
    is not collected, so its finalizer does not run. Without the freeze it would, which is what this tells apart."""
    cycle = ("class Cycle:\n"
             "    def __del__(self): print('collected at exit', flush=True)\n"
             "c = Cycle(); c.me = c; del c\n")
    untuned = subprocess.run([sys.executable, "-c", cycle], capture_output=True, text=True, timeout=120)
    assert untuned.stdout == "collected at exit\n"
    tuned = subprocess.run([sys.executable, "-c", "from remote_gpu_trainer.runtime import tune_process\n"
                            "tune_process()\n" + cycle], cwd=project_dir, capture_output=True, text=True, timeout=120)
    assert tuned.returncode == 0 and tuned.stdout == "" and tuned.stderr == ""


EXIT_NOW = """
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from remote_gpu_trainer.runtime import exit_now

class Cycle:
    def __del__(self): print("finalized", flush=True)

def late():
    time.sleep(0.3)
    print("thread done")

c = Cycle(); c.me = c
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=late).start()
ThreadPoolExecutor(2).submit(time.sleep, 0.01)  # never shut down: its idle worker must not hold the exit
sys.stdout.write("buffered, unflushed")
exit_now(int(sys.argv[1]))
"""


def test_exit_now_ends_as_python_would_less_the_teardown(project_dir: Path) -> None:
    """runtime.exit_now: the thread that is not a daemon is waited for, then the atexit handlers run, then the
    buffers are flushed, with the exit code given; an executor left open does not hold the exit; only the
    finalizer of an object still alive is skipped."""
    result = subprocess.run([sys.executable, "-c", EXIT_NOW, "3"], cwd=project_dir, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 3 and result.stderr == ""
    assert result.stdout == "buffered, unflushedthread done\natexit ran\n"  # one buffer, in the order written


def test_the_program_exits_with_main_s_code_and_argparse_s_own_exits_stay(project_dir: Path) -> None:
    report = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "--report", str(project_dir), "--strict"],
                            cwd=project_dir, capture_output=True, text=True, timeout=120)
    assert report.returncode == 1 and "rgt report" in report.stdout and report.stderr == ""
    version = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "--version"], capture_output=True,
                             text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("rgt ")
    usage = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "--no-such-option"], capture_output=True,
                           text=True, timeout=60)
    assert usage.returncode == 2 and "unrecognized arguments" in usage.stderr


def test_exit_now_exits_120_when_its_flush_fails_as_python_does(project_dir: Path) -> None:
    """A flush that fails at the end (a full disk, a reader gone) is not a success: 120, as Python's own exit
    says it, unless the command had already failed with its own code."""
    script = ("import sys\nfrom remote_gpu_trainer.runtime import exit_now\n"
              "sys.stdout = open('/dev/full', 'w')\nsys.stdout.write('lost')\nexit_now(int(sys.argv[1]))\n")
    for code, expected in ((0, 120), (3, 3)):
        result = subprocess.run([sys.executable, "-c", script, str(code)], cwd=project_dir, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == expected
