"""What every environment-audit row shares (docs/remote-ops.md §4): the statuses, the table's thresholds and
what the run needs (`RunRequirements`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SURVEY_VERSION = "rgt-env-probe/1"

PASS, WARN, FAIL, SKIPPED = "pass", "warn", "fail", "skipped"
_RANK = {PASS: 0, SKIPPED: 0, WARN: 1, FAIL: 2}

USE_WARN_PCT = 85.0
USE_FAIL_PCT = 95.0
BUDGET_PASS_RATIO = 0.8
SCRATCH_RESERVE_BYTES = 2 * 1024**3  # "+ 2 GB" of the checkpoint budget, read as GiB (the larger reserve)
TOP_K_CAP = 3
EXPORT_PER_TEST_CAP = 100
IDLE_MEMORY_RATIO = 0.9
NO_LIMIT_BYTES = 2**60  # cgroup v1 reports "no limit" as a page-rounded 2^63
GPU_BUSY_RATIO = 0.05
CACHE_SHARE_OF_SCRATCH = 0.30
CAPPED_TIER_BYTES = 16 * 1024**3  # *(proposed)*: a filesystem this small is a capped tier (e.g. 5 GB overlay)
CLOCK_SKEW_S = 60.0
HOLDER_MIN_AGE_S = 120
LOOPBACK = ("localhost", "127.0.0.1")
DELAYED_FSTYPES = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "fuse", "fuseblk")
KNOWN_GPU_DAEMONS = frozenset({"nvidia-persistenced", "nvidia-persiste", "nv-hostengine", "dcgm-exporter",
                               "dcgmi", "nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"})


@dataclass(frozen=True)
class RunRequirements:
    """What the run needs; None means "not known", which skips the rows that depend on it."""

    gpus: int = 0                           # 0 = CPU run
    gpu_name: str | None = None             # substring of the product name, case-insensitive
    gpu_memory_mib: float | None = None     # per GPU
    needs_torch: bool = True
    ckpt_bytes: int | None = None           # one checkpoint
    ckpt_source: str = ""                   # where ckpt_bytes came from, said in row 3 (rgt.toml or an estimate)
    kept: int | None = None                 # checkpoints alive at once: see kept_checkpoints()
    data_cache_bytes: int = 0
    log_bytes: int = 0
    workers: int | None = None              # data-loader workers
    worker_ram_bytes: int | None = None     # per worker (the main process counts as one more)
    export_files: int | None = None         # see export_file_count()
    ckpt_tier_survives: bool | None = None  # the profile's answer for the checkpoint dir's mount
    expected_durable_mount: str | None = None
    root_is_ephemeral: bool | None = None   # None: an overlay root is ephemeral, any other root is not
    unprobeable_clocks: Mapping[str, str | None] | None = None  # row 15: name -> the user's answer (None: unknown)
    own_pids: frozenset[int] = frozenset()
    known_daemons: frozenset[str] = KNOWN_GPU_DAEMONS
    capped_tier_bytes: int = CAPPED_TIER_BYTES
    interpreter_why: str = ""               # row 8: why the survey ran this interpreter (see run_interpreter)
    no_proxy_hosts: tuple[str, ...] = LOOPBACK  # row 17: hosts a set proxy must skip (+ the network's mirrors)


def worst_status(statuses: Iterable[str]) -> str:
    return max(statuses, key=lambda s: _RANK[s], default=PASS)
