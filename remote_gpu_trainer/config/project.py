"""rgt.toml: read with the typed table reader (toml_table.py) into typed dataclasses, every problem named
by file, key and line.

Validation collects all problems in one pass (a user fixing a file wants the whole list), then raises
one ConfigError whose message is the first problem plus a count; `problems` keeps them all.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from remote_gpu_trainer.config.audit import AuditConfig, read_audit_config
from remote_gpu_trainer.config.deliver import DeliverConfig, GridConfig, read_deliver_config, read_grid_config
from remote_gpu_trainer.config.notify import NotifyConfig, read_notify_config
from remote_gpu_trainer.config.recover import RecoverLimits, read_recover
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.providers import table as provider_table
from remote_gpu_trainer.remote.build_manifest import name_problem
from remote_gpu_trainer.secret_shapes import secrets_in
from remote_gpu_trainer.text import escape_control
from remote_gpu_trainer.toml_table import Problems, SourceLines, Table, parse_toml, read_text

if TYPE_CHECKING:
    from remote_gpu_trainer.run_records import LocationDrift  # a RunConfig's drift from its launch

CONFIG_NAME = "rgt.toml"
T = TypeVar("T")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
DEFAULT_REQUIRED = ("best.pth", "best_metrics.json")
# Plain torch.save names, then the standard .bin/.pkl names of Hugging Face and accelerate that hold tensors
# (assets/checkpoints.toml says how each is checked); training_args.bin is a pickled Python object, never loaded.
DEFAULT_CHECKPOINT_GLOBS = ("*.pth", "*.pt", "*.ckpt", "*.safetensors", "pytorch_model*.bin", "adapter_model.bin",
                            "optimizer*.bin", "scheduler*.bin", "scaler*.bin", "random_states_*.pkl")
DEFAULT_STATE_KEYS = ("model_state_dict", "state_dict", "model")

_TOP_KEYS = {"project", "instances", "runs", "signatures", "metrics", "verify", "deliver", "grid", "notify"}
_PROJECT_KEYS = {"name"}
_INSTANCE_KEYS = {"provider", "host", "id", "api_base", "price_per_hour", "teardown_command", "launch",
                  "mtbp_hours", "interruptible"}
_RUN_KEYS = {
    "instance", "workdir", "command", "log", "remote_root", "roster", "required", "metric", "push",
    "checkpoint_globs", "state_keys", "allowed_globals", "python", "stall_after", "gpus", "total_steps",
    "smoke", "smoke_timeout", "notify", "auto",
    "auto_resume", "recover", "network", "cache_dir", "mtbp_hours", "disk_budget", "checkpoint_bytes",
}
_LAUNCH_KEYS = {"gpu", "count", "max_price_per_hour", "image", "disk_gb", "region", "interruptible", "ssh_keys"}
DEFAULT_SMOKE_TIMEOUT_S = 300.0
DEFAULT_LAUNCH_DISK_GB = 40


@dataclass(frozen=True)
class Metric:
    """A run's `metric = { name, direction }`: the number the run is judged by and whether lower or higher is better."""

    name: str
    direction: str  # "min" | "max"


@dataclass(frozen=True)
class LaunchConstraint:
    """What `rgt up` may rent (`[instances.<name>.launch]`): a GPU type and count under a price ceiling.

    The ceiling is per hour for the whole instance (all its GPUs), in the provider's currency (USD); the
    approval the user types is checked against it, so a launch can never bill more than was approved.
    """

    gpu: str
    max_price_per_hour: float
    count: int = 1
    image: str | None = None
    disk_gb: int = DEFAULT_LAUNCH_DISK_GB
    region: str | None = None
    interruptible: bool = False
    ssh_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class InstanceConfig:
    """`[instances.<name>]`: which box (provider, host or id), what it costs, and how `rgt up` rents it or a teardown
    ends it."""

    name: str
    provider: str
    host: str | None = None
    id: str | None = None
    api_base: str | None = None
    price_per_hour: float | None = None
    teardown_command: str | None = None  # ssh: run here (no shell) after the gate, e.g. a provider CLI call
    launch: LaunchConstraint | None = None  # runpod, vastai, lambda: what `rgt up` rents when there is no id
    mtbp_hours: float | None = None  # mean time between preemptions here (beats the profile's [preemption])
    interruptible: bool = False  # a spot box rgt did not rent (e.g. a spot VM over SSH): exit 143 = preempted

    @property
    def preemptible(self) -> bool:
        """Declared interruptible here, or rented interruptible by `rgt up` (docs/remote-ops.md §10)."""
        return self.interruptible or (self.launch is not None and self.launch.interruptible)


