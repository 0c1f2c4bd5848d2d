"""One typed reader for the project's TOML files: rgt.toml (config/project.py), the billing profiles (profiles.py) and
the user's log signatures (audits/log/signatures.py).

Why one: a user fixing a file wants every problem at once, each naming the file, the dotted key and the line,
in one style, with a "did you mean" for a misspelt key. A loader declares what a table holds through typed
reads (`Table.text`, `Table.number`, ... or a `Field` spec read by `Table.fields`); every read that fails adds
a `Problem` to one `Problems` sink instead of raising, so the walk goes on, and `Problems.raise_if_any` then
raises one ConfigError (exit 2): its message is the first problem plus a count (one line, for the CLI's
one-line errors), its `problems` attribute lists every problem, one line each:

    rgt.toml:12: runs.exp1.comand: unknown key (did you mean 'command'?)

The key check under it (`unknown_keys`, `key_problems`, `refuse_unknown_keys`) also serves the JSON objects rgt
reads (manifests, acceptance records, table.json, figure.json), so a stray key is found and worded one way.

Imports only the standard library and errors.py, so the pure audits and DELIVER may use it.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote_gpu_trainer.errors import ConfigError

TOP_LEVEL = "(top level)"


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a file: `where` is the file (or a row a loader names, `signature U01 in x.toml`)."""

    where: str
    key: str  # dotted (`runs.exp1.command`, `storage[0].name`); "" when the message names its own key
    message: str
    line: int | None = None

    def render(self) -> str:
        at = f"{self.where}:{self.line}" if self.line else self.where
        return f"{at}: {self.key}: {self.message}" if self.key else f"{at}: {self.message}"


class Problems:
    """Every problem found in one load, in the order found."""

    def __init__(self) -> None:
        self.found: list[Problem] = []

    def add(self, problem: Problem) -> None:
        self.found.append(problem)

    def __len__(self) -> int:
        return len(self.found)

    def raise_if_any(self) -> None:
        if self.found:
            raise problems_error([problem.render() for problem in self.found])


def problems_error(lines: list[str]) -> ConfigError:
    """One ConfigError for all `lines`: the first as its one-line message (with a count), all in `problems`."""
    more = f" (and {len(lines) - 1} more problem(s))" if len(lines) > 1 else ""
    error = ConfigError(lines[0] + more)
    error.problems = list(lines)  # type: ignore[attr-defined]
    return error


def did_you_mean(word: str, allowed: Any) -> str:
    """` (did you mean 'x'?)` for the closest allowed word, else ` (allowed: a, b)`."""
    import difflib  # only for this message: not on every start-up (docs/architecture.md §5)

    names = sorted(allowed)
    close = difflib.get_close_matches(word, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(names)})"


# -- the keys of one object: a TOML table or a JSON object -------------------------------------------------------
# One check for every reader that refuses a key it does not know: `Table.done` below (rgt.toml and its
# config/ sections, profiles, networks), the JSON readers (audits/manifest.py, audits/acceptance.py,
# deliver/tables/spec.py, deliver/figures/spec.py) and the signature rows (audits/log/signatures.py). Why one: a
# misspelt key silently drops a fact, so every reader finds strays the same way and words them the same way.


def unknown_keys(data: Mapping[str, Any], allowed: Collection[str]) -> list[str]:
    """The keys of `data` that `allowed` does not list, in the object's own order (a file's order)."""
    return [key for key in data if key not in allowed]


def unknown_key(key: str | None = None, hint: str = "") -> str:
    """The one wording of a stray key: `unknown key` where the caller's path already ends in the key
    (`runs.exp1.comand: unknown key`), `unknown key 'x'` where it does not; then the hint (` (did you mean ...)`)."""
    return f"unknown key {key!r}{hint}" if key is not None else f"unknown key{hint}"


