"""A document's numbers as a reader sees them (docs/deliver.md §6): each line with its LaTeX or Markdown
typesetting removed (columns kept for the report), every anchor occurrence in it, and the number that follows
an anchor within WINDOW characters, with the decimals it was written with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal

from remote_gpu_trainer.audits.catalogue.reconcile.model import Document, Reading

WINDOW = 60  # characters after an anchor in which its number is looked for
# the decimals a written number may have to be compared (_double): a double's exact expansion ends by 1074
# decimals, and none rounds to a nonzero multiple of 1e400
DECIMALS_MIN, DECIMALS_MAX = -400, 1100
CONTEXT_CHARS = 120
NUMBER = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?%?")
SIGNS = "+-−"
# The Markdown and LaTeX rewrites; each turns one source sequence into what a reader sees.
MD_RULES = (("*", ""), ("`", ""))
TEX_RULES = (("\\%", "%"), ("\\,", " "), ("~", " "), ("$", ""), ("\\pm", "±"))
# A thin space (U+2009, U+202F; `\,` in LaTeX) between a digit and a group of exactly three digits separates
# thousands, as a comma does (`1\,250\,000` is 1250000): it is read as a comma before tokenising.
GROUPS = re.compile(r"(?<=[0-9])[\u2009\u202f](?=[0-9]{3}(?![0-9]))")
TEX_GROUPS = re.compile(r"(?<=[0-9])(?:\\,|[\u2009\u202f])(?=[0-9]{3}(?![0-9]))")


def preprocess(path: str, line: str) -> tuple[str, list[int]]:
    """The line as a reader sees it, with, for every character kept, its column in the source line.

    LaTeX loses its comments (an unescaped `%` to the end of the line) and typesetting (`\\%`, `\\,`, `~`, `$`,
    `\\pm`); Markdown loses emphasis and code marks. In every format a thin space between digit groups becomes
    a thousands comma (GROUPS)."""
    lowered = path.lower()
    if lowered.endswith(".tex"):
        return _rewrite(_drop_tex_comment(line), TEX_RULES, TEX_GROUPS)
    if lowered.endswith((".md", ".markdown")):
        return _rewrite(line, MD_RULES, GROUPS)
    return _rewrite(line, (), GROUPS)


def _drop_tex_comment(line: str) -> str:
    """Up to the first `%` not escaped by an odd run of backslashes (`\\\\%` is a line break, then a comment)."""
    for at, char in enumerate(line):
        if char == "%":
            backslashes = len(line[:at]) - len(line[:at].rstrip("\\"))
            if backslashes % 2 == 0:
                return line[:at]
    return line


def _rewrite(line: str, rules: Sequence[tuple[str, str]], groups: re.Pattern[str]) -> tuple[str, list[int]]:
    out: list[str] = []
    origin: list[int] = []
    at = 0
    while at < len(line):
        separator = groups.match(line, at)
        rule = ((separator.group(), ",") if separator else
                next(((src, dst) for src, dst in rules if line.startswith(src, at)), None))
        if rule is None:
            out.append(line[at])
            origin.append(at)
            at += 1
            continue
        out.extend(rule[1])
        origin.extend([at] * len(rule[1]))
        at += len(rule[0])
    return "".join(out), origin


def anchor_occurrences(line: str, anchors: Iterable[str]) -> list[tuple[int, str]]:
    """(start, anchor) of every case-insensitive occurrence not preceded by a letter or digit, in line order.

    An occurrence inside a longer anchor's occurrence is dropped (`psnr` inside `psnr on set14`), so a claim
    with its own alias is not also read by a claim with the generic anchor."""
    found = []
    for anchor in anchors:
        pattern = re.compile(r"(?<![^\W_])" + re.escape(anchor), re.IGNORECASE)
        found += [(m.start(), m.end(), anchor) for m in pattern.finditer(line)]
    found.sort(key=lambda hit: (hit[0], -(hit[1] - hit[0])))
    kept: list[tuple[int, int, str]] = []
    for start, end, anchor in found:
        if not any(k_start <= start and end <= k_end for k_start, k_end, _ in kept):
            kept.append((start, end, anchor))
    return [(start, anchor) for start, _, anchor in kept]


def first_number(line: str, begin: int, limit: int) -> tuple[int, str] | None:
    """(start, text) of the first numeric token starting in [begin, limit), sign dropped when the token
    follows a letter (`PSNR-31.42` → 31.42). An unsigned token after a letter is a name (`Set5`, `v2`) and is
    skipped; one after a digit only occurs when the scan began mid-number, and is skipped too."""
    for match in NUMBER.finditer(line, begin):
        start = match.start()
        if start >= limit:
            return None
        before = line[start - 1] if start > 0 else ""
        if before.isalnum():
            if before.isdigit() or match.group()[0] not in SIGNS:
                continue
            return start + 1, match.group()[1:]
        return start, match.group()
    return None


def parse_token(text: str) -> tuple[Decimal, int]:
    """The token's value and the decimals it was written with: thousands commas dropped, `%` literal (never
    ÷100), an exponent counted (`1.5e6` is written to the hundred thousand: decimals -5)."""
    plain = text.rstrip("%").replace(",", "").replace("−", "-")
    value = Decimal(plain)
    exponent = value.as_tuple().exponent
    return value, -exponent if isinstance(exponent, int) else 0


def readings(doc: Document, anchors: Iterable[str],
             window: int = WINDOW) -> Iterable[tuple[str, int, int, Reading | None]]:
    """(anchor, line, 1-based column, reading) for every anchor occurrence in the document, in reading order;
    the reading is None when no number starts within `window` characters after the anchor."""
    anchor_list = list(anchors)
    for number, raw in enumerate(lines(doc.text), 1):
        line, origin = preprocess(doc.path, raw)
        for start, anchor in anchor_occurrences(line, anchor_list):
            begin = start + len(anchor)
            token = first_number(line, begin, begin + window)
            if token is None:
                yield anchor, number, origin[start] + 1, None
                continue
            value, decimals = parse_token(token[1])
            if not _double(value, decimals):
                yield anchor, number, origin[start] + 1, None
                continue
            col = origin[token[0]]
            yield anchor, number, col + 1, Reading(doc.path, number, col + 1, anchor, token[1], value, decimals,
                                                   _context(raw, col), line[begin:token[0]])


def _double(value: Decimal, decimals: int) -> bool:
    """Whether a written number is one a double can be compared with: `5e900` is beyond one, and a number
    written past DECIMALS_MAX decimals (or rounded above 1e-DECIMALS_MIN) says more than any double holds;
    either read as no number at all, where exact decimal arithmetic on it would overflow."""
    return DECIMALS_MIN <= decimals <= DECIMALS_MAX and math.isfinite(float(value))


def lines(text: str) -> list[str]:
    """The document's lines as an editor numbers them: split on `\\n` only (one `\\r` before it dropped, for
    CRLF). str.splitlines also breaks at U+2028, U+2029, form feed, NEL and \\x1c-\\x1e, which would put every
    `doc:line` after such a character on a line no editor shows."""
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()  # the newline ending the last line starts no line of its own
    return [part[:-1] if part.endswith("\r") else part for part in parts]


def _context(raw: str, col: int) -> str:
    """At most CONTEXT_CHARS of the source line, starting a little before the number when the line is long."""
    text = raw.strip()
    if len(text) <= CONTEXT_CHARS:
        return text
    start = max(0, col - 40)
    return raw[start:start + CONTEXT_CHARS].strip()
