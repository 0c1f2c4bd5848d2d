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


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda path: path.stem)
def test_every_name_a_benchmark_imports_from_rgt_exists(script: Path) -> None:
    """`--help` returns before the imports inside functions run: those are checked by name here (a move of
    create_demo out of services/project_files.py broke two benchmarks that --help still passed)."""
    import ast
    import importlib

    missing = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("remote_gpu_trainer"):
            module = importlib.import_module(node.module)
            package = hasattr(module, "__path__")  # only a package has submodules to import by name
            missing += [f"{node.module}.{alias.name}" for alias in node.names
                        if not hasattr(module, alias.name)
                        and not (package and importlib.util.find_spec(f"{node.module}.{alias.name}") is not None)]
    assert missing == []
