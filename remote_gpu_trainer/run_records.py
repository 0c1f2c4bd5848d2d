"""A run's configuration as the state database stores it with each launch and verification, and bound to its launch.

The gate still covers a run after its table left rgt.toml, judged by the configuration it ran and was verified
under (docs/gate.md §7), and a launched run is looked for where its launch put it, whatever rgt.toml says now
("Launch-time bindings"). Kept beside config/project.py, which reads rgt.toml, so that module stays about reading it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from remote_gpu_trainer.config.project import Metric, RunConfig

# Where a launched run's files and processes are (docs/gate.md §7, "Launch-time bindings"): frozen by each
# launch, so an edit of these keys in rgt.toml is drift that applies to the next launch only.
LOCATION_KEYS = ("instance", "workdir", "log", "command", "remote_root", "roster", "cache_dir")


@dataclass(frozen=True)
class LocationDrift:
    """A location key whose value in rgt.toml differs from the one the run's latest launch used."""

    key: str
    launched: str | tuple[str, ...] | None
    now: str | tuple[str, ...] | None


def run_config_record(run: RunConfig) -> dict[str, Any]:
    """A run's configuration as JSON, stored with each launch and verification: the gate still covers a
    run after its table left rgt.toml, judged by the configuration it ran and was verified under. `location_drift` is
    written only when there is some (a verification of a run whose rgt.toml table moved since its launch); the
    recovery limits never are."""
    record = asdict(run)
    if not run.location_drift:
        del record["location_drift"]
    del record["recover"]  # rgt.toml's say now, bound by its approval (config/recover.py), not the launch's
    return record


def run_config_from_record(record: dict[str, Any]) -> RunConfig | None:
    """The RunConfig a record holds, or None when it is not one (an old database's empty record)."""
    try:
        values = dict(record)
        metric = values.get("metric")
        values["metric"] = Metric(**metric) if isinstance(metric, dict) else None
        values["location_drift"] = tuple(LocationDrift(item["key"], _tupled(item["launched"]), _tupled(item["now"]))
                                         for item in values.get("location_drift", ()))
        for name, value in list(values.items()):
            if isinstance(value, list):
                values[name] = tuple(value)
        return RunConfig(**values)
    except (TypeError, ValueError, KeyError):
        return None


def _tupled(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def bind_to_launch(current: RunConfig, launched: RunConfig | None) -> RunConfig:
    """The run as rgt.toml states it (`current`), with the location keys its latest launch used
    (`launched`, from the launch log) and a LocationDrift for each one rgt.toml now sets otherwise: liveness, logs,
    pull, verify and the gate look where the job really is (docs/gate.md §7, "Launch-time bindings"). A run
    never launched (or launched before the launch log kept configurations) is `current` as it is."""
    if launched is None:
        return current
    drift = tuple(LocationDrift(key, getattr(launched, key), getattr(current, key)) for key in LOCATION_KEYS
                  if getattr(launched, key) != getattr(current, key))
    bound: dict[str, Any] = {item.key: item.launched for item in drift}
    return replace(current, location_drift=drift, **bound)
