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

__all__ = ["CELL_STARTED", "CHECKPOINT_NAMES", "LAUNCH_JSON", "LAUNCH_LOG", "RESUME_VAR", "SLURM_OUT", "WRAPPER",
           "cell_command", "cell_root", "ctl_dir", "log_path", "resume_lines", "wrapper_path"]

CELL_STARTED = "== rgt: cell {cell} started"  # the wrapper's marker line: the log monitor starts a new series
LAUNCH_JSON = "launch.json"  # what was launched and when; liveness reads its time as the start
SLURM_OUT = "slurm.out"  # a batch job's stdout and stderr (the wrapper writes the run's own log itself)
# What a checkpoint is called, for the newest one the liveness look ages (services/watch/liveness.py, whose script
# names the same patterns) and the one `{resume}` names.
CHECKPOINT_NAMES = ("*.pth", "*.pt", "*.ckpt", "*.safetensors")
RESUME_VAR = "RGT_RESUME"  # the wrapper's variable behind `{resume}`: the newest checkpoint in the cell's root


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
    """The run's command for one cell: `{cell}` the cell id, `{out}` the quoted `remote_root/<cell>`,
    `{workdir}` the quoted workdir (for tools that write under their current folder: `cd {out} && python
    {workdir}/train.py` keeps Lightning's `lightning_logs/` inside the cell), and `{resume}` the newest checkpoint
    in the cell's root as the cell starts, quoted, or an empty argument when there is none (resume_lines)."""
    out = transport.resolve(cell_root(run, cell))
    workdir = transport.resolve(run.workdir)
    try:
        return run.command.format(cell=cell, out=shlex.quote(out), workdir=shlex.quote(workdir),
                                  resume=f'"${RESUME_VAR}"')
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"runs.{run.id}.command: bad placeholder {exc}: only {{cell}}, {{out}}, {{workdir}} and {{resume}} are "
            "filled in"
        ) from None


def resume_lines(run: RunConfig, transport: Transport, cell: str) -> list[str]:
    """The wrapper's lines that set `{resume}` for a cell, when the command names it: the newest checkpoint under the
    cell's result root by modification time, found on the box when the cell starts (so a relaunch after a
    preemption, on the same box or on one its checkpoint was pushed to, resumes from it), empty when there is none.
    The path never passes through rgt: it goes from find to the command in a quoted variable."""
    if "{resume}" not in run.command:
        return []
    out = shlex.quote(transport.resolve(cell_root(run, cell)))
    pick = "awk 'NR == 1 || $1 > t { t = $1; p = $0 } END { sub(/^[^ ]* /, \"\", p); print p }'"
    return [f"  {RESUME_VAR}=$({checkpoint_find(out)} | {pick})", f"  export {RESUME_VAR}"]


def checkpoint_find(folder: str) -> str:
    """The find that lists every checkpoint under `folder` (a shell word, already quoted) as `MTIME PATH` lines:
    one definition of what a checkpoint is on the box, for `{resume}` and for the copy kept home
    (services/recover/checkpoint_home.py)."""
    names = " -o ".join(f"-name {shlex.quote(name)}" for name in CHECKPOINT_NAMES)
    return f"find {folder} -type f \\( {names} \\) -printf '%T@ %p\\n' 2>/dev/null"
