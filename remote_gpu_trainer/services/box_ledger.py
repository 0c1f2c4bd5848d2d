"""The box's ledger (docs/gate.md §7.2): what was launched on a box, written on the box itself.

rgt's own memory (rgt.toml, the state database, instance names) can be edited, lost or replaced; the box
cannot be talked out of what it holds. So every launch writes, on the box and before the job starts, one
small JSON record per run in a fixed place: `~/.rgt-ledger/<project-id>/<run-id>.json` in the login's home,
plus a copy in the run's control folder. Teardown reads every entry there, of every project, and an entry
not verified home keeps the gate closed (services/gate.py). `rgt adopt` (services/adopt.py) rebuilds the local
launch records from it when the state database is gone.

A ledger is written only on boxes whose profile has an action that destroys a disk (a cloud or simulated
box, a generic SSH box): a Slurm job's cancel or the own workstation destroy no storage, so there is
nothing for a ledger to protect.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_gpu_trainer.config.project import ProjectConfig, RunConfig
from remote_gpu_trainer.errors import RgtError
from remote_gpu_trainer.fsutil import atomic_write
from remote_gpu_trainer.profile_facts import Profile
from remote_gpu_trainer.providers.base import Transport
from remote_gpu_trainer.run_records import run_config_from_record, run_config_record
from remote_gpu_trainer.strict_json import loads_strict
from remote_gpu_trainer.text import escape_control

SCHEMA = "rgt-ledger/v1"
LEDGER_DIR = ".rgt-ledger"
ENTRY_LIMIT = 64 << 10  # one entry is a few hundred bytes; a bigger file is not one of rgt's
MAX_ENTRIES = 10_000  # a box with more is not read to the end: unknown, never a partial answer taken as whole
PROJECT_ID_FILE = "project-id"
_ID = re.compile(r"^[0-9a-f]{32}$")
_HOMES: weakref.WeakKeyDictionary[Transport, str] = weakref.WeakKeyDictionary()  # box_home's answers
_KEYS = frozenset({"schema", "project_id", "project_root", "run_id", "launch_id", "instance", "result_root",
                   "control_folder", "log", "cells", "command", "started_at", "config"})


class LedgerUnreadable(RgtError):
    """The box answered, or did not, in a way that leaves its ledger unknown: never read as empty."""


@dataclass(frozen=True)
class LedgerEntry:
    """One run launched on the box, as the box records it."""

    project_id: str
    project_root: str
    run_id: str
    launch_id: str
    instance: str
    result_root: str
    control_folder: str
    log: str
    cells: tuple[str, ...]
    command: str
    started_at: str
    config: dict[str, Any]

    def run_config(self) -> RunConfig | None:
        """The run's table as it was launched (the launch-time bindings), or None when the box's copy is not
        one rgt can read back."""
        run = run_config_from_record(self.config)
        return run if run is not None and run.id == self.run_id else None

    def to_json(self) -> bytes:
        body = {"schema": SCHEMA, "project_id": self.project_id, "project_root": self.project_root,
                "run_id": self.run_id, "launch_id": self.launch_id, "instance": self.instance,
                "result_root": self.result_root, "control_folder": self.control_folder, "log": self.log,
                "cells": list(self.cells), "command": self.command, "started_at": self.started_at,
                "config": self.config}
        return (json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()

    def loss_name(self) -> str:
        """What the user types to accept losing this entry's results: the first 8 digits of its project's id
        and its run, so two projects' runs of one name stay apart."""
        return f"{self.project_id[:8]}/{escape_control(self.run_id)}"

    def shown(self) -> str:
        """How the plan names the entry: its run, its project's folder, its launch time; box text escaped."""
        return (f"run {escape_control(self.run_id)} of {escape_control(self.project_root)} (launched "
                f"{escape_control(self.started_at)})")


def keeps_ledger(profile: Profile) -> bool:
    """A box whose profile can destroy a disk keeps a ledger; teardown reads it only for such actions."""
    return any(action.destroys for action in profile.actions)


