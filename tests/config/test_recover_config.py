"""rgt.toml `runs.<id>.recover` (config/recover.py, docs/remote-ops.md §10.1): the limits recovery works within,
strict at load, every problem naming its key; never part of a launch's record or of the evidence configuration,
so editing a limit asks for a new approval and never closes the gate."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.gate import config_sha256
from remote_gpu_trainer.config.project import load_project
from remote_gpu_trainer.config.recover import RecoverLimits
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.run_records import run_config_from_record, run_config_record
from support.helpers import write_project

GOOD = ('recover = { max_price_per_hour = 0.6, max_spend = 25, max_restarts = 3, until = 2026-12-10T08:00:00Z, '
        'gpus = ["RTX 4090", "RTX A5000"] }')


def test_the_limits_load_with_their_offset(tmp_path: Path) -> None:
    run = load_project(write_project(tmp_path / "p", extra_run=GOOD)).run("r1")
    assert run.recover == RecoverLimits(0.6, 25.0, 3, datetime(2026, 12, 10, 8, tzinfo=UTC), ("RTX 4090", "RTX A5000"))
    as_text = GOOD.replace("2026-12-10T08:00:00Z", '"2026-12-10T09:00:00+01:00"').replace(
        ', gpus = ["RTX 4090", "RTX A5000"]', "")
    other = load_project(write_project(tmp_path / "q", extra_run=as_text)).run("r1").recover
    assert other is not None and other.until == datetime(2026, 12, 10, 9, tzinfo=timezone(timedelta(hours=1)))
    assert other.until == run.recover.until and other.gpus == ()  # the same moment; the run's own GPU class
    assert load_project(write_project(tmp_path / "r")).run("r1").recover is None  # absent: nothing recovers


@pytest.mark.parametrize(("table", "problem"), [
    ("recover = { max_spend = 5, max_restarts = 1, until = 2026-12-10T08:00:00Z }",
     "runs.r1.recover.max_price_per_hour: missing required key"),
    ("recover = { max_price_per_hour = 0, max_spend = 5, max_restarts = 1, until = 2026-12-10T08:00:00Z }",
     "runs.r1.recover.max_price_per_hour: must be a price per hour > 0"),
    ("recover = { max_price_per_hour = 1, max_spend = inf, max_restarts = 1, until = 2026-12-10T08:00:00Z }",
     "runs.r1.recover.max_spend: must be an amount > 0"),
    ("recover = { max_price_per_hour = 1, max_spend = 5, max_restarts = 0, until = 2026-12-10T08:00:00Z }",
     "runs.r1.recover.max_restarts: must be a whole number of restarts >= 1"),
    ("recover = { max_price_per_hour = 1, max_spend = 5, until = 2026-12-10T08:00:00Z }",
     "runs.r1.recover.max_restarts: is required"),
    ("recover = { max_price_per_hour = 1, max_spend = 5, max_restarts = 1, until = 2026-12-10T08:00:00 }",
     "runs.r1.recover.until: must be a date and time with its offset"),
    ("recover = { max_price_per_hour = 1, max_spend = 5, max_restarts = 1, until = \"tomorrow\" }",
     "runs.r1.recover.until: must be a date and time with its offset"),
    ("recover = { max_price_per_hour = 1, max_spend = 5, max_restarts = 1, until = 2026-12-10T08:00:00Z, "
     "max_price = 3 }", "runs.r1.recover.max_price: unknown key (did you mean 'max_spend'?)"),
    ('recover = "yes"', "runs.r1.recover: must be a table"),
])
def test_each_problem_names_its_key(tmp_path: Path, table: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_project(write_project(tmp_path / "p", extra_run=table))
    assert problem in str(raised.value)


def test_the_limits_are_neither_a_launch_record_nor_evidence_configuration(tmp_path: Path) -> None:
    """A launch records the run's configuration as JSON (run_records.py): the limits are rgt.toml's say now, bound
    by their approval, so they stay out of it (a TOML date-time is not JSON either), and editing one never makes
    the gate ask for a new verification."""
    with_limits = load_project(write_project(tmp_path / "p", extra_run=GOOD)).run("r1")
    without = load_project(write_project(tmp_path / "q")).run("r1")
    record = run_config_record(with_limits)
    assert "recover" not in record and record == run_config_record(without)
    assert run_config_from_record(record) == without
    assert config_sha256(with_limits) == config_sha256(without)
