"""State that survives versions and damage: the schema ladder, a newer database refused, a damaged one a
one-line error (exit 2) that keeps the gate closed, and a read-only project folder that still reports."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import StateError
from remote_gpu_trainer.state import migrations as state
from remote_gpu_trainer.state.db import StateDB
from remote_gpu_trainer.state.migrations import SCHEMA_VERSION
from support.helpers import INSTANCE, RUN, write_project
from support.helpers import run_rgt as rgt


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rgt: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def version_one_database(path: Path) -> None:
    """A database as the first rgt wrote it: schema 1, a launch and a successful verification."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(state._SCHEMA)
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO launches (run_id, instance, at, detail) VALUES ('r1', 'box', "
                 "'2026-11-01T10:00:00+00:00', '{\"pid\": 42}')")
    conn.execute("INSERT INTO verification_records (at, run_id, ok, manifest_sha256, errors, files) VALUES "
                 "('2026-11-01T11:00:00+00:00', 'r1', 1, ?, '[]', '[]')", ("a" * 64,))
    conn.execute("INSERT INTO file_hashes (path, size, mtime_ns, inode, sha256) VALUES ('/x', 1, 2, 3, ?)",
                 ("b" * 64,))
    conn.commit()
    conn.close()


def test_a_version_one_database_climbs_the_ladder_and_keeps_its_history(tmp_path: Path) -> None:
    path = tmp_path / ".rgt" / "state.db"
    version_one_database(path)
    db = StateDB(path)
    try:
        version = db._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        assert int(version) == SCHEMA_VERSION
        [launch] = db.launch_history("r1")
        assert (launch.run_id, launch.instance, launch.box, launch.detail) == ("r1", "box", None, {"pid": 42})
        record = db.last_verification_record("r1")
        assert record is not None and record.ok and record.marker_sha256 is None and record.config_sha256 is None
        columns = [row[1] for row in db._conn.execute("PRAGMA table_info(file_hashes)")]
        assert "ctime_ns" in columns
        assert db._conn.execute("SELECT COUNT(*) FROM file_hashes").fetchone()[0] == 0, "an mtime-keyed cache goes"
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db._conn.execute("DELETE FROM launch_log")
    finally:
        db.close()
    again = StateDB(path)  # opening an up-to-date database changes nothing
    assert len(again.launch_history()) == 1
    again.close()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "proj"
    write_project(root)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield root


def test_a_database_from_a_newer_rgt_is_refused_naming_both_versions(project: Path) -> None:
    assert rgt("up", RUN, cwd=project).returncode == 0
    db = project / ".rgt" / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    for args in (("--report",), ("events",), ("down", RUN, "--confirm", "sim-box")):
        result = rgt(*args, cwd=project)
        assert result.returncode == 2, (args, result.stderr)
        line = one_line_error(result)
        assert str(db) in line and "schema 99" in line and f"up to {SCHEMA_VERSION}" in line
    assert (project / ".rgt" / "sim" / INSTANCE).is_dir(), "the box survives: the gate stays closed"
    with pytest.raises(StateError):
        StateDB(db)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_database_is_one_line_naming_its_path_and_the_gate_stays_closed(project: Path, damage: str) -> None:
    assert rgt("up", RUN, cwd=project).returncode == 0
    db = project / ".rgt" / "state.db"
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if damage == "garbage":
        db.write_bytes(b"this is not an SQLite database at all" * 200)
    else:
        data = db.read_bytes()
        db.write_bytes(data[:100] + b"\0" * (len(data) - 100))
    for args in (("--report",), ("events",), ("down", RUN, "--confirm", "sim-box"), ("pull", RUN)):
        result = rgt(*args, cwd=project)
        assert result.returncode == 2, (args, result.returncode, result.stderr)
        line = one_line_error(result)
        assert str(db) in line and "damaged or unreadable" in line
    assert (project / ".rgt" / "sim" / INSTANCE).is_dir()


@pytest.fixture
def read_only_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real project on a tmpfs that is then remounted read-only (root can write nowhere on it)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True)
    try:
        root = mount / "proj"
        write_project(root)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        yield root
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_read_only_project_folder_still_reports_and_lists_events(read_only_project: Path) -> None:
    project = read_only_project
    assert rgt("up", RUN, cwd=project).returncode == 0
    events_before = rgt("events", cwd=project).stdout
    subprocess.run(["mount", "-o", "remount,ro", str(project.parent)], check=True)
    with pytest.raises(OSError):
        (project / "probe").write_text("x")

    report = rgt("--report", "--format", "json", cwd=project)
    assert report.returncode == 0, report.stderr
    data = json.loads(report.stdout)
    assert data["project"] == "test-project" and data["instances"][0]["name"] == INSTANCE
    events = rgt("events", cwd=project)
    assert events.returncode == 0 and events.stdout == events_before
    for args in (("pull", RUN), ("down", RUN, "--confirm", "sim-box")):
        result = rgt(*args, cwd=project)
        assert result.returncode == 2, (args, result.stderr)
        assert "read-only" in one_line_error(result)
    assert (project / ".rgt" / "sim" / INSTANCE).is_dir()


def test_a_deleted_state_database_does_not_open_the_gate(project: Path) -> None:
    """rgt's memory is not the evidence: with the launch log gone, the results on the box still count."""
    assert rgt("up", RUN, cwd=project).returncode == 0
    assert rgt("run", RUN, cwd=project).returncode == 0
    assert rgt("watch", RUN, "--interval", "0.2", cwd=project).returncode == 0
    for suffix in ("", "-wal", "-shm"):
        Path(f"{project / '.rgt' / 'state.db'}{suffix}").unlink(missing_ok=True)
    refused = rgt("down", RUN, "--confirm", "sim-box", cwd=project)
    assert refused.returncode == 3, refused.stderr
    assert "no PULL_VERIFIED.json" in refused.stderr
    assert (project / ".rgt" / "sim" / INSTANCE / "workspace" / "rgt" / RUN / "seed0" / "best.pth").is_file()


@pytest.mark.parametrize("args", [
    ("audit",), ("tick", RUN, "T01", "--note", "checked"), ("finding", "F-000001", "--waive", "--note", "n"),
    ("splits", "build", "main", "--split", "train=data"), ("accept", RUN, "--here"), ("probe", RUN, "V20"),
])
def test_a_verb_that_records_is_refused_in_a_read_only_folder_not_silently_lost(
        read_only_project: Path, args: tuple[str, ...]) -> None:
    """A tick, an audit, a finding's move, a split manifest, an acceptance or a probe answer written nowhere would
    be a success that is not one: refused with exit 2 and one line, before anything runs."""
    project = read_only_project
    (project / "data").mkdir()
    (project / "data" / "a.bin").write_bytes(b"x")
    assert rgt("up", RUN, cwd=project).returncode == 0
    subprocess.run(["mount", "-o", "remount,ro", str(project.parent)], check=True)
    result = rgt(*args, cwd=project)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is read-only" in one_line_error(result)
