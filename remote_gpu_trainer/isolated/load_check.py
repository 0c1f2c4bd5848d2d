"""Checkpoint load check, run in its own process (docs/gate.md §5.1).

    <python> -I -m remote_gpu_trainer.isolated.load_check PATH [--allow-global mod.Name]...
        [--state-key K]... [--accept-flat] [--check model|state] [--finite-under KEY]...
    <python> -I -m remote_gpu_trainer.isolated.load_check --serve [--parent PID]

One-shot mode: stdout is exactly one JSON object:
`{"ok": true, "format", "tensors", "elements", "state_key", "torch"}` or `{"ok": false, "error": ..., ...}`
with error one of `blocked_global` (+ `global`, the first, and `globals`, every one the pickle names that is
not allowed, found in one pass), `nonfinite` (+ `labels`, the first 10),
`no_tensors`, `no_state_key`, `load_failed` (+ `detail`; exit status 1).

Server mode (`--serve`, used by rgt's verifier so torch is imported once per process, not once per file):
after importing torch it writes `{"ready": true, "pid", "torch"}`, then reads one JSON request per line on
stdin, `{"path": str, "allow_globals": [str], "state_keys": [str], "accept_flat": bool|null,
"check": "model"|"state", "finite_under": [str], "kind": str}` (all but path optional), and answers each
with one verdict line of exactly the one-shot shapes; a request it cannot parse gets
`{"ok": false, "error": "bad_request"}`. It exits at end of input. On Linux it asks the kernel for SIGKILL
when its parent dies (PR_SET_PDEATHSIG) and exits at once if `--parent` is no longer its parent, so a kill -9
of rgt leaves no load check behind; elsewhere a watcher thread polls getppid().

Why a subprocess: loading a checkpoint can take memory and time without bound, and torch must never load in
the UI process. Why `weights_only=True` and never a retry without it: a pickle that names any global beyond
tensors could run arbitrary code; such a file is reported `unloadable` with the blocked global named, and
nothing in it is executed.

What a file must hold depends on its kind (remote_gpu_trainer/checkpoint_kinds.py): `check="model"` wants a
model state and every tensor finite; `check="state"` (optimizer, scheduler, RNG state) wants the file to load
and its tensors finite, and may hold no tensor at all. `finite_under` narrows the finiteness check to those
top-level keys where present (Lightning's callbacks keep `inf` as "no best yet").

This module imports torch only inside functions, so importing it for LOAD_CHECK_VERSION costs nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import mmap
import os
import re
import struct
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from remote_gpu_trainer.text import strip_ansi

LOAD_CHECK_VERSION = "probe1"  # stored in cached verdicts' keys and in PULL_VERIFIED.json: the value stays
DEFAULT_STATE_KEYS = ("model_state_dict", "state_dict", "model")
FINITE_CHUNK = 16 * 1024 * 1024  # elements per torch.isfinite call: bounds the temporary bool tensor
MAX_LABELS = 10
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
_DOTTED = r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)"
# The weights-only unpickler names a refused global two ways: "GLOBAL mod.Name was not an allowed global" for a
# global it meets, and "Can only build Tensor, ... but got <class 'mod.Name'>" for an object it must BUILD.
_GLOBAL = re.compile(r"GLOBAL\s+" + _DOTTED + r"|but got <class '" + _DOTTED + r"'>")
CHECKS = ("model", "state")


class LoadCheckFailure(Exception):
    """A definite verdict about the file (not a crash of the load check)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("error", "failed"))
        self.result = result


@dataclass
class WalkResult:
    """What the walk over a loaded checkpoint counted: tensors, elements, and the labels of tensors that are not
    finite."""

    tensors: int = 0
    elements: int = 0
    nonfinite: list[str] = field(default_factory=list)


def detect_format(path: str) -> str:
    """`safetensors` (8-byte LE header length + JSON header), `torch-zip` (PK\\x03\\x04), else legacy."""
    with open(path, "rb") as handle:
        head = handle.read(9)
        size = os.fstat(handle.fileno()).st_size
    if head[:4] == b"PK\x03\x04":
        return "torch-zip"
    if len(head) == 9 and head[8:9] == b"{":
        (length,) = struct.unpack("<Q", head[:8])
        if 2 <= length <= min(MAX_SAFETENSORS_HEADER, size - 8):
            return "safetensors"
    return "torch-legacy"


