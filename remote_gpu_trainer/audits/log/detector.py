"""Failure signatures over live log lines (docs/log-signatures.md §1, §4.6): `LogDetector` turns clean log lines into
`Hit`s of the catalogue's log rows, folds a Python traceback (chained or not) into one event, reads the sizes of
a CUDA OOM message (S01, S03), maps torchrun's worker exit codes to the rows they stand for and reads torchrun's
failure report (S96: the rank that failed first; the ranks torchrun then stopped are not stopped from outside, so
neither their SIGTERM nor their `Received SIGTERM` is S47). Pure: it keeps only the open traceback, the open
root-cause block and the pids torchrun signalled between calls. prefilter.py decides which rows a line can match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from weakref import WeakKeyDictionary

from remote_gpu_trainer.audits.log.prefilter import Matcher, build_matcher
from remote_gpu_trainer.audits.log.samples import Hit
from remote_gpu_trainer.audits.log.signatures import LOG_SOURCES, Catalogue
from remote_gpu_trainer.text import size_iec, strip_ansi

MAX_SCAN = 4096  # a 10 MB line (a dumped tensor, a minified JSON blob) costs no more than 4 KB of matching
MAX_EVIDENCE = 300
MAX_BLOCK_LINES = 500  # a traceback that never prints its final line must not swallow the rest of the log
_MAX_TAIL_BLANKS = 2  # blank lines allowed between an exception line and a chained traceback's marker


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
ELASTIC_PID = re.compile(r"\(pid: (?P<pid>\d+)\)")
# torchrun stopping its workers (`Sending process 1299 closing signal SIGTERM`), and torchrun itself told to stop
# first (`Received 15 death signal, shutting down workers`): then the stop came from outside
TORCHRUN_STOPS = re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<signal>SIG[A-Z]+)")
TORCHRUN_SIGNALLED = "death signal, shutting down workers"
ROOT_CAUSE = "Root Cause (first observed failure):"
ROOT_CAUSE_ROW = "S96"
REPORT_FIELD = re.compile(r"^\s*(?P<key>rank|exitcode|host|time)\s*:\s*(?P<value>.*?)\s*$")
ROOT_CAUSE_LINES = 12  # the block's fields come within its first lines: `[0]:`, time, host, rank, exitcode
STOP_WINDOW_LINES = 2000  # how long torchrun's own stop explains a SIGTERM: its report follows within lines
MAX_STOPPED = 64
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
            f"{label} {size_iec(value)}"
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


@dataclass
class _RootCause:
    """torchrun's `Root Cause (first observed failure):` block, open until it named the rank and its exit code."""

    line_no: int
    t: float
    text: str
    lines: int = 0
    fields: dict[str, str] = field(default_factory=dict)


_MATCHERS: WeakKeyDictionary[Catalogue, dict[str, Matcher]] = WeakKeyDictionary()


def matchers_of(catalogue: Catalogue) -> dict[str, Matcher]:
    """The catalogue's compiled matchers, one per log source, built once per catalogue (about 40 ms of regex
    compiling): a Matcher is immutable, so the detectors of one session (a run's monitor, a log view's backfill)
    share them instead of each compiling its own."""
    found = _MATCHERS.get(catalogue)
    if found is None:
        found = _MATCHERS[catalogue] = {
            source: build_matcher([row for row in catalogue.log_rows(source) if row.id != "S48"])
            for source in LOG_SOURCES
        }
    return found


