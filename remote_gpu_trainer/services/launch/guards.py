"""What the job wrapper adds for the host rules (docs/remote-ops.md §11): the memory monitor it runs in the
background from before the first cell to after the last, and the disk-budget gate before each cell.

The gate exists because a cell that starts on a nearly full disk fails hours later, at its first checkpoint,
having billed the whole way: free bytes on the result root's mount must cover the cell's budget, or the cell
is not started and the run ends with the gate's own exit status, DISK_GATE_EXIT.
"""

from __future__ import annotations

import importlib.resources
import shlex

from remote_gpu_trainer.audits.liveness import DISK_GATE_EXIT  # EX_TEMPFAIL: the cell was not started
from remote_gpu_trainer.config.project import RunConfig
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.state.db import StateDB

MEM_INTERVAL_S = 5  # seconds between the memory monitor's rows
MEM_MONITOR = "mem_monitor.py"
DEFAULT_BUDGET_FACTOR = 1.2  # without runs.<id>.disk_budget: the previous cell's output size × this


def mem_monitor_source() -> bytes:
    return importlib.resources.files("remote_gpu_trainer.remote").joinpath(MEM_MONITOR).read_bytes()


def mem_monitor_start(run: RunConfig) -> list[str]:
    """Start the memory monitor beside the cells; it exits on `mem.stop` or when the wrapper is gone."""
    return [f'{shlex.quote(run.python)} "$CTL/{MEM_MONITOR}" monitor "$CTL" {MEM_INTERVAL_S} '
            "</dev/null >/dev/null 2>&1 &"]


def mem_monitor_stop() -> list[str]:
    return ['touch "$CTL/mem.stop"']


def disk_gate(run: RunConfig, transport: Transport, cell: str) -> list[str]:
    """Bash lines run before `cell` starts: refuse it (exit DISK_GATE_EXIT) when the free bytes on the result
    root's mount are below its budget: `disk_budget` when set (0: no gate), else the previous cell's output
    folder × 1.2, else (the first cell) no gate. A free size df cannot tell is unknown, and does not refuse."""
    q = shlex.quote
    root = run.remote_root.rstrip("/") or "/"
    index = run.roster.index(cell)
    if run.disk_budget == 0 or (run.disk_budget is None and index == 0):
        return []
    if run.disk_budget is not None:
        need = [f"  need={run.disk_budget}"]
    else:
        previous = q(transport.resolve(f"{root}/{run.roster[index - 1]}"))
        need = [f"  prev=$(du -sk {previous} 2>/dev/null | cut -f1)",
                '  case "$prev" in ""|*[!0-9]*) prev=0;; esac',
                "  need=$(( prev * 12288 / 10 ))"]  # KiB × 1024 × 1.2
    where = q(transport.resolve(root))
    return [
        'if [ "$rc" -eq 0 ]; then',
        *need,
        f"  root={where}",
        '  d="$root"',
        '  while [ ! -d "$d" ]; do d=$(dirname "$d"); done',
        "  free=$(df -Pk \"$d\" 2>/dev/null | awk 'NR==2 {print $4}')",
        '  case "$free" in ""|*[!0-9]*) free="";; esac',
        '  if [ -n "$free" ] && [ "$need" -gt $(( free * 1024 )) ]; then',
        f'    echo {DISK_GATE_EXIT} > "$CTL/{cell}.exit_code"',
        f'    echo "== rgt: cell {cell} not started: disk budget $need bytes exceeds the $(( free * 1024 )) bytes '
        f'free on the mount of $root (exit {DISK_GATE_EXIT})" >> "$LOG"',
        f"    rc={DISK_GATE_EXIT}",
        "  fi",
        "fi",
    ]


def relaunch_detail(db: StateDB, run_id: str) -> dict[str, int]:
    """For a launch of a run id launched before: the step its series had reached (`step_before` in the launch
    record), read before the new launch clears the series; S65 compares the relaunch's first step with it."""
    if db.launch(run_id) is None:
        return {}
    steps = [s.step for key in db.metric_keys(run_id) for s in db.metric_samples(run_id, key, last=1)
             if s.step is not None and not s.approx_step]
    return {"step_before": max(steps)} if steps else {}
