"""Failure signatures over live log lines (log-signatures.md §1, §2, §4.6).

Three pieces, all pure (DESIGN.md §2): `load_catalogue` reads and checks the shipped rows and the user's
rows; `LogDetector` turns clean log lines into `Hit`s, folding a Python traceback into one event; and
`FindingsLedger` keeps one alert per row for a run, so a crash loop notifies once instead of a thousand times.
Rows whose source is the process table, host files, metrics or GPU samples only ship their text here;
audits/run_rules.py evaluates them.
"""

from __future__ import annotations

import re
import tomllib
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from remote_gpu_trainer.audits.log.samples import SEVERITIES, Hit, Signature, severity_rank
from remote_gpu_trainer.errors import ConfigError
from remote_gpu_trainer.text import strip_ansi

SHIPPED = Path(__file__).resolve().parents[2] / "assets" / "signatures.toml"

LOG_SOURCES = ("log", "log(dmesg)", "log(ssh)")
RULE_SOURCES = ("proc", "host", "metric", "gpu")
SOURCES = LOG_SOURCES + RULE_SOURCES
REQUIRED_KEYS = ("id", "source", "severity", "cause", "fix")
OPTIONAL_KEYS = ("pattern", "rule", "ignore_case", "match", "nomatch", "requires")
_STRING_KEYS = ("id", "source", "severity", "cause", "fix", "pattern", "rule")

_Fail = Callable[[str], ConfigError]  # builds the one-line error naming the file and the row

MAX_SCAN = 4096  # a 10 MB line (a dumped tensor, a minified JSON blob) costs no more than 4 KB of matching
MAX_EVIDENCE = 300
MAX_BLOCK_LINES = 500  # a traceback that never prints its final line must not swallow the rest of the log
_MAX_TAIL_BLANKS = 2  # blank lines allowed between an exception line and a chained traceback's marker

# --------------------------------------------------------------------------------------------------------------
# Loading and checking the catalogue


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


def load_catalogue(
    user_dirs: Sequence[Path] = (),
    user_rows: Sequence[Mapping[str, object]] = (),
    user_origin: str = "rgt.toml",
) -> Catalogue:
    """Shipped rows, then `<dir>/*.toml` rows, then rows given directly (rgt.toml's `[[signatures]]`).

    Any defect raises ConfigError with one line naming the file (or `user_origin`) and the row, because a
    silently dropped row is a crash the user believes is being watched for.
    """
    rows: dict[str, Signature] = {}
    origins: dict[str, str] = {}

    def add(row: Signature, origin: str) -> None:
        if row.id in origins:
            raise ConfigError(f"signature {row.id} in {origin}: duplicate id (already defined in {origins[row.id]})")
        origins[row.id] = origin
        rows[row.id] = row

    for row in _rows_from_file(SHIPPED, user=False):
        add(row, str(SHIPPED))
    for directory in user_dirs:
        if not Path(directory).is_dir():
            continue  # no signatures.d yet: nothing to add
        for path in sorted(Path(directory).glob("*.toml")):
            for row in _rows_from_file(path, user=True):
                add(row, str(path))
    for index, raw in enumerate(user_rows):
        add(_parse_row(raw, user_origin, index, user=True), user_origin)
    return Catalogue(rows)


def _rows_from_file(path: Path, *, user: bool) -> list[Signature]:
    """Parse one TOML file of `[[signature]]` tables."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {_one_line(str(exc))}") from None
    extra = sorted(set(data) - {"signature"})
    if extra:
        raise ConfigError(f"{path}: unknown top-level key {extra[0]!r} (expected [[signature]] tables)")
    tables = data.get("signature", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise ConfigError(f"{path}: 'signature' must be [[signature]] tables")
    return [_parse_row(table, str(path), index, user=user) for index, table in enumerate(tables)]


def _parse_row(raw: Mapping[str, object], origin: str, index: int, *, user: bool) -> Signature:
    """Check one row's keys and types and compile its regex; user rows must also prove their examples."""
    name = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"#{index + 1}"
    where = f"signature {name} in {origin}"

    def fail(problem: str) -> ConfigError:
        return ConfigError(_one_line(f"{where}: {problem}"))

    unknown = sorted(set(raw) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}")
    missing = [key for key in REQUIRED_KEYS if key not in raw]
    if missing:
        raise fail(f"missing key {missing[0]!r}")
    for key in _STRING_KEYS:
        if key in raw and not isinstance(raw[key], str):
            raise fail(f"{key!r} must be a string")
    if "ignore_case" in raw and not isinstance(raw["ignore_case"], bool):
        raise fail("'ignore_case' must be true or false")
    examples = {key: _string_list(raw.get(key, []), key, fail) for key in ("match", "nomatch", "requires")}
    row = Signature(
        id=str(raw["id"]),
        source=str(raw["source"]),
        severity=str(raw["severity"]),
        cause=str(raw["cause"]),
        fix=str(raw["fix"]),
        pattern=_optional_string(raw, "pattern"),
        rule=_optional_string(raw, "rule"),
        ignore_case=bool(raw.get("ignore_case", False)),
        match=examples["match"],
        nomatch=examples["nomatch"],
        requires=tuple(word.lower() for word in examples["requires"]),
    )
    _check_row(row, fail, user=user)
    return row


