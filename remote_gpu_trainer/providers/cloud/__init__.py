"""Cloud provider API clients (docs/providers.md §2–§6) over one shared HTTP layer.

Each client maps its provider's JSON onto `CloudInstance` and its state words onto INSTANCE_STATES, and
polls after a terminate until the provider itself says the instance is gone. Modules are imported lazily by
callers (`from remote_gpu_trainer.providers.cloud.runpod import RunPodClient`); this package re-exports nothing,
so importing one module (the log monitor's key scrubber in credentials.py) never loads httpx.
"""
