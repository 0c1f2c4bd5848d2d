"""Curves of any length in bounded memory (docs/deliver.md §3, issue 26 item 13): a `line` figure's train.csv is
read in chunks, hashed as it is parsed, averaged over seeds as the chunks arrive, and reduced for drawing.

- `stream_curve` reads one train.csv through a hashing reader (so `sha256` is of exactly the bytes parsed) with
  pandas `read_csv(chunksize=...)`, keeping only the two columns drawn, and yields (x, y) arrays per chunk
  with the empty y cells (a metric not logged at that step) dropped.
- `merge_seeds` walks the seeds' chunks together on x (every seed's x must increase): at each x every seed
  logged it yields the mean and sample std over seeds; an x only some seeds logged, or an x that goes back,
  is counted and reported, never averaged.
- `ColumnReducer` keeps the rows exactly up to EXACT_ROWS; past that it keeps, for each of at most `columns`
  equal x columns (one per pixel of the figure's width, so each is narrower than a pixel of the axes), the
  column's first, last, minimum and maximum point (M4): the drawn line has every column's extremes, so the
  shape is the full curve's at the figure's resolution. Memory is bounded by CAPACITY fine buckets, whatever
  the length of the file: the buckets double in width as the x range grows, and the final columns are whole
  groups of buckets, so each column's extremes are exact.

What was reduced is recorded in the figure's provenance (`reduction`: from how many rows to how many, over
how many columns of what width), the row count being that of the full curve.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from remote_gpu_trainer.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

CHUNK_ROWS = 200_000  # rows parsed at a time (about 10 MB of a two-column frame)
EXACT_ROWS = 20_000  # a curve of at most this many points is drawn as it is
CAPACITY = 1 << 14  # fine buckets held while streaming (a power of two: they merge pairwise)
#: a line of train.csv longer than this is no row of numbers: the parser would hold it whole (a file of NUL
#: bytes is one endless line), so it is refused as soon as it is seen
MAX_LINE_BYTES = 1 << 20
ROLES = ("first", "min", "max", "last")


class LineTooLong(ValueError):
    """A line of the stream is longer than MAX_LINE_BYTES."""


class HashingReader(io.RawIOBase):
    """A file descriptor read as a raw stream, every byte handed out also fed to a sha256; a line longer than
    MAX_LINE_BYTES raises LineTooLong before the parser can hold it."""

    def __init__(self, fd: int, max_line: int = MAX_LINE_BYTES) -> None:
        super().__init__()
        self._fd = fd
        self.digest = hashlib.sha256()
        self.bytes = 0
        self._max_line = max_line
        self._since_newline = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = os.read(self._fd, len(view))
        newline = data.rfind(b"\n")
        first = data.find(b"\n")
        longest = self._since_newline + (first if first >= 0 else len(data))
        if len(data) > self._max_line:  # a line inside a block is no longer than the block
            longest = max(longest, _longest_line(data, newline))
        if longest > self._max_line:
            raise LineTooLong(f"a line longer than {self._max_line} bytes")
        self._since_newline = len(data) - newline - 1 if newline >= 0 else self._since_newline + len(data)
        view[:len(data)] = data
        self.digest.update(data)
        self.bytes += len(data)
        return len(data)

    def drain(self) -> None:
        """Read (and hash) whatever the parser left unread, so the hash is of the whole file."""
        block = bytearray(1 << 20)
        while self.readinto(block):
            pass

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def _longest_line(data: bytes, last_newline: int) -> int:
    """The longest complete line inside `data` between its first and last newline (0 when there are none)."""
    first = data.find(b"\n")
    if first < 0 or first == last_newline:
        return 0
    return max(len(line) for line in data[first + 1:last_newline].split(b"\n"))


@dataclass
class CurveStream:
    """One train.csv being read: its path, the hash once read to the end, and whether x stayed integer."""

    path: str
    reader: HashingReader
    integer_x: bool = True
    rows: int = 0
    sha256: str | None = None


def stream_curve(fd: int, path: str, x: str, y: str, chunk_rows: int = CHUNK_ROWS
                 ) -> tuple[CurveStream, Iterator[tuple[np.ndarray, np.ndarray]]]:
    """The stream state and an iterator of (x, y) float arrays of train.csv at `fd` (which it closes), chunk by
    chunk, rows with an empty y dropped. A missing column or a cell that is not a number is a ConfigError naming
    the file (and the cell)."""
    import pandas as pd

    reader = HashingReader(fd)
    stream = CurveStream(path, reader)

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        with reader, io.BufferedReader(reader, 1 << 20) as handle:
            try:
                parts = pd.read_csv(handle, chunksize=chunk_rows)
                for frame in parts:
                    for column in (x, y):
                        if column not in frame.columns:
                            raise ConfigError(f"{path}: no column {column!r} (columns: "
                                              f"{', '.join(map(str, frame.columns))})")
                    xs, ys = _numbers(frame[x], x, path, stream), _numbers(frame[y], y, path, None)
                    keep = ~np.isnan(ys)
                    stream.rows += int(keep.sum())
                    yield xs[keep], ys[keep]
            except ConfigError:
                raise
            except LineTooLong as exc:
                raise ConfigError(f"{path}: {exc}: not a table of numbers; refused") from None
            except pd.errors.EmptyDataError:
                raise ConfigError(f"{path}: empty file, no header") from None
            except Exception as exc:  # pandas raises many types for one cause: not the table it claims to be
                raise ConfigError(f"{path}: unreadable table ({type(exc).__name__})") from None
            reader.drain()
            stream.sha256 = reader.digest.hexdigest()

    return stream, chunks()


def _numbers(column: pd.Series, name: str, path: str, stream: CurveStream | None) -> np.ndarray:
    """A column as float64; text that is not a number (or true/false) is refused naming the cell."""
    import pandas as pd

    kind = column.dtype.kind
    if kind in "iu":
        return column.to_numpy(dtype=np.float64)
    if kind == "f":
        if stream is not None:
            stream.integer_x = False
        return column.to_numpy(dtype=np.float64)
    converted = pd.to_numeric(column, errors="coerce") if kind == "O" else pd.Series(np.nan, index=column.index)
    bad = converted.isna() & column.notna()
    if bool(bad.any()):
        cell = column[bad].iloc[0]
        cell = cell.item() if isinstance(cell, np.generic) else cell  # np.True_ is named as the file says it
        raise ConfigError(f"{path}: column {name!r} holds {cell!r}, not a number")
    if stream is not None:
        stream.integer_x = False
    return converted.to_numpy(dtype=np.float64)


# -- seeds together -----------------------------------------------------------------------------------------
@dataclass
class MergeReport:
    """What merging the seeds found: x values only some seeds logged, and per seed the rows whose x went back."""

    unshared: int = 0
    backwards: dict[str, int] = field(default_factory=dict)


def merge_seeds(keys: Sequence[str], sources: Sequence[Iterator[tuple[np.ndarray, np.ndarray]]],
                report: MergeReport) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """(x, mean, std or None for one seed) at every x all seeds logged, in increasing x, a chunk at a time."""
    count = len(sources)
    pending: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0), np.empty(0)) for _ in sources]
    done = [False] * count
    last = [-math.inf] * count
    while True:
        for i in range(count):
            while not done[i] and pending[i][0].size == 0:
                chunk = next(sources[i], None)
                if chunk is None:
                    done[i] = True
                    break
                pending[i] = _forward(chunk, last[i], keys[i], report)
                if pending[i][0].size:
                    last[i] = float(pending[i][0][-1])
        if all(done[i] and pending[i][0].size == 0 for i in range(count)):
            return
        live = [float(pending[i][0][-1]) for i in range(count) if not done[i]]
        frontier = min(live) if live else math.inf
        taken = []
        for i in range(count):
            xs, ys = pending[i]
            cut = int(np.searchsorted(xs, frontier, side="right"))
            taken.append((xs[:cut], ys[:cut]))
            pending[i] = (xs[cut:], ys[cut:])
        shared = taken[0][0]
        for xs, _ in taken[1:]:
            shared = np.intersect1d(shared, xs, assume_unique=True)
        report.unshared += sum(xs.size for xs, _ in taken) - shared.size * count
        if shared.size == 0:
            continue
        stacked = np.vstack([ys[np.searchsorted(xs, shared)] for xs, ys in taken])
        if count == 1:
            yield shared, stacked[0], None
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            yield shared, stacked.mean(axis=0), stacked.std(axis=0, ddof=1)


def _forward(chunk: tuple[np.ndarray, np.ndarray], last: float, key: str,
             report: MergeReport) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's rows whose x is beyond every x before it (in the file and in the chunk); the others are
    counted for the report (the figure's G5 problem), never drawn out of order."""
    xs, ys = chunk
    if xs.size == 0:
        return xs, ys
    running = np.maximum.accumulate(np.concatenate(([last], xs)))[:-1]
    keep = xs > running
    dropped = int(xs.size - keep.sum())
    if dropped:
        report.backwards[key] = report.backwards.get(key, 0) + dropped
    return xs[keep], ys[keep]


