"""Write a run capsule (run.json, config.yaml, train.csv, test/<test-id>/metrics.json and results.csv) from a
training or evaluation script, in the formats VERIFY reads (docs/verify.md §5).

This file is pushed to the box beside the training script and imported there as `import rgt_capsule` (get a
copy with `rgt capsule --write DIR`), so it is stdlib-only and keeps to Python 3.8 (no `match`, no `X | Y`
outside annotations). torch is used only when it is importable, to name the hardware.

Usage, in the script that trains (its folder is the cell, `<result root>/<cell>/`):

    import rgt_capsule

    cap = rgt_capsule.Capsule("out/seed0", run_id="ours-full", cell="seed0", config=cfg, seed=0,
                              split_manifest="splits/main.json", env_lock="requirements.lock",
                              determinism=["cudnn.benchmark=False"], overrides=sys.argv[1:])
    for epoch in range(1, epochs + 1):
        ...
        cap.log_step(step=step, epoch=epoch, loss=loss, lr=lr, val={"acc": val_acc})
        torch.save(model.state_dict(), "out/seed0/best.pth")
        cap.checkpoint("best", "out/seed0/best.pth", epoch=epoch, step=step)
    cap.write_test("main", split="test", metrics={"acc": (0.91, "higher_is_better", "mean", "acc")},
                   items=[{"item_id": "img001", "target": 3, "pred": 3, "acc": 1.0}, ...])
    cap.close(selection={"criterion": "acc", "split": "val", "direction": "higher_is_better",
                         "epoch": 87, "step": 69600, "value": 0.93},
              training={"world_size": 1, "per_device_batch": 16, "epochs": 100, "precision": "bf16"})

Every file is written whole or not at all (a temp name in the same folder, fsync, rename), so a crash never
leaves half a file; run.json is written last, by `close`, so a capsule without one was not closed. Put the
result folder (and __pycache__/) in .gitignore when it lies inside the repository: the dirty-tree hash counts
untracked files.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

RUN_SCHEMA = "remote-gpu-trainer/RUN/v1"
METRICS_SCHEMA = "remote-gpu-trainer/METRICS/v1"
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
DIRECTIONS = {"higher_is_better": "higher_is_better", "lower_is_better": "lower_is_better",
              "max": "higher_is_better", "min": "lower_is_better"}
AGGREGATES = ("mean", "median", "custom")  # and pooled:<registered fn>
TRAIN_COLUMNS = ("step", "epoch", "loss", "lr", "grad_norm", "throughput")
ENV_KEYS = ("PYTHONUNBUFFERED", "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES")
CHUNK = 1 << 20
TOOL_TIMEOUT_S = 60


# -- bytes on disk ---------------------------------------------------------------------------------------------

def canonical_json(value: Any) -> bytes:
    """The one form hashes are taken over (the capsule contract): sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write(path: str, data: bytes) -> None:
    """Replace `path` with `data` so a reader sees the old file or the whole new one, never a half."""
    folder = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(folder, f".rgt-tmp-{os.path.basename(path)}.{os.getpid()}")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def json_bytes(value: Any, what: str) -> bytes:
    """Pretty JSON for a file people read too; NaN and infinity are refused, naming the file."""
    try:
        return (json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    except ValueError as exc:
        raise ValueError(f"{what}: {exc} (NaN and infinity are not numbers JSON can hold)") from None


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017 - datetime.UTC is 3.11+


def _tool(argv: Sequence[str], cwd: str | None = None) -> bytes | None:
    """A command's stdout, or None when it is not installed, fails or hangs: provenance that cannot be read
    is recorded as null, never a crash of the training script."""
    try:
        done = subprocess.run(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


# -- YAML without PyYAML ---------------------------------------------------------------------------------------

_YAML_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"}
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_YAML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _yaml_string(text: str) -> str:
    """A double-quoted YAML scalar: printable characters as they are, everything else escaped, so the
    reader never folds a line break or trips on a control character."""
    out = []
    for char in text:
        code = ord(char)
        if char in _YAML_ESCAPES:
            out.append(_YAML_ESCAPES[char])
        elif 0x20 <= code < 0x7F or (code >= 0xA0 and not 0xD800 <= code < 0xE000
                                     and char not in "\u2028\u2029\ufeff\ufffe\uffff"):
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


def _yaml_scalar(value: Any, where: str) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"config {where}: {value} is not a finite number")
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            text = text.replace("e", ".0e", 1)  # YAML 1.1 reads 1e-05 as a string; 1.0e-05 is a float
        return text
    if isinstance(value, str):
        return _yaml_string(value)
    raise TypeError(f"config {where}: {type(value).__name__} is not a YAML scalar "
                    "(use dicts, lists, str, int, float, bool, None)")


def _yaml_key(key: Any, where: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"config {where}: key {key!r} is not a string")
    plain = _PLAIN_KEY.match(key) and key.lower() not in _YAML_WORDS
    return key if plain else _yaml_string(key)


def _yaml_lines(value: Any, indent: str, where: str) -> list[str]:
    """The block lines of a non-empty dict or list, each starting with `indent`."""
    lines: list[str] = []
    items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, Mapping) else enumerate(value)
    for key, item in items:
        head = indent + (f"{_yaml_key(key, where)}:" if isinstance(value, Mapping) else "-")
        inner = f"{where}.{key}" if isinstance(value, Mapping) else f"{where}[{key}]"
        if isinstance(item, (Mapping, list, tuple)) and len(item) > 0:
            lines.append(head)
            lines.extend(_yaml_lines(item, indent + "  ", inner))
        elif isinstance(item, Mapping):
            lines.append(head + " {}")
        elif isinstance(item, (list, tuple)):
            lines.append(head + " []")
        else:
            lines.append(head + " " + _yaml_scalar(item, inner))
    return lines


