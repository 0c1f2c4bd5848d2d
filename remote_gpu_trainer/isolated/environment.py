"""The whole environment of every isolated subprocess rgt starts (the checkpoint load checks of `rgt verify` and of
the audit catalogue, and the model probes):
no provider keys, tokens or anything else of the caller's. Stdlib only, so services and audits share it."""

from __future__ import annotations

import os
from collections.abc import Mapping

ENV_KEEP = frozenset({"PATH", "HOME", "LANG", "TMPDIR"})


def isolated_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """Only PATH, HOME, LANG, LC_* and TMPDIR are kept; the GPU is hidden and torch runs single-threaded."""
    source = os.environ if source is None else source
    env = {name: value for name, value in source.items() if name in ENV_KEEP or name.startswith("LC_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env