def key_problems(data: Mapping[str, Any], allowed: Collection[str], required: Collection[str] = (), *,
                 suggest: bool = False) -> list[str]:
    """Every stray key of `data` as one line: `unknown key 'x'` (sorted, so an object names its strays the same
    way whatever order it was written in; with a did-you-mean when `suggest`), then `missing key 'y'` for each
    `required` key it lacks, in `required`'s order (a set is sorted)."""
    problems = [unknown_key(key, did_you_mean(key, allowed) if suggest else "")
                for key in sorted(unknown_keys(data, allowed))]
    order = required if isinstance(required, list | tuple) else sorted(required)
    return problems + [f"missing key {key!r}" for key in order if key not in data]


def refuse_unknown_keys(data: Mapping[str, Any], allowed: Collection[str], at: str, hint: str) -> None:
    """For readers that stop at the first problem: ConfigError `{at}{key}: unknown key ({hint})` naming the first
    stray key in sorted order (`at` is the path up to the key, `tables/t/table.json: layout.`)."""
    unknown = sorted(unknown_keys(data, allowed))
    if unknown:
        raise ConfigError(f"{at}{unknown[0]}: {unknown_key(hint=f' ({hint})')}")


# -- reading a file --------------------------------------------------------------------------------------------


def read_text(path: Path, what: str = "") -> str:
    """The file's text; utf-8-sig because editors on Windows start a file with a byte-order mark, which TOML
    itself refuses. `what` names the file's kind in the error (`cannot read profile: ...`)."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read{' ' + what if what else ''}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


MAX_DEPTH = 64  # arrays and tables inside one another; no file rgt reads needs more than a handful


def parse_toml(where: str, text: str) -> dict[str, Any]:
    """`text` parsed, or one ConfigError naming `where` and tomllib's line and column.

    Nesting is bounded: tomllib recurses once per level and raises RecursionError on an array nested some
    hundreds deep (a hostile or generated file), which would end a whole patrol or `rgt status --all` as an
    "internal error"; and a value that parses just under Python's limit would overflow the first recursive
    walk after it. Both are this file's ConfigError (exit 2), like any other malformed TOML."""
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{where}: malformed TOML: {detail} (the file is not valid TOML, so none of it is used)"
                          ) from None
    except RecursionError:
        raise ConfigError(_too_deep(where)) from None
    if _depth(data) > MAX_DEPTH:
        raise ConfigError(_too_deep(where))
    return data


def _too_deep(where: str) -> str:
    return (f"{where}: malformed TOML: arrays or tables nested more than {MAX_DEPTH} deep (the file is refused, "
            "so none of it is used)")


def _depth(data: Any) -> int:
    """How deep arrays and tables nest in `data`, found without recursion (the point is not to overflow)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


# -- locating a key ----------------------------------------------------------------------------------------------

_HEADER = re.compile(r"^\[+\s*([^\]]+?)\s*\]+")
_KEY = re.compile(r"^([A-Za-z0-9_.\-\"]+)\s*=")
_ROW = re.compile(r"([A-Za-z0-9_\-]+)\[(\d+)\]")


class SourceLines:
    """Best-effort line numbers of tables and keys, found by scanning the source (tomllib keeps none)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._rows: dict[str, list[int]] | None = None

    @classmethod
    def of_file(cls, path: Path) -> SourceLines | None:
        try:
            return cls(path.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError):
            return None

    def line_of(self, table: tuple[str, ...], key: str | None) -> int | None:
        """Line of `key` inside `[table]`, else of the table's header; an inline table (`launch = { ... }`)
        is found by its key in the table above it."""
        found = self._scan(table, key)
        if found is None and key is not None and table:
            found = self._scan(table, None)
        if found is None and len(table) > 1:
            found = self.line_of(table[:-1], table[-1])
        return found

    def row_line(self, array: str, index: int) -> int | None:
        """Line of the `index`-th `[[array]]` header (rows written inline have none)."""
        rows = self._row_headers().get(array, [])
        return rows[index] if index < len(rows) else None

    def inline_row_line(self, array: str, index: int) -> int | None:
        """Line of the `index`-th `{ ... }` row of a top-level `array = [` written one row per line."""
        start = next((n for n, raw in enumerate(self.lines) if re.match(rf"{re.escape(array)}\s*=\s*\[", raw)), None)
        if start is None:
            return None
        seen = 0
        for number, raw in enumerate(self.lines[start + 1:], start=start + 2):
            line = raw.strip()
            if line.startswith("]"):
                return None
            if line.startswith("{"):
                if seen == index:
                    return number
                seen += 1
        return None

    def _row_headers(self) -> dict[str, list[int]]:
        """Every `[[array]]` header's line, by array, found in one pass (a catalogue asks once per row)."""
        if self._rows is None:
            self._rows = {}
            for number, raw in enumerate(self.lines, start=1):
                line = raw.strip()
                match = _HEADER.match(line)
                if match and line.startswith("[["):
                    self._rows.setdefault(match.group(1).replace('"', "").strip(), []).append(number)
        return self._rows

    def _scan(self, table: tuple[str, ...], key: str | None) -> int | None:
        header = ".".join(table)
        current: str | None = "" if not table else None
        inline_prefix = ".".join(table[1:]) if len(table) > 1 else None
        for number, raw in enumerate(self.lines, start=1):
            line = raw.strip()
            match = _HEADER.match(line)
            if match:
                current = match.group(1).replace('"', "").replace(" ", "")
                if key is None and current == header:
                    return number
                continue
            key_match = _KEY.match(line) if key is not None else None
            if key_match is None:
                continue
            name = key_match.group(1).replace('"', "")
            if current == header and name == key:
                return number
            if table and current == table[0] and inline_prefix and name == f"{inline_prefix}.{key}":
                return number
        return None