def to_yaml(config: Mapping[str, Any]) -> str:
    """Block YAML of nested dicts, lists and scalars that `yaml.safe_load` reads back as the same value."""
    if not config:
        return "{}\n"
    return "\n".join(_yaml_lines(config, "", "")) + "\n"


def plain_config(value: Any, where: str = "") -> Any:
    """The config as JSON and YAML hold it (tuples become lists); anything else is refused, naming it."""
    if isinstance(value, Mapping):
        for key in value:
            _yaml_key(key, where)
        return {k: plain_config(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_config(v, f"{where}[{i}]") for i, v in enumerate(value)]
    _yaml_scalar(value, where or "(top)")
    return value


# -- provenance ------------------------------------------------------------------------------------------------

def _git(repo: str, *args: str) -> bytes | None:
    return _tool(["git", "-C", repo, *args])


def dirty_diff_sha256(top: str) -> str | None:
    """sha256 of `git diff --binary HEAD` then `path NUL sha256 LF` per untracked non-ignored file in sorted
    order; None on a clean tree. Colour, external diff tools and prefixes are pinned so a user's git config
    cannot change the bytes."""
    diff = _git(top, "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                "--src-prefix=a/", "--dst-prefix=b/", "HEAD")
    listed = _git(top, "ls-files", "--others", "--exclude-standard", "-z")
    if diff is None or listed is None:
        return None
    body = bytearray(diff)
    for name in sorted(p for p in listed.split(b"\0") if p):
        path = os.path.join(os.fsencode(top), name)
        if os.path.isdir(path) and not os.path.islink(path):
            continue  # an untracked nested repository is listed as its folder: not a file
        data = os.readlink(path) if os.path.islink(path) else None
        digest = sha256_bytes(os.fsencode(data)) if data is not None else sha256_file(os.fsdecode(path))
        body += name + b"\0" + digest.encode("ascii") + b"\n"
    return sha256_bytes(bytes(body)) if body else None


def code_provenance(code_dir: str) -> dict[str, Any]:
    """The commit, whether the tree is dirty and the hash of the difference; null fields without git."""
    top = _git(code_dir, "rev-parse", "--show-toplevel")
    commit = _git(code_dir, "rev-parse", "--verify", "HEAD") if top is not None else None
    if top is None or commit is None:
        return {"repo": None, "commit": None, "dirty": None, "dirty_diff_sha256": None}
    top_dir = os.fsdecode(top.strip())
    remote = _git(top_dir, "remote", "get-url", "origin")
    diff_sha = dirty_diff_sha256(top_dir)
    return {"repo": remote.decode("utf-8", "replace").strip() if remote else None,
            "commit": commit.decode("ascii").strip(), "dirty": diff_sha is not None, "dirty_diff_sha256": diff_sha}


def data_sha256(members: Mapping[str, Any]) -> str:
    """sha256 of the sorted lines "{split}\\t{id}\\t{sha256}\\n" of a split manifest's members."""
    lines = sorted("{}\t{}\t{}\n".format(split, row["id"], row.get("sha256") or "")
                   for split, rows in members.items() for row in rows)
    return sha256_bytes("".join(lines).encode("utf-8"))


def data_provenance(split_manifest: str | None, dataset: str | None) -> dict[str, Any]:
    """The split manifest the run read, its sha256 and the hash of its (split, id, sha256) lines."""
    if split_manifest is None:
        return {"dataset": dataset, "split_manifest": None, "split_manifest_sha256": None, "data_sha256": None}
    with open(split_manifest, "rb") as handle:
        raw = handle.read()
    manifest = json.loads(raw.decode("utf-8"))
    members = manifest.get("members") if isinstance(manifest, dict) else None
    if not isinstance(members, dict) or not all(isinstance(rows, list) for rows in members.values()):
        raise ValueError(f"{split_manifest}: no `members` object of split -> list of {{id, path, sha256}}")
    return {"dataset": dataset if dataset is not None else manifest.get("dataset"),
            "split_manifest": split_manifest.replace(os.sep, "/"), "split_manifest_sha256": sha256_bytes(raw),
            "data_sha256": data_sha256(members)}


def env_lock_provenance(env_lock: str | None) -> dict[str, Any]:
    """The named lock file's hash; without one, the hash of `pip freeze` (path null)."""
    if env_lock is not None:
        return {"path": env_lock.replace(os.sep, "/"), "sha256": sha256_file(env_lock)}
    frozen = _tool([sys.executable, "-m", "pip", "freeze"])
    return {"path": None, "sha256": sha256_bytes(frozen) if frozen is not None else None}


def _smi() -> list[list[str]]:
    """nvidia-smi's (name, driver) per GPU, or [] when it is absent or fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = _tool(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    rows = [[part.strip() for part in line.split(",")] for line in (out or b"").decode("utf-8", "replace").splitlines()]
    return [row for row in rows if len(row) == 2 and row[0]]


def _torch() -> Any:
    """torch when the script already imported it or it is importable; None when the box trains without it."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    try:
        import torch
    except Exception:  # a broken CUDA install raises OSError and friends, not only ImportError
        return None
    return torch


def hardware() -> dict[str, Any]:
    """The GPU, count, driver, CUDA and torch: from torch when importable, else nvidia-smi, else cpu."""
    gpus = _smi()
    driver = gpus[0][1] if gpus else None
    torch = _torch()
    if torch is not None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return {"gpu": torch.cuda.get_device_name(0) if count else "cpu", "count": count,
                "driver": driver if count else None, "cuda": torch.version.cuda, "torch": str(torch.__version__)}
    if gpus:
        return {"gpu": gpus[0][0], "count": len(gpus), "driver": driver, "cuda": None, "torch": None}
    return {"gpu": "cpu", "count": 0, "driver": None, "cuda": None, "torch": None}


def provenance_hash(provenance: Mapping[str, Any]) -> str:
    """"sha256:" + sha256(canonical_json(P)): the content address of a capsule's inputs."""
    hw = provenance["hardware"]
    body = {
        "config_sha256": provenance["config"]["sha256"], "code_commit": provenance["code"]["commit"],
        "dirty_diff_sha256": provenance["code"]["dirty_diff_sha256"],
        "data_sha256": provenance["data"]["data_sha256"],
        "split_manifest_sha256": provenance["data"]["split_manifest_sha256"], "seed": provenance["seed"],
        "determinism_flags": sorted(provenance["determinism"]["flags"]),
        "env_lock_sha256": provenance["env_lock"]["sha256"],
        "hardware": {key: hw.get(key) for key in ("gpu", "count", "driver", "cuda", "torch")},
    }
    return "sha256:" + sha256_bytes(canonical_json(body))


# -- the capsule -----------------------------------------------------------------------------------------------

def _safe_id(value: str, what: str) -> str:
    if not isinstance(value, str) or not SAFE_ID.match(value):
        raise ValueError(f"{what} {value!r} is not an id (letters, digits, '.', '_', '-'; not starting with a symbol)"
                         )
    return value


def _csv_bytes(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def _columns(rows: Iterable[Mapping[str, Any]], first: Sequence[str]) -> list[str]:
    """Every column any row has: the known ones first in their order, then the rest as first seen."""
    seen = [c for c in first if any(c in row for row in rows)]
    for row in rows:
        seen += [key for key in row if key not in seen]
    return seen


def metric_block(name: str, spec: Any) -> dict[str, Any]:
    """One metrics.json block from (value, direction, aggregate, column[, unit]) or a dict of those keys."""
    if isinstance(spec, Mapping):
        fields = dict(spec)
    elif isinstance(spec, (tuple, list)) and 4 <= len(spec) <= 5:
        fields = dict(zip(("value", "direction", "aggregate", "column", "unit"), spec))  # noqa: B905 - 3.8
    else:
        raise ValueError(f"metric {name}: give (value, direction, aggregate, column[, unit]) or a dict")
    value = fields.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"metric {name}: value {value!r} is not a finite number")
    direction = DIRECTIONS.get(str(fields.get("direction")))
    if direction is None:
        raise ValueError("metric {}: direction {!r} is not higher_is_better or lower_is_better"
                         .format(name, fields.get("direction")))
    aggregate = str(fields.get("aggregate") or "mean")
    if aggregate not in AGGREGATES and not aggregate.startswith("pooled:"):
        raise ValueError(f"metric {name}: aggregate {aggregate!r} is not mean, median, pooled:<fn> or custom")
    return {"value": value, "direction": direction, "unit": fields.get("unit"), "aggregate": aggregate,
            "column": fields.get("column")}


def _items_rows(items: Sequence[Mapping[str, Any]], split: str) -> list[dict[str, Any]]:
    """Per-item rows with a unique string item_id each and their split; a duplicate id is refused."""
    rows, seen = [], set()
    for index, item in enumerate(items):
        if item.get("item_id") is None:
            raise ValueError(f"items[{index}] has no item_id")
        item_id = str(item["item_id"])
        if item_id in seen:
            raise ValueError(f"items: item_id {item_id!r} appears twice (item ids are unique)")
        seen.add(item_id)
        rows.append(dict(item, item_id=item_id, split=item.get("split", split)))
    return rows


class Capsule:
    """One cell's capsule being written: config.yaml at once, train.csv as steps are logged, test artifacts
    as they are evaluated, run.json at `close`. A capsule is written once: a folder that already holds one
    is refused."""

    def __init__(self, out_dir: str, *, run_id: str, cell: str, config: Mapping[str, Any], seed: int | None,
                 exp_id: str | None = None, task: str | None = None, split_manifest: str | None = None,
                 dataset: str | None = None, env_lock: str | None = None, determinism: Sequence[str] = (),
                 overrides: Sequence[str] = (), argv: Sequence[str] | None = None, code_dir: str = ".",
                 hardware_info: Mapping[str, Any] | None = None, host: Mapping[str, Any] | None = None,
                 tracker: Mapping[str, Any] | None = None, rerun_of: str | None = None,
                 flush_every_s: float = 0.0) -> None:
        self.out_dir = os.fspath(out_dir)
        self.run_id, self.cell = _safe_id(run_id, "run_id"), _safe_id(cell, "cell")
        for name in ("run.json", "config.yaml", "train.csv"):
            if os.path.lexists(os.path.join(self.out_dir, name)):
                raise FileExistsError(f"{self.out_dir}: already holds {name} "
                                      "(a capsule is written once: use a new folder)")
        os.makedirs(self.out_dir, exist_ok=True)
        self.config = plain_config(config)
        self.created_at = now_utc()
        self.head = {"exp_id": exp_id or run_id, "task": task, "rerun_of": rerun_of}
        self.command = {"argv": list(argv) if argv is not None else ["python"] + sys.argv,
                        "overrides": list(overrides), "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ}}
        self.provenance = self._provenance(code_dir, seed, split_manifest, dataset, env_lock, determinism,
                                           hardware_info, host, tracker)
        self.rows: list[dict[str, Any]] = []
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.tests: list[dict[str, Any]] = []
        self.flush_every_s, self._flushed_at, self.closed = flush_every_s, 0.0, False
        atomic_write(self.path("config.yaml"), to_yaml(self.config).encode("utf-8"))

    def _provenance(self, code_dir: str, seed: int | None, split_manifest: str | None, dataset: str | None,
                    env_lock: str | None, determinism: Sequence[str], hardware_info: Mapping[str, Any] | None,
                    host: Mapping[str, Any] | None, tracker: Mapping[str, Any] | None) -> dict[str, Any]:
        """Every input binding of run.json's provenance, gathered before the capsule writes a byte."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"seed {seed!r} is not an integer (or None)")
        prov: dict[str, Any] = {
            "provenance_hash": None,
            "config": {"path": "config.yaml", "sha256": sha256_bytes(canonical_json(self.config))},
            "code": code_provenance(code_dir),
            "data": data_provenance(split_manifest, dataset),
            "seed": seed,
            "determinism": {"declared": bool(determinism), "flags": sorted(str(f) for f in determinism)},
            "env_lock": env_lock_provenance(env_lock),
            "hardware": dict(hardware_info) if hardware_info is not None else hardware(),
            "command": self.command,
            "host": dict(host) if host is not None else {"profile": None, "instance": socket.gethostname()},
        }
        if tracker is not None:
            prov["tracker"] = dict(tracker)
        prov["provenance_hash"] = provenance_hash(prov)
        return prov

    def path(self, *parts: str) -> str:
        return os.path.join(self.out_dir, *parts)

    def _open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self.out_dir}: the capsule is closed (a capsule is written once)")

    def log_step(self, step: int, *, epoch: int | None = None, loss: float | None = None, lr: float | None = None,
                 grad_norm: float | None = None, throughput: float | None = None,
                 val: Mapping[str, Any] | None = None, **extra: Any) -> None:
        """One train.csv row; `val={"acc": 0.9}` becomes the column `val/acc`. Steps strictly increase."""
        self._open()
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"step {step!r} is not an integer")
        if self.rows and step <= self.rows[-1]["step"]:
            raise ValueError("step {} is not after the last logged step {} (train.csv steps strictly increase)"
                             .format(step, self.rows[-1]["step"]))
        row = {"step": step, "epoch": epoch, "loss": loss, "lr": lr, "grad_norm": grad_norm, "throughput": throughput}
        row = {key: value for key, value in row.items() if value is not None}
        row.update((f"val/{key}", value) for key, value in (val or {}).items())
        row.update(extra)
        self.rows.append(row)
        if time.monotonic() - self._flushed_at >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        """Rewrite train.csv whole (atomically) with every row logged so far."""
        atomic_write(self.path("train.csv"), _csv_bytes(_columns(self.rows, TRAIN_COLUMNS), self.rows))
        self._flushed_at = time.monotonic()

    def checkpoint(self, name: str, path: str, *, epoch: int | None = None, step: int | None = None) -> str:
        """Bind a saved checkpoint file (inside the capsule folder) under `name` ("best", "last"); returns its
        sha256. Call it again each time the file is saved anew."""
        self._open()
        _safe_id(name, "checkpoint name")
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(self.out_dir))
        if rel.startswith(os.pardir) or os.path.isabs(rel):
            raise ValueError(f"checkpoint {name}: {path} is outside the capsule folder {self.out_dir} "
                             "(save or copy it there)")
        entry: dict[str, Any] = {"path": rel.replace(os.sep, "/"), "sha256": sha256_file(path), "epoch": epoch}
        if step is not None:
            entry["step"] = step
        self.checkpoints[name] = entry
        return str(entry["sha256"])

    def write_test(self, test_id: str, *, metrics: Mapping[str, Any], split: str = "test", n: int | None = None,
                   items: Sequence[Mapping[str, Any]] | None = None, checkpoint: str = "best",
                   protocol_id: str | None = None, ground_truth_status: str = "available",
                   metric_applicability: str = "applicable", vis: Mapping[str, Any] | None = None,
                   eval_argv: Sequence[str] | None = None, eval_overrides: Sequence[str] = (),
                   evaluated: str | None = None) -> str:
        """test/<test_id>/metrics.json, then results.csv with one row per item; returns the metrics path.
        `checkpoint_sha256` is the hash of the file the evaluation loaded: `evaluated` when the caller names it
        (the truth when it is not the bound checkpoint, which VERIFY V26 then reports), else the bound one.
        Everything is checked before the first byte is written."""
        self._open()
        _safe_id(test_id, "test_id")
        if any(t["test_id"] == test_id for t in self.tests):
            raise ValueError(f"test {test_id!r} was already written to this capsule")
        if checkpoint not in self.checkpoints:
            raise ValueError(f"test {test_id}: checkpoint {checkpoint!r} is not bound yet (call cap.checkpoint first)"
                             )
        blocks = {str(name): metric_block(str(name), spec) for name, spec in metrics.items()}
        rows = _items_rows(items, split) if items is not None else None
        if n is None and rows is None:
            raise ValueError(f"test {test_id}: give n (the number of test items) or the items")
        count = n if n is not None else len(rows or [])
        self._check_columns(test_id, blocks, rows)
        body = {"schema": METRICS_SCHEMA, "run_id": self.run_id, "cell": self.cell, "test_id": test_id,
                "split": split, "n": count,
                "checkpoint_sha256": sha256_file(evaluated) if evaluated else self.checkpoints[checkpoint]["sha256"],
                "protocol_id": protocol_id,
                "eval_command": self._eval_command(eval_argv, eval_overrides),
                "metrics": blocks, "metric_applicability": metric_applicability, "created_at": now_utc()}
        data = json_bytes(body, f"test {test_id} metrics.json")
        folder = self.path("test", test_id)
        os.makedirs(folder, exist_ok=True)
        atomic_write(os.path.join(folder, "metrics.json"), data)
        if rows:
            atomic_write(os.path.join(folder, "results.csv"), _csv_bytes(_columns(rows, ("item_id", "split")), rows))
        entry: dict[str, Any] = {"test_id": test_id, "split": split, "protocol_id": protocol_id,
                                 "checkpoint": checkpoint, "n": count, "ground_truth_status": ground_truth_status}
        if vis is not None:
            entry["vis"] = dict(vis)
        self.tests.append(entry)
        return os.path.join(folder, "metrics.json")

    def _eval_command(self, argv: Sequence[str] | None, overrides: Sequence[str]) -> dict[str, Any]:
        """The evaluation's command: this script's own unless the caller names another."""
        if argv is None:
            return {"argv": self.command["argv"], "overrides": self.command["overrides"]}
        return {"argv": list(argv), "overrides": list(overrides)}

    @staticmethod
    def _check_columns(test_id: str, blocks: Mapping[str, Any], rows: list[dict[str, Any]] | None) -> None:
        """A metric that names a per-item column must find it in the items, or VERIFY cannot re-derive it."""
        if not rows:
            return
        present = set(_columns(rows, ()))
        for name, block in blocks.items():
            if block["column"] is not None and block["column"] not in present:
                raise ValueError("test {}: metric {} names column {!r}, which no item has"
                                 .format(test_id, name, block["column"]))

    def close(self, *, selection: Mapping[str, Any], training: Mapping[str, Any] | None = None) -> str:
        """Write train.csv a last time, then run.json: the capsule is closed. Refused (nothing written) when a
        required part is missing or a bound checkpoint changed since it was bound."""
        self._open()
        missing = [key for key in ("criterion", "split", "direction") if key not in selection]
        if missing:
            raise ValueError("selection lacks {}".format(", ".join(missing)))
        if "best" not in self.checkpoints:
            raise ValueError("no 'best' checkpoint bound (cap.checkpoint('best', path, epoch=...))")
        if not self.tests:
            raise ValueError("no test written (cap.write_test(...)): run.json needs at least one")
        for name, entry in self.checkpoints.items():
            if sha256_file(self.path(entry["path"])) != entry["sha256"]:
                raise ValueError("checkpoint {}: {} changed after it was bound: call cap.checkpoint again after "
                                 "saving it".format(name, entry["path"]))
        record = {"schema": RUN_SCHEMA, "run_id": self.run_id, "cell": self.cell, "exp_id": self.head["exp_id"],
                  "task": self.head["task"], "created_at": self.created_at, "closed_at": now_utc(),
                  "rerun_of": self.head["rerun_of"], "provenance": self.provenance,
                  "training": dict(training or {}), "selection": dict(selection),
                  "checkpoints": self.checkpoints, "tests": self.tests}
        data = json_bytes(record, "run.json")
        self.flush()
        atomic_write(self.path("run.json"), data)
        self.closed = True
        return self.path("run.json")
