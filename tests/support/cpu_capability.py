"""Train the demo under more than one ATen CPU capability (loaded by conftest.py).

The demo's trained bytes depend on the CPU: torch picks kernels for the machine's vector width, and even its
generic kernels and MKL's CPU-independent path give other bytes on another CPU. CI runs on whichever machine a
session draws, so a test that reads what the demo trained must hold for any of them. The tests that train the
demo take `cpu_capability` (or `demo_capability` for a module's trained project) and run once with torch's
generic kernels (`default`) and once with the AVX2 ones: on an AVX-512 machine that is the code path of a
machine without AVX-512, and the bytes differ (seen here: seed0's best.pth 450f55… against 1eea82…).

The capability reaches the job through the environment (the sim box's job inherits rgt's; the demo's train.py
only sets a default), and the job names the one it used in its first log line, which `assert_trained_under`
reads: a capability that did not reach the job fails the test instead of passing it twice on the same code.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CAPABILITIES = ("default", "avx2")
ENV = "ATEN_CPU_CAPABILITY"


@functools.cache
def capability_in_effect(requested: str) -> str:
    """What torch uses when asked for `requested` on this machine (it falls back to what the CPU has)."""
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    result = subprocess.run([sys.executable, "-c", probe], env={**os.environ, ENV: requested},
                            capture_output=True, text=True, timeout=120, check=True)
    return result.stdout.strip()


def require(capability: str) -> None:
    """Fail (never skip) when this machine cannot run `capability`: the test would run one code path twice."""
    got = capability_in_effect(capability)
    if got.lower() != capability:
        pytest.fail(f"{ENV}={capability} is not available on this machine (torch uses {got}): the demo's "
                    "training would not be tested under two capabilities")


def assert_trained_under(log: Path | str, capability: str) -> None:
    """Every cell of the demo's log names `capability` as the one its training used."""
    text = log.read_text(encoding="utf-8") if isinstance(log, Path) else log
    used = re.findall(r"cpu_capability=(\S+)", text)
    assert used, "the demo's log names no cpu_capability"
    assert {u.lower() for u in used} == {capability}, f"trained under {sorted(set(used))}, expected {capability}"


@pytest.fixture(params=CAPABILITIES)
def cpu_capability(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """This test's processes (and the jobs they launch) use this ATen CPU capability."""
    capability = str(request.param)
    require(capability)
    monkeypatch.setenv(ENV, capability)
    return capability


@pytest.fixture(scope="module", params=CAPABILITIES)
def demo_capability(request: pytest.FixtureRequest) -> Iterator[str]:
    """The same as `cpu_capability`, for a module-scoped fixture that trains once for the module's tests."""
    capability = str(request.param)
    require(capability)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV, capability)
        yield capability
