"""The one text module: ANSI stripping, money and prices, sizes and durations, as every face uses them."""

from __future__ import annotations

import pytest

from remote_gpu_trainer.audits.log.lines import LineSplitter
from remote_gpu_trainer.text import (
    duration,
    escape_all,
    escape_control,
    gib,
    money,
    price,
    price_text,
    size,
    size_iec,
    span,
    strip_ansi,
)

OSC8 = "\x1b]8;;https://wandb.ai/run/7\x1b\\"


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[1;31mERROR\x1b[0m loss=nan", "ERROR loss=nan"),  # colours
    ("\x1b[2K\x1b[1Gepoch 3", "epoch 3"),  # erase line, cursor to column 1
    (f"see {OSC8}the run\x1b]8;;\x1b\\ page", "see the run page"),  # an OSC-8 hyperlink keeps its text
    ("\x1b]0;train.py: step 40\x07step=40", "step=40"),  # a window title ended by BEL
    ("\x1b]2;title\x1b\\done", "done"),  # a window title ended by ST
    ("\x1b[1mbold\x1b(B\x1b[m plain", "bold plain"),  # tput sgr0 emits ESC ( B before ESC [ m
    ("\x1b7saved\x1b8 \x1b=keypad", "saved keypad"),  # two-character escapes
    ("\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),  # private CSI parameters
    ("no escapes at all", "no escapes at all"),
])
def test_escape_sequences_are_removed_whole_and_their_text_kept(raw: str, shown: str) -> None:
    assert strip_ansi(raw) == shown


def test_what_is_left_of_a_broken_sequence_is_shown_escaped_never_obeyed() -> None:
    assert escape_control(strip_ansi("tail \x1b")) == "tail \\x1b"
    assert strip_ansi("\x1b]8;;https://unterminated") == ""  # an OSC never ended takes the rest of the line


def test_the_log_splitter_shows_a_hyperlinked_line_as_its_text() -> None:
    splitter = LineSplitter()
    lines = splitter.feed(f"{OSC8}checkpoint saved\x1b]8;;\x1b\\ \x1b]0;title\x07step=5\n".encode())
    assert [line.text for line in lines] == ["checkpoint saved step=5"]


def test_amounts_are_rounded_to_the_cent_and_quoted_prices_are_kept_as_quoted() -> None:
    assert [money(v) for v in (0.347, 1234.5, 0.0, None)] == ["$0.35", "$1,234.50", "$0.00", "—"]
    assert money(2.5, "CNY") == "CNY 2.50"
    assert [price_text(v) for v in (0.44, 0.4, 2, 0.347, 1.23456)] == ["0.44", "0.40", "2.00", "0.347", "1.2346"]
    assert price(0.347) == "$0.347" and price(3, "CNY") == "3.00 CNY"


def test_sizes_use_binary_units_and_durations_read_at_a_glance() -> None:
    assert [size(v) for v in (512, 100_000, 5 << 20, 3 << 30, None)] == ["512 B", "97.7 KiB", "5.0 MiB", "3.0 GiB", "—"]
    assert [duration(v) for v in (45, 725, 11220, None)] == ["45s", "12m05s", "3h07m", "—"]


def test_the_other_size_conventions_have_one_home_each() -> None:
    assert [gib(v) for v in (10 * 2**30, 2 * 2**40, 0)] == ["10.0 GiB", "2048.0 GiB", "0.0 GiB"]
    assert [size_iec(v) for v in (2 * 2**30, 20 * 2**20, 512 * 2**10, 2**40, 100)] == [
        "2.00 GiB", "20.00 MiB", "512.00 KiB", "1.00 TiB", "100 B"]
    assert size_iec(80 * 2**30, 0, "GiB") == "80 GiB" and size_iec(2**29, 1, "GiB") == "0.5 GiB"


def test_coarse_spans_for_evidence_and_liveness() -> None:
    assert [span(v) for v in (10, 119, 125, 2400, 7200, 11160, None)] == [
        "10s", "119s", "2m", "40m", "2.0h", "3.1h", "never"]


def test_escape_all_walks_every_string_of_a_structure_keys_included() -> None:
    """One walk for the report's Overview and the --format json documents: nothing a box wrote stays raw."""
    import dataclasses
    from typing import NamedTuple

    class Pair(NamedTuple):
        name: str
        size: int

    @dataclasses.dataclass(frozen=True)
    class Row:
        path: str
        pairs: tuple[Pair, ...]
        extra: dict[str, list[str]]

    raw = Row("a\x1b[2Jb", (Pair("c\u202ed", 3),), {"k\x07": ["e\x1bf", "ok"]})
    clean = escape_all(raw)
    assert clean == Row("a\\x1b[2Jb", (Pair("c\\u202ed", 3),), {"k\\x07": ["e\\x1bf", "ok"]})
    assert isinstance(clean.pairs[0], Pair) and raw.path == "a\x1b[2Jb"  # a new value; the original is kept



@pytest.mark.parametrize("char", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u061c", "\u202e",
                                  "\u2028", "\udcff"])
def test_invisible_and_direction_changing_characters_and_lone_surrogates_are_escaped(char: str) -> None:
    """`best\u200b.pth` must not read as `best.pth`, nor a lone surrogate (a name that was not UTF-8) crash a
    terminal or the state database."""
    shown = escape_control(f"best{char}.pth")
    assert shown == (f"best\\u{ord(char):04x}.pth" if ord(char) >= 0x100 else f"best\\x{ord(char):02x}.pth")
    shown.encode("utf-8")


def test_escape_all_keeps_a_frozen_record_with_nothing_to_escape_and_rebuilds_one_with_something() -> None:
    """The report escapes its whole Overview: records with nothing to escape are kept (not copied field by field),
    and a string to escape, however deep, still makes its records new ones."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Row:
        name: str
        tags: tuple[str, ...] = ()

    @dataclasses.dataclass(frozen=True)
    class Table:
        rows: tuple[Row, ...]
        title: str = ""

    clean = Table((Row("a", ("x",)), Row("b")), "t")
    assert escape_all(clean) is clean
    dirty = Table((Row("a", ("x",)), Row("b", ("\x1b[2J",))), "t")
    escaped = escape_all(dirty)
    assert escaped is not dirty and escaped.rows[0] is dirty.rows[0]
    assert escaped.rows[1].tags == ("\\x1b[2J",) and dirty.rows[1].tags == ("\x1b[2J",)
