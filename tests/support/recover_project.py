"""A project whose run can be preempted and recovered (tests/services/test_recover.py and
tests/ui/test_auto_recover_ui.py): a real torch trainer that resumes from `{resume}`
(tests/fixtures/resumable_trainer.py) on an interruptible sim box, with `recover` limits; the test preempts it as a
spot box's provider does (SIGTERM to the job's process group)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remote_gpu_trainer.services.instances import create_instance, instance_status
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.session import Session
from remote_gpu_trainer.services.watch.liveness import RunState, run_state
from remote_gpu_trainer.services.watch.watched_state import with_provider_word
from remote_gpu_trainer.state.events import EventKind
from support.helpers import FIXTURES, INSTANCE, RUN, wait_exists, wait_file, write_project

TRAINER = FIXTURES / "resumable_trainer.py"
PERSON = "person:/dev/pts/test"
TEARDOWN_KINDS = (EventKind.TORN_DOWN, EventKind.STOPPED, EventKind.TEARDOWN_UNCONFIRMED)


def project(root: Path, *, restarts: int = 3, apprise: str | None = None) -> Path:
    until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0).isoformat()
    limits = (f'recover = {{ max_price_per_hour = 1.0, max_spend = 25, max_restarts = {restarts}, '
              f'until = "{until}" }}')
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(TRAINER))} {{out}} {{resume}}"
    write_project(root, command, roster=("seed0",), extra_run=limits,
                  instance_body='provider = "sim"\ninterruptible = true')
    if apprise is not None:
        notify_to(root, apprise)
    return root


def notify_to(root: Path, apprise: str) -> None:
    """[notify] through an apprise URL kept in a private file (never in rgt.toml)."""
    secret = root / "apprise.txt"
    secret.write_text(apprise + "\n")
    secret.chmod(0o600)
    with open(root / "rgt.toml", "a", encoding="utf-8") as handle:
        handle.write('\n[notify]\napprise_file = "apprise.txt"\n')


def disk(root: Path) -> Path:
    return root / ".rgt" / "sim" / INSTANCE


def checkpoint(root: Path, step: int) -> Path:
    return disk(root) / "workspace" / "rgt" / RUN / "seed0" / f"ckpt_{step:03d}.pt"


def hold(root: Path, step: int | None) -> None:
    """Make the trainer wait at `step` (None: let it run to the end)."""
    path = disk(root) / "workspace" / "job" / "hold"
    if step is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(step))


def preempt(root: Path) -> None:
    """What a spot box's provider does: SIGTERM to the job's process group; then its exit code is written."""
    ctl = disk(root) / "workspace" / "job" / ".rgt" / RUN
    os.killpg(int(wait_file(ctl / "pgid").strip()), signal.SIGTERM)
    assert wait_file(ctl / "exit_code").strip() == "143"


async def seen_by_watcher(session: Session) -> RunState:
    """The run's state as a watcher reads it: the liveness look with the provider's word."""
    status = await instance_status(session, INSTANCE)
    return with_provider_word(session, RUN, await run_state(session, RUN), status)


async def launched_holding(session: Session, root: Path, at_step: int) -> None:
    """The run launched on a fresh sim box and waiting at `at_step`, its checkpoint of the step before written."""
    await create_instance(session, INSTANCE)
    hold(root, at_step)
    await launch_run(session, RUN)
    wait_exists(checkpoint(root, at_step - 1))


async def launched_and_preempted(session: Session, root: Path, at_step: int = 2) -> RunState:
    await launched_holding(session, root, at_step)
    preempt(root)
    seen = await seen_by_watcher(session)
    assert seen.liveness.detail.startswith("preempted"), seen.liveness
    return seen


def launches(session: Session) -> list[dict[str, object]]:
    return [record.detail for record in session.db.launch_history(RUN)]


def never_torn_down(session: Session) -> None:
    assert [e.kind for e in session.db.events() if e.kind in TEARDOWN_KINDS
            or e.detail.get("action") in ("terminate", "stop")] == []
    assert (disk(session.project.root) / "workspace").is_dir()




def taken_by_provider(root: Path) -> None:
    """What a spot provider does when it reclaims the box for good: the box and its disk are gone, and its API says
    terminated with its own word for why (Lambda's instance status `preempted`)."""
    record_path = root / ".rgt" / "sim" / f"{INSTANCE}.json"
    record = json.loads(record_path.read_text(encoding="utf-8"))
    record.update(state="terminated", raw_state="preempted")
    record_path.write_text(json.dumps(record), encoding="utf-8")
    shutil.rmtree(disk(root))
