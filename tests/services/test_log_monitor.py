"""The log pipeline end to end on real sim runs: alerts, stored series, findings in the report, restarts."""

from __future__ import annotations

import asyncio
import json
import math
import shlex
import shutil
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.services import box_layout
from remote_gpu_trainer.services.bindings import run_config
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import run_state
from remote_gpu_trainer.services.watch.log_monitor import LogUpdate
from remote_gpu_trainer.services.watch.monitors import catalogue, log_monitor
from remote_gpu_trainer.services.watch.run_logs import evaluate_rules, follow_log, loss_chart, take_alerts
from support.helpers import FIXTURES, INSTANCE, RUN, wait_for_liveness, write_project

LOGS = FIXTURES / "logs" / "monitor"


def cat_then_fail(fixture: str, rc: int = 1) -> str:
    return f"cat {shlex.quote(str(LOGS / fixture))}; exit {rc}"


async def launched(root: Path, command: str, extra_run: str = "", **kw: str) -> Session:
    write_project(root, command, roster=("seed0",), extra_run=extra_run, **kw)
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    return session


async def follow_all(session: Session) -> list[LogUpdate]:
    updates = []
    while True:
        update = await follow_log(session, RUN)
        assert update is not None
        updates.append(update)
        if not update.more:
            return updates


def log_on_box(root: Path, session: Session) -> Path:
    run = run_config(session, RUN)
    return Path(LocalTransport(root / ".rgt" / "sim" / INSTANCE).resolve(box_layout.log_path(run)))