@dataclass(frozen=True)
class RunConfig:
    """`[runs.<id>]`: the job, the instance it runs on, where its results live on the box, and what rgt watches,
    pulls and checks for it."""

    id: str
    instance: str
    workdir: str
    command: str
    log: str
    remote_root: str
    roster: tuple[str, ...]
    required: tuple[str, ...] = DEFAULT_REQUIRED
    metric: Metric | None = None
    push: tuple[str, ...] = ()
    checkpoint_globs: tuple[str, ...] = DEFAULT_CHECKPOINT_GLOBS
    state_keys: tuple[str, ...] = DEFAULT_STATE_KEYS
    allowed_globals: tuple[str, ...] = ()
    python: str = "python3"
    python_explicit: bool = False  # `python` was set in rgt.toml: it beats the command's own interpreter
    stall_after: float = 900.0  # seconds of log silence (and no fresh checkpoint) before `stalled`
    gpus: int = 0  # GPUs the run needs; 0 = a CPU run (the phase-0 audit checks the box has them)
    total_steps: int = 0  # planned optimizer steps for the ETA when the log does not say; 0 = from the log
    smoke: str | None = None  # a local CPU check (argv, no shell, in the project root) `rgt up` runs before renting
    smoke_timeout: float = DEFAULT_SMOKE_TIMEOUT_S
    notify: bool = True  # false: launched without the sentinel even when [notify] is set (config/notify.py)
    auto: tuple[str, ...] = ()  # follow-ups a watcher starts once the run finished: "pull", then "verify"
    auto_resume: bool = False  # true: a preempted run may be relaunched on its still-billing box (--resume)
    recover: RecoverLimits | None = None  # what recovery may spend, once a person approved it (config/recover.py)
    network: str | None = None  # an environment profile in assets/networks/ (e.g. "china"), exported by the wrapper
    cache_dir: str | None = None  # where that profile puts the HF/torch/pip caches (default: <workdir>/.cache)
    mtbp_hours: float | None = None  # mean time between preemptions for Young/Daly (beats the instance's)
    disk_budget: int | None = None  # bytes free before each cell (0: no gate; None: previous cell's size × 1.2)
    checkpoint_bytes: int | None = None  # one checkpoint's size: phase 0's budget row (audits/env_audit/space.py)
    # the location keys rgt.toml now sets otherwise than the latest launch did (bind_to_launch); () as written
    location_drift: tuple[LocationDrift, ...] = ()

    def as_configured(self) -> RunConfig:
        """The table as rgt.toml states it now: the drifted keys at their rgt.toml values. The gate's
        evidence hash is taken over this, so an edit of remote_root or roster after verification still closes
        it (docs/gate.md §7, binding 4), although the run stays bound to where its launch put its files."""
        if not self.location_drift:
            return self
        now: dict[str, Any] = {item.key: item.now for item in self.location_drift}
        return replace(self, location_drift=(), **now)


@dataclass(frozen=True)
class ProjectConfig:
    """rgt.toml as a whole, read and checked: its instances, runs and sections, and the project root the state and
    runs/ folders hang from."""

    root: Path
    file: Path
    name: str
    instances: dict[str, InstanceConfig] = field(default_factory=dict)
    runs: dict[str, RunConfig] = field(default_factory=dict)
    signatures: tuple[dict[str, Any], ...] = ()  # user log signatures ([[signatures]]), checked at load
    audit: AuditConfig = field(default_factory=AuditConfig)  # [metrics], [verify.*] (config/audit.py)
    deliver: DeliverConfig = field(default_factory=DeliverConfig)  # [deliver] (config/deliver.py)
    grid: GridConfig | None = None  # [grid]: the expected experiment grid (config/deliver.py)
    notify: NotifyConfig = field(default_factory=NotifyConfig)  # [notify]: the sentinel's receiver

    @property
    def state_dir(self) -> Path:
        return self.root / ".rgt"

    @property
    def state_db(self) -> Path:
        return self.state_dir / "state.db"

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def run(self, run_id: str) -> RunConfig:
        if run_id not in self.runs:
            known = ", ".join(sorted(self.runs)) or "none"
            raise ConfigError(f"{self.file}: run {run_id!r} does not exist (runs: {known})")
        return self.runs[run_id]

    def instance_of(self, run_id: str) -> InstanceConfig:
        return self.instances[self.run(run_id).instance]


