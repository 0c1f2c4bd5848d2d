"""The live GPU samples of a watched box (docs/remote-ops.md §5): what the dashboard's GPU column shows and what
the GPU run rules (audits/rules/gpu.py, S86-S93) read.

One nvidia-smi query of the same fields as the environment survey's samples, sent as a bash program on stdin
(services/box_programs.py), at most every GPU_SAMPLE_S per instance. The answer is parsed strictly: anything but
the expected version line and nvidia-smi's CSV is a bad answer (a one-line TransportError, state unknown), and
a box with no GPU says so ("no GPU" is a state, not an error). Judging the samples is audits/gpu_health.py's job.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from remote_gpu_trainer.audits.gpu_health import (
    SAMPLE_FIELDS,
    THROTTLE_FIELDS,
    GpuParseError,
    GpuSample,
    parse_gpu_samples,
)
from remote_gpu_trainer.errors import RgtError, TransportError
from remote_gpu_trainer.providers.base import InstanceStatus, Transport
from remote_gpu_trainer.services.box_programs import run_box_program
from remote_gpu_trainer.services.watch import run_logs
from remote_gpu_trainer.text import describe_gpus

if TYPE_CHECKING:
    from remote_gpu_trainer.services.session import Session

SAMPLE_TIMEOUT_S = 15.0
SAMPLE_VERSION = "rgt-gpu-sample/1"
GPU_SAMPLE_S = 10.0  # the dashboard's GPU text is sampled at most this often per instance

# One query of the same fields as the survey's samples; KEY=VALUE lines, then nvidia-smi's CSV verbatim.
_SAMPLER = f"""set -u
main() {{
  echo "version={SAMPLE_VERSION}"
  if ! command -v nvidia-smi >/dev/null 2>&1; then echo "nvidia_smi=missing"; return 0; fi
  echo "nvidia_smi=present"
  local t="" out rc
  timeout -k 1 5 true >/dev/null 2>&1 && t="timeout -k 2 10"
  out=$($t nvidia-smi --query-gpu={','.join(SAMPLE_FIELDS)},{THROTTLE_FIELDS[0]} --format=csv,noheader,nounits 2>&1)
  rc=$?
  if [ "$rc" != 0 ]; then
    out=$($t nvidia-smi --query-gpu={','.join(SAMPLE_FIELDS)},{THROTTLE_FIELDS[1]} --format=csv,noheader,nounits 2>&1)
    rc=$?
  fi
  echo "rc=$rc"
  printf '%s\\n' "$out"
}}
main </dev/null; exit 0
"""



async def sample_gpus(transport: Transport, timeout: float = SAMPLE_TIMEOUT_S) -> list[GpuSample] | None:
    """One sample per GPU for the live panel; None when the box has no GPU (no nvidia-smi, or no device)."""
    result = await run_box_program(transport, "bash -s", _SAMPLER.encode(), timeout, "GPU sample")
    return parse_sample_output(result.stdout)


def parse_sample_output(stdout: bytes) -> list[GpuSample] | None:
    lines = stdout.decode("utf-8", errors="replace").splitlines()
    if not lines or lines[0] != f"version={SAMPLE_VERSION}":
        raise TransportError(f"GPU sampler answered badly: {lines[0][:80] if lines else 'nothing'!r}")
    if lines[1:2] == ["nvidia_smi=missing"]:
        return None
    if len(lines) < 3 or lines[1] != "nvidia_smi=present" or not lines[2].startswith("rc="):
        raise TransportError("GPU sampler answered badly: missing nvidia_smi/rc lines")
    rc_text = lines[2].removeprefix("rc=")
    csv = "\n".join(lines[3:])
    if rc_text != "0":
        if rc_text == "6" or "no devices were found" in csv.lower():
            return None
        first = next((line.strip() for line in lines[3:] if line.strip()), "no output")
        raise TransportError(f"nvidia-smi failed on the box (exit {rc_text}): {first[:200]}")
    try:
        samples = parse_gpu_samples(csv)
    except GpuParseError as exc:
        raise TransportError(f"GPU sampler answered badly: {exc}") from None
    return samples or None


async def gpu_text(session: Session, name: str, status: InstanceStatus) -> str:
    """What the GPUs are doing, sampled at most every GPU_SAMPLE_S per instance; "no GPU" is a state."""
    if not session.profile(name).gpu_sampling or status.state != "running":
        return status.gpu
    texts = _gpu_texts(session)
    cached = texts.get(name)
    if cached is not None and time.monotonic() - cached[0] < GPU_SAMPLE_S:
        return cached[1]
    try:
        samples = await sample_gpus(session.transport(name))
    except RgtError:
        text = f"{cached[1]} (stale)" if cached else status.gpu or "?"  # the provider's word beats none
    else:
        text = describe_gpus(samples)
        run_logs.note_gpu_samples(session, name, samples or [])  # the GPU rules read them
    texts[name] = (time.monotonic(), text)
    return text


def _gpu_texts(session: Session) -> dict[str, tuple[float, str]]:
    """Instance -> (monotonic time, panel text) of its last GPU sample in this session."""
    return session.cache(__name__, dict)
