"""rgt.toml: read with tomllib into typed dataclasses, every problem named by file, key and line.

Validation collects all problems in one pass (a user fixing a file wants the whole list), then raises
one ConfigError whose message is the first problem plus a count; `problems` keeps them all.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from remote_gpu_trainer.errors import ConfigError

CONFIG_NAME = "rgt.toml"
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PROVIDERS = (
    "local", "sim", "ssh", "slurm", "kubernetes", "runpod", "vastai", "lambda", "paperspace", "autodl",
)
DEFAULT_REQUIRED = ("best.pth", "best_metrics.json")
DEFAULT_CHECKPOINT_GLOBS = ("*.pth", "*.pt", "*.ckpt", "*.safetensors")
DEFAULT_STATE_KEYS = ("model_state_dict", "state_dict", "model")

_SECRET_KEY_NAME = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
_SECRET_VALUE = re.compile(
    r"^(sk-|rpa_|ghp_|gho_|xox[bp]-|AKIA)[A-Za-z0-9_\-]{8,}$|^[A-Za-z0-9_\-]{32,}$"
)

_TOP_KEYS = {"project", "instances", "runs", "signatures"}
_PROJECT_KEYS = {"name"}
_INSTANCE_KEYS = {"provider", "host", "id", "api_base", "price_per_hour", "teardown_command", "launch"}
_RUN_KEYS = {
    "instance", "workdir", "command", "log", "remote_root", "roster", "required", "metric", "push",
    "checkpoint_globs", "state_keys", "allowed_globals", "python", "stall_after", "gpus", "total_steps",
    "smoke", "smoke_timeout",
}
_LAUNCH_KEYS = {"gpu", "count", "max_price_per_hour", "image", "disk_gb", "region", "interruptible", "ssh_keys"}
# Providers whose API can create an instance (`rgt up` launches them), and what each one's create call needs.
# Lambda picks its own image (Lambda Stack) and needs a registered SSH key name; RunPod and vast.ai need an image
# and use the SSH keys already on the account.
LAUNCH_PROVIDERS = ("runpod", "vastai", "lambda")
_LAUNCH_NEEDS = {"runpod": ("image",), "vastai": ("image",), "lambda": ("ssh_keys",)}
_LAUNCH_FORBIDS = {"runpod": ("ssh_keys",), "vastai": ("ssh_keys",), "lambda": ("image",)}
DEFAULT_SMOKE_TIMEOUT_S = 300.0
DEFAULT_LAUNCH_DISK_GB = 40


@dataclass(frozen=True)
class Metric:
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
    name: str
    provider: str
    host: str | None = None
    id: str | None = None
    api_base: str | None = None
    price_per_hour: float | None = None
    teardown_command: str | None = None  # ssh: run here (no shell) after the gate, e.g. a provider CLI call
    launch: LaunchConstraint | None = None  # runpod, vastai, lambda: what `rgt up` rents when there is no id


@dataclass(frozen=True)
class RunConfig:
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


@dataclass(frozen=True)
class ProjectConfig:
    root: Path
    file: Path
    name: str
    instances: dict[str, InstanceConfig] = field(default_factory=dict)
    runs: dict[str, RunConfig] = field(default_factory=dict)
    signatures: tuple[dict[str, Any], ...] = ()  # user log signatures ([[signatures]]), checked at load

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
    try:
        # utf-8-sig: editors on Windows start the file with a byte-order mark, which TOML itself refuses
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    return load_project_text(path, text)


def load_project_text(path: Path, text: str) -> ProjectConfig:
    """Validate `text` as if it were the file at `path`: `rgt init` checks its template before writing it."""
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    return _Validator(path, text).project(data)


def table_line(path: Path, table: tuple[str, ...]) -> int | None:
    """The line of a table's header (or of its first key) in the file, for errors found after loading."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    return _Validator(path, text)._line_of(table, None)


