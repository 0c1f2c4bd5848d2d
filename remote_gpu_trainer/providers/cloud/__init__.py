"""Cloud provider API clients (docs/providers.md §2–§6) over one shared HTTP layer.

Each client maps its provider's JSON onto `CloudInstance` and its state words onto INSTANCE_STATES, and
polls after a terminate until the provider itself says the instance is gone. Modules are imported lazily by
callers (`from remote_gpu_trainer.providers.cloud.runpod import RunPodClient`); this package re-exports only
the shared types, errors and helpers.
"""

from __future__ import annotations

from remote_gpu_trainer.providers.cloud.client import CloudClient, TeardownUnconfirmed, UnsupportedAction
from remote_gpu_trainer.providers.cloud.credentials import ApiKey, CredentialsMissing, find_key
from remote_gpu_trainer.providers.cloud.http import (
    CloudAPIError,
    CloudAuthError,
    CloudHTTP,
    CloudNotFound,
    CloudTimeout,
    RetryPolicy,
    redact,
)
from remote_gpu_trainer.providers.cloud.types import (
    CloudInstance,
    GpuRequest,
    Money,
    Residual,
    StorageBilling,
    TeardownOutcome,
    map_state,
)

__all__ = [
    "ApiKey",
    "CloudAPIError",
    "CloudAuthError",
    "CloudClient",
    "CloudHTTP",
    "CloudInstance",
    "CloudNotFound",
    "CloudTimeout",
    "CredentialsMissing",
    "GpuRequest",
    "Money",
    "Residual",
    "RetryPolicy",
    "StorageBilling",
    "TeardownOutcome",
    "TeardownUnconfirmed",
    "UnsupportedAction",
    "find_key",
    "map_state",
    "redact",
]
