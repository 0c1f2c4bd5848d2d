"""The dataclass code cache (remote_gpu_trainer/dataclass_code.py): classes made from cached code are the classes
Python makes without it, a later process compiles nothing, and a cache file that is broken, foreign or not
private is never used."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

from remote_gpu_trainer import dataclass_code

DESCRIBE = """
import dataclasses, importlib, inspect, json, sys
from pathlib import Path
if sys.argv[1] != "plain":
    from remote_gpu_trainer import dataclass_code
    dataclass_code.install(Path(sys.argv[1]))
for name in ("remote_gpu_trainer.app", "remote_gpu_trainer.report", "remote_gpu_trainer.cli.main"):
    importlib.import_module(name)

def code(c):
    consts = [code(k) if hasattr(k, "co_code") else repr(k) for k in c.co_consts]
    return [c.co_code.hex(), consts, c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars, c.co_flags,
            c.co_argcount, c.co_kwonlyargcount, c.co_filename, c.co_name, c.co_qualname, c.co_firstlineno]

rows = []
for module_name, module in sorted(sys.modules.items()):
    if not module_name.startswith("remote_gpu_trainer"):
        continue
    for cls in vars(module).values():
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module_name):
            continue
        for method in ("__init__", "__repr__", "__eq__", "__setattr__", "__delattr__", "__hash__"):
            function = inspect.unwrap(cls.__dict__[method]) if callable(cls.__dict__.get(method)) else None
            rows.append([module_name, cls.__qualname__, method] + ([] if function is None else [
                code(function.__code__), repr(function.__annotations__), repr(function.__defaults__),
                repr(function.__kwdefaults__), function.__qualname__, function.__globals__ is vars(module)]))