async def test_oom_run_alerts_once_stores_the_series_and_reports_the_fix(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = await launched(root, cat_then_fail("oom_after_training.log"))
    updates = await follow_all(session)
    alerts = [a for u in updates for a in u.alerts]
    assert {a.signature for a in alerts} >= {"S01", "S03"}
    oom = next(a for a in alerts if a.signature == "S01")
    assert oom.severity == "error" and "CUDA out of memory" in oom.message and oom.fix
    lines = [line for u in updates for line in u.lines]
    assert lines[-2].level == "error" and lines[-2].text.startswith("torch.OutOfMemoryError")
    assert lines[-1].text == "== rgt: cell seed0 exited 1" and lines[-1].level is None

    loss = session.db.metric_samples(RUN, "loss")
    assert [s.step for s in loss] == list(range(1, 41))
    assert loss[0].value == pytest.approx(2.0 * 0.95)

    overview = await observe_and_build(session)
    run = overview.run(RUN)
    assert run is not None
    s01 = next(f for f in run.findings if f.id == "S01")
    assert s01.status == "open" and s01.fix and s01.check == "log:log"
    assert run.step == 40 and run.total_steps == 40
    assert any("$ BURN" in alert and "job dead" in alert for alert in overview.alerts)

    # a second follow finds nothing new and raises nothing again
    again = await follow_log(session, RUN)
    assert again is not None and not again.lines and not again.alerts
    await session.close_transports()
    session.close()

    # the same findings in the headless report, and --strict flags them
    out = tmp_path / "report.json"
    argv = ["--report", str(root), "--format", "json", "--output", str(out), "--strict"]
    assert await asyncio.to_thread(main, argv) == 1
    report = json.loads(out.read_text())
    findings = {f["id"]: f for f in report["runs"][0]["findings"]}
    assert findings["S01"]["severity"] == "error" and findings["S01"]["fix"] == s01.fix
    assert findings["S01"]["count"] == 1 and "torch.OutOfMemoryError" in findings["S01"]["evidence"]


async def test_restart_resumes_at_the_cursor_without_renotifying(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = await launched(root, cat_then_fail("oom_after_training.log"))
    first = await follow_all(session)
    assert any(u.alerts for u in first)
    log = log_on_box(root, session)
    await session.close_transports()
    session.close()

    reopened = open_session(str(root))
    quiet = await follow_log(reopened, RUN)
    assert quiet is not None and not quiet.lines and not quiet.alerts  # cursor and findings survived
    with log.open("a") as handle:
        handle.write("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
                     "unhandled system error, NCCL version 2.19.3\n")
        handle.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n")
    update = await follow_log(reopened, RUN)
    assert update is not None
    assert [line.text[:12] for line in update.lines] == ["RuntimeError", "torch.OutOfM"]
    assert {a.signature for a in update.alerts} == {"S26"}  # S01 repeats: counted, not re-notified
    s01 = next(f for f in reopened.db.log_findings(RUN) if f.signature == "S01")
    assert s01.count == 2
    reopened.close()


async def test_nan_loss_is_found_in_the_log_and_in_the_series(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = await launched(root, cat_then_fail("nan_loss.log", 0))
    updates = await follow_all(session)
    signatures = {a.signature for u in updates for a in u.alerts}
    assert "S08" in signatures
    await evaluate_rules(session, RUN, await run_state(session, RUN))
    assert "S70" in {a.signature for a in take_alerts(session)}
    stored = session.db.metric_samples(RUN, "loss")
    assert [s.step for s in stored if math.isnan(s.value)] == [25, 26, 27, 28, 29, 30]  # NaN survives SQLite
    chart = loss_chart(session, RUN)
    assert chart is not None and "NON-FINITE at step 25" in chart.title
    assert len(chart.steps) == 24  # the finite points only
    session.close()


async def test_relaunch_follows_only_the_new_launch(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = await launched(root, cat_then_fail("oom_after_training.log"))
    await follow_all(session)
    assert session.db.log_findings(RUN)
    # run ids are append-only: the same id launches again only once its failed cells were cleared from the
    # box (by hand, as after a crash at start-up); the wrapper then appends to the same log
    shutil.rmtree(root / ".rgt" / "sim" / "box" / "workspace" / "rgt" / RUN)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    updates = await follow_all(session)
    lines = [line.text for u in updates for line in u.lines]
    assert lines[0] == "== rgt: cell seed0 started" and lines.count("== rgt: cell seed0 started") == 1
    assert [f.signature for f in session.db.log_findings(RUN) if f.signature == "S01"] == ["S01"]
    assert [s.step for s in session.db.metric_samples(RUN, "loss")] == list(range(1, 41))
    session.close()


async def test_user_signature_from_rgt_toml_fires(tmp_path: Path) -> None:
    root = tmp_path / "p"
    rows = """
[[signatures]]
id = "U01"
source = "log"
pattern = 'checkpoint upload quota exceeded'
severity = "error"
cause = "Our bucket is full"
fix = "Prune old runs in the bucket"
match = ["ERROR checkpoint upload quota exceeded (bucket ml-runs)"]
nomatch = ["checkpoint upload ok"]
"""
    command = "echo 'ERROR checkpoint upload quota exceeded (bucket ml-runs)'"
    write_project(root, command, roster=("seed0",))
    with (root / "rgt.toml").open("a") as handle:
        handle.write(rows)
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    alerts = [a for u in await follow_all(session) for a in u.alerts]
    assert [(a.signature, a.severity, a.fix) for a in alerts] == [("U01", "error", "Prune old runs in the bucket")]
    session.close()


def test_a_user_signature_that_misses_its_example_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "p"
    write_project(root, "true", roster=("seed0",))
    with (root / "rgt.toml").open("a") as handle:
        handle.write('\n[[signatures]]\nid = "U02"\nsource = "log"\npattern = "quota"\nseverity = "warn"\n'
                     'cause = "c"\nfix = "f"\nmatch = ["QUOTA exceeded"]\nnomatch = ["fine"]\n')
    with pytest.raises(ConfigError) as caught:
        open_session(str(root))
    message = str(caught.value)
    assert "U02" in message and str(root / "rgt.toml") in message and "\n" not in message
    assert main(["--report", str(root)]) == 2


def test_user_signatures_d_rows_load_from_the_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "xdg" / "rgt" / "signatures.d"
    folder.mkdir(parents=True)
    (folder / "team.toml").write_text(
        '[[signature]]\nid = "U10"\nsource = "log"\npattern = "ECC page retirement pending"\nseverity = "warn"\n'
        'cause = "Card retiring pages"\nfix = "Ask the host for another card"\n'
        'match = ["nvidia: ECC page retirement pending on GPU 0"]\nnomatch = ["ECC ok"]\n', encoding="utf-8")
    root = tmp_path / "p"
    write_project(root, "true", roster=("seed0",))
    session = open_session(str(root))
    assert catalogue(session).rows["U10"].fix == "Ask the host for another card"
    session.close()


async def test_a_log_truncated_while_followed_loses_no_line_after_the_cut(tmp_path: Path) -> None:
    root = tmp_path / "p"
    session = await launched(root, cat_then_fail("nan_loss.log", 0))
    await follow_all(session)
    log = log_on_box(root, session)
    with log.open("r+b") as handle:
        handle.truncate(0)  # logrotate's copytruncate
    with log.open("ab") as handle:
        handle.write(b"step=1 loss=0.9\nOSError: [Errno 28] No space left on device\n\xff\xfe garbage \x00\n")
    update = await follow_log(session, RUN)
    assert update is not None and update.restarted
    assert [line.text for line in update.lines] == [
        "step=1 loss=0.9", "OSError: [Errno 28] No space left on device", "\ufffd\ufffd garbage "]
    assert "S31" in {a.signature for a in update.alerts}
    session.close()


async def test_a_stretch_rgt_was_closed_is_billed_as_an_estimate_and_logged(tmp_path: Path) -> None:
    """The sim box reports no uptime, so two unwatched hours cannot be explained: they bill at the last known
    rate, flagged as an estimate, and the gap is in the event log (it survives a restart of rgt)."""
    from support.helpers import FIXED_NOW, FixedClock

    root = tmp_path / "p"
    write_project(root, "true", roster=("seed0",))
    clock = FixedClock(FIXED_NOW)
    session = open_session(str(root), clock=clock)
    await create_instance(session, INSTANCE)
    watched = await observe_and_build(session)
    assert not watched.instances[0].estimate and session.db.events(kind="meter_gap") == []
    session.close()

    clock.advance(hours=2)  # rgt closed for two hours
    reopened = open_session(str(root), clock=clock)
    overview = await observe_and_build(reopened)
    box = overview.instances[0]
    assert box.estimate and "not watching" in box.note
    assert box.cost_so_far == pytest.approx(2 * 0.89)  # the sim profile's compute price, for the unwatched hours
    [gap] = reopened.db.events(kind="meter_gap")
    assert gap.detail["start"] == FIXED_NOW.isoformat()
    reopened.close()


async def test_each_roster_cell_is_its_own_training_run(tmp_path: Path) -> None:
    """The wrapper runs seed0 then seed1 into one log; seed1 starts again at step 1 and loss 2.0. Read as one
    series that is a step regression (S65) and a loss spike (S71/S72); read per cell it is neither."""
    root = tmp_path / "p"
    command = "seq 1 300 | awk '{{printf \"step=%d/300 loss=%.4f\\n\", $1, 2.0 * 0.99 ^ $1}}'"
    write_project(root, command, roster=("seed0", "seed1"))
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    await follow_all(session)
    await evaluate_rules(session, RUN, await run_state(session, RUN))
    found = {f.signature for f in session.db.log_findings(RUN)}
    assert not found & {"S65", "S71", "S72"}
    chart = loss_chart(session, RUN)
    assert chart is not None and chart.title.startswith("cell seed1 · ") and "step 300/300" in chart.title
    assert chart.steps[0] == 1.0 and chart.steps[-1] == 300.0 and chart.values[0] == pytest.approx(1.98)
    assert len(session.db.metric_samples(RUN, "loss")) == 600  # both cells are stored
    session.close()

    reopened = open_session(str(root))  # a restarted rgt restores the current cell only
    chart = loss_chart(reopened, RUN)
    assert chart is not None and chart.title.startswith("cell seed1") and chart.steps[-1] == 300.0
    assert list(chart.steps) == sorted(chart.steps) and chart.steps[0] <= 2.0  # one cell only (thinned)
    assert log_monitor(reopened, RUN) is not None and log_monitor(reopened, RUN).progress.current_step == 300
    reopened.close()


async def test_eta_and_cost_to_finish_come_from_the_step_rate(tmp_path: Path) -> None:
    """Steps 1-10 read at t0, steps 11-20 read 20 s later: 2 s a step, 80 steps to go → ETA 160 s, and the
    box's $0.89/h (sim profile) for 160 s is the cost to finish shown on the instances panel and report."""
    from support.helpers import FIXED_NOW, FixedClock

    root = tmp_path / "p"
    write_project(root, "sleep 30", roster=("seed0",))
    clock = FixedClock(FIXED_NOW)
    session = open_session(str(root), clock=clock)
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("running",))
    log = log_on_box(root, session)
    try:
        with log.open("a") as handle:
            handle.writelines(f"step={i}/100 loss={1 / i:.4f}\n" for i in range(1, 11))
        await follow_all(session)
        clock.advance(seconds=20)
        with log.open("a") as handle:
            handle.writelines(f"step={i}/100 loss={1 / i:.4f}\n" for i in range(11, 21))
        await follow_all(session)
        overview = await observe_and_build(session)
        run, box = overview.run(RUN), overview.instance(INSTANCE)
        assert run is not None and box is not None
        assert (run.step, run.total_steps) == (20, 100) and run.eta_s == pytest.approx(160.0)
        assert box.eta_s == pytest.approx(160.0) and box.cost_to_finish == pytest.approx(0.89 * 160 / 3600)
    finally:
        session.close()


async def test_the_tail_others_read_is_replaced_whole_never_changed_in_place(tmp_path: Path) -> None:
    """The rules read the monitor's last lines on the event loop while a poll digests a big chunk in a thread;
    when they iterated the deque the digest extends, the dashboard's worker died of `deque mutated during
    iteration` (bench_log_ingest.py). What they get now is a tuple that a later poll replaces, never changes."""
    session = await launched(tmp_path / "p", "echo 'epoch 1 loss 0.5'; exit 0")
    try:
        await follow_all(session)
        monitor = log_monitor(session, RUN)
        assert monitor is not None
        seen = monitor.tail
        assert isinstance(seen, tuple) and "epoch 1 loss 0.5" in seen
        with log_on_box(tmp_path / "p", session).open("a") as log:
            log.write("epoch 2 loss 0.4\n")
        await follow_all(session)
        assert monitor.tail == (*seen, "epoch 2 loss 0.4")
        assert "epoch 2 loss 0.4" not in seen  # the old one, untouched
    finally:
        session.close()


def test_a_run_that_ended_has_its_log_read_less_often() -> None:
    """A finished or dead run's log grows only when the run is launched again: watchers stat it every 5 s, not every
    0.5 s (issue 29: the poll was a sixth of an idle dashboard's CPU); a run that may be writing is read at once."""
    from remote_gpu_trainer.services.watch.run_logs import LIVE_POLL_S, QUIET_POLL_S, log_poll_interval

    assert [log_poll_interval(state) for state in ("running", "stalled", "unknown", None)] == [LIVE_POLL_S] * 4
    assert [log_poll_interval(state) for state in ("finished", "dead", "not_launched")] == [QUIET_POLL_S] * 3
    assert QUIET_POLL_S > LIVE_POLL_S