class _Validator:
    """Walks the parsed TOML once, collecting every problem with its location."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.problems: list[str] = []

    # -- locating ----------------------------------------------------------------------------------
    def _line_of(self, table: tuple[str, ...], key: str | None) -> int | None:
        """Best-effort line number of `key` inside `[table]` (or of the table header when key is None)."""
        header = ".".join(table)
        current: str | None = "" if not table else None
        inline_prefix = ".".join(table[1:]) if len(table) > 1 else None
        for number, raw in enumerate(self.lines, start=1):
            line = raw.strip()
            match = re.match(r"^\[+\s*([^\]]+?)\s*\]+", line)
            if match:
                current = match.group(1).replace('"', "").replace(" ", "")
                if key is None and current == header:
                    return number
                continue
            if key is None:
                continue
            key_match = re.match(r"^([A-Za-z0-9_.\-\"]+)\s*=", line)
            if not key_match:
                continue
            name = key_match.group(1).replace('"', "")
            if current == header and name == key:
                return number
            if current == table[0] if table else False:
                if inline_prefix and name == f"{inline_prefix}.{key}":
                    return number
        if key is not None and table:
            return self._line_of(table, None)
        return None

    def problem(self, table: tuple[str, ...], key: str | None, message: str) -> None:
        self.problem_at(self._line_of(table, key), table, key, message)

    def problem_at(self, line: int | None, table: tuple[str, ...], key: str | None, message: str) -> None:
        where = ".".join((*table, key) if key else table) or "(top level)"
        at = f":{line}" if line else ""
        self.problems.append(f"{self.path}{at}: {where}: {message}")

    # -- helpers -------------------------------------------------------------------------------
    def _unknown_keys(self, table: tuple[str, ...], data: dict[str, Any], allowed: set[str]) -> None:
        for key in data:
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(sorted(allowed))})"
            self.problem(table, key, f"unknown key{hint}")

    def _str(self, table: tuple[str, ...], data: dict[str, Any], key: str, required: bool) -> str | None:
        if key not in data:
            if required:
                self.problem(table, None, f"missing required key {key!r}")
            return None
        value = data[key]
        if not isinstance(value, str) or not value.strip():
            self.problem(table, key, "must be a non-empty string")
            return None
        return value

    def _str_list(self, table: tuple[str, ...], data: dict[str, Any], key: str) -> tuple[str, ...] | None:
        if key not in data:
            return None
        value = data[key]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem(table, key, "must be a list of non-empty strings")
            return None
        return tuple(value)

    def _secrets(self, table: tuple[str, ...], data: dict[str, Any]) -> None:
        """Secrets never live in rgt.toml: a key-like name or value is an error (the value is never echoed)."""
        for key, value in data.items():
            if isinstance(value, dict):
                self._secrets((*table, key), value)
                continue
            if _SECRET_KEY_NAME.search(key):
                self.problem(table, key, "looks like a secret: keep API keys in environment variables "
                             "or the provider CLI's credential file, never in rgt.toml")
            elif isinstance(value, str) and _SECRET_VALUE.match(value) and "/" not in value:
                self.problem(table, key, "value looks like an API key or token: remove it from rgt.toml "
                             "and use an environment variable")

    # -- sections ----------------------------------------------------------------------------------
    def project(self, data: dict[str, Any]) -> ProjectConfig:
        self._secrets((), data)
        self._unknown_keys((), data, _TOP_KEYS)
        project = data.get("project", {})
        name = "project"
        if not isinstance(project, dict):
            self.problem((), "project", "must be a table")
        else:
            self._unknown_keys(("project",), project, _PROJECT_KEYS)
            name = self._str(("project",), project, "name", required=True) or name
        instances = self._instances(data.get("instances", {}))
        self._same_provider_id(instances)
        runs = self._runs(data.get("runs", {}), instances)
        signatures = data.get("signatures", [])
        if not isinstance(signatures, list) or not all(isinstance(row, dict) for row in signatures):
            self.problem((), "signatures", "must be [[signatures]] tables (id, pattern, severity, cause, fix, "
                         "match, nomatch)")
            signatures = []
        if self.problems:
            first = self.problems[0]
            more = f" (and {len(self.problems) - 1} more problem(s))" if len(self.problems) > 1 else ""
            error = ConfigError(first + more)
            error.problems = list(self.problems)  # type: ignore[attr-defined]
            raise error
        return ProjectConfig(
            root=self.path.parent.resolve(), file=self.path.resolve(), name=name,
            instances=instances, runs=runs, signatures=tuple(signatures),
        )

    def _instances(self, raw: Any) -> dict[str, InstanceConfig]:
        result: dict[str, InstanceConfig] = {}
        if not isinstance(raw, dict):
            self.problem((), "instances", "must be a table of instance tables")
            return result
        for name, body in raw.items():
            table = ("instances", name)
            if not SAFE_NAME.match(name):
                self.problem(table, None, "instance names use letters, digits, '.', '_' and '-'")
                continue
            if not isinstance(body, dict):
                self.problem(table, None, "must be a table")
                continue
            self._unknown_keys(table, body, _INSTANCE_KEYS)
            provider = self._str(table, body, "provider", required=True)
            if provider is not None and provider not in PROVIDERS:
                close = difflib.get_close_matches(provider, PROVIDERS, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                self.problem(table, "provider", f"unknown provider {provider!r}: {hint}"
                             f"known: {', '.join(PROVIDERS)}")
                provider = None
            price = body.get("price_per_hour")
            if price is not None and not (_number(price) and math.isfinite(price) and price >= 0):
                # TOML allows inf and nan: either would make every cost figure (and the gate's burn) meaningless
                self.problem(table, "price_per_hour", "must be a finite number >= 0 (per hour)")
                price = None
            host = self._str(table, body, "host", required=False)
            ident = self._str(table, body, "id", required=False)
            api_base = self._str(table, body, "api_base", required=False)
            teardown_command = self._str(table, body, "teardown_command", required=False)
            if provider == "ssh" and host is None:
                self.problem(table, None, 'provider "ssh" needs host = "alias" or "user@host[:port]"')
            launch = self._launch(table, provider, body["launch"]) if "launch" in body else None
            if provider is not None:
                result[name] = InstanceConfig(
                    name=name, provider=provider, host=host, id=ident, api_base=api_base,
                    price_per_hour=float(price) if price is not None else None, teardown_command=teardown_command,
                    launch=launch,
                )
        return result

    def _same_provider_id(self, instances: dict[str, InstanceConfig]) -> None:
        """Two entries with one provider and one provider id are one physical box: each would get its own
        gate, so tearing down through one could destroy results the other's runs never pulled. SSH and Slurm
        hosts are compared once ssh config has resolved them, when the project is opened (providers/box_identity.py)."""
        seen: dict[tuple[str, str], str] = {}
        for name, instance in instances.items():
            if instance.id is None:
                continue
            key = (instance.provider, instance.id.strip())
            first = seen.setdefault(key, name)
            if first != name:
                line = self._line_of(("instances", first), None)
                self.problem(("instances", name), "id", f"names the same box as instances.{first}"
                             f"{f' (line {line})' if line else ''}: provider {instance.provider!r}, id "
                             f"{instance.id!r}; keep one entry and point every run at it")

    # -- the GPU constraint `rgt up` launches from ------------------------------------------------------
    def _launch_problem(self, table: tuple[str, ...], key: str | None, message: str) -> None:
        """Locate `key` in `[instances.x.launch]`, else on the inline `launch = { ... }` line."""
        sub = (*table, "launch")
        line = self._line_of(sub, key) if self._line_of(sub, None) else None
        self.problem_at(line or self._line_of(table, "launch"), sub, key, message)

    def _launch(self, table: tuple[str, ...], provider: str | None, raw: Any) -> LaunchConstraint | None:
        if not isinstance(raw, dict):
            self.problem(table, "launch", 'must be a table: launch = { gpu = "...", max_price_per_hour = 0.8, ... }')
            return None
        for key in raw:
            if key not in _LAUNCH_KEYS:
                close = difflib.get_close_matches(key, sorted(_LAUNCH_KEYS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(sorted(_LAUNCH_KEYS))})"
                self._launch_problem(table, key, f"unknown key{hint}")
        if provider is not None and provider not in LAUNCH_PROVIDERS:
            self._launch_problem(table, None, f"provider {provider!r} has no launch API in rgt (only "
                                 f"{', '.join(LAUNCH_PROVIDERS)}): create the instance yourself and set id or host")
            return None
        problems = len(self.problems)
        values = self._launch_values(table, raw)
        for key in _LAUNCH_NEEDS.get(provider or "", ()):
            if key not in raw:
                self._launch_problem(table, None, f"provider {provider!r} needs {key!r} to launch")
        for key in _LAUNCH_FORBIDS.get(provider or "", ()):
            if key in raw:
                self._launch_problem(table, key, f"not used by provider {provider!r}: remove it")
        if provider == "lambda" and values.get("interruptible"):
            self._launch_problem(table, "interruptible", "Lambda has no spot instances: remove it or set false")
        if len(self.problems) > problems or provider is None:
            return None
        return LaunchConstraint(**values)

    def _launch_values(self, table: tuple[str, ...], raw: dict[str, Any]) -> dict[str, Any]:
        """Each key's type and range, every problem with its line; only the valid keys come back."""
        values: dict[str, Any] = {}
        checks: dict[str, tuple[Any, str]] = {
            "gpu": (lambda v: isinstance(v, str) and v.strip(), 'must be the GPU type, e.g. "RTX 4090"'),
            "max_price_per_hour": (lambda v: _number(v) and v > 0, "must be a number > 0 (per hour, whole instance)"),
            "count": (lambda v: _whole(v) and v >= 1, "must be a whole number >= 1"),
            "image": (lambda v: isinstance(v, str) and v.strip(), "must be a non-empty container image name"),
            "disk_gb": (lambda v: _whole(v) and v >= 1, "must be a whole number of GB >= 1"),
            "region": (lambda v: isinstance(v, str) and v.strip(), "must be a non-empty region or datacenter id"),
            "interruptible": (lambda v: isinstance(v, bool), "must be true or false"),
            "ssh_keys": (lambda v: isinstance(v, list) and v and all(isinstance(k, str) and k for k in v),
                         "must be a list of SSH key names registered on the account"),
        }
        for key in ("gpu", "max_price_per_hour"):
            if key not in raw:
                self._launch_problem(table, None, f"missing required key {key!r}")
        for key, (valid, message) in checks.items():
            if key not in raw:
                continue
            if not valid(raw[key]):
                self._launch_problem(table, key, message)
                continue
            value = raw[key]
            values[key] = float(value) if key == "max_price_per_hour" else tuple(value) if key == "ssh_keys" else value
        return values

    def _runs(self, raw: Any, instances: dict[str, InstanceConfig]) -> dict[str, RunConfig]:
        result: dict[str, RunConfig] = {}
        if not isinstance(raw, dict):
            self.problem((), "runs", "must be a table of run tables")
            return result
        for run_id, body in raw.items():
            table = ("runs", run_id)
            if not SAFE_NAME.match(run_id):
                self.problem(table, None, "run ids use letters, digits, '.', '_' and '-' (a safe name)")
                continue
            if not isinstance(body, dict):
                self.problem(table, None, "must be a table")
                continue
            run = self._run(run_id, table, body, instances)
            if run is not None:
                result[run_id] = run
        return result

    def _run(self, run_id: str, table: tuple[str, ...], body: dict[str, Any],
             instances: dict[str, InstanceConfig]) -> RunConfig | None:
        self._unknown_keys(table, body, _RUN_KEYS)
        instance = self._str(table, body, "instance", required=True)
        if instance is not None and instance not in instances:
            known = ", ".join(sorted(instances)) or "none defined"
            self.problem(table, "instance", f"no instance named {instance!r} (instances: {known})")
        workdir = self._str(table, body, "workdir", required=True)
        command = self._str(table, body, "command", required=True)
        remote_root = self._str(table, body, "remote_root", required=True)
        for key, value in (("workdir", workdir), ("remote_root", remote_root)):
            if value is not None and not value.startswith("/"):
                self.problem(table, key, "must be an absolute path on the instance")
        log = self._str(table, body, "log", required=False) or "train.log"
        roster = self._str_list(table, body, "roster")
        if roster is None and "roster" not in body:
            self.problem(table, None, "missing required key 'roster'")
        elif roster is not None:
            if not roster:
                self.problem(table, "roster", "must list at least one cell")
            for cell in roster:
                if not SAFE_NAME.match(cell):
                    self.problem(table, "roster", f"cell {cell!r} is not a safe name")
            if len(set(roster)) != len(roster):
                self.problem(table, "roster", "lists a cell twice")
        required = self._str_list(table, body, "required")
        if required is not None:
            for name in required:
                if not all(SAFE_NAME.match(part) for part in name.split("/")):
                    self.problem(table, "required", f"{name!r} is not a safe relative path")
        metric = self._metric(table, body.get("metric"))
        push = self._str_list(table, body, "push") or ()
        for item in push:
            if item.startswith("/") or ".." in Path(item).parts:
                self.problem(table, "push", f"{item!r} must be a path relative to the project")
        python_set = self._str(table, body, "python", required=False)
        python = python_set or "python3"
        gpus = body.get("gpus", 0)
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            self.problem(table, "gpus", "must be a whole number >= 0")
            gpus = 0
        total_steps = body.get("total_steps", 0)
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 0:
            self.problem(table, "total_steps", "must be a whole number >= 0 (0: read it from the log)")
            total_steps = 0
        stall_after = body.get("stall_after", 900)
        if isinstance(stall_after, bool) or not isinstance(stall_after, int | float) or stall_after <= 0:
            self.problem(table, "stall_after", "must be a number of seconds > 0")
            stall_after = 900
        smoke = self._str(table, body, "smoke", required=False)
        if smoke is not None:
            try:
                shlex.split(smoke)
            except ValueError as exc:
                self.problem(table, "smoke", f"cannot be split into arguments ({exc}): check the quotes")
                smoke = None
        smoke_timeout = body.get("smoke_timeout", DEFAULT_SMOKE_TIMEOUT_S)
        if not _number(smoke_timeout) or smoke_timeout <= 0:
            self.problem(table, "smoke_timeout", "must be a number of seconds > 0")
            smoke_timeout = DEFAULT_SMOKE_TIMEOUT_S
        if None in (instance, workdir, command, remote_root) or roster is None:
            return None
        assert instance is not None and workdir is not None and command is not None
        assert remote_root is not None
        return RunConfig(
            id=run_id, instance=instance, workdir=workdir, command=command, log=log,
            remote_root=remote_root, roster=roster, required=required or DEFAULT_REQUIRED,
            metric=metric, push=push,
            checkpoint_globs=self._str_list(table, body, "checkpoint_globs") or DEFAULT_CHECKPOINT_GLOBS,
            state_keys=self._str_list(table, body, "state_keys") or DEFAULT_STATE_KEYS,
            allowed_globals=self._str_list(table, body, "allowed_globals") or (),
            python=python, python_explicit=python_set is not None,
            stall_after=float(stall_after), gpus=gpus, total_steps=total_steps,
            smoke=smoke, smoke_timeout=float(smoke_timeout),
        )

    def _metric(self, table: tuple[str, ...], raw: Any) -> Metric | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or set(raw) - {"name", "direction"}:
            self.problem(table, "metric", 'must be { name = "...", direction = "min" | "max" }')
            return None
        name, direction = raw.get("name"), raw.get("direction")
        if not isinstance(name, str) or not name:
            self.problem(table, "metric", "needs a non-empty name")
            return None
        if direction not in ("min", "max"):
            self.problem(table, "metric", 'direction must be "min" or "max"')
            return None
        return Metric(name=name, direction=direction)


def _number(value: Any) -> bool:
    """An int or float that is not a bool (TOML's `true` would otherwise pass as 1)."""
    return not isinstance(value, bool) and isinstance(value, int | float)


def _whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def run_config_record(run: RunConfig) -> dict[str, Any]:
    """A run's configuration as JSON, stored with each launch and verification: the gate still covers a
    run after its table left rgt.toml, judged by the configuration it ran and was verified under."""
    return asdict(run)


def run_config_from_record(record: dict[str, Any]) -> RunConfig | None:
    """The RunConfig a record holds, or None when it is not one (an old database's empty record)."""
    try:
        values = dict(record)
        metric = values.get("metric")
        values["metric"] = Metric(**metric) if isinstance(metric, dict) else None
        for name, value in list(values.items()):
            if isinstance(value, list):
                values[name] = tuple(value)
        return RunConfig(**values)
    except (TypeError, ValueError):
        return None
