"""Where a launched run's files and processes are: its launch's bindings, never the current rgt.toml alone.

Each launch records the run's whole configuration in the append-only launch log (state/launches.py). The
location keys (run_records.LOCATION_KEYS: instance, workdir, log, command, remote_root, roster, cache_dir) are read
from the latest launch, so editing `workdir` while the job runs does not make liveness read another control
folder, nor pull take half-written results as finished ones (docs/gate.md §7, "Launch-time bindings"). What
rgt.toml now says otherwise is the run's `location_drift`, shown to the user, and applies to the next launch only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
from remote_gpu_trainer.run_records import bind_to_launch, run_config_from_record
from remote_gpu_trainer.state.db import StateDB

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session


def run_config(session: Session, run_id: str) -> RunConfig:
    """Where the run's files and processes are: rgt.toml's table with the location keys its latest launch
    bound; what rgt.toml now says otherwise is its `location_drift`. Launching reads `project.run` (rgt.toml
    as it is) instead: a new launch binds the next job."""
    return bound_run_config(session.project, session.db, run_id)


def bound_run_config(project: ProjectConfig, db: StateDB, run_id: str) -> RunConfig:
    """The run's table in rgt.toml with its location keys as its latest launch bound them (raises
    ConfigError for a run rgt.toml does not name, as `project.run` does). A new launch reads
    `project.run` instead: it binds the next job to rgt.toml as it is."""
    current = project.run(run_id)
    launched = launched_config(db, run_id)
    if launched is not None and launched.instance not in project.instances:
        # the entry that reached its box left rgt.toml: no box can be asked through it, so the run is looked
        # for through the entry rgt.toml names (the gate still covers the old box by its launch log)
        launched = replace(launched, instance=current.instance)
    return bind_to_launch(current, launched)


def launched_config(db: StateDB, run_id: str) -> RunConfig | None:
    """The configuration of the run's latest launch; None when it was never launched (or before schema 2)."""
    record = db.last_launch_config(run_id)
    return run_config_from_record(record) if record else None
