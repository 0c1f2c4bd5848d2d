"""The evidence tests' common project: a finished two-cell run on a local box (support/evidence_helpers.py),
with the checkpoint probe's verdict cache put back after each test. A test module that needs another run
defines its own `env`, which takes precedence over this one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.evidence_helpers import Env, keep_probe_verdicts, make_env, write_run


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    made = make_env(tmp_path)
    write_run(made.box)
    yield made
    keep_probe_verdicts(made)
