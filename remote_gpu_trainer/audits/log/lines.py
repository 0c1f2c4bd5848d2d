"""Bytes of a followed log → clean lines, whatever the trainer wrote.

Trainers write carriage-return progress bars (tqdm redraws one line hundreds of times), ANSI colours,
bytes that are not UTF-8 and, now and then, a multi-megabyte line (a tensor printed in full). The parser
and the detector want one clean line at a time; the log view wants only the lines a terminal would have
kept. Memory stays bounded: a line longer than `max_chars` keeps its head and counts the rest.

A line is shown in the TUI, printed by `rgt watch` and quoted in findings and reports, so what ANSI stripping
leaves of control characters (a lone ESC, BS, BEL, C1 codes, bidi overrides) is escaped here, once, with
text.escape_control: every consumer gets text that cannot drive a terminal.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

from remote_gpu_trainer.text import escape_control, has_control, strip_ansi

MAX_LINE_CHARS = 4096


class Line(NamedTuple):
    """One segment of the log. `redraw` marks a segment ended by a bare carriage return: a progress-bar
    frame the terminal overwrote, so parsers read it but a log view shows only the frame that stayed."""

    text: str
    redraw: bool = False
    dropped: int = 0  # characters cut from an over-long line


class LineSplitter:
    """Incremental: feed any chunking of the byte stream and get the same lines out."""

    def __init__(self, max_chars: int = MAX_LINE_CHARS) -> None:
        self.max_chars = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""  # the start of the current unfinished line (at most max_chars)
        self._dropped = 0  # characters of the current line beyond max_chars
        self._held_cr = False  # the previous chunk ended in '\r': wait to see whether '\n' follows
        self._dirty = False  # the text being split (or the held line) has control characters to escape

    def feed(self, data: bytes) -> list[Line]:
        return self._split(self._decoder.decode(data))

    def flush(self) -> list[Line]:
        """End of input (the run ended): the unfinished last line is a line too."""
        lines = self._split(self._decoder.decode(b"", final=True))
        if self._held_cr or self._head or self._dropped:
            lines.append(self._make(self._head, redraw=self._held_cr))
        self._held_cr = False
        self._head, self._dropped = "", 0
        return lines

    def reset(self) -> None:
        """The file was truncated or replaced: forget the half line of the old file."""
        self._decoder.reset()
        self._head, self._dropped, self._held_cr, self._dirty = "", 0, False, False

    @property
    def partial(self) -> str:
        """The unfinished line so far: a live progress bar that has not reached its newline."""
        return escape_control(strip_ansi(self._head))

    def _split(self, text: str) -> list[Line]:
        if self._held_cr:
            text, self._held_cr = "\r" + text, False
        if text.endswith("\r"):
            text, self._held_cr = text[:-1], True  # a '\n' in the next chunk would make it '\r\n'
        if not text:
            return []
        self._dirty = self._dirty or has_control(text, line_breaks_ok=True)  # one scan per chunk, not per line
        segments = text.split("\n")  # str.split is C-fast; '\r' inside a segment is a redrawn frame
        if not (self._dirty or self._dropped or "\x1b" in text or "\x00" in text or "\x1b" in self._head
                or max(len(self._head) + len(segments[0]), *map(len, segments)) > self.max_chars):
            segments[0] = self._head + segments[0]  # the held half line is the first segment's start
            return self._split_clean(segments)
        lines: list[Line] = []
        last = len(segments) - 1
        for index, segment in enumerate(segments):
            if index < last and segment.endswith("\r"):
                segment = segment[:-1]  # '\r\n' ends a line once
            frames = segment.split("\r") if "\r" in segment else (segment,)
            final = len(frames) - 1
            for position, frame in enumerate(frames):
                self._append(frame)
                if index == last and position == final:
                    break  # the unfinished line: wait for its end
                lines.append(self._make(self._head, redraw=position < final))
                self._head, self._dropped = "", 0
        self._dirty = self._dirty and has_control(self._head)
        return lines

    def _split_clean(self, segments: list[str]) -> list[Line]:
        """`_split` for the common chunk: no escape, control or NUL character and no over-long line, so
        every segment is a line as it stands (built here without a call per line)."""
        lines: list[Line] = []
        append, make = lines.append, tuple.__new__  # C-level construction: Line(...) costs 3× as much
        unfinished = segments.pop()
        for segment in segments:
            if "\r" in segment:
                frames = (segment[:-1] if segment.endswith("\r") else segment).split("\r")
                lines.extend([make(Line, (frame, True, 0)) for frame in frames[:-1]])
                append(make(Line, (frames[-1], False, 0)))
            else:
                append(make(Line, (segment, False, 0)))
        if "\r" in unfinished:
            frames = unfinished.split("\r")
            lines.extend([make(Line, (frame, True, 0)) for frame in frames[:-1]])
            unfinished = frames[-1]
        self._head = unfinished
        return lines

    def _append(self, piece: str) -> None:
        if not self._head and len(piece) <= self.max_chars:
            self._head = piece  # the common case: a whole line in one chunk
            return
        room = self.max_chars - len(self._head)
        if len(piece) <= room:
            self._head += piece
        else:
            self._head += piece[:max(0, room)]
            self._dropped += len(piece) - max(0, room)

    def _make(self, text: str, redraw: bool) -> Line:
        clean = strip_ansi(text)
        if "\x00" in clean:
            clean = clean.replace("\x00", "")
        if self._dirty:
            clean = escape_control(clean)
        return Line(clean, redraw=redraw, dropped=self._dropped)
