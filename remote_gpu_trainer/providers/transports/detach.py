"""Detached launch on any transport: upload the wrapper, start it with `setsid -f`, read back its pid.

Built only on `put_bytes` and `run`, so the local and SSH transports launch the same way (docs/remote-ops.md §6):
all three descriptors redirected (or the channel stays open until the job ends), the wrapper in a new
session so it survives the TUI, the connection and rgt itself.
"""

from __future__ import annotations

import asyncio
import shlex

from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.base import Transport

PID_WAIT_S = 10.0
WRAPPER = "wrapper.sh"  # the job wrapper, in the run's control folder (services/box_layout.py)
LAUNCH_LOG = "launch.log"  # what setsid's own descriptors write there: why a wrapper never wrote its pid


def detached_command(transport: Transport, argv: list[str], ctl_dir: str, log_name: str) -> str:
    """`argv` started in its own session from the control folder, all three descriptors redirected (stdout
    and stderr appended to `log_name` there): the one way rgt starts anything that must outlive it."""
    ctl = shlex.quote(transport.resolve(ctl_dir))
    program = " ".join(shlex.quote(arg) for arg in argv)
    return f"cd {ctl}; setsid -f {program} </dev/null >>{ctl}/{shlex.quote(log_name)} 2>&1"


async def launch_with_setsid(transport: Transport, script: str, ctl_dir: str) -> int:
    wrapper = f"{ctl_dir}/{WRAPPER}"
    await transport.put_bytes(script.encode(), wrapper, mode=0o700)
    command = detached_command(transport, ["bash", transport.resolve(wrapper)], ctl_dir, LAUNCH_LOG)
    result = await transport.run(command, timeout=30)
    if result.rc != 0:
        raise TransportError(f"detached launch failed in {ctl_dir}: {result.error_text.strip()[:200]}")
    deadline = asyncio.get_running_loop().time() + PID_WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        data, _ = await transport.tail(f"{ctl_dir}/pid", 0)
        text = data.decode(errors="replace").strip()
        if text.isdigit():
            return int(text)
        await asyncio.sleep(0.05)
    raise TransportError(f"the job wrapper in {ctl_dir} never wrote its pid: see {ctl_dir}/{LAUNCH_LOG}")
