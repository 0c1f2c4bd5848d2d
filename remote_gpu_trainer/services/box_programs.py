"""Running one of rgt's own programs on a box: the script on stdin, a deadline, and every failure as one line.

The phase-0 environment survey (services/launch/env_audit.py) and the live GPU sampler
(services/watch/gpu_samples.py) both send a bash program this way. Arguments are shell-quoted into the
command by the caller, never spliced into the script body. What comes back is parsed by the caller; here only
the ways a run can fail are named: no answer in time (state unknown), the box unreachable, the command not
runnable, a non-zero exit. Typed transport failures (an unknown host key, refused authentication) pass through
unchanged, because the UI needs them to offer the right action.
"""

from __future__ import annotations

from remote_gpu_trainer.errors import TransportError
from remote_gpu_trainer.providers.base import CommandResult, Transport


async def run_box_program(transport: Transport, command: str, script: bytes, timeout: float,
                          what: str) -> CommandResult:
    """`command` on the box with `script` on its stdin; the result when it exited 0, else a one-line
    TransportError naming `what` went wrong."""
    try:
        result = await transport.run(command, stdin=script, timeout=timeout)
    except TimeoutError:
        raise TransportError(f"{what} got no answer within {timeout:g} s: state unknown, retry later") from None
    except TransportError as exc:
        if type(exc) is not TransportError:
            raise  # typed failures (host key, authentication) carry what the UI needs; never blur them
        raise TransportError(f"{what} could not reach the box: {_one_line(str(exc))}") from None
    except OSError as exc:
        raise TransportError(f"{what} could not run: {_one_line(str(exc)) or type(exc).__name__}") from None
    if result.rc != 0:
        detail = _one_line(result.error_text) or "no message"
        raise TransportError(f"{what} exited {result.rc}: {detail}")
    return result


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