def parse_entry(data: bytes, where: str) -> LedgerEntry:
    """One entry, every key checked; anything else is LedgerUnreadable naming `where`."""
    try:
        body = loads_strict(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise LedgerUnreadable(f"{where}: not a ledger entry ({exc})") from None
    if not isinstance(body, dict) or set(body) != _KEYS or body.get("schema") != SCHEMA:
        raise LedgerUnreadable(f"{where}: not a {SCHEMA} entry")
    texts = ("project_id", "project_root", "run_id", "launch_id", "instance", "result_root", "control_folder",
             "log", "command", "started_at")
    if not all(isinstance(body[key], str) for key in texts) or not isinstance(body["config"], dict):
        raise LedgerUnreadable(f"{where}: a value has the wrong type")
    cells = body["cells"]
    if not isinstance(cells, list) or not all(isinstance(cell, str) for cell in cells):
        raise LedgerUnreadable(f"{where}: cells is not a list of names")
    if not _ID.match(body["project_id"]) or not body["run_id"]:
        raise LedgerUnreadable(f"{where}: project_id or run_id is malformed")
    return LedgerEntry(
        project_id=body["project_id"], project_root=body["project_root"], run_id=body["run_id"],
        launch_id=body["launch_id"], instance=body["instance"], result_root=body["result_root"],
        control_folder=body["control_folder"], log=body["log"], cells=tuple(cells), command=body["command"],
        started_at=body["started_at"], config=body["config"])


def project_id(project: ProjectConfig) -> str:
    """The project's id, minted once (`.rgt/project-id`). Losing `.rgt/` mints a new one; the box's entries
    also carry the project's folder, so they are still recognised as this project's (`is_ours`)."""
    path = project.state_dir / PROJECT_ID_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if _ID.match(text):
        return text
    minted = _new_id()
    project.state_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (minted + "\n").encode())
    return minted


def _new_id() -> str:
    """A fresh random id (uuid4, hex). uuid is imported here, when an id is minted: it loads `platform` with it,
    and the readers of the ledger (every `rgt --report`, docs/architecture.md §5) mint none."""
    import uuid

    return uuid.uuid4().hex


def is_ours(entry: LedgerEntry, project: ProjectConfig, own_id: str) -> bool:
    """This project's entry: the same id, or the same project folder (an id minted again after `.rgt/` was
    lost)."""
    return entry.project_id == own_id or entry.project_root == str(project.root)


def new_entry(project: ProjectConfig, run: RunConfig, *, control_folder: str, log: str, started_at: str,
              transport: Transport) -> LedgerEntry:
    """The entry for a launch about to start: the launch-time bindings, with paths as the box sees them."""
    return LedgerEntry(
        project_id=project_id(project), project_root=str(project.root), run_id=run.id,
        launch_id=_new_id(), instance=run.instance, result_root=transport.resolve(run.remote_root),
        control_folder=transport.resolve(control_folder), log=transport.resolve(log), cells=tuple(run.roster),
        command=run.command, started_at=started_at, config=run_config_record(run))


async def box_home(transport: Transport, timeout: float = 30.0) -> str:
    """The login's home on the box, as an absolute path in the box's own namespace. Asked once per transport
    (one login on one box, its host key pinned): the gate reads the ledger on every refresh of every box, and
    each ask was a command channel, most of an idle dashboard's cost with 50 boxes (issue 29)."""
    if transport.fixed_home is not None:
        return transport.fixed_home
    known = _HOMES.get(transport)
    if known is not None:
        return known
    result = await transport.run('printf %s "$HOME"', timeout=timeout)
    home = result.text.strip()
    if result.rc != 0 or not home.startswith("/") or "\n" in home:
        raise LedgerUnreadable(f"the box did not name its home folder (exit {result.rc})")
    _HOMES[transport] = home = home.rstrip("/") or "/"
    return home


