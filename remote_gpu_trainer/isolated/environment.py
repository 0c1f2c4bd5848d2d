"""The whole environment of every probe subprocess rgt starts (the checkpoint probe, VERIFY's load checks):
no provider keys, tokens or anything else of the caller's. Stdlib only, so services and audits share it."""

from __future__ import annotations

import os
from collections.abc import Mapping

PROBE_ENV_KEEP = frozenset({"PATH", "HOME", "LANG", "TMPDIR"})


def probe_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """Only PATH, HOME, LANG, LC_* and TMPDIR are kept; the GPU is hidden and torch runs single-threaded."""
    source = os.environ if source is None else source
    env = {name: value for name, value in source.items() if name in PROBE_ENV_KEEP or name.startswith("LC_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env
