"""Text from the box never drives a terminal, the TUI or a report reader.

A hostile (or merely broken) box controls file names, log lines, error messages and provider error bodies.
Each of them, with terminal escapes (ESC, CSI as one C1 byte, OSC title sets, BEL, backspace, carriage
return), bidi overrides and newlines in single-line fields, and with Rich markup (`[bold red]x`), is sent
through the real renderers: text.escape_control, the log line splitter, every report format, the CLI
printers and the TUI panels. What comes out shows the characters escaped and the markup literally.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from remote_gpu_trainer.audits.log.lines import LineSplitter
from remote_gpu_trainer.cli import main
from remote_gpu_trainer.report import render
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch.run_logs import follow_log
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.text import escape_control, has_control
from remote_gpu_trainer.views import (
    AuditRow,
    ChecklistItem,
    CheckpointView,
    FindingView,
    GateView,
    InstanceView,
    LogLineView,
    Overview,
    RunView,
)
from remote_gpu_trainer.widgets.checkpoints_panel import CheckpointsPanel
from remote_gpu_trainer.widgets.instances_panel import InstancesPanel
from remote_gpu_trainer.widgets.log_panel import LogPanel
from support.helpers import INSTANCE, RUN, wait_for_liveness, write_project

# Everything a terminal would act on, in one string: colour + clear screen, a one-byte CSI, a window title
# (OSC ... BEL), backspace and carriage return to overwrite, a bidi override, NEL and a line separator.
HOSTILE = "a\x1b[31m\x1b[2Jb\x9b6nc\x1b]0;pwned\x07d\x08e\rf\u202eg\x85h\u2028i\x7fj\x00k"
MARKUP = "[bold red]x[/]"
NASTY = f"{MARKUP} {HOSTILE}"
CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0A, 0x20), *range(0x7F, 0xA0))] + [
    "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069",
]


def raw_controls(text: str, allowed: str = "") -> list[str]:
    """The control characters (and bidi/separator code points) in `text` other than `allowed`."""
    return [hex(ord(ch)) for ch in text if ch not in allowed and (ch in CONTROLS or unicodedata.category(ch) == "Cc")]


# -- the one function ------------------------------------------------------------------------------------------

def test_escape_control_shows_every_control_character_and_keeps_the_rest() -> None:
    assert escape_control("plain text, ünïcödé and a\ttab") == "plain text, ünïcödé and a\ttab"
    assert escape_control("\x1b[2J") == "\\x1b[2J"
    assert escape_control("a\nb\rc") == "a\\nb\\rc"
    assert escape_control("a\nb\rc", keep_newlines=True) == "a\nb\\rc"
    assert escape_control("\x9b\x7f\u202e\x00") == "\\x9b\\x7f\\u202e\\x00"
    for ch in CONTROLS:
        shown = escape_control(f"<{ch}>")
        assert raw_controls(shown) == [], hex(ord(ch))
        assert shown != f"<{ch}>" and has_control(f"<{ch}>")
        assert escape_control(shown) == shown  # escaping twice changes nothing
    assert raw_controls(escape_control(HOSTILE)) == []


def test_log_lines_escape_what_ansi_stripping_leaves() -> None:
    splitter = LineSplitter()
    data = ("\x1b[32mok\x1b[0m epoch 1\n" + HOSTILE.replace("\r", "").replace("\x85", "") + "\n" + "bell\x07 then"
            ).encode("utf-8")
    lines = [line.text for line in splitter.feed(data)]
    assert lines[0] == "ok epoch 1"  # colour is stripped, as before
    assert raw_controls(lines[1], allowed="") == [] and "\\x9b" in lines[1] and "\\u202e" in lines[1]
    assert "pwned" not in lines[1]  # a window-title OSC goes whole, BEL terminator included (text.strip_ansi)
    assert splitter.partial == "bell\\x07 then"  # the live progress bar too
    assert [line.text for line in splitter.flush()] == ["bell\\x07 then"]
    # a control character split across two reads, in the line's second half, is still escaped
    splitter = LineSplitter()
    assert splitter.feed(b"clean start ") == []
    assert [line.text for line in splitter.feed(b"then \x07 box\n")] == ["clean start then \\x07 box"]
    assert [line.text for line in splitter.feed(b"next line clean\n")] == ["next line clean"]


# -- every report format ---------------------------------------------------------------------------------------

def hostile_overview() -> Overview:
    instance = InstanceView(
        name="box", provider="ssh", id=f"id {NASTY}", state="unknown", gpu=NASTY, price_per_hour=1.0,
        price_source="user", billing="compute", cost_so_far=0.0, burn_per_hour=1.0, estimate=False,
        verified_month="2026-01", stale=False, note=f"ssh: {NASTY}", drift=NASTY, facts_age=NASTY)
    run = RunView(
        id="r1", instance="box", evidence_state="pulled", liveness="unknown", liveness_detail=f"box says {NASTY}",
        checkpoints=(CheckpointView(f"seed0/{NASTY}.pth", 10, "ab" * 32, "unloadable", f"load: {NASTY}"),),
        gate=GateView(open=False, action=f"terminate {NASTY}", destroys=(NASTY,), reasons=(f"missing {NASTY}",)),
        findings=(FindingView("S01", "log:log", "error", "open", f"OOM {NASTY}", fix="fix", count=2,
                              evidence=f"line {NASTY}"),),
        checklist=(ChecklistItem("T01", "tick", "title", "ticked", f"note {NASTY}"),), log="train.log",
        environment=(AuditRow(1, "disk", "fail", f"df said {NASTY}"),))
    return Overview(project="p", generated_at=datetime(2026, 1, 1, tzinfo=UTC), currency="USD", total=0.0,
                    burn_per_hour=1.0, instances=(instance,), runs=(run,), alerts=(f"alert {NASTY}",))


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_every_report_format_escapes_box_text(fmt: str) -> None:
    text = render(hostile_overview(), fmt)
    assert raw_controls(text, allowed="\n") == []
    assert MARKUP in text  # a report is not a markup language: kept as written
    lines = text.splitlines()
    assert not any(line.startswith(("f", "g", "h", "i")) for line in lines)  # no field broke onto a new line
    if fmt == "json":
        data = json.loads(text)
        run = data["runs"][0]
        for value in (run["checkpoints"][0]["path"], run["checkpoints"][0]["detail"], run["findings"][0]["message"],
                      run["findings"][0]["evidence"], run["liveness_detail"], run["gate"]["reasons"][0],
                      run["environment"][0]["detail"], data["instances"][0]["note"], data["alerts"][0]):
            assert "\\x1b[2J" in value and "\\u202e" in value and raw_controls(value) == []
    else:
        for part in (f"seed0/{MARKUP}", "load: ", "OOM ", "box says ", "missing ", "df said ", "alert "):
            assert any(part in line and "\\x1b[31m" in line for line in lines), part


# -- the CLI's printers --------------------------------------------------------------------------------------------

def test_events_and_errors_print_box_text_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "p"
    write_project(root)
    db = StateDB(root / ".rgt" / "state.db")
    db.append_event("pull", f"pulled {NASTY}", run_id=RUN, instance=INSTANCE, actor="cli",
                    detail={"shown": [f"file {NASTY}"], "reasons": [f"reason {NASTY}"]})
    db.close()
    assert main(["events", str(root)]) == 0
    out = capsys.readouterr().out
    assert raw_controls(out, allowed="\n") == [] and out.count("\\x1b[2J") == 3 and MARKUP in out
    # an error message quoting what the box (or here rgt.toml) holds is one escaped line too
    config = root / "rgt.toml"
    config.write_text(config.read_text().replace("[runs.r1]", '[runs."r1\\u001b[2J\\u0007"]'))
    assert main(["--report", str(root)]) == 2
    err = capsys.readouterr().err
    assert raw_controls(err, allowed="\n") == [] and "\\x1b[2J\\x07" in err and len(err.splitlines()) == 1


async def test_a_hostile_log_line_reaches_the_findings_and_the_report_escaped(tmp_path: Path) -> None:
    """A real sim run whose log prints terminal escapes inside an OOM line: the lines the monitor returns,
    the finding's evidence in the state database and every report show them stripped (ANSI) or escaped."""
    log = tmp_path / "hostile.log"
    log.write_bytes(("step=1 loss=2.0\nRuntimeError: CUDA out of memory. " + HOSTILE.replace("\r", "") +
                     " " + MARKUP + "\n").encode("utf-8"))
    root = tmp_path / "p"
    write_project(root, f"cat {shlex.quote(str(log))}; exit 1", roster=("seed0",))
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    update = await follow_log(session, RUN)
    assert update is not None
    assert any("CUDA out of memory" in line.text for line in update.lines)
    assert all(raw_controls(line.text) == [] for line in update.lines)
    evidence = [f.evidence for f in session.db.log_findings(RUN)]
    assert any("\\x08" in e and "\\u202e" in e and "\\x9b" in e and "pwned" not in e for e in evidence)
    assert all(raw_controls(e) == [] for e in evidence)
    overview = await observe_and_build(session)
    await session.close_transports()
    session.close()
    for fmt in ("text", "markdown", "json"):
        out = render(overview, fmt)
        assert raw_controls(out, allowed="\n") == [] and "CUDA out of memory" in out and "\\u202e" in out


