"""Accept a pulled bundle on a second machine: re-hash it, load-check its checkpoints, read its metrics files.

`rgt accept` (services/audit/acceptance.py) ships this file as-is on stdin to that machine's interpreter (`<python> -`),
so it is stdlib-only and keeps to Python 3.8 syntax (no `from __future__`, no `match`, no `X | Y`; annotations
are strings). The client prepends one line that defines PARAMS (remote.program_stdin), with keys:

    root          the folder holding the bundle (a scratch copy there, or runs/RUN/ for `--here`)
    files         every path the manifest lists, plus the manifest itself, relative to root
    checkpoints   {path: timeout_s}: the files to load-check, each in its own subprocess
    metrics       the metrics files (metrics.json, best_metrics.json) to read back as JSON

It prints exactly one JSON object on stdout and exits 0, whatever it found:

    {"ok": true, "identity": {hostname, machine_id, python, torch, platform},
     "files": {path: sha256 or null}, "problems": [{code, path, detail}],
     "checkpoints": {path: {"ok", "tensors", "elements", "error", "detail"}},
     "metrics": {path: the parsed object, or null}}

or `{"ok": false, "error": ...}` for malformed PARAMS (exit 2). A path is only ever read inside root: absolute
paths, `..`, unsafe names and symlinks anywhere on the way are refused (`path_unsafe`, `symlink`), never followed.
A checkpoint is loaded with `torch.load(weights_only=True)` (or safetensors) in a child with `-I`, no GPU, a
scrubbed environment and its own process group, killed on its timeout: nothing in a pickle is ever executed here.
"""

import hashlib
import json
import os
import platform
import re
import signal
import socket
import stat
import subprocess
import sys
from typing import Any

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
CHUNK = 4 << 20
METRICS_MAX_BYTES = 8 << 20
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
ENV_KEEP = ("PATH", "HOME", "LANG", "TMPDIR")

# The load check, run as `python -I -c LOAD_CHILD PATH`: one JSON line on stdout.
LOAD_CHILD = r'''
import json, sys
def answer(**fields):
    print(json.dumps(fields)); sys.exit(0)
path = sys.argv[1]
try:
    import torch
except ImportError:
    answer(ok=False, error="no_torch", detail="torch is not installed for this interpreter")
with open(path, "rb") as handle:
    head = handle.read(9)
try:
    if len(head) == 9 and head[8:9] == b"{" and head[:4] != b"PK\x03\x04":
        from safetensors.torch import load_file
        loaded = load_file(path, device="cpu")
    else:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
except Exception as exc:
    answer(ok=False, error="load_failed", detail=(type(exc).__name__ + ": " + str(exc))[-300:])
tensors, elements, nonfinite, stack, seen = 0, 0, [], [("", loaded)], set()
while stack:
    label, value = stack.pop()
    if id(value) in seen:
        continue
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        tensors += 1
        elements += value.numel()
        if (value.is_floating_point() or value.is_complex()) and not bool(torch.isfinite(value).all()):
            nonfinite.append(label)
    elif isinstance(value, dict):
        stack.extend((label + "." + str(k) if label else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        stack.extend((label + "." + str(i) if label else str(i), v) for i, v in enumerate(value))
if nonfinite:
    answer(ok=False, error="nonfinite", detail="non-finite values in " + ", ".join(sorted(nonfinite)[:10]),
           tensors=tensors, elements=elements)
if tensors == 0:
    answer(ok=False, error="no_tensors", detail="holds no tensors", tensors=0, elements=0)
answer(ok=True, tensors=tensors, elements=elements)
'''


def problem(code: str, path: str, detail: str) -> "dict[str, str]":
    return {"code": code, "path": path, "detail": detail}


def unsafe(path: object) -> "str | None":
    """Why a listed path may not be read (None when it may): relative, safe names, no `.`/`..`."""
    if not isinstance(path, str) or not path:
        return "not a path"
    if path.startswith("/") or "\\" in path:
        return "absolute or with a backslash"
    for part in path.split("/"):
        if part in ("", ".", "..") or not SAFE_NAME.match(part):
            return f"component {part!r} is not a safe name"
    return None


class Refused(Exception):
    """A listed path this script will not read: a link on the way, or not a regular file."""

    def __init__(self, code: str, detail: str) -> None:
        Exception.__init__(self, detail)
        self.code = code


def open_inside(root: str, path: str) -> int:
    """A read descriptor of root/path, no link followed on the way (each folder lstat-ed, the file O_NOFOLLOW)."""
    parts = path.split("/")
    for depth in range(1, len(parts)):
        info = os.lstat(os.path.join(root, *parts[:depth]))
        if stat.S_ISLNK(info.st_mode):
            raise Refused("symlink", "/".join(parts[:depth]) + " is a symlink: not followed")
        if not stat.S_ISDIR(info.st_mode):
            raise Refused("not_regular", "/".join(parts[:depth]) + " is not a folder")
    full = os.path.join(root, *parts)
    if stat.S_ISLNK(os.lstat(full).st_mode):
        raise Refused("symlink", "a symlink: not followed")
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused("not_regular", "not a regular file")
    return fd


