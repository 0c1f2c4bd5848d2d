"""Provider name → implementation, read from the provider table (providers/table.py): a row's `builder` names the
callable that builds it. A row without one is a name rgt.toml may use that this version cannot drive.

Imports are lazy: asyncssh and its crypto take longer to import than the whole dashboard takes to draw,
and a project on the embedded `sim` box never needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.providers.base import Provider
from remote_gpu_trainer.providers.table import ProviderRow

# How a row's builder is called (each provider module has one, named by its row).
Builder = Callable[[ProviderRow, InstanceConfig, Path, Clock], Provider]


def load_dotted(dotted: str) -> Any:
    """The attribute a "module:attribute" string of the provider table names, its module imported now."""
    module, _, attribute = dotted.partition(":")
    return getattr(importlib.import_module(module), attribute)


def provider_for(instance: InstanceConfig, state_dir: Path, clock: Clock = utc_now) -> Provider:
    """The provider an instance entry names. Callers hold it as a Provider and ask what else it can do with
    isinstance against the capability protocols of providers.base (Creatable, WaitsGone, BatchJobs)."""
    row = table.find(instance.provider)
    if row is None or row.builder is None:
        raise ConfigError(
            f"instances.{instance.name}: provider {instance.provider!r} is not available in this version of rgt "
            f"(available: {', '.join(table.available())})"
        )
    builder: Builder = load_dotted(row.builder)
    return builder(row, instance, state_dir, clock)