def _optional_string(raw: Mapping[str, object], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) else None


def _string_list(value: object, key: str, fail: _Fail) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise fail(f"{key!r} must be a list of strings")
    return tuple(value)


def _check_row(row: Signature, fail: _Fail, *, user: bool) -> None:
    """Semantic checks: known source and severity, exactly one of pattern/rule, a compilable regex."""
    if not row.id:
        raise fail("empty id")
    if row.source not in SOURCES:
        raise fail(f"unknown source {row.source!r} (one of {', '.join(SOURCES)})")
    if row.severity not in SEVERITIES:
        raise fail(f"unknown severity {row.severity!r} (one of {', '.join(SEVERITIES)})")
    if (row.pattern is None) == (row.rule is None):
        raise fail("needs exactly one of 'pattern' and 'rule'")
    compiled = None
    if row.pattern is not None:
        try:
            compiled = re.compile(row.pattern, re.IGNORECASE if row.ignore_case else 0)
        except re.error as exc:
            raise fail(f"bad regex: {exc}") from None
    for example in row.match if row.requires else ():
        if not any(word in example.lower() for word in row.requires):
            raise fail(f"'requires' would hide its example {_short(example)!r}")
    if user:
        _check_user_row(row, compiled, fail)


def _check_user_row(row: Signature, compiled: re.Pattern[str] | None, fail: _Fail) -> None:
    """User rows are log regexes that prove themselves on a matching and a non-matching example."""
    if not row.id.startswith("U") or len(row.id) < 2:
        raise fail("user signature ids must start with 'U' (S.. ids are reserved for shipped rows)")
    if row.source != "log":
        raise fail(f"user signatures must have source 'log', not {row.source!r}")
    if compiled is None:
        raise fail("user signatures need a 'pattern'")
    if not row.match:
        raise fail("needs at least one 'match' example")
    if not row.nomatch:
        raise fail("needs at least one 'nomatch' example")
    for example in row.match:
        if not compiled.search(example):
            raise fail(f"pattern does not match its example {_short(example)!r}")
    for example in row.nomatch:
        if compiled.search(example):
            raise fail(f"pattern matches its non-matching example {_short(example)!r}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------------------------
# Structured fields inside messages (§4.6)

_SIZE = r"(?P<v>\d+(?:\.\d+)?) ?(?P<u>[KMGT]iB)"
OOM_REQ = re.compile(r"Tried to allocate " + _SIZE)
OOM_TOTAL_NEW = re.compile(r"total capacity of " + _SIZE)
OOM_TOTAL_OLD = re.compile(_SIZE + r" total capacity")
OOM_FREE_NEW = re.compile(r"of which " + _SIZE + r" is free")
OOM_FREE_OLD = re.compile(_SIZE + r" free;")
OOM_RU_NEW = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
OOM_ALLOC_OLD = re.compile(_SIZE + r" already allocated")
OOM_RES_OLD = re.compile(_SIZE + r" reserved in total by PyTorch")
EXC_LINE = re.compile(
    r"^(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?::\s*(?P<msg>.*))?$"
)
ELASTIC_EXIT = re.compile(r"exitcode\s*:\s*(?P<code>-?\d+)")

ELASTIC_ROWS = {-9: ("S04", "SIGKILL"), -11: ("S22", "SIGSEGV"), -15: ("S47", "SIGTERM")}
_UNIT_BYTES = {"KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40}


@dataclass(frozen=True)
class OomFields:
    """Sizes in bytes read from one CUDA OOM message; None when that torch version does not print it."""

    requested: float | None
    total: float | None
    free: float | None
    reserved_unallocated: float | None

    def fragmented(self) -> bool:
        """S03: the allocator holds at least the request in reserved-but-unallocated blocks."""
        return (
            self.requested is not None
            and self.reserved_unallocated is not None
            and self.reserved_unallocated >= self.requested
        )

    def describe(self) -> str:
        parts = [
            f"{label} {format_bytes(value)}"
            for label, value in (
                ("requested", self.requested),
                ("total", self.total),
                ("free", self.free),
                ("reserved-but-unallocated", self.reserved_unallocated),
            )
            if value is not None
        ]
        return ", ".join(parts)


def parse_oom(text: str) -> OomFields:
    """Read the §4.6 fields from torch 2.x (`... is reserved by PyTorch but unallocated`) or 1.x messages."""
    unallocated = _size(OOM_RU_NEW, text)
    if unallocated is None:
        reserved, allocated = _size(OOM_RES_OLD, text), _size(OOM_ALLOC_OLD, text)
        if reserved is not None and allocated is not None:
            unallocated = max(reserved - allocated, 0.0)
    return OomFields(
        requested=_size(OOM_REQ, text),
        total=_size(OOM_TOTAL_NEW, text) or _size(OOM_TOTAL_OLD, text),
        free=_size(OOM_FREE_NEW, text) or _size(OOM_FREE_OLD, text),
        reserved_unallocated=unallocated,
    )


def _size(pattern: re.Pattern[str], text: str) -> float | None:
    found = pattern.search(text)
    return float(found["v"]) * _UNIT_BYTES[found["u"]] if found else None


def format_bytes(value: float) -> str:
    """Largest binary unit that keeps the number ≥ 1, two decimals: 2147483648 → '2.00 GiB'."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if value >= _UNIT_BYTES[unit]:
            return f"{value / _UNIT_BYTES[unit]:.2f} {unit}"
    return f"{value:.0f} B"


# --------------------------------------------------------------------------------------------------------------
# Matching lines

_LINE_BREAK = re.compile(r"[\r\n]")
_RANK_PREFIX = re.compile(r"\[(?:rank|default)\d+\]:[ ]?")  # torchrun's per-worker prefix
TRACEBACK_START = "Traceback (most recent call last):"  # S48's pattern, as a prefix test
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_EMBEDDED_TRACEBACK = "Original Traceback (most recent call last):"  # DataLoader worker's re-raised traceback


@dataclass(frozen=True)
class _Row:
    """One regex row as the matcher runs it: compiled, with the literals that let it skip most lines."""

    signature: Signature
    regex: re.Pattern[str]
    leads: frozenset[str] | None  # every match starts with one of these (lower-cased); None if unknown
    requires: tuple[str, ...] = ()  # one of these occurs in every match (the row's own `requires`)


@dataclass(frozen=True)
class _Matcher:
    """The rows of one source behind one combined prefilter regex.

    Almost no line of a healthy log can match any row, but CPython's `re` tries every branch of an alternation
    at every position, so a union of the ~55 full patterns runs at ~20k lines/s. Instead each row contributes
    the literal strings one of which every match must contain (`_literals`); they form one lower-case trie
    regex, searched over the lower-cased line, and only rows whose literal occurs run their own pattern, and
    then only where one of their leading literals occurs when they have one (S08's `loss` is on every metric
    line). Rows without a provable literal (exotic user regexes) are in `always` and run on every line.
    """

    rows: tuple[_Row, ...]
    prefilter: re.Pattern[str] | None
    rows_by_trigger: Mapping[str, frozenset[int]]  # trigger → indexes into `rows`
    always: frozenset[int]
    gates: tuple[re.Pattern[str], ...] = ()  # over many lines at once: which lines can hit anything (see gate)

    def gate(self, lowered: str, starts: Sequence[int]) -> set[int] | None:
        """Indexes of the lines (of `lowered`, lines joined by newlines, starting at `starts`) that may hit a
        row, found by C-level scans of the whole chunk; None when every line must be looked at. A row with
        `requires` gates only lines holding its trigger *and* one of those words: S08's `loss` is on nearly
        every metric line, `nan`/`inf` on almost none of them."""
        if self.always or not self.gates:
            return None
        lines: set[int] = set()
        for gate in self.gates:
            for found in gate.finditer(lowered):
                lines.add(bisect_right(starts, found.start()) - 1)
        return lines

    def matching(self, text: str) -> list[Signature]:
        lowered = text.lower()
        prefilter = self.prefilter
        found = prefilter.search(lowered) if prefilter is not None else None
        if found is None and not self.always:
            return []  # the common case: one C-level scan and out
        candidates = set(self.always)
        while found is not None:
            candidates.update(self.rows_by_trigger[found.group()])
            found = prefilter.search(lowered, found.start() + 1) if prefilter is not None else None  # may overlap
        aligned = len(lowered) == len(text)  # lower() kept every position, so lead offsets hold in `text`
        return [
            self.rows[index].signature
            for index in sorted(candidates)
            if _row_matches(self.rows[index], text, lowered if aligned else None)
        ]


def _row_matches(row: _Row, text: str, lowered: str | None) -> bool:
    """`row.regex.search(text)`, trying only the offsets where a match can start when they are known."""
    if row.requires and not any(word in (lowered or text.lower()) for word in row.requires):
        return False
    if row.leads is None or lowered is None:
        return row.regex.search(text) is not None
    for lead in row.leads:
        start = lowered.find(lead)
        while start >= 0:
            if row.regex.match(text, start):  # look-behinds still see the text before `start`
                return True
            start = lowered.find(lead, start + 1)
    return False


def _build_matcher(signatures: Sequence[Signature]) -> _Matcher:
    rows: list[_Row] = []
    wanted: dict[str, set[int]] = {}
    always: set[int] = set()
    for index, signature in enumerate(signatures):
        assert signature.pattern is not None
        triggers, leads = _literals(signature.pattern)
        regex = re.compile(signature.pattern, re.IGNORECASE if signature.ignore_case else 0)
        rows.append(_Row(signature, regex, leads, signature.requires))
        if triggers is None:
            always.add(index)
        for trigger in triggers or ():
            wanted.setdefault(trigger, set()).add(index)
    # Keep only triggers no other trigger is a prefix of: at one position at most one can then match, and a
    # longer trigger's rows ride on its prefix (the prefix occurs wherever the longer one does).
    minimal = [word for word in sorted(wanted) if not any(word.startswith(o) for o in wanted if o != word)]
    by_trigger = {m: frozenset(i for word, idx in wanted.items() if word.startswith(m) for i in idx) for m in minimal}
    prefilter = re.compile(_trie(minimal)) if minimal else None
    return _Matcher(tuple(rows), prefilter, MappingProxyType(by_trigger), frozenset(always),
                    _chunk_gates(rows, by_trigger))


CHUNK_ALWAYS = ("traceback (most recent call last):", "exitcode")  # block starts and torchrun exits


def _chunk_gates(rows: Sequence[_Row], by_trigger: Mapping[str, frozenset[int]]) -> tuple[re.Pattern[str], ...]:
    """One pattern for the triggers of plain rows (plus what opens a traceback or names an exit code), and
    one per row with `requires`: that row's trigger and one of its words on the same line."""
    words = {*(t for t, indexes in by_trigger.items() if any(not rows[i].requires for i in indexes)), *CHUNK_ALWAYS}
    minimal = sorted(w for w in words if not any(w.startswith(o) for o in words if o != w))
    gates = [re.compile(_trie(minimal))]  # a trie, not a flat alternation: `re` would try every branch everywhere
    for index, row in enumerate(rows):
        if row.requires:
            own = [t for t, indexes in by_trigger.items() if index in indexes]
            gates.append(re.compile(
                rf"(?m)^(?=[^\n]*{_trie(sorted(own))})[^\n]*?{_trie(sorted(row.requires))}"))
    return tuple(gates)


def _trie(words: Sequence[str]) -> str:
    """A regex matching exactly `words` (none a prefix of another), factored by shared prefixes so that `re`
    rejects most positions after one character comparison per first letter."""
    heads: dict[str, list[str]] = {}
    for word in words:
        heads.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(head) + (_trie(rests) if rests != [""] else "") for head, rests in sorted(heads.items())]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


MIN_LITERAL = 3  # shorter literals ("ed", "at") would let nearly every line through
Words = frozenset[str] | None  # one of these literals is present (lower-cased); None: nothing provable


class _Unsupported(Exception):
    """The pattern uses syntax the literal scan does not model; the row then runs on every line."""


def _literals(pattern: str) -> tuple[Words, Words]:
    """(triggers, leads) of a regex: literals one of which every match contains / starts with.

    A small reading of Python regex syntax: an alternation gives the union of its branches' literals, a
    sequence its most selective mandatory piece (a run of literal characters, or a group that always matches);
    anything optional, a class, a look-around or an escape class breaks a run. Lower-cased, so case flags are
    moot; syntax it does not model (verbose mode, back-references, numeric escapes) gives (None, None).
    """
    scan = _LiteralScan(pattern)
    try:
        triggers, leads = scan.alternation()
    except _Unsupported:
        return None, None
    if scan.pos != len(pattern):
        return None, None
    return _lower(triggers), _lower(leads)


def _lower(words: set[str] | None) -> Words:
    return frozenset(word.lower() for word in words) if words is not None else None


def _union(left: set[str] | None, right: set[str] | None) -> set[str] | None:
    return left | right if left is not None and right is not None else None


def _selective(words: set[str] | None) -> bool:
    return bool(words) and min(map(len, words or ())) >= MIN_LITERAL


class _LiteralScan:
    """Recursive-descent walk over a regex string that tracks only mandatory literal text."""

    _FLAGS = set("aiLmsux-")
    _ZERO_WIDTH = set("bBAZ")
    _CONTROLS = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.pos = 0

    def peek(self, ahead: int = 0) -> str:
        index = self.pos + ahead
        return self.pattern[index] if index < len(self.pattern) else ""

    def alternation(self) -> tuple[set[str] | None, set[str] | None]:
        triggers: set[str] | None = set()
        leads: set[str] | None = set()
        while True:
            branch_triggers, branch_leads = self.sequence()
            triggers, leads = _union(triggers, branch_triggers), _union(leads, branch_leads)
            if self.peek() != "|":
                return triggers, leads
            self.pos += 1

    def sequence(self) -> tuple[set[str] | None, set[str] | None]:
        pieces: list[set[str]] = []
        run = ""  # literal characters every match contains back to back
        leads: set[str] | None = None
        leading = True  # nothing consuming seen yet: the first run or group gives the leads
        while self.peek() not in ("", "|", ")"):
            kind, value, group_leads = self.atom()
            least, plain = self.quantifier()
            if kind == "char" and plain:
                run += value
                continue
            if leading and run:
                leads, leading = {run}, False
            if kind == "char" and least > 0:
                pieces.append({run + value})  # the first copy follows the run, the last precedes what follows
                run = value
            else:
                if run:
                    pieces.append({run})
                run = ""
            if kind == "group" and least > 0 and value is not None:
                pieces.append(value)
            if leading and kind != "zero":
                leads, leading = (group_leads if kind == "group" and least > 0 else None), False
        if leading and run:
            leads = {run}
        if run:
            pieces.append({run})
        usable = [piece for piece in pieces if _selective(piece)]
        best = max(usable, key=lambda piece: min(map(len, piece))) if usable else None
        return best, leads if _selective(leads) else None

    def quantifier(self) -> tuple[int, bool]:
        """(minimum repeat count, whether there was no quantifier at all) for the atom just read."""
        char = self.peek()
        if char in ("?", "*", "+"):
            least = 1 if char == "+" else 0
            self.pos += 1
        elif char == "{" and (bound := re.match(r"\{(\d*)(?:,(\d*))?\}", self.pattern[self.pos :])):
            least = int(bound.group(1) or 0)
            self.pos += bound.end()
        else:
            return 1, True
        if self.peek() in ("?", "+"):  # lazy or possessive
            self.pos += 1
        return least, False

    def atom(self) -> tuple[str, Any, set[str] | None]:
        """(kind, value, leads): kind 'char' (value: the character), 'group' (value: its triggers), 'zero'
        (consumes nothing: anchors, look-arounds) or 'other' (classes, `.`, escape classes)."""
        char = self.peek()
        self.pos += 1
        if char == "\\":
            return self.escape()
        if char == "[":
            self.skip_class()
            return "other", None, None
        if char == "(":
            return self.group()
        if char in "^$":
            return "zero", None, None
        if char == ".":
            return "other", None, None
        return "char", char, None

    def escape(self) -> tuple[str, Any, set[str] | None]:
        char = self.peek()
        self.pos += 1
        if not char:
            raise _Unsupported("trailing backslash")
        if char in self._ZERO_WIDTH:
            return "zero", None, None
        if char in "dDwWsS":
            return "other", None, None
        if char in self._CONTROLS:
            return "char", self._CONTROLS[char], None
        if char.isalnum():
            raise _Unsupported(f"escape \\{char}")  # back-references, \x.., \u...., \N{...}
        return "char", char, None

    def skip_class(self) -> None:
        if self.peek() == "^":
            self.pos += 1
        if self.peek() == "]":
            self.pos += 1
        while self.peek() not in ("]", ""):
            self.pos += 2 if self.peek() == "\\" else 1
        if not self.peek():
            raise _Unsupported("unterminated class")
        self.pos += 1

    def group(self) -> tuple[str, Any, set[str] | None]:
        kind = "group"
        if self.peek() == "?":
            marker = self.peek(1)
            if marker == ":":
                self.pos += 2
            elif marker == "P" and self.peek(2) == "<":
                end = self.pattern.find(">", self.pos)
                if end < 0:
                    raise _Unsupported("unterminated group name")
                self.pos = end + 1
            elif marker in ("=", "!") or (marker == "<" and self.peek(2) in ("=", "!")):
                self.pos += 2 if marker in ("=", "!") else 3
                kind = "zero"  # a look-around consumes nothing
            elif marker in self._FLAGS:
                self.pos += 1
                if self.flags():
                    return "zero", None, None  # a global flag group such as (?s)
            else:
                raise _Unsupported(f"group (?{marker}")  # back-references, conditionals, comments, atomic
        triggers, leads = self.alternation()
        if self.peek() != ")":
            raise _Unsupported("unbalanced parenthesis")
        self.pos += 1
        return (kind, triggers, leads) if kind == "group" else ("zero", None, None)

    def flags(self) -> bool:
        """Read `(?i:` or `(?s)`; True when it was a global flag group. Verbose mode changes the syntax."""
        start = self.pos
        while self.peek() in self._FLAGS:
            self.pos += 1
        if "x" in self.pattern[start : self.pos]:
            raise _Unsupported("verbose flag")
        if self.peek() not in (":", ")"):
            raise _Unsupported("bad flag group")
        self.pos += 1
        return self.pattern[self.pos - 1] == ")"


def _evidence(text: str) -> str:
    return text if len(text) <= MAX_EVIDENCE else text[: MAX_EVIDENCE - 1] + "…"


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


@dataclass
class _Block:
    """An open Python traceback: hits inside it are held back until its end, then reported as one event."""

    start_line: int
    start_t: float
    start_text: str
    last_line: int
    lines: int = 0
    in_tail: bool = False  # the final exception line was seen; what follows decides whether the chain goes on
    tail_blanks: int = 0
    expect_traceback: bool = False  # a chain marker was seen: the next Traceback line continues this block
    exceptions: list[str] = field(default_factory=list)
    exception_line: tuple[str, int, float] | None = None
    label: list[Hit] = field(default_factory=list)
    also: list[str] = field(default_factory=list)

    def absorb(self, hits: list[Hit]) -> None:
        """The first line that hits anything labels the block (the root cause prints first); others are noted."""
        if not hits:
            return
        if not self.label:
            self.label = list(hits)
            return
        labelled = {hit.signature for hit in self.label}
        self.also.extend(h.signature for h in hits if h.signature not in labelled and h.signature not in self.also)


class LogDetector:
    """Feeds clean log lines through the catalogue's log rows, with the traceback and OOM rules of §1/§4.6.

    One detector follows one run's log (and may also be fed its dmesg or ssh lines by `source`); it keeps only
    the open traceback between calls, so memory stays bounded however long the log.
    """

    def __init__(self, catalogue: Catalogue) -> None:
        self._catalogue = catalogue
        self._matchers = {
            source: _build_matcher([row for row in catalogue.log_rows(source) if row.id != "S48"])
            for source in LOG_SOURCES
        }
        self._block: _Block | None = None

    def feed(self, line: str, line_no: int, t: float, source: str = "log") -> list[Hit]:
        """Hits caused by this line. Hits of a traceback arrive when the block ends (a later line or `flush`)."""
        if "\x1b" in line or "\r" in line or "\n" in line:
            hits: list[Hit] = []
            segments = [segment for segment in _LINE_BREAK.split(strip_ansi(line)) if segment]
            for segment in segments or [""]:  # a CRLF ending must not read as a blank line after it
                hits.extend(self._feed_one(segment, line_no, t, source))
            return hits
        return self._feed_one(line, line_no, t, source)

    def feed_lines(self, lines: Sequence[str], first_line_no: int, t: float) -> list[Hit]:
        """`feed` for a chunk of clean log lines (numbered from `first_line_no`), the same hits in the same
        order, at a fraction of the cost: one scan of the whole chunk finds the few lines that can hit a row,
        and only those (and the lines of an open traceback) go through `feed`."""
        joined = "\n".join(lines)
        lowered = joined.lower()
        starts: list[int] = []
        if len(lowered) == len(joined):  # lower() kept every offset (not so for a few non-ASCII letters)
            position = 0
            for line in lines:
                starts.append(position)
                position += len(line) + 1
        wanted = self._matchers["log"].gate(lowered, starts) if starts else None
        hits: list[Hit] = []
        for index, line in enumerate(lines):
            if wanted is None or self._block is not None or index in wanted:
                hits.extend(self.feed(line, first_line_no + index, t))
        return hits

    def flush(self, t: float) -> list[Hit]:
        """End of input: close an open traceback. Hits keep the time of their evidence line, not `t`."""
        return self._close() if self._block is not None else []

    # -- one physical line ---------------------------------------------------------------------------------

    def _feed_one(self, line: str, line_no: int, t: float, source: str) -> list[Hit]:
        text = line if len(line) <= MAX_SCAN else line[:MAX_SCAN]
        if text[:1] == "[":
            prefix = _RANK_PREFIX.match(text)
            if prefix:
                text = text[prefix.end() :]
        matcher = self._matchers.get(source)
        if matcher is None:
            return []
        if source != "log":
            return self._line_hits(matcher, text, line, line_no, t)
        out = self._elastic(text, line, line_no, t) if "exitcode" in text else []
        if self._block is not None:
            consumed, closed = self._block_step(self._block, matcher, text, line, line_no, t)
            out.extend(closed)
            if consumed:
                return out
        if text.startswith(TRACEBACK_START):
            self._block = _Block(start_line=line_no, start_t=t, start_text=_evidence(line), last_line=line_no)
            return out
        out.extend(self._line_hits(matcher, text, line, line_no, t))
        return out

    def _line_hits(self, matcher: _Matcher, text: str, line: str, line_no: int, t: float) -> list[Hit]:
        rows = matcher.matching(text)
        if not rows:
            return []
        evidence = _evidence(line)
        hits = [Hit(row.id, row.severity, evidence, t, line_no) for row in rows]
        if any(row.id == "S01" for row in rows):
            hits = self._with_oom_fields(hits, text, evidence, line_no, t)
        return hits

    def _with_oom_fields(self, hits: list[Hit], text: str, evidence: str, line_no: int, t: float) -> list[Hit]:
        """S01 carries the parsed sizes; S03 joins it when reserved-but-unallocated covers the request."""
        fields = parse_oom(text)
        detail = fields.describe()
        hits = [replace(hit, detail=detail) if hit.signature == "S01" else hit for hit in hits]
        fragmentation = self._catalogue.rows.get("S03")
        if fragmentation is not None and fields.fragmented():
            assert fields.requested is not None and fields.reserved_unallocated is not None
            why = (
                f"requested {format_bytes(fields.requested)}, "
                f"reserved-but-unallocated {format_bytes(fields.reserved_unallocated)}"
            )
            hits.append(Hit("S03", fragmentation.severity, evidence, t, line_no, why))
        return hits

    def _elastic(self, text: str, line: str, line_no: int, t: float) -> list[Hit]:
        """torchrun's `exitcode : -9` names the signal that killed a worker: report the row it stands for."""
        found = ELASTIC_EXIT.search(text)
        if not found:
            return []
        mapped = ELASTIC_ROWS.get(int(found["code"]))
        row = self._catalogue.rows.get(mapped[0]) if mapped else None
        if mapped is None or row is None:
            return []
        detail = f"torchrun worker exitcode {found['code']} ({mapped[1]})"
        return [Hit(row.id, row.severity, _evidence(line), t, line_no, detail)]

    # -- traceback blocks -------------------------------------------------------------------------------------

    def _block_step(
        self, block: _Block, matcher: _Matcher, text: str, line: str, line_no: int, t: float
    ) -> tuple[bool, list[Hit]]:
        """Advance the open block by one line: (whether the block consumed the line, hits of a closed block)."""
        block.lines += 1
        if block.lines > MAX_BLOCK_LINES:
            return False, self._close()
        stripped = text.strip()
        if block.in_tail:
            return self._tail_step(block, matcher, text, stripped, line, line_no, t)
        if not stripped or text[0] in " \t":
            block.last_line = line_no
            return True, []  # frame, source or caret line: program text, not an error message
        if text.startswith(TRACEBACK_START):
            if block.expect_traceback:
                block.expect_traceback = False
                block.last_line = line_no
                return True, []
            return False, self._close()  # a new, unrelated traceback
        exception = EXC_LINE.match(text)
        if exception is None:
            return False, []  # interleaved output of another thread or rank: evaluate it on its own
        block.exceptions.append(exception["exc"])
        block.exception_line = (_evidence(line), line_no, t)
        block.in_tail, block.tail_blanks, block.last_line = True, 0, line_no
        block.absorb(self._line_hits(matcher, text, line, line_no, t))
        return True, []

    def _tail_step(
        self, block: _Block, matcher: _Matcher, text: str, stripped: str, line: str, line_no: int, t: float
    ) -> tuple[bool, list[Hit]]:
        """After an exception line: blank lines wait, a chain marker continues, indented text is its message."""
        if not stripped:
            block.tail_blanks += 1
            return (True, []) if block.tail_blanks <= _MAX_TAIL_BLANKS else (False, self._close())
        if stripped in _CHAIN_MARKERS or stripped == _EMBEDDED_TRACEBACK:
            block.in_tail, block.last_line = False, line_no
            block.expect_traceback = stripped in _CHAIN_MARKERS
            return True, []
        if text[0] in " \t" and block.tail_blanks == 0:
            block.last_line = line_no
            block.absorb(self._line_hits(matcher, text, line, line_no, t))
            return True, []
        return False, self._close()

    def _close(self) -> list[Hit]:
        """One event for the block: its labelling line's rows, or S48 naming the exception when none matched."""
        block, self._block = self._block, None
        if block is None:
            return []
        span = f"traceback lines {block.start_line}–{block.last_line}"
        if block.label:
            also = f"also {', '.join(block.also)}" if block.also else ""
            return [replace(hit, detail=_join(hit.detail, span, also)) for hit in block.label]
        generic = self._catalogue.rows.get("S48")
        if generic is None:
            return []
        if block.exception_line is None:
            return [Hit("S48", generic.severity, block.start_text, block.start_t, block.start_line,
                        _join("no final exception line", span))]
        evidence, line_no, t = block.exception_line
        name = block.exceptions[-1]
        severity = "info" if name == "KeyboardInterrupt" else generic.severity
        chain = " → ".join(block.exceptions)
        return [Hit("S48", severity, evidence, t, line_no, _join(chain, span))]


# --------------------------------------------------------------------------------------------------------------
# One alert per row


@dataclass(frozen=True)
class LedgerEntry:
    """What the UI shows for one row of one run: how bad, how often, the first and latest evidence."""

    signature: str
    severity: str  # the worst seen so far
    count: int
    first_t: float
    last_t: float
    first_evidence: str
    last_evidence: str
    line_no: int | None  # of the first hit
    detail: str  # of the hit that set the severity


class FindingsLedger:
    """One active alert per row for one run (§1 Alerts): repeats bump a counter, only escalation re-alerts.

    It holds one entry per row id, so a crash loop printing the same error a million times costs one entry.
    """

    def __init__(self) -> None:
        self._entries: dict[str, LedgerEntry] = {}

    def add(self, hit: Hit) -> bool:
        """Record a hit; True when the UI should notify (first hit of its row, or a worse severity than before)."""
        old = self._entries.get(hit.signature)
        if old is None:
            self._entries[hit.signature] = LedgerEntry(
                hit.signature, hit.severity, 1, hit.t, hit.t, hit.evidence, hit.evidence, hit.line_no, hit.detail
            )
            return True
        worse = severity_rank(hit.severity) > severity_rank(old.severity)
        self._entries[hit.signature] = replace(
            old,
            severity=hit.severity if worse else old.severity,
            detail=hit.detail if worse else old.detail,
            count=old.count + 1,
            last_t=max(old.last_t, hit.t),
            last_evidence=hit.evidence,
        )
        return worse

    def restore(self, entry: LedgerEntry) -> None:
        """Put back an entry kept across a restart, count and all, so nothing re-notifies or recounts."""
        self._entries[entry.signature] = entry

    def get(self, signature: str) -> LedgerEntry | None:
        return self._entries.get(signature)

    def entries(self) -> list[LedgerEntry]:
        """Entries in order of first appearance."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