def blocked_global(message: str) -> str | None:
    """The dotted name in the weights-only unpickler's 'GLOBAL module.name' message, ANSI stripped."""
    match = _GLOBAL.search(strip_ansi(message))
    return (match.group(1) or match.group(2)) if match else None


def refused_globals(path: str, fmt: str, allow_globals: Sequence[str]) -> list[str]:
    """Every global the pickle names that weights-only loading would refuse, read from its opcodes without
    executing anything (torch's own scanner), so one verify names them all rather than one per pass."""
    if fmt != "torch-zip":
        return []
    import torch

    scan = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if scan is None:
        return []
    try:
        named = scan(path)
    except Exception:  # not a readable archive: the load below says why
        return []
    allowed = set(allow_globals)
    return sorted({str(name) for name in named} - allowed)


def load_torch(path: str, fmt: str, allow_globals: Sequence[str]) -> Any:
    """torch.load with weights_only=True always; mmap for zip files; allow-list only via safe_globals."""
    import pickle

    import torch

    allowed = [_import_global(name) for name in allow_globals]
    refused = refused_globals(path, fmt, allow_globals)
    if refused:
        raise LoadCheckFailure({"ok": False, "error": "blocked_global", "format": fmt, "global": refused[0],
                            "globals": refused})
    try:
        if allowed:
            with torch.serialization.safe_globals(allowed):
                return torch.load(path, map_location="cpu", weights_only=True, mmap=fmt == "torch-zip")
        return torch.load(path, map_location="cpu", weights_only=True, mmap=fmt == "torch-zip")
    except pickle.UnpicklingError as exc:
        name = blocked_global(str(exc))
        if name is None:
            raise LoadCheckFailure({"ok": False, "error": "load_failed", "format": fmt,
                                "detail": _one_line(str(exc))}) from None
        raise LoadCheckFailure({"ok": False, "error": "blocked_global", "format": fmt, "global": name}) from None


def _import_global(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError):
        raise LoadCheckFailure({"ok": False, "error": "load_failed",
                            "detail": f"allowed global {name!r} cannot be imported here"}) from None


def load_safetensors(path: str) -> dict[str, Any]:
    """Name -> tensor, via the safetensors package when installed, else a strict reader of the format."""
    try:
        from safetensors import safe_open  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return dict(_read_safetensors(path))
    result: dict[str, Any] = {}
    with safe_open(path, framework="pt", device="cpu") as handle:
        for key in handle.keys():
            result[key] = handle.get_tensor(key)
    return result


def _read_safetensors(path: str) -> Iterator[tuple[str, Any]]:
    """The safetensors layout read directly (no pickle involved): header, then raw little-endian data."""
    import torch

    dtypes = {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
        "BOOL": torch.bool, "C64": torch.complex64,
        "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    }
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length).decode("utf-8"))
        size = os.fstat(handle.fileno()).st_size
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) if size > 8 + length else b""
    if not isinstance(header, dict):
        raise ValueError("safetensors header is not an object")
    start = 8 + length
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = dtypes.get(str(info.get("dtype"))) if isinstance(info, dict) else None
        if dtype is None:
            raise ValueError(f"tensor {name!r}: unsupported or missing dtype")
        begin, end = info["data_offsets"]
        shape = info["shape"]
        count = 1
        for dim in shape:
            count *= int(dim)
        width = torch.empty((), dtype=dtype).element_size()
        if not 0 <= begin <= end or start + end > size or (end - begin) != count * width:
            raise ValueError(f"tensor {name!r}: data offsets do not match its shape and dtype")
        if count == 0:
            yield name, torch.empty(shape, dtype=dtype)
            continue
        tensor = torch.frombuffer(data, dtype=dtype, count=count, offset=start + begin)
        yield name, tensor.reshape(shape)


