"""Writing projects: `rgt init`'s commented template and `rgt demo`'s ready-to-run project.

rgt.toml is written as text, never round-tripped through a TOML writer (which would drop the user's
comments), and only ever created, never rewritten in place. Writes go through a temp file and a
no-clobber link, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import os
import shlex
import sys
from importlib import resources
from pathlib import Path

from ..config import CONFIG_NAME, PROVIDERS, load_project
from ..errors import ConfigError

INIT_TEMPLATE = """\
# rgt.toml: one project for remote-gpu-trainer (https://github.com/…/remote-gpu-trainer)
# Secrets never go here: API keys come from environment variables or the provider CLI's own file.

[project]
name = "{name}"

# One table per instance, keyed by a local name.
[instances.box]
provider = "{provider}"        # local | sim | ssh | slurm | kubernetes | runpod | vastai | lambda | paperspace | autodl
# host = "gpu-box"            # ssh: an alias from ~/.ssh/config, or user@host[:port]
# id = "abc123"               # cloud: the provider's instance id
# price_per_hour = 0.0        # where the provider has no price API: price_source = "user"

# One table per run, keyed by the run id.
[runs.exp1]
instance = "box"
workdir = "/workspace/proj"                             # where the command runs on the instance
command = "python train.py --seed {{cell}} --out {{out}}" # once per roster cell; {{out}} = remote_root/<cell>
log = "train.log"                                       # relative to workdir
remote_root = "/workspace/rgt/exp1"                     # durable root, one folder per cell
roster = ["seed0", "seed1", "seed2"]                    # the manifest must match it exactly
required = ["best.pth", "best_metrics.json"]
metric = {{ name = "val_loss", direction = "min" }}
push = ["train.py"]                                     # local files copied into workdir before a run
"""

DEMO_RUN = "demo"
DEMO_INSTANCE = "gpu-box"


def write_new_file(path: Path, text: str) -> None:
    """Create `path` with `text`, refusing to overwrite; nothing is left behind on failure."""
    temp = path.with_name(f".rgt-tmp-{path.name}.{os.getpid()}")
    try:
        with open(temp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, path)
    except FileExistsError:
        raise ConfigError(f"{path} already exists: rgt never overwrites a project file") from None
    finally:
        temp.unlink(missing_ok=True)


def init_project(folder: Path, provider: str) -> Path:
    if provider not in PROVIDERS:
        raise ConfigError(f"--provider {provider!r} is not a known provider (known: {', '.join(PROVIDERS)})")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / CONFIG_NAME
    name = folder.resolve().name or "project"
    write_new_file(target, INIT_TEMPLATE.format(name=name, provider=provider))
    load_project(target)  # the template must itself be valid
    return target


def demo_toml(python: str, quick: bool) -> str:
    extra = " --epochs 2 --steps-per-epoch 6 --step-delay 0.05" if quick else ""
    command = f"{shlex.quote(python)} train.py --cell {{cell}} --out {{out}}{extra}"
    return f"""\
# The rgt demo: a real PyTorch run on a simulated rented box (provider "sim").
# The box bills a demo price; its disk is .rgt/sim/{DEMO_INSTANCE}/ and terminate deletes it.

[project]
name = "rgt-demo"

[instances.{DEMO_INSTANCE}]
provider = "sim"

[runs.{DEMO_RUN}]
instance = "{DEMO_INSTANCE}"
workdir = "/workspace/demo"
command = {_toml_string(command)}
log = "train.log"
remote_root = "/workspace/rgt/{DEMO_RUN}"
roster = ["seed0", "seed1"]
required = ["best.pth", "best_metrics.json"]
metric = {{ name = "val_loss", direction = "min" }}
push = ["train.py"]
python = {_toml_string(python)}
"""


def create_demo(folder: Path, quick: bool = False) -> Path:
    """Write the demo project into `folder` unless it already holds one; returns its rgt.toml."""
    target = folder / CONFIG_NAME
    if target.exists():
        load_project(target)
        return target
    if folder.exists() and any(folder.iterdir()):
        raise ConfigError(f"{folder} exists and is not empty: choose another folder for the demo")
    folder.mkdir(parents=True, exist_ok=True)
    train = resources.files("remote_gpu_trainer").joinpath("assets/demo/train.py").read_bytes()
    (folder / "train.py").write_bytes(train)
    write_new_file(target, demo_toml(sys.executable, quick))
    return target


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
