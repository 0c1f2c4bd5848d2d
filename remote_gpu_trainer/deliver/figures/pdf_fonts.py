"""The font subset a PDF embeds, computed once per font file and glyph set in a process (docs/deliver.md §3).

With `pdf.fonttype` 42 (TrueType, which journals' PDF checkers accept where they refuse Type 3) matplotlib
embeds each font as a subset of the glyphs the figure used, made by fontTools from the font file on every
save: 0.1–0.15 s a PDF, the largest single cost of a build (issue 29's profile: 12.8 s of a 33 s build of 20
figures). The subset is a pure function of the font file's bytes and the glyph set (fontTools subsets without
a timestamp: `recalc_timestamp` is off in its options), and the figures of one project use the same fonts and
mostly the same glyphs, so `install()` wraps matplotlib's `_backend_pdf_ps.get_glyphs_subset` with a memo
keyed on (path, face index, size and mtime of the file, glyph set). A hit hands back the subset font re-read
from the bytes the miss saved; matplotlib then writes it exactly as it would have (tested: the PDF bytes are
identical with and without the memo). A different glyph set (a figure whose text changed) is a different key.

matplotlib's helper is private: the memo is installed only on the signature it was written against
(`get_glyphs_subset(fontfile, glyphs)` returning `SubsetResults`, matplotlib 3.11); any other matplotlib
subsets as it always did, unmemoized.
"""

from __future__ import annotations

import inspect
import io
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

MEMO_ENTRIES = 256  # a subset of DejaVu Sans for a figure's text is 20–40 KB: at most ~10 MB held
_memo: OrderedDict[tuple[Any, ...], tuple[bytes, dict[int, int]]] = OrderedDict()
_lock = threading.Lock()
_MARK = "_rgt_subset_memo"


def install() -> bool:
    """Wrap matplotlib's subsetting with the memo (once per process); False where this matplotlib's helper is
    not the one the memo was written against (it then runs as it is)."""
    from matplotlib.backends import _backend_pdf_ps as shared

    current = shared.get_glyphs_subset
    if getattr(current, _MARK, False):
        return True
    if not hasattr(shared, "SubsetResults") or list(inspect.signature(current).parameters) != ["fontfile",
                                                                                                "glyphs"]:
        return False
    shared.get_glyphs_subset = _memoized(current, shared)
    return True


def _memoized(original: Callable[..., Any], shared: Any) -> Callable[..., Any]:
    def get_glyphs_subset(fontfile: Any, glyphs: Iterable[int]) -> Any:
        from fontTools.ttLib import TTFont  # type: ignore[import-untyped]

        wanted = frozenset(glyphs)
        info = os.stat(fontfile)
        key = (os.fspath(fontfile), getattr(fontfile, "face_index", 0), info.st_size, info.st_mtime_ns, wanted)
        with _lock:
            hit = _memo.get(key)
            if hit is not None:
                _memo.move_to_end(key)
        if hit is None:
            with original(fontfile, set(wanted)) as made:
                hit = (shared.font_as_file(made.font).getvalue(), dict(made.glyph_index_map))
            with _lock:
                _memo[key] = hit
                while len(_memo) > MEMO_ENTRIES:
                    _memo.popitem(last=False)
        data, index_map = hit
        font = TTFont(io.BytesIO(data), recalcBBoxes=False, recalcTimestamp=False, lazy=True)
        return shared.SubsetResults(font, dict(index_map))._as_cm()

    setattr(get_glyphs_subset, _MARK, True)
    return get_glyphs_subset


def size() -> int:
    """How many subsets are held."""
    with _lock:
        return len(_memo)


def clear() -> None:
    """Forget every subset (a test compares a memoized PDF with one made from scratch)."""
    with _lock:
        _memo.clear()