def walk(root: Any, finite: bool = True, finite_under: Sequence[str] = ()) -> WalkResult:
    """Iterative walk of dict/list/tuple nests (no recursion limit), guarded against cycles by id().

    Counts tensors and elements; floating and complex tensors must be finite (checked in chunks);
    sparse tensors are checked through their values; integer, bool and quantized ones are only counted.
    When the top level is a mapping holding any key of `finite_under`, only tensors under those keys must be
    finite; the rest are counted.
    """
    import torch

    result = WalkResult()
    seen: set[int] = set()
    scoped = isinstance(root, Mapping) and any(key in root for key in finite_under)
    stack: list[tuple[str, Any, bool]] = [("", root, finite and not scoped)]
    if scoped:
        stack = [(str(key), value, finite and key in finite_under) for key, value in reversed(list(root.items()))]
        seen.add(id(root))
    while stack:
        label, obj, check = stack.pop()
        if isinstance(obj, torch.Tensor | Mapping | list | tuple):
            if id(obj) in seen:
                continue
            seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            result.tensors += 1
            result.elements += obj.numel()
            if check and len(result.nonfinite) < MAX_LABELS and not _all_finite(obj):
                result.nonfinite.append(label or "(top level)")
        elif isinstance(obj, Mapping):
            children = [(_join(label, str(key)), value, check) for key, value in obj.items()]
            stack.extend(reversed(children))
        elif isinstance(obj, list | tuple):
            stack.extend(reversed([(_join(label, str(index)), value, check) for index, value in enumerate(obj)]))
    return result


def _join(label: str, key: str) -> str:
    return f"{label}.{key}" if label else key


def _all_finite(tensor: Any) -> bool:
    import torch

    if tensor.is_quantized or tensor.device.type == "meta":
        return True
    if tensor.layout == torch.sparse_coo:
        tensor = tensor._values()
    elif tensor.layout != torch.strided:
        tensor = tensor.values()
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    flat = tensor.detach().reshape(-1)
    for start in range(0, flat.numel(), FINITE_CHUNK):
        if not bool(torch.isfinite(flat[start:start + FINITE_CHUNK]).all()):
            return False
    return True


def state_key(root: Any, keys: Sequence[str], accept_flat: bool) -> str | None:
    """Which accepted key holds the model state (>= 1 tensor); '.' for an accepted flat name->tensor map."""
    import torch

    if not isinstance(root, Mapping):
        return None
    for key in keys:
        if key in root and walk(root[key], finite=False).tensors > 0:
            return key
    if accept_flat and root and all(isinstance(value, torch.Tensor) for value in root.values()):
        return "."
    return None


def check_file(path: str, allow_globals: Sequence[str] = (), state_keys: Sequence[str] = DEFAULT_STATE_KEYS,
          accept_flat: bool | None = None, check: str = "model", finite_under: Sequence[str] = (),
          kind: str | None = None) -> dict[str, Any]:
    """The verdict for one file, as the JSON object the load check prints (with `kind` echoed when given)."""
    verdict = _verdict(path, allow_globals, state_keys, accept_flat, check, finite_under)
    return {**verdict, "kind": kind} if kind else verdict


def _verdict(path: str, allow_globals: Sequence[str], state_keys: Sequence[str], accept_flat: bool | None,
             check: str, finite_under: Sequence[str]) -> dict[str, Any]:
    import torch

    fmt = detect_format(path)
    try:
        if fmt == "safetensors":
            root: Any = load_safetensors(path)
        else:
            root = load_torch(path, fmt, allow_globals)
    except LoadCheckFailure as failure:
        return failure.result
    except Exception as exc:  # corrupt archive, bad header, out of memory: the file does not load
        return {"ok": False, "error": "load_failed", "format": fmt,
                "detail": _one_line(f"{type(exc).__name__}: {exc}")}
    walked = walk(root, finite_under=finite_under)
    if walked.nonfinite:
        return {"ok": False, "error": "nonfinite", "format": fmt, "labels": walked.nonfinite}
    version = str(torch.__version__).split("+")[0]
    if check == "state":  # training state loads and is finite; a scheduler's may hold no tensor at all
        return {"ok": True, "format": fmt, "tensors": walked.tensors, "elements": walked.elements,
                "state_key": "", "torch": version}
    if walked.tensors == 0:
        return {"ok": False, "error": "no_tensors", "format": fmt}
    # A flat name -> tensor map is what `torch.save(model.state_dict(), path)` writes, PyTorch's own tutorial
    # way to save a model, and what safetensors always holds: a model state unless the caller says otherwise.
    flat = accept_flat if accept_flat is not None else True
    key = state_key(root, state_keys, flat)
    if key is None:
        accepted = ", ".join(state_keys) + (" or a flat name->tensor map" if flat else "")
        return {"ok": False, "error": "no_state_key", "format": fmt,
                "detail": f"no model state under {accepted}"}
    return {"ok": True, "format": fmt, "tensors": walked.tensors, "elements": walked.elements,
            "state_key": key, "torch": version}