counts = dataclass_code.COUNTS if sys.argv[1] != "plain" else {}
print(json.dumps({"rows": rows, "counts": counts}))
"""


def describe(cache: str) -> dict[str, object]:
    """Every dataclass the dashboard, the report and the CLI create in a fresh process, method by method, and
    the cache's counts ("plain": without the cache)."""
    result = subprocess.run([sys.executable, "-c", DESCRIBE, cache], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
    described: dict[str, object] = json.loads(result.stdout)
    return described


def test_classes_from_cached_code_are_the_classes_python_makes(tmp_path: Path) -> None:
    plain = describe("plain")
    first = describe(str(tmp_path))
    second = describe(str(tmp_path))
    rows = plain["rows"]
    assert isinstance(rows, list) and len({(row[0], row[1]) for row in rows}) > 150  # the classes compared
    assert first["rows"] == rows and second["rows"] == rows
    counts = first["counts"]
    assert isinstance(counts, dict) and counts["compiled"] > 500  # a text met twice (same fields) is compiled once
    assert second["counts"] == {"compiled": 0, "cached": counts["compiled"] + counts["cached"]}


def test_a_broken_foreign_or_shared_file_is_never_used(tmp_path: Path) -> None:
    code = compile("def f(): return 1\n", "<string>", "exec")
    good = {"some.module": marshal.dumps({"def f(): return 1\n": code})}
    path = tmp_path / "cache.marshal"
    assert dataclass_code.save(path, good) and dataclass_code.load(path) == good
    assert list(dataclass_code.module_codes(good["some.module"])) == ["def f(): return 1\n"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    path.chmod(0o620)  # writable by the group: anyone in it could have put code here
    assert dataclass_code.load(path) == {}
    for body in (b"not marshal", marshal.dumps((1, {})), marshal.dumps((2, {"m": "not bytes"})),
                 marshal.dumps([2, good]), b""):
        path.write_bytes(body)
        path.chmod(0o600)
        assert dataclass_code.load(path) == {}
    assert dataclass_code.load(tmp_path / "missing.marshal") == {}
    for part in (b"not marshal", marshal.dumps({"text": "not code"}), marshal.dumps([code]), None):
        assert dataclass_code.module_codes(part) == {}
    for table in ((dataclass_code.FORMAT, {"some.module": (0, 10_000)}),  # a part beyond the file's end
                  (dataclass_code.FORMAT - 1, {"some.module": (0, 1)}), (dataclass_code.FORMAT, {"m": (-1, 1)})):
        head = marshal.dumps(table)
        path.write_bytes(dataclass_code.TABLE_LENGTH.pack(len(head)) + head + b"x")
        assert dataclass_code.load(path) == {}
    path.write_bytes(marshal.dumps((2, good)))  # the format before the table of contents: one marshalled dict
    assert dataclass_code.load(path) == {}


def test_each_module_is_its_own_part_of_the_file(tmp_path: Path) -> None:
    """The file is a table of contents and a part per module, read one by one: a damaged part costs its module's
    texts (compiled again), never another module's."""
    code = compile("def f(): return 1\n", "<string>", "exec")
    good = marshal.dumps({"def f(): return 1\n": code})
    path = tmp_path / "cache.marshal"
    assert dataclass_code.save(path, {"damaged.module": b"\x00not marshal at all", "some.module": good})
    file = dataclass_code.CacheFile(path)
    try:
        assert dataclass_code.module_codes(file.blob("damaged.module")) == {}
        assert list(dataclass_code.module_codes(file.blob("some.module"))) == ["def f(): return 1\n"]
        assert file.blob("never.cached") is None
    finally:
        file.close()


def test_a_broken_file_is_replaced_and_an_unwritable_folder_costs_nothing(tmp_path: Path) -> None:
    path = dataclass_code.cache_file(tmp_path)
    path.write_bytes(b"\x00garbage")
    path.chmod(0o600)
    assert describe(str(tmp_path))["counts"]["compiled"] > 500  # type: ignore[index]
    assert sum(len(dataclass_code.module_codes(blob)) for blob in dataclass_code.load(path).values()) > 500
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # the cache folder would be under a file: mkdir fails
    assert describe(str(blocked / "rgt"))["counts"]["compiled"] > 500  # type: ignore[index]
    assert not (blocked.parent / f".{path.name}").exists() and blocked.read_text() == ""


ONE_MODULE = """
import sys
from pathlib import Path
from remote_gpu_trainer import dataclass_code
dataclass_code.install(Path(sys.argv[1]))
import {module}
print(dataclass_code.COUNTS["compiled"], dataclass_code.COUNTS["cached"])
"""


def test_a_process_reads_the_code_of_the_modules_it_imports_and_keeps_the_others(tmp_path: Path) -> None:
    """Per module: a process that imports only views.py unmarshals views.py's code, compiles nothing, and leaves
    the other modules' code in the file for the commands that import them."""
    describe(str(tmp_path))  # the dashboard's, the report's and the CLI's modules
    path = dataclass_code.cache_file(tmp_path)
    before = dataclass_code.load(path)
    assert "remote_gpu_trainer.views" in before and len(before) > 50
    run = subprocess.run([sys.executable, "-c", ONE_MODULE.format(module="remote_gpu_trainer.views"), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    compiled, cached = map(int, run.stdout.split())
    assert (compiled, run.stderr) == (0, "") and cached >= 26 * 3  # views.py's classes, three methods at least
    assert dataclass_code.load(path) == before  # nothing new: not rewritten
    real = dataclass_code.module_codes(before["remote_gpu_trainer.views"])
    dropped = next(iter(real))  # one text lost: the next process compiles it, so writes the module back
    for junk in (3, 2 * len(real) + 20):  # texts of classes long gone: a few are kept, many are dropped
        part = {text: code for text, code in real.items() if text != dropped}
        part.update({f"x = {n}\n": compile(f"x = {n}\n", "<string>", "exec") for n in range(junk)})
        dataclass_code.save(path, {**before, "remote_gpu_trainer.views": marshal.dumps(part)})
        run = subprocess.run([sys.executable, "-c", ONE_MODULE.format(module="remote_gpu_trainer.views"),
                              str(tmp_path)], capture_output=True, text=True, timeout=120)
        assert run.stdout.split()[0] == "1"
        kept = dataclass_code.module_codes(dataclass_code.load(path)["remote_gpu_trainer.views"])
        assert set(kept) == set(real) | ({f"x = {n}\n" for n in range(junk)} if junk == 3 else set())