# -- the TUI -------------------------------------------------------------------------------------------------------

class Panels(App[None]):
    def compose(self) -> ComposeResult:
        yield InstancesPanel()
        yield CheckpointsPanel()
        yield LogPanel()


async def test_panels_show_box_text_literally_never_as_markup_or_terminal_codes() -> None:
    overview = hostile_overview()
    run = overview.runs[0]
    app = Panels()
    async with app.run_test(size=(160, 48)) as pilot:
        app.query_one(InstancesPanel).show(overview, "r1", read_only=False)
        checkpoints = app.query_one(CheckpointsPanel)
        checkpoints.show(run)
        panel = app.query_one(LogPanel)
        panel.append([LogLineView(1, f"log {NASTY}", "error")])
        panel.set_progress(f"bar {NASTY}")
        await pilot.pause()
        gate = str(app.query_one("#gate-status").render())
        assert f"missing {MARKUP}" in gate and "\\x1b[2J" in gate and raw_controls(gate) == []
        meter = str(app.query_one("#meter-summary").render())
        assert f"ssh: {MARKUP}" in meter and raw_controls(meter) == []
        cells = [str(cell) for cell in app.query_one("#checkpoints", DataTable).get_row_at(0)]
        assert any(f"seed0/{MARKUP}" in cell and "\\x1b[31m" in cell for cell in cells)
        assert all(raw_controls(cell) == [] for cell in cells)
        checkpoints.show_progress(1, 2, f"pulling seed0/{NASTY}.pth")
        await pilot.pause()
        summary = str(app.query_one("#checkpoint-summary").render())
        assert f"seed0/{MARKUP}" in summary and raw_controls(summary) == []
        shown = panel.text()
        assert f"log {MARKUP}" in shown and raw_controls(shown, allowed="\n") == []
        progress = str(app.query_one("#log-progress").render())
        assert f"bar {MARKUP}" in progress and raw_controls(progress) == []


def test_the_hostile_overview_really_is_hostile() -> None:
    """The fixture must hold raw controls and markup, or the tests above could pass on clean text."""
    run = hostile_overview().runs[0]
    assert raw_controls(run.checkpoints[0].path) and MARKUP in run.gate.reasons[0]
    assert all(dataclasses.is_dataclass(part) for part in (run, run.gate, run.checkpoints[0]))
