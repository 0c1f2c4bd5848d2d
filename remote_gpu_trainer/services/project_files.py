"""Writing projects: `rgt init`'s commented template and `rgt demo`'s ready-to-run project.

rgt.toml is written as text, never round-tripped through a TOML writer (which would drop the user's
comments), and only ever created, never rewritten in place. Writes go through a temp file and a
no-clobber link, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import os
import posixpath
import re
import tomllib
from pathlib import Path

import tomli_w

from remote_gpu_trainer.config.project import CONFIG_NAME, ProjectConfig, load_project_text
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.providers import table

INIT_TEMPLATE = """\
# rgt.toml: one project for remote-gpu-trainer (https://github.com/…/remote-gpu-trainer)
# Secrets never go here: API keys come from environment variables or the provider CLI's own file.

[project]
name = "{name}"

# One table per instance, keyed by a local name.
[instances.box]
provider = "{provider}"        # {providers}
{instance_lines}
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

# What the instance table needs per kind of provider (providers/table.py): ssh and slurm cannot load without a
# host, so theirs is set to an example the user edits; the others keep it as a comment.
_HOST_LINES = {
    "ssh": 'host = "gpu-box"              # an alias from ~/.ssh/config, or user@host[:port]\n'
           '# price_per_hour = 1.49       # what the box costs you (price_source "user")\n',
    "slurm": 'host = "login.cluster.edu"    # the login node; runs go in with sbatch\n',
}
_CLOUD_LINES = ('# id = "abc123"               # the provider\'s instance id\n'
                '# price_per_hour = 0.0        # where the provider has no price API: price_source = "user"\n')
_LAUNCH_LINE = ('# launch = {{ gpu = "NVIDIA A40", max_price_per_hour = 0.8, {extra} }}  # without id, '
                '`rgt up` rents one\n')
_PLAIN_LINES = '# host = "gpu-box"            # ssh: an alias from ~/.ssh/config, or user@host[:port]\n'


def _instance_lines(provider: str) -> str:
    """The commented keys of the template's instance table for `provider`: by its kind, and for a cloud that
    can rent a box, a commented launch line with the keys its row gives."""
    row = table.find(provider)
    kind = row.kind if row is not None else ""
    if kind in _HOST_LINES:
        return _HOST_LINES[kind]
    if row is not None and kind == "cloud":
        return _CLOUD_LINES + (_LAUNCH_LINE.format(extra=row.launch_example) if row.launches else "")
    return _PLAIN_LINES


def init_text(name: str, provider: str) -> str:
    """The commented rgt.toml `rgt init` writes for one provider."""
    return INIT_TEMPLATE.format(name=name, provider=provider, providers=" | ".join(table.available()),
                                instance_lines=_instance_lines(provider))


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
    available = table.available()
    if provider not in available:  # kubernetes is a known name with no implementation: never offered
        what = "is not available in this version of rgt" if table.find(provider) else "is not a known provider"
        raise ConfigError(f"--provider {provider!r} {what} (choose one of: {', '.join(available)})")
    target = folder / CONFIG_NAME
    # the folder's name, as a safe name: a quote or a control character in it must not break the TOML
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", folder.resolve().name).strip("-.") or "project"
    text = init_text(name, provider)
    load_project_text(target, text)  # the template must itself be valid, before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    write_new_file(target, text)
    return target


def toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


_RERUN_SUFFIX = re.compile(r"^(?P<base>.+)-r(?P<n>[0-9]+)$")


def rerun_id(project: ProjectConfig, run_id: str, taken: set[str]) -> str:
    """`<id>-r<N>` with the smallest N >= 2 that no run, launch or local root has used (a re-run of a
    re-run counts on from its base: exp1-r2 → exp1-r3)."""
    match = _RERUN_SUFFIX.match(run_id)
    base = match.group("base") if match else run_id
    number = int(match.group("n")) + 1 if match else 2
    while True:
        candidate = f"{base}-r{number}"
        if candidate not in taken and candidate not in project.runs and not project.run_dir(candidate).exists():
            return candidate
        number += 1


def add_rerun(project: ProjectConfig, run_id: str, taken: set[str]) -> str:
    """Append a copy of `[runs.<run_id>]` to rgt.toml under a new id whose result root is a sibling of the
    old one (never inside it: the old manifest's root must stay as it was). Returns the new id.

    rgt.toml is otherwise left byte for byte as the user wrote it; the new text is validated before the
    file is replaced atomically, so a failure leaves the old file."""
    run = project.run(run_id)
    new_id = rerun_id(project, run_id, taken)
    text = project.file.read_text(encoding="utf-8-sig")
    table = tomllib.loads(text)["runs"][run_id]
    parent, name = posixpath.split(run.remote_root.rstrip("/"))
    suffix = new_id.rsplit("-", 1)[1]  # rN
    table["remote_root"] = posixpath.join(parent, new_id if name == run_id else f"{name}-{suffix}")
    body = tomli_w.dumps({"runs": {new_id: table}})
    addition = f"\n# a re-run of {run_id}, added by `rgt run {run_id} --rerun`\n{body}"
    new_text = text.rstrip("\n") + "\n" + addition
    load_project_text(project.file, new_text)
    atomic_write(project.file, new_text.encode("utf-8"))
    return new_id