def user_config_dir() -> Path:
    """Where user-wide settings live (e.g. `signatures.d/*.toml`): $XDG_CONFIG_HOME/rgt, else ~/.config/rgt."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rgt"


def user_state_dir() -> Path:
    """Where user-wide state lives (the registry of opened projects): $XDG_STATE_HOME/rgt, else
    ~/.local/state/rgt."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rgt"


def find_project_file(start: Path) -> Path | None:
    """Nearest rgt.toml from `start` upward; `start` may itself be the file."""
    start = start.resolve()
    if start.is_file():
        return start
    for folder in (start, *start.parents):
        candidate = folder / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def resolve_project_file(project: str | None) -> Path:
    """The rgt.toml named by a PROJECT argument (a folder or a file), or the nearest one upward."""
    if project is None:
        found = find_project_file(Path.cwd())
        if found is None:
            raise ConfigError(
                f"no {CONFIG_NAME} in {Path.cwd()} or above: run `rgt init` or `rgt demo`, or pass PROJECT"
            )
        return found
    path = Path(project)
    if path.is_dir():
        path = path / CONFIG_NAME
    if not path.is_file():
        raise ConfigError(f"{path}: no such project file: run `rgt init {path.parent}` or check the path")
    return path


def load_project(path: Path) -> ProjectConfig:
    return load_project_text(path, read_text(path))


def load_project_text(path: Path, text: str) -> ProjectConfig:
    """Validate `text` as if it were the file at `path`: `rgt init` checks its template before writing it."""
    data = parse_toml(str(path), text)
    return _ProjectReader(path, text).project(data)


