"""Every benchmark still loads against the current package (docs/architecture.md §5): a move that breaks a
benchmark's imports fails here, not months later when someone wants a figure. `--help` parses the arguments
and returns before any measurement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.stem)
def test_a_benchmark_imports_and_parses_its_arguments(script: Path) -> None:
    result = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage:" in result.stdout
