"""`slurm`: a Slurm cluster reached on its login node. Instance = the login node; runs are sbatch jobs.

The login node is `host` over SSH, or this machine when no host is given (a workstation that is itself a
login node, or the loopback cluster of the tests). There is no box to tear down: the cluster's storage
outlives every job, and ending a job is `scancel` (providers/slurm.py), not an instance action. The batch-job
verbs (BatchJobs) are sbatch, squeue/sacct and scancel over the login node's transport (commands.py).
"""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.clock import Clock, utc_now
from remote_gpu_trainer.config.project import InstanceConfig
from remote_gpu_trainer.errors import RgtError, TransportError
from remote_gpu_trainer.profiles import Profile, load_profile
from remote_gpu_trainer.providers import table
from remote_gpu_trainer.providers.base import BatchJobs, InstanceStatus, JobState, Provider, Transport
from remote_gpu_trainer.providers.slurm import commands
from remote_gpu_trainer.providers.table import ProviderRow
from remote_gpu_trainer.providers.transports.local import LocalTransport
from remote_gpu_trainer.providers.transports.ssh import SSHTransport
from remote_gpu_trainer.providers.transports.ssh_hostkeys import HostKeyUnknown
from remote_gpu_trainer.providers.transports.ssh_pool import SSHPool, SSHSettings

REACH_TIMEOUT_S = 15.0


class SlurmProvider(Provider, BatchJobs):
    name = "slurm"

    def __init__(self, state_dir: Path, clock: Clock = utc_now) -> None:
        self.clock = clock
        self.settings = SSHSettings(known_hosts_file=state_dir / "known_hosts")
        self.pool = SSHPool()
        self.profile: Profile = load_profile("slurm")

    def transport(self, instance: InstanceConfig) -> Transport:
        if instance.host and instance.host not in table.HERE_HOSTS:
            return SSHTransport(instance.host, self.settings, self.pool)
        return LocalTransport(root=None)

    def provider_id(self, instance: InstanceConfig) -> str:
        return instance.id or instance.host or "localhost"

    async def get(self, instance: InstanceConfig) -> InstanceStatus:
        """The login node answers `sinfo` (running) or not (unknown); a cluster is never `terminated`."""
        price = instance.price_per_hour
        detail: dict[str, object] = {}
        try:
            result = await self.transport(instance).run("sinfo --noheader --format=%P", timeout=REACH_TIMEOUT_S)
            state = "running" if result.rc == 0 else "unknown"
            if result.rc != 0:
                detail["error"] = f"sinfo failed: {result.error_text.strip()[:200]}"
        except HostKeyUnknown as exc:
            state, detail = "unknown", {"error": str(exc), "host_key_unknown": exc}
        except (TransportError, OSError, TimeoutError) as exc:
            state, detail = "unknown", {"error": str(exc)}
        return InstanceStatus(
            name=instance.name, provider=self.name, provider_id=self.provider_id(instance), state=state,
            gpu="cluster", price_per_hour=price, price_source="user" if price is not None else "none",
            detail=detail,
        )

    async def list_instances(self) -> list[InstanceStatus]:
        return []

    async def stop(self, instance: InstanceConfig) -> None:
        raise RgtError(f"{instance.name}: a Slurm cluster has nothing to stop; cancel a job with scancel")

    async def terminate(self, instance: InstanceConfig) -> None:
        raise RgtError(f"{instance.name}: a Slurm cluster has nothing to tear down; its storage outlives jobs")

    async def close(self) -> None:
        await self.pool.close_all()

    # -- batch jobs ---------------------------------------------------------------------------------------

    async def submit_job(self, transport: Transport, script_path: str, *, job_name: str, workdir: str,
                         output: str) -> str:
        return await commands.submit(transport, script_path, job_name=job_name, workdir=workdir, output=output)

    async def job_state(self, transport: Transport, job_id: str) -> JobState:
        """Slurm's answer in the generic words of providers.base (commands.liveness_of maps them)."""
        job = await commands.job_state(transport, job_id)
        state, detail = commands.liveness_of(job)
        return JobState("Slurm", job.job_id, state, detail, known=bool(job.state), walltime=job.walltime())

    async def cancel_job(self, transport: Transport, job_id: str) -> None:
        await commands.cancel(transport, job_id)


def build(row: ProviderRow, instance: InstanceConfig, state_dir: Path, clock: Clock) -> SlurmProvider:
    """The `slurm` row's builder (providers/table.py)."""
    return SlurmProvider(state_dir, clock)