class LogDetector:
    """Feeds clean log lines through the catalogue's log rows, with the traceback and OOM rules of §1/§4.6.

    One detector follows one run's log (and may also be fed its dmesg or ssh lines by `source`); it keeps only
    the open traceback, the open root-cause block and at most MAX_STOPPED pids between calls, so memory stays
    bounded however long the log.
    """

    def __init__(self, catalogue: Catalogue) -> None:
        self._catalogue = catalogue
        self._matchers = matchers_of(catalogue)
        self._block: _Block | None = None
        self._root: _RootCause | None = None
        self._stopped: dict[int, str] = {}  # pid → signal: ranks torchrun stopped after one failed
        self._stopped_until = -1  # the line up to which that stop explains SIGTERMs
        self._signalled_at: int | None = None  # the line where torchrun said it was itself told to stop

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
            if wanted is None or self._block is not None or self._root is not None or index in wanted:
                hits.extend(self.feed(line, first_line_no + index, t))
        return hits

    def flush(self, t: float) -> list[Hit]:
        """End of input: close an open traceback and root-cause block. Hits keep the time of their evidence line,
        not `t`."""
        hits = self._close() if self._block is not None else []
        return hits + self._close_root() if self._root is not None else hits

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
        out = self._root_step(text, line_no) if self._root is not None else []
        if "signal" in text:
            self._torchrun_stop(text, line_no)
        if text.startswith(ROOT_CAUSE) and ROOT_CAUSE_ROW in self._catalogue.rows:
            out.extend(self._close_root())
            self._root = _RootCause(line_no, t, _evidence(line))
            return out
        if "exitcode" in text:
            out.extend(self._elastic(text, line, line_no, t))
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

    def _line_hits(self, matcher: Matcher, text: str, line: str, line_no: int, t: float) -> list[Hit]:
        rows = matcher.matching(text)
        if not rows:
            return []
        if self._stopped and line_no <= self._stopped_until and "got signal" not in text:
            rows = [row for row in rows if row.id != "S47"]  # a rank torchrun stopped says so: not from outside
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
                f"requested {size_iec(fields.requested)}, "
                f"reserved-but-unallocated {size_iec(fields.reserved_unallocated)}"
            )
            hits.append(Hit("S03", fragmentation.severity, evidence, t, line_no, why))
        return hits

    def _elastic(self, text: str, line: str, line_no: int, t: float) -> list[Hit]:
        """torchrun's `exitcode : -9` names the signal that killed a worker: report the row it stands for, unless
        torchrun itself sent that worker the signal (it stops the other ranks when one fails)."""
        found = ELASTIC_EXIT.search(text)
        if not found:
            return []
        pid = ELASTIC_PID.search(text)
        if pid is not None and int(pid["pid"]) in self._stopped and line_no <= self._stopped_until:
            return []
        mapped = ELASTIC_ROWS.get(int(found["code"]))
        row = self._catalogue.rows.get(mapped[0]) if mapped else None
        if mapped is None or row is None:
            return []
        detail = f"torchrun worker exitcode {found['code']} ({mapped[1]})"
        return [Hit(row.id, row.severity, _evidence(line), t, line_no, detail)]

    # -- torchrun's stop and its report ------------------------------------------------------------------------

    def _torchrun_stop(self, text: str, line_no: int) -> None:
        """Remember the workers torchrun signals because one of them failed; not when torchrun was itself told
        to stop just before (a preemption reaches every rank: that SIGTERM is the outside's, S47)."""
        if TORCHRUN_SIGNALLED in text:
            self._signalled_at = line_no
            return
        found = TORCHRUN_STOPS.search(text)
        if found is None:
            return
        if self._signalled_at is not None and line_no - self._signalled_at <= STOP_WINDOW_LINES:
            return
        if len(self._stopped) >= MAX_STOPPED:
            self._stopped.pop(next(iter(self._stopped)))
        self._stopped[int(found["pid"])] = found["signal"]
        self._stopped_until = line_no + STOP_WINDOW_LINES

    def _root_step(self, text: str, line_no: int) -> list[Hit]:
        """One line of the open root-cause block: a field of the first failure, or the block's end."""
        root = self._root
        assert root is not None
        root.lines += 1
        found = REPORT_FIELD.match(text)
        if found is not None:
            root.fields.setdefault(found["key"], found["value"])
        done = "rank" in root.fields and "exitcode" in root.fields
        if done or root.lines >= ROOT_CAUSE_LINES or text.startswith("==="):
            return self._close_root()
        return []

    def _close_root(self) -> list[Hit]:
        """S96 naming the rank that failed first (its rank, exit code and host, as the block gives them), and the
        ranks torchrun stopped because of it; torchrun's own stop is then over."""
        root, self._root = self._root, None
        row = self._catalogue.rows.get(ROOT_CAUSE_ROW)
        if root is None or row is None:
            return []
        named = [f"{key} {' '.join(root.fields[key].split())}" for key in ("rank", "exitcode", "host")
                 if key in root.fields]
        evidence = "torchrun root cause: " + ", ".join(named) if named else root.text
        stopped = ", ".join(f"pid {pid} ({signal})" for pid, signal in self._stopped.items())
        detail = f"torchrun then stopped the other ranks: {stopped}" if stopped else ""
        self._stopped.clear()
        return [Hit(row.id, row.severity, _evidence(evidence), root.t, root.line_no, detail)]

    # -- traceback blocks -------------------------------------------------------------------------------------

    def _block_step(
        self, block: _Block, matcher: Matcher, text: str, line: str, line_no: int, t: float
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
        self, block: _Block, matcher: Matcher, text: str, stripped: str, line: str, line_no: int, t: float
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
