"""`rgt init` offers only providers this version can drive (issue 25): `kubernetes` is a name rgt.toml knows with no
implementation behind it, so `rgt init --provider kubernetes` used to write a project every verb then refused
("not available in this version"). Driven through the installed console script, as a user types it."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_gpu_trainer.providers import table
from support.gate_helpers import rgt

PROVIDERS, AVAILABLE = table.names(), table.available()  # the provider table (providers/table.py)
UNBUILT = tuple(p for p in PROVIDERS if p not in AVAILABLE)


def test_some_known_provider_has_no_implementation() -> None:
    """The case this file is about exists (else the tests below would prove nothing)."""
    assert "kubernetes" in UNBUILT


@pytest.mark.parametrize("provider", UNBUILT)
def test_init_refuses_a_provider_without_an_implementation(tmp_path: Path, provider: str) -> None:
    result = rgt("init", "proj", "--provider", provider, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert repr(provider) in lines[0] and "not available" in lines[0]
    assert all(name in lines[0] for name in AVAILABLE), lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing may be written"


def test_init_help_lists_only_what_exists(tmp_path: Path) -> None:
    result = rgt("init", "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert all(name not in result.stdout for name in UNBUILT), result.stdout
    assert all(name in result.stdout for name in AVAILABLE), result.stdout


def test_the_written_template_offers_only_what_exists(tmp_path: Path) -> None:
    result = rgt("init", "proj", "--provider", "lambda", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "proj" / "rgt.toml").read_text(encoding="utf-8")
    [comment] = [line for line in text.splitlines() if line.startswith('provider = "lambda"')]
    assert all(name in comment for name in AVAILABLE) and all(name not in comment for name in UNBUILT), comment