def read_all(root: str, path: str, limit: "int | None" = None) -> "tuple[str, bytes | None]":
    """The sha256 of the file, and its bytes when `limit` is set and it is no longer (else None)."""
    fd = open_inside(root, path)
    digest = hashlib.sha256()
    kept = bytearray() if limit is not None else None
    try:
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            if kept is not None and limit is not None:
                kept += chunk
                if len(kept) > limit:
                    kept = None
    finally:
        os.close(fd)
    return digest.hexdigest(), bytes(kept) if kept is not None else None


def hash_files(root: str, paths: "list[str]", metrics: "set[str]") -> "tuple[dict, dict, list]":
    """Every listed file re-hashed from its bytes; the metrics files' bytes kept for parsing."""
    hashes = {}  # type: dict[str, str | None]
    texts = {}  # type: dict[str, bytes]
    problems = []  # type: list[dict[str, str]]
    for path in paths:
        why = unsafe(path)
        if why is not None:
            hashes[str(path)] = None
            problems.append(problem("path_unsafe", str(path), why))
            continue
        try:
            hashes[path], data = read_all(root, path, METRICS_MAX_BYTES if path in metrics else None)
        except FileNotFoundError:
            hashes[path] = None
            problems.append(problem("missing", path, "not in the bundle on this machine"))
            continue
        except Refused as exc:
            hashes[path] = None
            problems.append(problem(exc.code, path, str(exc)))
            continue
        except OSError as exc:
            hashes[path] = None
            problems.append(problem("unreadable", path, str(exc.strerror or exc)))
            continue
        if path in metrics and data is not None:
            texts[path] = data
        elif path in metrics:
            problems.append(problem("metrics_invalid", path, f"larger than {METRICS_MAX_BYTES} bytes"))
    return hashes, texts, problems


def parse_metrics(texts: "dict[str, bytes]", problems: "list") -> "dict[str, object]":
    """Each metrics file as JSON (no NaN/Infinity, no duplicate key), or None with a problem."""
    def no_constant(token: str) -> object:
        raise ValueError(f"{token} is not valid JSON")

    def unique(pairs: "list") -> dict:
        result = {}
        for key, value in pairs:
            if key in result:
                raise ValueError(f"duplicate key {key!r}")
            result[key] = value
        return result

    parsed = {}
    for path, data in sorted(texts.items()):
        try:
            parsed[path] = json.loads(data.decode("utf-8"), parse_constant=no_constant, object_pairs_hook=unique)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            parsed[path] = None
            problems.append(problem("metrics_invalid", path, str(exc)[:200]))
    return parsed


def child_environment() -> "dict[str, str]":
    env = {name: value for name, value in os.environ.items() if name in ENV_KEEP or name.startswith("LC_")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    return env


def load_check(root: str, path: str, timeout: float) -> "dict[str, object]":
    """One checkpoint loaded in its own child; its whole group killed on timeout."""
    child = subprocess.Popen([sys.executable, "-I", "-c", LOAD_CHILD, os.path.join(root, *path.split("/"))],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=child_environment(), start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
        child.communicate()
        return {"ok": False, "error": "timeout", "detail": f"no verdict within {timeout:.0f} s"}
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        verdict = json.loads(lines[-1]) if len(lines) == 1 else None
    except ValueError:
        verdict = None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("ok"), bool):
        tail = " ".join(err.decode("utf-8", "replace").split())[-300:]
        return {"ok": False, "error": "crash", "detail": f"exit {child.returncode}: {tail}"}
    return verdict


def load_checks(root: str, checkpoints: "dict[str, float]", hashes: "dict") -> "dict[str, object]":
    """The load check of every checkpoint that could be hashed (a missing or unsafe one is already a problem)."""
    return {path: load_check(root, path, float(timeout)) for path, timeout in sorted(checkpoints.items())
            if hashes.get(path) is not None}


def identity() -> "dict[str, object]":
    """Who this machine says it is: its hostname, its machine id when it has one, and the interpreter."""
    machine_id = None
    for name in MACHINE_ID_FILES:
        try:
            with open(name, encoding="ascii", errors="replace") as handle:
                machine_id = handle.read(200).strip() or None
        except OSError:
            continue
        if machine_id:
            break
    try:
        from importlib.metadata import version
        torch_version = version("torch")
    except Exception:
        torch_version = None
    return {"hostname": socket.gethostname(), "machine_id": machine_id, "python": platform.python_version(),
            "torch": torch_version, "platform": platform.platform()}


def check_params(params: object) -> "list[str]":
    if not isinstance(params, dict):
        return ["PARAMS must be a JSON object"]
    errors = []
    if not isinstance(params.get("root"), str):
        errors.append("PARAMS.root must be a string")
    for key in ("files", "metrics"):
        if not isinstance(params.get(key), list):
            errors.append(f"PARAMS.{key} must be a list")
    if not isinstance(params.get("checkpoints"), dict):
        errors.append("PARAMS.checkpoints must be an object")
    return errors


def main(params: "Any") -> int:
    errors = check_params(params)
    if errors:
        print(json.dumps({"ok": False, "error": "; ".join(errors)}))
        return 2
    root = os.path.realpath(params["root"])
    metrics = set(params["metrics"])
    hashes, texts, problems = hash_files(root, list(params["files"]), metrics)
    answer = {"ok": True, "identity": identity(), "files": hashes, "problems": problems,
              "metrics": parse_metrics(texts, problems),
              "checkpoints": load_checks(root, params["checkpoints"], hashes)}
    print(json.dumps(answer, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(globals().get("PARAMS")))