class _ProjectReader:
    """Walks the parsed rgt.toml once with the typed table reader, collecting every problem with its line."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = SourceLines(text)
        self.problems = Problems()

    def table(self, keys: tuple[str, ...], data: dict[str, Any]) -> Table:
        return Table(self.problems, str(self.path), keys, data, self.lines)

    def problem(self, keys: tuple[str, ...], key: str | None, message: str) -> None:
        self.table(keys, {}).problem(key, message)

    def _secrets(self, data: dict[str, Any]) -> None:
        """Secrets never live in rgt.toml: a key-like name or value is an error (the value is never echoed)."""
        for table, key, problem in secrets_in(data):
            self.problem(table, key, problem)

    # -- sections ----------------------------------------------------------------------------------
    def project(self, data: dict[str, Any]) -> ProjectConfig:
        self._secrets(data)
        self.problems.raise_if_any()  # before any other read, whose message could quote the secret's value
        top = self.table((), data)
        top.expect(_TOP_KEYS)
        top.done()
        audit = read_audit_config(top)
        deliver, audit = read_deliver_config(top, audit)  # one document list for reconcile and V31
        grid = read_grid_config(top)
        notify = read_notify_config(top)
        name = "project"
        project = top.table("project") if top.has("project") else self.table(("project",), {})
        if project is not None:
            project.expect(_PROJECT_KEYS)
            project.done()
            name = project.text("name", required=True, nonempty=True) or name
        instances = self._instances(data.get("instances", {}))
        self._same_provider_id(instances)
        runs = self._runs(data.get("runs", {}), instances)
        signatures = data.get("signatures", [])
        if not isinstance(signatures, list) or not all(isinstance(row, dict) for row in signatures):
            self.problem((), "signatures", "must be [[signatures]] tables (id, pattern, severity, cause, fix, "
                         "match, nomatch)")
            signatures = []
        self.problems.raise_if_any()
        return ProjectConfig(
            root=self.path.parent.resolve(), file=self.path.resolve(), name=name,
            instances=instances, runs=runs, signatures=tuple(signatures), audit=audit,
            deliver=deliver, grid=grid, notify=notify,
        )

    def _instances(self, raw: Any) -> dict[str, InstanceConfig]:
        return self._named_tables(raw, "instances", "instance names use letters, digits, '.', '_' and '-'",
                                  self._instance)

    def _named_tables(self, raw: Any, section: str, bad_name: str, build: Callable[[str, Table], T | None]
                      ) -> dict[str, T]:
        """`[section.<name>]` tables: a safe name, a table, then `build`; every problem collected, the good kept."""
        result: dict[str, T] = {}
        if not isinstance(raw, dict):
            self.problem((), section, f"must be a table of {section.removesuffix('s')} tables")
            return result
        for name, body in raw.items():
            table = (section, name)
            if not SAFE_NAME.match(name):
                self.problem(table, None, bad_name)
            elif not isinstance(body, dict):
                self.problem(table, None, "must be a table")
            elif (built := build(name, self.table(table, body))) is not None:
                result[name] = built
        return result

    def _instance(self, name: str, body: Table) -> InstanceConfig | None:
        body.expect(_INSTANCE_KEYS)
        body.done()
        provider = body.text("provider", required=True, nonempty=True)
        known = provider_table.names()  # which providers exist, and what each needs: providers/table.py
        if provider is not None and provider not in known:
            import difflib  # only for this message: not on every start-up (docs/architecture.md §5)
            close = difflib.get_close_matches(provider, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            body.problem("provider", f"unknown provider {provider!r}: {hint}known: {', '.join(known)}")
            provider = None
        # TOML allows inf and nan: either would make every cost figure (and the gate's burn) meaningless
        price = body.number("price_per_hour", message="must be a finite number >= 0 (per hour)")
        host = body.text("host", nonempty=True)
        ident = body.text("id", nonempty=True)
        api_base = body.text("api_base", nonempty=True)
        teardown_command = body.text("teardown_command", nonempty=True)
        row = provider_table.find(provider) if provider is not None else None
        if row is not None and row.needs_host and host is None:
            body.problem(None, f'provider "{provider}" needs host = "alias" or "user@host[:port]"')
        launch = self._launch(body, provider) if body.has("launch") else None
        if provider is None:
            return None
        return InstanceConfig(
            name=name, provider=provider, host=host, id=ident, api_base=api_base, price_per_hour=price,
            teardown_command=teardown_command, launch=launch,
            mtbp_hours=body.number("mtbp_hours", above=True, message="must be a number of hours > 0"),
            interruptible=body.flag("interruptible", False),
        )

    def _same_provider_id(self, instances: dict[str, InstanceConfig]) -> None:
        """Two entries with one provider and one provider id are one physical box: each would get its own
        gate, so tearing down through one could destroy results the other's runs never pulled. SSH and Slurm
        hosts are compared once ssh config has resolved them, when the project is opened (providers/box_identity.py).
        Ids differing only in case or in a number's leading zeros count as one box (added 2026-12-06): refusing
        them is safe, as no provider hands out two ids that differ only so. One provider is one account here
        (its key comes from one place), so provider and id name one box whatever `api_base` says."""
        seen: dict[tuple[str, str], str] = {}
        for name, instance in instances.items():
            if instance.id is None:
                continue
            ident = instance.id.strip().casefold()
            key = (instance.provider, str(int(ident)) if ident.isdigit() else ident)
            first = seen.setdefault(key, name)
            if first != name:
                line = self.lines.line_of(("instances", first), None)
                self.problem(("instances", name), "id", f"names the same box as instances.{first}"
                             f"{f' (line {line})' if line else ''}: provider {instance.provider!r}, id "
                             f"{instance.id!r}; keep one entry and point every run at it")

    # -- the GPU constraint `rgt up` launches from ------------------------------------------------------
    def _launch(self, instance: Table, provider: str | None) -> LaunchConstraint | None:
        """`[instances.x.launch]` or an inline `launch = { ... }` (its problems then name that line)."""
        raw = instance.value("launch")
        if not isinstance(raw, dict):
            instance.problem("launch", 'must be a table: launch = { gpu = "...", max_price_per_hour = 0.8, ... }')
            return None
        launch = self.table((*instance.keys, "launch"), raw)
        launch.expect(_LAUNCH_KEYS)
        launch.done()
        row = provider_table.find(provider) if provider is not None else None
        if row is not None and not row.launches:
            launch.problem(None, f"provider {provider!r} has no launch API in rgt (only "
                           f"{', '.join(provider_table.launching())}): create the instance yourself and set id or "
                           "host")
            return None
        problems = len(self.problems)
        values = _launch_values(launch)
        for key in row.launch_needs if row is not None else ():
            if not launch.has(key):
                launch.problem(None, f"provider {provider!r} needs {key!r} to launch")
        for key in row.launch_forbids if row is not None else ():
            if launch.has(key):
                launch.problem(key, f"not used by provider {provider!r}: remove it")
        for key, why in row.launch_refuses.items() if row is not None else ():
            if values.get(key):
                launch.problem(key, why)
        if len(self.problems) > problems or provider is None:
            return None
        return LaunchConstraint(**values)

    def _runs(self, raw: Any, instances: dict[str, InstanceConfig]) -> dict[str, RunConfig]:
        return self._named_tables(raw, "runs", "run ids use letters, digits, '.', '_' and '-' (a safe name)",
                                  lambda run_id, body: _run(run_id, body, instances))


def _launch_values(launch: Table) -> dict[str, Any]:
    """Each key's type and range, every problem with its line; only the valid keys come back."""
    values: dict[str, Any] = {}
    checks: dict[str, tuple[Any, str]] = {
        "gpu": (lambda v: isinstance(v, str) and v.strip(), 'must be the GPU type, e.g. "RTX 4090"'),
        "max_price_per_hour": (lambda v: _number(v) and math.isfinite(v) and v > 0,
                               "must be a number > 0 (per hour, whole instance)"),
        "count": (lambda v: _whole(v) and v >= 1, "must be a whole number >= 1"),
        "image": (lambda v: isinstance(v, str) and v.strip(), "must be a non-empty container image name"),
        "disk_gb": (lambda v: _whole(v) and v >= 1, "must be a whole number of GB >= 1"),
        "region": (lambda v: isinstance(v, str) and v.strip(), "must be a non-empty region or datacenter id"),
        "interruptible": (lambda v: isinstance(v, bool), "must be true or false"),
        "ssh_keys": (lambda v: isinstance(v, list) and v and all(isinstance(k, str) and k for k in v),
                     "must be a list of SSH key names registered on the account"),
    }
    for key in ("gpu", "max_price_per_hour"):
        if not launch.has(key):
            launch.problem(None, f"missing required key {key!r}")
    for key, (valid, message) in checks.items():
        value = launch.value(key)
        if value is None:
            continue
        if not valid(value):
            launch.problem(key, message)
            continue
        values[key] = float(value) if key == "max_price_per_hour" else tuple(value) if key == "ssh_keys" else value
    return values


