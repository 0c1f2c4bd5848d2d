"""The catalogue of failure signatures (docs/log-signatures.md §1, §2): the shipped rows (assets/signatures.toml) and
the user's (`~/.config/rgt/signatures.d/*.toml`, rgt.toml's `[[signatures]]`), read with the typed TOML reader
(toml_table.py) and checked once, every problem collected with its file, row and line.

The rest of the pipeline, all pure (docs/architecture.md §2): detector.py turns clean log lines into `Hit`s of the log
rows (prefilter.py screens lines first), and ledger.py keeps one alert per row for a run. Rows whose source is
the process table, host files, metrics or GPU samples only ship their text here; audits/rules/ evaluates them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from remote_gpu_trainer.audits.log.samples import SEVERITIES, Signature
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.shipped_toml import ASSETS, read_asset
from remote_gpu_trainer.toml_table import (
    Problem,
    Problems,
    SourceLines,
    key_problems,
    parse_toml,
    read_text,
    unknown_keys,
)

SHIPPED = ASSETS / "signatures.toml"

LOG_SOURCES = ("log", "log(dmesg)", "log(ssh)")
RULE_SOURCES = ("proc", "host", "metric", "gpu")
SOURCES = LOG_SOURCES + RULE_SOURCES
REQUIRED_KEYS = ("id", "source", "severity", "cause", "fix")
OPTIONAL_KEYS = ("pattern", "rule", "ignore_case", "match", "nomatch", "requires")
_STRING_KEYS = ("id", "source", "severity", "cause", "fix", "pattern", "rule")
_LIST_KEYS = ("match", "nomatch", "requires")

_Report = Callable[[str], None]  # records one problem of one row, named by file, row and line


@dataclass(frozen=True)
class Catalogue:
    """Every row by id, in file order (shipped first, then user rows), with the rows each evaluator needs."""

    rows: Mapping[str, Signature] = field(hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", MappingProxyType(dict(self.rows)))  # read-only, even for the caller

    def __getitem__(self, signature_id: str) -> Signature:
        return self.rows[signature_id]

    def __contains__(self, signature_id: object) -> bool:
        return signature_id in self.rows

    def __len__(self) -> int:
        return len(self.rows)

    def log_rows(self, source: str = "log") -> tuple[Signature, ...]:
        """Regex rows read from one log stream (`log`, `log(dmesg)` or `log(ssh)`)."""
        return tuple(row for row in self.rows.values() if row.source == source and row.pattern is not None)

    def rule_rows(self) -> tuple[Signature, ...]:
        """Rows evaluated outside the log detector (proc, host, metric, gpu); S03 is not one: it rides on S01."""
        return tuple(row for row in self.rows.values() if row.source in RULE_SOURCES)


@dataclass(frozen=True)
class _Origin:
    """Where rows come from: a file (or rgt.toml's rows, given directly), its lines when known, and the name
    of its array of tables (`signature` in signatures.d, `signatures` in rgt.toml)."""

    name: str
    lines: SourceLines | None
    array: str

    def row_line(self, index: int) -> int | None:
        return self.lines.row_line(self.array, index) if self.lines is not None else None


class _CatalogueBuilder:
    """Rows by id in file order, every problem of every file collected before the load fails."""

    def __init__(self) -> None:
        self.problems = Problems()
        self.rows: dict[str, Signature] = {}
        self.origins: dict[str, str] = {}

    def add_rows(self, raws: Sequence[Mapping[str, object]], origin: _Origin, *, user: bool) -> None:
        for index, raw in enumerate(raws):
            line = origin.row_line(index)
            row = _parse_row(raw, origin.name, index, line, self.problems, user=user)
            if row is None:
                continue
            if row.id in self.origins:
                self.problems.add(Problem(f"signature {row.id} in {origin.name}", "",
                                          f"duplicate id (already defined in {self.origins[row.id]})", line))
                continue
            self.origins[row.id] = origin.name
            self.rows[row.id] = row

    def add_file(self, path: Path, *, user: bool) -> None:
        """One TOML file of `[[signature]]` tables; a file that cannot be read or parsed is one problem."""
        try:
            text = read_text(path)
            data = parse_toml(str(path), text)
        except ConfigError as error:
            self.problems.add(Problem(str(path), "", str(error).removeprefix(f"{path}: ")))
            return
        lines = SourceLines(text)
        for key in sorted(unknown_keys(data, ("signature",))):
            self.problems.add(Problem(str(path), "", f"unknown top-level key {key!r} (expected [[signature]] "
                                      "tables)", lines.line_of((key,), None) or lines.line_of((), key)))
        tables = data.get("signature", [])
        if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
            self.problems.add(Problem(str(path), "", "'signature' must be [[signature]] tables",
                                      lines.line_of((), "signature")))
            return
        self.add_rows(tables, _Origin(str(path), lines, "signature"), user=user)


def load_catalogue(
    user_dirs: Sequence[Path] = (),
    user_rows: Sequence[Mapping[str, object]] = (),
    user_origin: str = "rgt.toml",
) -> Catalogue:
    """Shipped rows, then `<dir>/*.toml` rows, then rows given directly (rgt.toml's `[[signatures]]`).

    Any defect raises ConfigError (its message the first problem, one line naming the file or `user_origin`,
    the row and its line; `problems` all of them), because a silently dropped row is a crash the user believes
    is being watched for.
    """
    builder = _CatalogueBuilder()
    # parsed once per machine (shipped_toml.py); its rows have no line numbers, and need none: tests prove them
    builder.add_rows(read_asset(SHIPPED).get("signature", []), _Origin(str(SHIPPED), None, "signature"), user=False)
    for directory in user_dirs:
        if not Path(directory).is_dir():
            continue  # no signatures.d yet: nothing to add
        for path in sorted(Path(directory).glob("*.toml")):
            builder.add_file(path, user=True)
    origin_path = Path(user_origin)
    lines = SourceLines.of_file(origin_path) if origin_path.is_absolute() and user_rows else None
    builder.add_rows(user_rows, _Origin(user_origin, lines, "signatures"), user=True)
    builder.problems.raise_if_any()
    return Catalogue(builder.rows)


def _parse_row(raw: Mapping[str, object], origin: str, index: int, line: int | None, problems: Problems, *,
               user: bool) -> Signature | None:
    """Check one row's keys and types and compile its regex; user rows must also prove their examples.
    None when the row has a problem (recorded)."""
    name = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"#{index + 1}"
    found = len(problems)

    def report(problem: str) -> None:
        problems.add(Problem(f"signature {name} in {origin}", "", _one_line(problem), line))

    _check_keys(raw, report)
    if len(problems) > found:
        return None
    row = Signature(
        id=str(raw["id"]),
        source=str(raw["source"]),
        severity=str(raw["severity"]),
        cause=str(raw["cause"]),
        fix=str(raw["fix"]),
        pattern=_optional_string(raw, "pattern"),
        rule=_optional_string(raw, "rule"),
        ignore_case=bool(raw.get("ignore_case", False)),
        match=_strings(raw, "match"),
        nomatch=_strings(raw, "nomatch"),
        requires=tuple(word.lower() for word in _strings(raw, "requires")),
    )
    _check_row(row, report, user=user)
    return row if len(problems) == found else None


def _check_keys(raw: Mapping[str, object], report: _Report) -> None:
    """Every key known, every required key there, each of the right type."""
    for problem in key_problems(raw, REQUIRED_KEYS + OPTIONAL_KEYS, required=REQUIRED_KEYS, suggest=True):
        report(problem)
    for key in _STRING_KEYS:
        if key in raw and not isinstance(raw[key], str):
            report(f"{key!r} must be a string")
    if "ignore_case" in raw and not isinstance(raw["ignore_case"], bool):
        report("'ignore_case' must be true or false")
    for key in _LIST_KEYS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            report(f"{key!r} must be a list of strings")


def _optional_string(raw: Mapping[str, object], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) else None


def _strings(raw: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    return tuple(value) if isinstance(value, list) else ()


def _check_row(row: Signature, report: _Report, *, user: bool) -> None:
    """Semantic checks: known source and severity, exactly one of pattern/rule, a user row's regex compilable."""
    if not row.id:
        report("empty id")
    if row.source not in SOURCES:
        report(f"unknown source {row.source!r} (one of {', '.join(SOURCES)})")
    if row.severity not in SEVERITIES:
        report(f"unknown severity {row.severity!r} (one of {', '.join(SEVERITIES)})")
    if (row.pattern is None) == (row.rule is None):
        report("needs exactly one of 'pattern' and 'rule'")
    compiled = None
    # A shipped pattern is compiled when a detector first needs it: each is proven on its examples by
    # tests/audits/log/test_signatures.py, and compiling all 70 here was ~10 ms of every `rgt --report`.
    if row.pattern is not None and user:
        try:
            compiled = re.compile(row.pattern, re.IGNORECASE if row.ignore_case else 0)
        except re.error as exc:
            report(f"bad regex: {exc}")
            return
    for example in row.match if row.requires else ():
        if not any(word in example.lower() for word in row.requires):
            report(f"'requires' would hide its example {_short(example)!r}")
    if user:
        _check_user_row(row, compiled, report)


def _check_user_row(row: Signature, compiled: re.Pattern[str] | None, report: _Report) -> None:
    """User rows are log regexes that prove themselves on a matching and a non-matching example."""
    if not row.id.startswith("U") or len(row.id) < 2:
        report("user signature ids must start with 'U' (S.. ids are reserved for shipped rows)")
    if row.source != "log":
        report(f"user signatures must have source 'log', not {row.source!r}")
    if compiled is None:
        report("user signatures need a 'pattern'")
        return
    if not row.match:
        report("needs at least one 'match' example")
    if not row.nomatch:
        report("needs at least one 'nomatch' example")
    for example in row.match:
        if not compiled.search(example):
            report(f"pattern does not match its example {_short(example)!r}")
    for example in row.nomatch:
        if compiled.search(example):
            report(f"pattern matches its non-matching example {_short(example)!r}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