def table_line(path: Path, table: tuple[str, ...]) -> int | None:
    """The line of a table's header in the file at `path`, for errors found after loading."""
    lines = SourceLines.of_file(path)
    return lines.line_of(table, None) if lines is not None else None


# -- typed reads ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One key of a declared table: its kind (`str`, `int`, `float`, `bool`, `str_list`), whether it must be
    there, the values a string may take, and the value when it is absent."""

    kind: str
    required: bool = False
    choices: tuple[str, ...] = ()
    default: Any = None


def toml_type(value: Any) -> str:
    """The TOML name of a parsed value's type, for `must be a string, not integer`."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


class Table:
    """Typed reads from one TOML table. Each read marks its key known and returns the value, or adds a problem
    and returns the default; `done()` reports every key no read asked for."""

    def __init__(self, problems: Problems, where: str, keys: tuple[str, ...], data: Mapping[str, Any],
                 lines: SourceLines | None = None) -> None:
        self.problems, self.where, self.keys, self.data, self.lines = problems, where, keys, data, lines
        self.known: set[str] = set()

    def dotted(self, key: str | None = None) -> str:
        return ".".join((*self.keys, key) if key else self.keys) or TOP_LEVEL

    def problem(self, key: str | None, message: str) -> None:
        """A problem at `key` of this table (the table itself when None), with its line when it can be found."""
        self.problems.add(Problem(self.where, self.dotted(key), message, self._line(key)))

    def _line(self, key: str | None) -> int | None:
        """The key's line; a cross-check may name a dotted path (`verbs.down.gate`) from an outer table."""
        if self.lines is None:
            return None
        path = (*self.keys, *(key.split(".") if key else ()))
        row = _ROW.fullmatch(path[0]) if path else None
        if row is not None:  # a row of a top-level inline array (`storage = [ {...}, {...} ]`): its own line
            found = self.lines.inline_row_line(row.group(1), int(row.group(2)))
            if found is not None:
                return found
        located = tuple(part.split("[")[0] for part in path)  # `storage[0]`: the scan knows no row index
        return self.lines.line_of(located[:-1], located[-1]) if located else None

    def has(self, key: str) -> bool:
        return key in self.data

    def value(self, key: str, required: bool = False) -> Any:
        """The raw value (None when absent), after noting a missing required key."""
        self.known.add(key)
        if key not in self.data and required:
            self.problem(key, f"missing required key {key!r}")
        return self.data.get(key)

    def text(self, key: str, *, required: bool = False, choices: tuple[str, ...] = (),
            nonempty: bool = False, default: str | None = None) -> str | None:
        value = self.value(key, required)
        if value is None:
            return default
        if not isinstance(value, str) or (nonempty and not value.strip()):
            self.problem(key, "must be a non-empty string" if nonempty else f"must be a string, not {toml_type(value)}")
            return default
        if choices and value not in choices:
            self.problem(key, f"{value!r} is not one of {', '.join(choices)}")
            return default
        return value

    def req_text(self, key: str, choices: tuple[str, ...] = ()) -> str:
        """A required string; "" when it is missing or wrong (the problem is recorded, the load will fail)."""
        return self.text(key, required=True, choices=choices) or ""

    def flag(self, key: str, default: bool = False, *, required: bool = False) -> bool:
        value = self.value(key, required)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(key, "must be true or false")
            return default
        return value

    def whole(self, key: str, default: int | None = None, *, minimum: int = 0, message: str = "") -> int | None:
        """A whole number >= `minimum` (TOML's `true` is not 1)."""
        value = self.value(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.problem(key, message or f"must be a whole number >= {minimum}")
            return default
        return value

    def number(self, key: str, default: float | None = None, *, required: bool = False, minimum: float = 0.0,
               above: bool = False, message: str = "") -> float | None:
        """A finite int or float >= `minimum` (> with `above`): TOML allows inf and nan, which would make any
        price, rate or timeout meaningless."""
        value = self.value(key, required)
        if value is None:
            return default
        low_ok = isinstance(value, int | float) and (value > minimum if above else value >= minimum)
        if isinstance(value, bool) or not low_ok or not math.isfinite(value):
            self.problem(key, message or f"must be a finite number {'>' if above else '>='} {minimum:g}")
            return default
        return float(value)

    def strings(self, key: str, *, required: bool = False, choices: tuple[str, ...] = (),
                 nonempty: bool = False) -> tuple[str, ...] | None:
        """A list of strings (of non-empty strings with `nonempty`); None when absent or wrong."""
        value = self.value(key, required)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and (v or not nonempty) for v in value):
            self.problem(key, f"must be a list of {'non-empty ' if nonempty else ''}strings")
            return None
        bad = [item for item in value if choices and item not in choices]
        if bad:
            self.problem(key, f"{bad[0]!r} is not one of {', '.join(choices)}")
            return None
        return tuple(value)

    def table(self, key: str, required: bool = False) -> Table | None:
        value = self.value(key, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.problem(key, "must be a table")
            return None
        return Table(self.problems, self.where, (*self.keys, key), value, self.lines)

    def rows(self, key: str) -> list[Table]:
        """An array of tables (`storage = [{...}]` or `[[storage]]`), each addressed as `key[index]`."""
        value = self.value(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
            self.problem(key, "must be an array of tables")
            return []
        return [Table(self.problems, self.where, (*self.keys, f"{key}[{index}]"), row, self.lines)
                for index, row in enumerate(value)]

    def fields(self, spec: Mapping[str, Field]) -> dict[str, Any]:
        """Read every declared field; absent optional fields get their default."""
        readers = {"str": lambda k, f: self.text(k, required=f.required, choices=f.choices, default=f.default),
                   "bool": lambda k, f: self.flag(k, bool(f.default), required=f.required),
                   "int": lambda k, f: self.whole(k, f.default),
                   "float": lambda k, f: self.number(k, f.default, required=f.required),
                   "str_list": lambda k, f: self.strings(k, required=f.required, choices=f.choices) or f.default}
        return {key: readers[field.kind](key, field) for key, field in spec.items()}

    def done(self) -> None:
        """Every key no read asked for is unknown: a misspelt key would otherwise silently drop a fact."""
        for key in unknown_keys(self.data, self.known):
            self.problem(key, unknown_key(hint=did_you_mean(key, self.known)))

    def expect(self, allowed: Any) -> None:
        """Declare the keys this table may hold before reading them, so `done()` can run first."""
        self.known.update(allowed)