# -- reduction ----------------------------------------------------------------------------------------------
@dataclass
class _Buckets:
    """Per bucket: whether it holds rows, how many, and (x, y, err) of its first, min, max and last point."""

    size: int
    has: np.ndarray = field(init=False)
    rows: np.ndarray = field(init=False)
    points: dict[str, np.ndarray] = field(init=False)  # role -> (size, 3): x, y, err

    def __post_init__(self) -> None:
        self.has = np.zeros(self.size, dtype=bool)
        self.rows = np.zeros(self.size, dtype=np.int64)
        self.points = {role: np.full((self.size, 3), np.nan) for role in ROLES}

    def take(self, index: np.ndarray | slice) -> _Buckets:
        out = _Buckets.__new__(_Buckets)
        out.has, out.rows = self.has[index], self.rows[index]
        out.points = {role: self.points[role][index] for role in ROLES}
        out.size = int(out.has.size)
        return out


def _key_low(y: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(y), np.inf, y)


def _combine(early: _Buckets, late: _Buckets) -> _Buckets:
    """Bucket i of `early` followed by bucket i of `late` (all of early's x before late's), as one bucket."""
    out = _Buckets.__new__(_Buckets)
    out.size = early.size
    out.has = early.has | late.has
    out.rows = early.rows + late.rows
    only_late, only_early = ~early.has & late.has, early.has & ~late.has
    both = early.has & late.has
    points = {}
    points["first"] = np.where(only_late[:, None], late.points["first"], early.points["first"])
    points["last"] = np.where(only_early[:, None], early.points["last"], late.points["last"])
    low_e, low_l = _key_low(early.points["min"][:, 1]), _key_low(late.points["min"][:, 1])
    take_late = only_late | (both & (low_l < low_e))
    points["min"] = np.where(take_late[:, None], late.points["min"], early.points["min"])
    high_e, high_l = _key_low(early.points["max"][:, 1]), _key_low(late.points["max"][:, 1])
    take_late = only_late | (both & (high_l > high_e))
    points["max"] = np.where(take_late[:, None], late.points["max"], early.points["max"])
    out.points = points
    return out


