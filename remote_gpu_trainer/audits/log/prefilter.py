"""Which catalogue rows can match a log line, found fast (docs/log-signatures.md §1): each regex row is compiled
with the literal strings one of which every match must contain, and a trie of those literals screens lines
(or whole chunks of lines) before any row's own pattern runs. detector.py feeds lines through a Matcher.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from remote_gpu_trainer.audits.log.samples import Signature


@dataclass(frozen=True)
class _Row:
    """One regex row as the matcher runs it: compiled, with the literals that let it skip most lines."""

    signature: Signature
    regex: re.Pattern[str]
    leads: frozenset[str] | None  # every match starts with one of these (lower-cased); None if unknown
    requires: tuple[str, ...] = ()  # one of these occurs in every match (the row's own `requires`)


@dataclass(frozen=True)
class Matcher:
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
    gate_words: re.Pattern[str] | None = None  # over many lines at once: which lines can hit anything (see gate)
    gate_requires: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()  # (a row's words, its triggers)

    def gate(self, lowered: str, starts: Sequence[int]) -> set[int] | None:
        """Indexes of the lines (of `lowered`, lines joined by newlines, starting at `starts`) that may hit a
        row, found by C-level scans of the whole chunk; None when every line must be looked at. A row with
        `requires` gates only lines holding its trigger *and* one of those words: S08's `loss` is on nearly
        every metric line, `nan`/`inf` on almost none of them."""
        if self.always or self.gate_words is None:
            return None
        lines = {bisect_right(starts, found.start()) - 1 for found in self.gate_words.finditer(lowered)}
        for words, triggers in self.gate_requires:
            near = {bisect_right(starts, at) - 1 for word in words for at in _occurrences(lowered, word)} - lines
            for index in near:
                end = starts[index + 1] if index + 1 < len(starts) else len(lowered)
                line = lowered[starts[index]:end]
                if any(trigger in line for trigger in triggers):
                    lines.add(index)
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


def _occurrences(text: str, word: str) -> list[int]:
    """Every offset of `word` in `text`: str.find's C search, faster than `re` for a few short words."""
    found: list[int] = []
    at = text.find(word)
    while at >= 0:
        found.append(at)
        at = text.find(word, at + 1)
    return found


def build_matcher(signatures: Sequence[Signature]) -> Matcher:
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
    return Matcher(tuple(rows), prefilter, MappingProxyType(by_trigger), frozenset(always),
                   *_chunk_gates(rows, by_trigger))


# block starts, torchrun's exits and its own stops (audits/log/detector.py reads them without a row)
CHUNK_ALWAYS = ("traceback (most recent call last):", "exitcode", "closing signal", "death signal")


def _chunk_gates(rows: Sequence[_Row], by_trigger: Mapping[str, frozenset[int]]
                 ) -> tuple[re.Pattern[str], tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]]:
    """The chunk gate: one pattern for the triggers of plain rows (plus what opens a traceback or names an
    exit code), and per row with `requires` the pattern of its words with the triggers its line must hold.

    The gate only has to let through a superset of the lines that can hit (each then goes through the
    full matcher), so each trigger is searched by its tail from its rarest letter (`_rare_tail`): `re`
    tries the pattern only at positions holding one of the few letters the tails start with, instead of
    at nearly every letter of the chunk (the ~130 whole triggers start with 27 different characters)."""
    words = {*(t for t, indexes in by_trigger.items() if any(not rows[i].requires for i in indexes)), *CHUNK_ALWAYS}
    tails = {_rare_tail(word) for word in words}
    minimal = sorted(w for w in tails if not any(w.startswith(o) for o in tails if o != w))
    plain = re.compile(_trie(minimal))  # a trie, not a flat alternation: `re` would try every branch everywhere
    requires = []
    for index, row in enumerate(rows):
        if row.requires:
            own = tuple(sorted(t for t, indexes in by_trigger.items() if index in indexes))
            requires.append((tuple(_minimal(row.requires)), own))
    return plain, tuple(requires)


# Letters by how often they occur in training logs, most frequent first; anything absent is rarer still.
_COMMON = " e0123456789taoinsrl.:/=,_-|[]()'\"hdcumpfgwybkv"
_RARITY = {char: len(_COMMON) - rank for rank, char in enumerate(_COMMON)}


def _rare_tail(word: str) -> str:
    """The part of `word` from its rarest character on (at least MIN_LITERAL long): a line holding `word`
    holds this tail, and few positions of a log start it."""
    if len(word) <= MIN_LITERAL:
        return word
    start = min(range(len(word) - MIN_LITERAL + 1), key=lambda i: (_RARITY.get(word[i], 0), i))
    return word[start:]


def _minimal(words: Sequence[str]) -> list[str]:
    return sorted(w for w in set(words) if not any(w.startswith(o) for o in words if o != w))


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