def _run(run_id: str, body: Table, instances: dict[str, InstanceConfig]) -> RunConfig | None:
    body.expect(_RUN_KEYS)
    body.done()
    instance = body.text("instance", required=True, nonempty=True)
    if instance is not None and instance not in instances:
        known = ", ".join(sorted(instances)) or "none defined"
        body.problem("instance", f"no instance named {instance!r} (instances: {known})")
    workdir = body.text("workdir", required=True, nonempty=True)
    command = body.text("command", required=True, nonempty=True)
    remote_root = body.text("remote_root", required=True, nonempty=True)
    for key, value in (("workdir", workdir), ("remote_root", remote_root)):
        if value is not None and not value.startswith("/"):
            body.problem(key, "must be an absolute path on the instance")
    log = body.text("log", nonempty=True) or "train.log"
    roster = _roster(body)
    required = _required(body)
    metric = _metric(body)
    push = _push(body)
    python_set = body.text("python", nonempty=True)
    numbers = _run_numbers(body)
    smoke = _smoke(body)
    globs = body.strings("checkpoint_globs", nonempty=True) or DEFAULT_CHECKPOINT_GLOBS
    state_keys = body.strings("state_keys", nonempty=True) or DEFAULT_STATE_KEYS
    allowed_globals = body.strings("allowed_globals", nonempty=True) or ()
    if instance is None or workdir is None or command is None or remote_root is None or roster is None:
        return None
    return RunConfig(
        id=run_id, instance=instance, workdir=workdir, command=command, log=log,
        remote_root=remote_root, roster=roster, required=required or DEFAULT_REQUIRED,
        metric=metric, push=push,
        checkpoint_globs=globs, state_keys=state_keys, allowed_globals=allowed_globals,
        python=python_set or "python3", python_explicit=python_set is not None,
        smoke=smoke, notify=body.flag("notify", True), auto=_auto(body), **numbers, **_resilience(body),
        disk_budget=_size(body, "disk_budget"), checkpoint_bytes=_size(body, "checkpoint_bytes", positive=True),
    )


def _roster(body: Table) -> tuple[str, ...] | None:
    roster = body.strings("roster", required=True, nonempty=True)
    if roster is not None:
        if not roster:
            body.problem("roster", "must list at least one cell")
        for cell in roster:
            if not SAFE_NAME.match(cell):
                body.problem("roster", f"cell {cell!r} is not a safe name")
        if len(set(roster)) != len(roster):
            body.problem("roster", "lists a cell twice")
    return roster