def entry_path(home: str, entry: LedgerEntry) -> str:
    return f"{home}/{LEDGER_DIR}/{entry.project_id}/{entry.run_id}.json"


async def write_entry(transport: Transport, entry: LedgerEntry, copy_in: str) -> str:
    """Write the entry into the box's ledger and a copy into `copy_in` (the run's control folder); returns
    the ledger path. A box that cannot take it stops the launch: a run the box does not record is a run
    teardown could not see."""
    home = await box_home(transport)
    path = entry_path(home, entry)
    folder = path.rsplit("/", 1)[0]
    made = await transport.run(f"mkdir -p {shlex.quote(transport.resolve(folder))}", timeout=30)
    if made.rc != 0:
        raise RgtError(f"cannot create the box's ledger folder {folder}: {made.error_text.strip()[:200]}")
    await transport.put_bytes(entry.to_json(), path)
    await transport.put_bytes(entry.to_json(), f"{copy_in.rstrip('/')}/ledger.json")
    return path


async def read_ledger(transport: Transport, timeout: float = 30.0) -> tuple[LedgerEntry, ...]:
    """Every entry on the box, of every project. No ledger folder is an empty ledger (the box never had a
    run of rgt's, or predates ledgers); anything that cannot be read is LedgerUnreadable, never empty."""
    home = await box_home(transport, timeout)
    root = f"{home}/{LEDGER_DIR}"
    try:
        if await transport.stat(root) is None:
            return ()
        entries: list[LedgerEntry] = []
        for project in sorted(await transport.listdir(root)):
            for name in sorted(await transport.listdir(f"{root}/{project}")):
                if len(entries) >= MAX_ENTRIES:
                    raise LedgerUnreadable(f"{root} holds more than {MAX_ENTRIES} entries: not read to the end")
                where = f"{root}/{project}/{name}"
                data, _ = await transport.tail(where, 0, ENTRY_LIMIT + 1)
                if len(data) > ENTRY_LIMIT:
                    raise LedgerUnreadable(f"{where}: larger than {ENTRY_LIMIT} bytes")
                entry = parse_entry(data, where)
                if entry.project_id != project or f"{entry.run_id}.json" != name:
                    raise LedgerUnreadable(f"{where}: the entry names another place ({entry.project_id}/"
                                           f"{escape_control(entry.run_id)})")
                entries.append(entry)
    except LedgerUnreadable:
        raise
    except (RgtError, OSError, TimeoutError) as exc:
        raise LedgerUnreadable(f"{root}: {escape_control(str(exc)) or type(exc).__name__}") from None
    return tuple(entries)


def _cache_path(project: ProjectConfig, instance: str) -> Path:
    digest = hashlib.sha256(instance.encode()).hexdigest()[:16]
    return project.state_dir / "ledgers" / f"{digest}.json"


def cache_ledger(project: ProjectConfig, instance: str, entries: tuple[LedgerEntry, ...]) -> None:
    """Keep the ledger as last read: when the box stops answering, the runs it held (of any project) are
    still known (a copy, never the evidence that a run is home)."""
    path = _cache_path(project, instance)
    body = [json.loads(entry.to_json()) for entry in entries]
    data = (json.dumps(body, sort_keys=True) + "\n").encode()
    try:
        if _read_or_none(path) == data:
            return  # as kept already: the gate reads the ledger each refresh, and a write costs two fsyncs (issue 29)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
    except OSError:
        pass  # a read-only project folder: the copy is a convenience, the gate does not rest on it


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def cached_ledger(project: ProjectConfig, instance: str) -> tuple[LedgerEntry, ...]:
    """The copy `cache_ledger` kept, or nothing; a damaged copy is no copy."""
    path = _cache_path(project, instance)
    try:
        body = json.loads(path.read_bytes())
        return tuple(parse_entry(json.dumps(item).encode(), str(path)) for item in body)
    except (OSError, ValueError, TypeError, LedgerUnreadable):
        return ()

