"""Where a run's files live on its box (docs/remote-ops.md §6): one home for the layout the launch verb writes
and every watcher reads.

The launch verb (services/launch/launch.py) writes it; liveness, recovery notes, host signals, the log
monitor, the manifest builder and the box's ledger read it. Each of those needs the paths, none of them the
verb, so the layout sits below both and imports nothing of the service wings.

On the box, for a run with workdir W and result root R:

- `W/<run.log>`: the run's log; the wrapper appends every cell's output and a `CELL_STARTED` line per cell.
- `R/<cell>/`: one cell's results (what `rgt pull` fetches and the manifest describes).
- `W/.rgt/<run-id>/`, the control folder, beside the work and never inside R (the manifest must stay clean):
  `wrapper.sh`, `launch.json`, `pid`, `pgid`, `pid_start`, `<cell>.exit_code`, `exit_code`, `finished_at`,
  `DONE` (every cell exited 0 and every required artifact exists), `launch.log` (setsid's own output),
  `slurm.out` (a batch job's), and the memory monitor's files (services/launch/guards.py).
"""

from __future__ import annotations

import shlex

from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers.base import Transport

# the names providers/transports/detach.py writes when it starts the wrapper with setsid: the provider layer
# below services owns them, the layout names them here for every reader
from remote_gpu_trainer.providers.transports.detach import LAUNCH_LOG, WRAPPER

__all__ = ["CELL_STARTED", "LAUNCH_JSON", "LAUNCH_LOG", "SLURM_OUT", "WRAPPER", "cell_command", "cell_root",
           "ctl_dir", "log_path", "wrapper_path"]

CELL_STARTED = "== rgt: cell {cell} started"  # the wrapper's marker line: the log monitor starts a new series
LAUNCH_JSON = "launch.json"  # what was launched and when; liveness reads its time as the start
SLURM_OUT = "slurm.out"  # a batch job's stdout and stderr (the wrapper writes the run's own log itself)


def ctl_dir(run: RunConfig) -> str:
    """Control files live beside the work, never inside remote_root (the manifest must stay clean)."""
    return f"{run.workdir.rstrip('/')}/.rgt/{run.id}"


def log_path(run: RunConfig) -> str:
    return f"{run.workdir.rstrip('/')}/{run.log}"


def cell_root(run: RunConfig, cell: str) -> str:
    """One cell's result folder, `remote_root/<cell>`."""
    return f"{run.remote_root.rstrip('/')}/{cell}"


def wrapper_path(run: RunConfig) -> str:
    return f"{ctl_dir(run)}/{WRAPPER}"


def cell_command(run: RunConfig, transport: Transport, cell: str) -> str:
    """The run's command for one cell: `{cell}` the cell id, `{out}` the quoted `remote_root/<cell>`, and
    `{workdir}` the quoted workdir (for tools that write under their current folder: `cd {out} && python
    {workdir}/train.py` keeps Lightning's `lightning_logs/` inside the cell)."""
    out = transport.resolve(cell_root(run, cell))
    workdir = transport.resolve(run.workdir)
    try:
        return run.command.format(cell=cell, out=shlex.quote(out), workdir=shlex.quote(workdir))
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"runs.{run.id}.command: bad placeholder {exc}: only {{cell}}, {{out}} and {{workdir}} are filled in"
        ) from None
