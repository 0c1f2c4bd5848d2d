"""A job log that prints a provider key rgt knows: redacted before it is stored, shown or reported.

A real sim run cats a real log file holding the key (as `env` or a config dump would print it) in a metric
line, an error line that fires a signature, a line cut mid-key and a progress bar. The key is configured
the way a user does it: the provider's env var (monkeypatch.setenv) or the provider CLI's credential file
under HOME. Afterwards the key, and its first and last 12 characters, are searched for in the state
database's bytes (with its WAL), the lines and the partial line the monitor returned, the alerts, and every
report format. The log on the box is shown to hold the key, so a run that never saw it cannot pass.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from remote_gpu_trainer.report import render
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from remote_gpu_trainer.services.overview import observe_and_build
from remote_gpu_trainer.services.watch.run_logs import follow_log, log_backfill
from support.helpers import INSTANCE, RUN, wait_for_liveness, write_project

KEY = "rgtlogKEY-4c9e1f7a2b8d6035e1a9c7f2"
NEEDLES = (KEY, KEY[:12], KEY[-12:])
LOG = (
    "step=1 loss=2.000 lr=0.001\n"
    f"RUNPOD_API_KEY={KEY} step=2 loss=1.900\n"
    f"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (debug: key {KEY})\n"
    f"config dump: api_key='{KEY[:20]}\n"  # cut mid-key, as a truncated line would be
    f"step=3 loss=1.800\n"
    f"progress {KEY} 50%|#####     | 5/10"  # no newline: the live progress bar
)


def leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [needle for needle in NEEDLES if needle.encode() in data]


@pytest.fixture(params=["env", "cli-file"])
def key_configured(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in ("RUNPOD_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "PAPERSPACE_API_KEY", "AUTODL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    if request.param == "env":
        monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    else:
        (home / ".runpod").mkdir(parents=True)
        (home / ".runpod" / "config.toml").write_text(f'apiKey = "{KEY}"\n', encoding="utf-8")
    return str(request.param)


async def test_a_key_in_the_job_log_is_never_stored_shown_or_reported(tmp_path: Path, key_configured: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(LOG, encoding="utf-8")
    root = tmp_path / "p"
    write_project(root, f"cat {shlex.quote(str(log))}; exit 1", roster=("seed0",))
    session = open_session(str(root))
    await create_instance(session, INSTANCE)
    await launch_run(session, RUN)
    await wait_for_liveness(session, states=("finished", "dead"))
    box_log = next((root / ".rgt" / "sim").rglob("train.log"))
    assert leaks(box_log.read_bytes()), "the job must really have printed the key"

    update = await follow_log(session, RUN)
    assert update is not None
    texts = [line.text for line in update.lines]
    assert any("CUDA out of memory" in t for t in texts) and any("<redacted>" in t for t in texts)
    assert leaks("\n".join(texts)) == [] and leaks(update.partial) == []
    assert leaks(" ".join(f"{a.title} {a.message}" for a in update.alerts)) == []
    assert any(a.signature == "S01" for a in update.alerts)  # the line still fired its signature
    assert [s.value for s in session.db.metric_samples(RUN, "loss")] == [2.0, 1.9, 1.8]  # metrics still parse

    monitor_backfill = await log_backfill(session, RUN)  # what a freshly opened log view shows
    assert monitor_backfill and leaks("\n".join(line.text for line in monitor_backfill)) == []
    overview = await observe_and_build(session)
    reports = [render(overview, fmt) for fmt in ("text", "markdown", "json")]
    assert all("CUDA out of memory" in report for report in reports)
    assert leaks("".join(reports)) == []
    await session.close_transports()
    session.close()

    state = [p for p in (root / ".rgt").iterdir() if p.name.startswith("state.db")]
    assert state and all(leaks(p.read_bytes()) == [] for p in state)