def _one_line(text: str) -> str:
    return " ".join(strip_ansi(text).split())[:500]


def die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when its parent dies; exit now if `parent` already died (the prctl race)."""
    if parent is None:
        return
    armed = False
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent died before (or while) the request was made
        os._exit(1)
    if not armed:
        import threading
        import time

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@dataclass(frozen=True)
class Request:
    """One load-check request, as `serve` reads it from a line."""

    path: str
    allow_globals: tuple[str, ...] = ()
    state_keys: tuple[str, ...] = ()
    accept_flat: bool | None = None
    check: str = "model"
    finite_under: tuple[str, ...] = ()
    kind: str | None = None


def _strings(value: Any) -> tuple[str, ...] | None:
    value = value or []
    if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        return None
    return tuple(value)


def _request(line: bytes) -> Request | None:
    try:
        request = json.loads(line.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(request, dict) or not isinstance(request.get("path"), str):
        return None
    allow, keys, under = (_strings(request.get(name)) for name in ("allow_globals", "state_keys", "finite_under"))
    flat, check, kind = request.get("accept_flat"), request.get("check", "model"), request.get("kind")
    if allow is None or keys is None or under is None or check not in CHECKS:
        return None
    if (flat is not None and not isinstance(flat, bool)) or (kind is not None and not isinstance(kind, str)):
        return None
    return Request(request["path"], allow, keys, flat, check, under, kind)


def serve(stdin: Any, out: Any, parent: int | None) -> int:
    """The long-lived load check: one request line in, one verdict line out, until end of input."""
    die_with_parent(parent)
    import torch

    out.write(json.dumps({"ready": True, "pid": os.getpid(), "torch": str(torch.__version__).split("+")[0]})
              + "\n")
    out.flush()
    for line in stdin:
        if not line.strip():
            continue
        parsed = _request(line)
        if parsed is None:
            result: dict[str, Any] = {"ok": False, "error": "bad_request", "detail": "not a load-check request"}
        else:
            result = check_file(parsed.path, parsed.allow_globals, parsed.state_keys or DEFAULT_STATE_KEYS,
                           parsed.accept_flat, parsed.check, parsed.finite_under, parsed.kind)
        out.write(json.dumps(result, sort_keys=True) + "\n")
        out.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="load_check", description="load-verify one checkpoint")
    parser.add_argument("path", nargs="?")
    parser.add_argument("--allow-global", action="append", default=[], metavar="MOD.NAME")
    parser.add_argument("--state-key", action="append", default=[], metavar="KEY")
    parser.add_argument("--accept-flat", action="store_true", default=None)
    parser.add_argument("--check", choices=CHECKS, default="model", help="model (default) or training state")
    parser.add_argument("--finite-under", action="append", default=[], metavar="KEY")
    parser.add_argument("--serve", action="store_true", help="answer one JSON request per stdin line")
    parser.add_argument("--parent", type=int, default=None, help="die when this pid stops being the parent")
    args = parser.parse_args(argv)
    if (args.path is None) != args.serve:
        parser.error("give exactly one of PATH and --serve")
    # Stdout carries only JSON: anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.serve:
        return serve(sys.stdin.buffer, out, args.parent)
    result = check_file(args.path, args.allow_global, args.state_key or DEFAULT_STATE_KEYS, args.accept_flat,
                   args.check, args.finite_under)
    out.write(json.dumps(result, sort_keys=True) + "\n")
    out.flush()
    return 1 if result.get("error") == "load_failed" else 0


if __name__ == "__main__":
    sys.exit(main())
