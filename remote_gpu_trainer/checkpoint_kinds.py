"""What a checkpoint file is, by its name, and how it is load-verified (assets/checkpoints.toml).

Frameworks save more than a model: Hugging Face's Trainer writes `optimizer.pt`, `scheduler.pt` and
`rng_state.pth` beside `model.safetensors`; accelerate's `save_state` writes `optimizer.bin` and
`random_states_0.pkl`; Lightning keeps `inf` in its callbacks' state. Each is checked for what it is: a model
must hold a model, training state must load and be finite. The table is data, so a framework's new file name is
one line in the assets, not a code change.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from functools import cache

from remote_gpu_trainer.shipped_toml import ASSETS

CHECKS = ("model", "state")


@dataclass(frozen=True)
class CheckpointKind:
    """One row of the table: which names it takes and how such a file is checked."""

    name: str
    files: tuple[str, ...]
    check: str = "model"
    accept_flat: bool | None = None
    finite_under: tuple[str, ...] = ()
    globals: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The same as one-shot load-check arguments: `--check`, `--finite-under`, `--allow-global`."""
        args = ["--check", self.check]
        for key in self.finite_under:
            args += ["--finite-under", key]
        for name in self.globals:
            args += ["--allow-global", name]
        return args + (["--accept-flat"] if self.accept_flat else [])

    def request(self) -> dict[str, object]:
        """The load-check request fields this kind sets (isolated/load_check.py reads them)."""
        return {"kind": self.name, "check": self.check, "finite_under": list(self.finite_under),
                **({"accept_flat": self.accept_flat} if self.accept_flat is not None else {})}


@cache
def kinds() -> tuple[CheckpointKind, ...]:
    """The table, in order; the last row takes every name."""
    text = (ASSETS / "checkpoints.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    named = {key: tuple(str(name) for name in value) for key, value in data.get("globals", {}).items()}
    table = []
    for row in data["kind"]:
        check = str(row.get("check", "model"))
        if check not in CHECKS:
            raise ValueError(f"assets/checkpoints.toml: kind {row.get('name')!r}: check must be one of {CHECKS}")
        allowed = tuple(name for group in row.get("globals", ()) for name in named[group])
        flat = row.get("accept_flat")
        table.append(CheckpointKind(name=str(row["name"]), files=tuple(row["files"]), check=check,
                                    accept_flat=bool(flat) if flat is not None else None,
                                    finite_under=tuple(row.get("finite_under", ())), globals=allowed))
    return tuple(table)


def kind_of(path: str) -> CheckpointKind:
    """The first kind whose pattern matches the file's name (case-sensitive, as the box's file system)."""
    name = path.rsplit("/", 1)[-1]
    table = kinds()
    return next((kind for kind in table if any(fnmatch.fnmatchcase(name, p) for p in kind.files)), table[-1])
