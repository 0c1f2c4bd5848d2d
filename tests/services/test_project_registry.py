"""The registry of opened projects: opening a project records it; concurrent writers lose no entry."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

from remote_gpu_trainer.services import project_registry
from remote_gpu_trainer.services.opening import open_session


def test_opening_a_project_records_it(project_dir: Path) -> None:
    session = open_session(str(project_dir))
    session.close()
    known = project_registry.known_projects()
    assert [k.root for k in known] == [project_dir.resolve()]
    assert known[0].present
    data = json.loads(project_registry.registry_path().read_text())
    assert data["schema"] == "rgt-projects/v1"
    assert oct(project_registry.registry_path().stat().st_mode & 0o777) == "0o600"


def test_a_moved_project_is_shown_as_gone_not_dropped(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "rgt.toml").write_text("")
    assert project_registry.remember(root)
    (root / "rgt.toml").unlink()
    [entry] = project_registry.known_projects()
    assert entry.root == root.resolve() and not entry.present
    assert project_registry.forget(root) and project_registry.known_projects() == []
    assert not project_registry.forget(root)


def _remember_many(state_home: str, base: str, worker: int) -> None:
    os.environ["XDG_STATE_HOME"] = state_home
    for i in range(20):
        project_registry.remember(Path(base) / f"w{worker}-{i}")


def test_two_processes_writing_at_once_lose_no_entry(tmp_path: Path) -> None:
    state_home = os.environ["XDG_STATE_HOME"]
    procs = [multiprocessing.get_context("spawn").Process(target=_remember_many, args=(state_home, str(tmp_path), w))
             for w in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert len(project_registry.known_projects()) == 60


def test_a_garbled_registry_reads_as_empty_and_is_rewritten(tmp_path: Path) -> None:
    path = project_registry.registry_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert project_registry.known_projects() == []
    assert project_registry.remember(tmp_path)
    assert [k.root for k in project_registry.known_projects()] == [tmp_path.resolve()]


def test_a_project_opened_again_within_a_day_is_not_rewritten(tmp_path: Path) -> None:
    """The registry is rewritten (fsync and all) when a project is new to it or its stamp is a day old, not on
    every open: that write was ~8 ms of each `rgt --report`."""
    from datetime import UTC, datetime, timedelta

    first = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    assert project_registry.remember(tmp_path, clock=lambda: first)
    path = project_registry.registry_path()
    written = (path.stat().st_ino, path.stat().st_mtime_ns)
    assert project_registry.remember(tmp_path, clock=lambda: first + timedelta(hours=23))
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == written  # left as it was
    assert [k.last_opened for k in project_registry.known_projects()] == ["2026-12-07T09:00:00Z"]
    assert project_registry.remember(tmp_path, clock=lambda: first + timedelta(days=1))
    assert [k.last_opened for k in project_registry.known_projects()] == ["2026-12-08T09:00:00Z"]
    assert project_registry.remember(tmp_path, clock=lambda: first)  # a stamp from the future is not fresh
    assert [k.last_opened for k in project_registry.known_projects()] == ["2026-12-07T09:00:00Z"]
    path.write_text(path.read_text().replace("2026-12-07T09:00:00Z", "not a time"))
    assert project_registry.remember(tmp_path, clock=lambda: first)
    assert [k.last_opened for k in project_registry.known_projects()] == ["2026-12-07T09:00:00Z"]