def _required(body: Table) -> tuple[str, ...] | None:
    required = body.strings("required", nonempty=True)
    for name in required or ():
        unfit = [why for part in name.split("/") if (why := name_problem(part)) is not None]
        if unfit:
            body.problem("required", f"{escape_control(name)!r} is not a relative path inside the cell ({unfit[0]})")
    return required


def _push(body: Table) -> tuple[str, ...]:
    push = body.strings("push", nonempty=True) or ()
    for item in push:
        if item.startswith("/") or ".." in Path(item).parts:
            body.problem("push", f"{item!r} must be a path relative to the project")
    return push


AUTO_STEPS = ("pull", "verify")  # the only follow-ups a watcher may start on its own, in this order


def _auto(body: Table) -> tuple[str, ...]:
    """`auto`: "pull" and/or "verify", each once, in that order (docs/formats.md); teardown never is."""
    steps = body.strings("auto") or ()
    if any(step not in AUTO_STEPS for step in steps):
        body.problem("auto", 'teardown never starts automatically: only "pull" and "verify" may be listed, '
                     f"not {next(s for s in steps if s not in AUTO_STEPS)!r}")
        return ()
    if len(set(steps)) != len(steps) or list(steps) != sorted(steps, key=AUTO_STEPS.index):
        body.problem("auto", 'must list "pull" and/or "verify", each once, in that order')
        return ()
    return steps


def _run_numbers(body: Table) -> dict[str, Any]:
    """gpus, total_steps, stall_after and smoke_timeout, each back to its default when it is wrong."""
    return {
        "gpus": body.whole("gpus", 0, message="must be a whole number >= 0"),
        "total_steps": body.whole("total_steps", 0, message="must be a whole number >= 0 (0: read it from the log)"),
        "stall_after": body.number("stall_after", 900.0, above=True, message="must be a number of seconds > 0"),
        "smoke_timeout": body.number("smoke_timeout", DEFAULT_SMOKE_TIMEOUT_S, above=True,
                                     message="must be a number of seconds > 0"),
    }


def _resilience(body: Table) -> dict[str, Any]:
    """auto_resume, recover, network, cache_dir and mtbp_hours (docs/remote-ops.md §10, §12), each checked here."""
    from remote_gpu_trainer.networks import network_ids

    cache_dir = body.text("cache_dir", nonempty=True)
    if cache_dir is not None and not cache_dir.startswith("/"):
        body.problem("cache_dir", "must be an absolute path on the instance")
        cache_dir = None
    return {
        "auto_resume": body.flag("auto_resume", False),
        "recover": read_recover(body),
        "network": body.text("network", nonempty=True, choices=network_ids()),
        "cache_dir": cache_dir,
        "mtbp_hours": body.number("mtbp_hours", above=True, message="must be a number of hours > 0"),
    }


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _size(body: Table, key: str, *, positive: bool = False) -> int | None:
    """A size in bytes: whole bytes, or a string with a unit ("20GB", "512 MiB"). runs.<id>.disk_budget (0 turns
    the gate off) and runs.<id>.checkpoint_bytes (one checkpoint, > 0)."""
    raw = body.value(key)
    if raw is None:
        return None
    floor = 1 if positive else 0
    if _whole(raw) and raw >= floor:
        return int(raw)
    found = _SIZE.match(raw) if isinstance(raw, str) else None
    value = int(float(found.group(1)) * _SIZE_UNITS[found.group(2)]) if found is not None else None
    if value is None or value < floor:
        body.problem(key, f'must be a whole number of bytes >= {floor} or a size like "20GB" or "512MiB" '
                          "(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
        return None
    return value


def _smoke(body: Table) -> str | None:
    smoke = body.text("smoke", nonempty=True)
    if smoke is not None:
        try:
            shlex.split(smoke)
        except ValueError as exc:
            body.problem("smoke", f"cannot be split into arguments ({exc}): check the quotes")
            return None
    return smoke


def _metric(body: Table) -> Metric | None:
    raw = body.value("metric")
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"name", "direction"}:
        body.problem("metric", 'must be { name = "...", direction = "min" | "max" }')
        return None
    name, direction = raw.get("name"), raw.get("direction")
    if not isinstance(name, str) or not name:
        body.problem("metric", "needs a non-empty name")
        return None
    if direction not in ("min", "max"):
        body.problem("metric", 'direction must be "min" or "max"')
        return None
    return Metric(name=name, direction=direction)


def _number(value: Any) -> bool:
    """An int or float that is not a bool (TOML's `true` would otherwise pass as 1)."""
    return not isinstance(value, bool) and isinstance(value, int | float)


def _whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)
