"""What rgt does at a terminal (a real pseudo-terminal, the installed module in its own process):
`rgt down RUN` shows the plan and asks for the instance id; pull and verify draw one progress bar.
Away from a terminal both keep their old behaviour (tests/e2e/test_cli.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from remote_gpu_trainer.text import strip_ansi
from support.helpers import INSTANCE, RUN, run_rgt
from support.pty_runner import run_at_terminal

PROMPT = "Type the instance id"
BOX_ID = "sim-box"
BAR = "━"


def frames_of(output: str) -> list[str]:
    """What the terminal showed, cut at every carriage return or line end, colours stripped."""
    return [strip_ansi(part).strip() for part in re.split(r"[\r\n]+", output) if strip_ansi(part).strip()]


def finished(project: Path) -> Path:
    for args in (("up", RUN), ("run", RUN), ("watch", RUN, "--interval", "0.2")):
        result = run_rgt(*args, cwd=project)
        assert result.returncode == 0, result.stderr
    return project / ".rgt" / "sim" / INSTANCE


def pulled_and_verified(project: Path) -> None:
    for verb in ("pull", "verify"):
        result = run_rgt(verb, RUN, cwd=project)
        assert result.returncode == 0, result.stderr


def test_down_at_a_terminal_with_a_wrong_id_refuses_with_exit_3_and_destroys_nothing(project_dir: Path) -> None:
    disk = finished(project_dir)
    pulled_and_verified(project_dir)  # the gate is open: only the typed id stands between rgt and the box
    asked = run_at_terminal("down", RUN, cwd=project_dir, prompt=PROMPT, answer="other-box")
    assert asked.prompted, asked.output
    assert asked.returncode == 3, asked.output
    assert "Action:    sim  Terminate instance sim-box" in asked.output  # the plan came before the question
    assert asked.output.index("Action:") < asked.output.index(PROMPT)
    assert "does not match" in asked.output
    assert disk.is_dir()
    events = run_rgt("events", cwd=project_dir).stdout
    assert "typed id 'other-box' does not match" in events  # the refusal is on record
    assert "approved terminate" not in events


def test_down_at_a_terminal_proceeds_with_the_right_id_only_once_the_gate_is_open(project_dir: Path) -> None:
    disk = finished(project_dir)
    closed = run_at_terminal("down", RUN, cwd=project_dir, answer=BOX_ID)  # typed ahead: the right id
    assert closed.returncode == 3, closed.output
    assert not closed.prompted and PROMPT not in closed.output  # nothing to ask while the gate is closed
    assert "Action:" in closed.output and "no PULL_VERIFIED.json" in closed.output
    assert disk.is_dir()

    pulled_and_verified(project_dir)
    opened = run_at_terminal("down", RUN, cwd=project_dir, prompt=PROMPT, answer=BOX_ID)
    assert opened.prompted and opened.returncode == 0, opened.output
    assert "terminated, confirmed by the provider" in opened.output
    assert not disk.exists()
    events = run_rgt("events", cwd=project_dir).stdout
    assert f"approved terminate of {INSTANCE} ({BOX_ID})" in events


def test_down_needs_confirm_when_stdout_is_not_a_terminal(project_dir: Path) -> None:
    """A terminal on stdin only (a script piping rgt's output) is not a person who can read the plan."""
    disk = finished(project_dir)
    pulled_and_verified(project_dir)
    piped = run_at_terminal("down", RUN, cwd=project_dir, answer=BOX_ID, stdout_to_pipe=True)
    assert piped.returncode == 2 and "the following arguments are required: --confirm" in piped.output
    assert disk.is_dir()


def test_pull_and_verify_draw_one_bar_at_a_terminal_and_plain_lines_elsewhere(project_dir: Path) -> None:
    finished(project_dir)
    pulled = run_at_terminal("pull", RUN, cwd=project_dir)
    assert pulled.returncode == 0, pulled.output
    frames = [frame for frame in frames_of(pulled.output) if frame.startswith(f"pull {RUN}")]
    final = frames[-1]  # the bar's last frame
    assert BAR in final
    assert re.search(r" (\d+(?:\.\d+)? \w+)/\1 ", final), final  # all the manifest's bytes, of its total
    assert re.search(r" \d+(?:\.\d+)? \w+/s ", final), final  # and the rate
    assert "downloading " not in pulled.output and "done        seed0" not in pulled.output
    verified = run_at_terminal("verify", RUN, cwd=project_dir)
    assert verified.returncode == 0, verified.output
    assert BAR in verified.output and "verified: wrote PULL_VERIFIED.json" in verified.output
    assert "\nhashing " not in verified.output  # no plain progress lines at a terminal

    plain = run_rgt("verify", RUN, cwd=project_dir)  # not a terminal: today's lines, no bar
    assert plain.returncode == 0 and BAR not in plain.stderr + plain.stdout
    assert "hashing seed0/best.pth" in plain.stderr and "\x1b[" not in plain.stderr


def test_an_ungated_stop_at_a_terminal_is_cancelled_by_any_answer_but_the_id(project_dir: Path) -> None:
    """The sim box's stop is reversible and destroys nothing: the service takes it without an id, so the
    answer to the question is what stands between the person and the stop."""
    assert run_rgt("up", RUN, cwd=project_dir).returncode == 0

    def state() -> str:
        report = json.loads(run_rgt("--report", "--format", "json", cwd=project_dir).stdout)
        return str(report["instances"][0]["state"])

    cancelled = run_at_terminal("down", RUN, "--stop", cwd=project_dir, prompt=PROMPT, answer="nope")
    assert cancelled.prompted and cancelled.returncode == 3, cancelled.output
    assert "stop of box cancelled: typed id 'nope' is not the instance id 'sim-box'" in cancelled.output
    assert state() == "running"
    stopped = run_at_terminal("down", RUN, "--stop", cwd=project_dir, prompt=PROMPT, answer=BOX_ID)
    assert stopped.prompted and stopped.returncode == 0, stopped.output
    assert state() == "stopped"