def _group(buckets: _Buckets, factor: int) -> _Buckets:
    """Every `factor` consecutive buckets as one (the last group padded with empty buckets)."""
    groups = -(-buckets.size // factor)
    padded = _Buckets(groups * factor)
    padded.has[:buckets.size], padded.rows[:buckets.size] = buckets.has, buckets.rows
    for role in ROLES:
        padded.points[role][:buckets.size] = buckets.points[role]
    out = padded.take(slice(0, None, factor))
    for offset in range(1, factor):
        out = _combine(out, padded.take(slice(offset, None, factor)))
    return out


def _chunk_buckets(index: np.ndarray, xs: np.ndarray, ys: np.ndarray, errs: np.ndarray,
                   size: int) -> _Buckets:
    """The chunk's rows (increasing x, so increasing bucket index) gathered into `size` buckets."""
    out = _Buckets(size)
    starts = np.flatnonzero(np.concatenate(([True], index[1:] != index[:-1])))
    ends = np.concatenate((starts[1:], [index.size]))
    where = index[starts]
    out.has[where] = True
    out.rows[where] = ends - starts
    positions = np.arange(index.size)
    table = np.column_stack((xs, ys, errs))
    low = _key_low(ys)
    low_min = np.minimum.reduceat(low, starts)
    at_min = np.minimum.reduceat(np.where(low == np.repeat(low_min, ends - starts), positions, index.size), starts)
    high_max = np.maximum.reduceat(low, starts)
    at_max = np.minimum.reduceat(np.where(low == np.repeat(high_max, ends - starts), positions, index.size),
                                 starts)
    for role, rows in (("first", starts), ("last", ends - 1), ("min", at_min), ("max", at_max)):
        out.points[role][where] = table[rows]
    return out


@dataclass(frozen=True)
class Reduced:
    """The points to draw, and (when reduced) what the provenance records."""

    x: np.ndarray
    y: np.ndarray
    err: np.ndarray | None
    rows: int  # points of the full curve (after averaging over seeds)
    columns: int = 0  # 0: not reduced
    column_width: float = 0.0
    x0: float = 0.0
    #: a row at x is in column floor((x - x0) / bucket_width) // factor (the arithmetic the buckets used)
    bucket_width: float = 0.0
    factor: int = 0


class ColumnReducer:
    """The M4 reduction of the module docstring, fed (x, y, err) chunks in increasing x."""

    def __init__(self, columns: int, *, exact_rows: int = EXACT_ROWS, capacity: int = CAPACITY) -> None:
        self.columns = max(1, columns)
        self.exact_rows = max(exact_rows, 4 * self.columns)
        self.capacity = max(capacity, 4 * self.columns)
        self.raw: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.rows = 0
        self.single = False
        self.buckets: _Buckets | None = None
        self.x0 = 0.0
        self.width = 1.0

    def add(self, xs: np.ndarray, ys: np.ndarray, errs: np.ndarray | None) -> None:
        if xs.size == 0:
            return
        if errs is None:
            self.single = True
            errs = np.full(xs.size, np.nan)
        self.rows += int(xs.size)
        if self.buckets is None:
            self.raw.append((xs, ys, errs))
            if self.rows > self.exact_rows:
                self._start_buckets()
            return
        self._feed(xs, ys, errs)

    def _start_buckets(self) -> None:
        xs, ys, errs = (np.concatenate(parts) for parts in zip(*self.raw, strict=True))
        self.raw = []
        self.x0 = float(xs[0])
        span = float(xs[-1]) - self.x0
        self.width = span / (self.capacity // 4) if span > 0 and math.isfinite(span) else 1.0
        self.buckets = _Buckets(self.capacity)
        self._feed(xs, ys, errs)

    def _feed(self, xs: np.ndarray, ys: np.ndarray, errs: np.ndarray) -> None:
        assert self.buckets is not None
        top = float(xs[-1]) - self.x0
        while top / self.width >= self.capacity:
            merged = _group(self.buckets, 2)
            self.buckets = _Buckets(self.capacity)
            self.buckets = _paste(self.buckets, merged)
            self.width *= 2
        index = np.floor((xs - self.x0) / self.width).astype(np.int64)
        np.clip(index, 0, self.capacity - 1, out=index)
        self.buckets = _combine(self.buckets, _chunk_buckets(index, xs, ys, errs, self.capacity))

    def result(self) -> Reduced:
        if self.buckets is None:
            if not self.raw:
                return Reduced(np.empty(0), np.empty(0), None if self.single else np.empty(0), 0)
            xs, ys, errs = (np.concatenate(parts) for parts in zip(*self.raw, strict=True))
            return Reduced(xs, ys, None if self.single else errs, self.rows)
        used = int(np.flatnonzero(self.buckets.has)[-1]) + 1
        factor = -(-used // self.columns)
        final = _group(self.buckets.take(slice(0, used)), factor)
        table = np.concatenate([final.points[role][final.has] for role in ROLES])
        order = np.argsort(table[:, 0], kind="stable")
        table = table[order]
        keep = np.concatenate(([True], table[1:, 0] != table[:-1, 0]))
        table = table[keep]
        return Reduced(table[:, 0], table[:, 1], None if self.single else table[:, 2], self.rows,
                       columns=int(final.has.size), column_width=self.width * factor, x0=self.x0,
                       bucket_width=self.width, factor=factor)


def _paste(into: _Buckets, part: _Buckets) -> _Buckets:
    into.has[:part.size], into.rows[:part.size] = part.has, part.rows
    for role in ROLES:
        into.points[role][:part.size] = part.points[role]
    return into


def reduce_curve(chunks: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray | None]], columns: int,
                 **options: Any) -> Reduced:
    """Every chunk through one ColumnReducer (see its docstring)."""
    reducer = ColumnReducer(columns, **options)
    for xs, ys, errs in chunks:
        reducer.add(xs, ys, errs)
    return reducer.result()
