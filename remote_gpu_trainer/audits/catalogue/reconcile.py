"""Reconcile: every number a document states beside a claim's anchor, against EVIDENCE.json (check V31 of
docs/verify.md §2; the algorithm is the DELIVER reconcile spec, its output is `reconcile.json`).

A document holds no number of its own: it is a rendering of EVIDENCE.json. Whatever was still typed by hand
is found here by anchor (an alias, or the metric's first word), read at the precision it was written with and
compared to the authoritative value, so a correctly rounded number passes and a stale one is a drift. A number
that rounds correctly but says less than the claim's precision (`1` or `31.4` for a value shown as `0.97` or
`31.42`) is a drift too, unless the sentence marks it approximate (`about 31`, `~31`, `≈ 31`): then it is a
coarse quote, reported and not failing.

Everything is a pure function of (EVIDENCE.json as parsed, documents as (path, text)); reading the configured
documents from disk is reconcile_files.py's `read_documents`, which never reads outside the project root. Nothing
here edits a
document, and nothing blocks: the exit code (0 no drift, 1 drift, 2 unreadable input or nothing to reconcile)
is a status.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext
from typing import Any

WINDOW = 60  # characters after an anchor in which its number is looked for
# the decimals a written number may have to be compared (_double): a double's exact expansion ends by 1074
# decimals, and none rounds to a nonzero multiple of 1e400
DECIMALS_MIN, DECIMALS_MAX = -400, 1100
MODES = ("rounding", "exact")
CONTEXT_CHARS = 120
#: the decimals a claim without a declared `precision` is shown with: the build's formatter's default
#: (deliver/disclosure.py DEFAULT_PRECISION; audits may not import deliver, a test holds the two equal)
DISPLAY_PRECISION = 2
#: the words and signs that mark a number as approximate when they stand between the anchor and the number
#: (`PSNR of about 31`, `accuracy ~0.97`, `PSNR $\approx$ 31`); in LaTeX `~` is a space, `\approx`/`\sim` the mark
APPROXIMATE = re.compile(r"(?<![A-Za-z])(?:about|around|roughly|approximately|approx\.?|circa)(?![A-Za-z])"
                         r"|[~≈∼≃]|\\(?:approx|sim)(?![A-Za-z])", re.IGNORECASE)
NUMBER = re.compile(r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?%?")
SIGNS = "+-−"
NON_ALNUM = re.compile(r"[^0-9A-Za-z]+")
# The Markdown and LaTeX rewrites; each turns one source sequence into what a reader sees.
MD_RULES = (("*", ""), ("`", ""))
TEX_RULES = (("\\%", "%"), ("\\,", " "), ("~", " "), ("$", ""), ("\\pm", "±"))
# A thin space (U+2009, U+202F; `\,` in LaTeX) between a digit and a group of exactly three digits separates
# thousands, as a comma does (`1\,250\,000` is 1250000): it is read as a comma before tokenising.
GROUPS = re.compile(r"(?<=[0-9])[\u2009\u202f](?=[0-9]{3}(?![0-9]))")
TEX_GROUPS = re.compile(r"(?<=[0-9])(?:\\,|[\u2009\u202f])(?=[0-9]{3}(?![0-9]))")


@dataclass(frozen=True)
class Document:
    """One document as read: its project-relative path (posix) and text; sha256 of its bytes when known."""

    path: str
    text: str
    sha256: str | None = None


@dataclass(frozen=True)
class DocumentProblem:
    """A configured document that could not be reconciled: unreadable, missing, or outside the project."""

    path: str
    message: str


@dataclass(frozen=True)
class ScalarClaim:
    """One EVIDENCE evidence row with a numeric value: the number documents must show.

    `id` is the claim id, with `#<row>` appended when the claim has several rows (as VERIFY names numbers).
    `target` is value × display_scale, exact in decimal; `shown` is the same product in float, the value the
    build's formatter (`f"{v:.{p}f}"`) renders, so an `expected` string is what `rgt build` would write."""

    id: str
    claim: str
    metric: str
    target: Decimal
    shown: float
    precision: int | None
    anchors: tuple[str, ...]
    generic: bool  # the anchor is the metric's first word, not a declared alias
    paper_anchor: str | None = None


@dataclass(frozen=True)
class Drift:
    """A number beside an anchor that no claim sharing the anchor is consistent with. The nearest candidate
    gives `metric`, `authoritative` and `expected`; `claim_ids` lists every candidate, nearest first."""

    doc: str
    line: int
    col: int  # 1-based column of the number in the document's own line
    claim_ids: tuple[str, ...]
    metric: str
    authoritative: float
    expected: str  # the authoritative value at the decimals the document wrote
    reported: float
    reported_text: str
    decimals: int
    context: str
    #: `inconsistent` (the number is not the value at the decimals written) or `coarser_than_precision` (it
    #: rounds correctly but has fewer decimals than the claim's precision, and no approximate mark: `expected`
    #: is then the value at that precision)
    reason: str = "inconsistent"
    precision: int | None = None  # the claim's precision (declared, else DISPLAY_PRECISION) for a coarse drift


@dataclass(frozen=True)
class CoarseQuote:
    """A number that rounds correctly but says less than the claim's precision, in a sentence that marks it
    approximate (`about 31` for 31.42): not a drift, and it covers the claim, but it is reported so a reader
    can see where the documents round. `expected` is the value at `precision`; `marker` the word or sign."""

    doc: str
    line: int
    col: int
    claim_ids: tuple[str, ...]
    metric: str
    authoritative: float
    expected: str
    reported: float
    reported_text: str
    decimals: int
    precision: int
    marker: str
    context: str


@dataclass(frozen=True)
class Note:
    """A warning (`ambiguous_anchor`, `value_out_of_range`) or an info (`anchor_without_number`). `detail` says
    in words what a `value_out_of_range` row holds. (A quote coarser than the claim's precision, once the info
    `coarser_than_declared`, is now a drift or a CoarseQuote.)"""

    kind: str
    claim_ids: tuple[str, ...] = ()
    anchor: str = ""
    doc: str = ""
    line: int = 0
    col: int = 0
    reported: float | None = None
    decimals: int | None = None
    precision: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Missing:
    """A claim no document shows consistently: `warn` when it has a paper anchor (it is asserted somewhere),
    else `info`."""

    claim_id: str
    claim: str
    metric: str
    authoritative: float
    severity: str
    paper_anchor: str | None = None


@dataclass(frozen=True)
class Reading:
    """The number found after one anchor occurrence."""

    doc: str
    line: int
    col: int
    anchor: str
    text: str
    value: Decimal
    decimals: int
    context: str
    lead: str = ""  # the text between the anchor and the number, as a reader sees it (approximate marks)


@dataclass(frozen=True)
class ReconcileReport:
    """The answer `reconcile.json` holds. `problems` are inputs that could not be read (exit 2)."""

    drifts: tuple[Drift, ...] = ()
    warnings: tuple[Note, ...] = ()
    infos: tuple[Note, ...] = ()
    missing_from_docs: tuple[Missing, ...] = ()
    coverage: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    claims: tuple[ScalarClaim, ...] = ()
    documents: tuple[str, ...] = ()
    problems: tuple[DocumentProblem, ...] = ()
    mode: str = "rounding"
    coarse_quotes: tuple[CoarseQuote, ...] = ()

    @property
    def exit_code(self) -> int:
        """2 when an input was unreadable or there was nothing to reconcile (the answer would be incomplete
        or empty, so it takes precedence), 1 on any drift, else 0. A status, never a block."""
        if self.problems or not self.claims:
            return 2
        return 1 if self.drifts else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "remote-gpu-trainer/RECONCILE/v1", "mode": self.mode, "exit_code": self.exit_code,
            "documents": list(self.documents), "scalar_claims": len(self.claims),
            "drifts": [asdict(d) for d in self.drifts],
            "coarse_quotes": [asdict(q) for q in self.coarse_quotes],
            "warnings": [_note_dict(n) for n in self.warnings],
            "infos": [_note_dict(n) for n in self.infos],
            "missing_from_docs": [asdict(m) for m in self.missing_from_docs],
            "coverage": {claim: list(where) for claim, where in self.coverage.items()},
            "problems": [asdict(p) for p in self.problems],
        }

    def to_json(self) -> str:
        """The text of `reconcile.json`: stable key order, LF, trailing newline."""
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"


NOTE_FIELDS = {
    "ambiguous_anchor": ("kind", "claim_ids", "anchor"),
    "value_out_of_range": ("kind", "claim_ids", "detail"),
    "anchor_without_number": ("kind", "claim_ids", "anchor", "doc", "line", "col"),
}


def _note_dict(note: Note) -> dict[str, Any]:
    """A note with the fields its kind uses, so reconcile.json says only what was found."""
    body = asdict(note)
    return {key: body[key] for key in NOTE_FIELDS.get(note.kind, tuple(body))}


# --- scalar claims and anchors -------------------------------------------------------------------------------

def scalar_claims(evidence: Mapping[str, Any], skipped: list[Note] | None = None) -> list[ScalarClaim]:
    """One claim per evidence row whose value converts to a finite number; other rows are not reconciled. A
    row whose value × display_scale is beyond a double (1e308 × 100) cannot be shown by any build either: it
    is skipped like a non-numeric row, with a `value_out_of_range` warning naming it appended to `skipped`."""
    found: list[ScalarClaim] = []
    claims = evidence.get("claims")
    for position, claim in enumerate(claims if isinstance(claims, list) else []):
        if not isinstance(claim, Mapping):
            continue
        claim_id = str(claim.get("id") or f"claims[{position}]")
        rows = claim.get("evidence")
        rows = rows if isinstance(rows, list) else []
        for index, row in enumerate(rows):
            scalar = _scalar(claim, row, f"{claim_id}#{index}" if len(rows) > 1 else claim_id, claim_id) \
                if isinstance(row, Mapping) else None
            if isinstance(scalar, Note):
                if skipped is not None:
                    skipped.append(scalar)
            elif scalar is not None:
                found.append(scalar)
    return found


def _scalar(claim: Mapping[str, Any], row: Mapping[str, Any], scalar_id: str,
            claim_id: str) -> ScalarClaim | Note | None:
    value, scale = _number(row.get("value")), _number(row.get("display_scale", 1) or 1)
    if value is None or scale is None:
        return None
    shown = float(value) * float(scale)
    if not math.isfinite(shown):
        return Note("value_out_of_range", (scalar_id,), detail=(
            f"value {value:g} × display_scale {scale:g} is beyond a double: skipped as non-numeric, not reconciled"))
    metric = str(row.get("metric") or claim.get("metric") or "")
    aliases = _aliases(row.get("aliases")) + _aliases(claim.get("aliases"))
    anchors = tuple(dict.fromkeys(aliases)) or _generic_anchor(metric)
    if not anchors:
        return None
    precision = row.get("precision")
    paper_anchor = claim.get("paper_anchor")
    return ScalarClaim(
        id=scalar_id, claim=claim_id, metric=metric, target=value * scale, shown=shown,
        precision=precision if isinstance(precision, int) and not isinstance(precision, bool) else None,
        anchors=anchors, generic=not aliases,
        paper_anchor=paper_anchor if isinstance(paper_anchor, str) and paper_anchor else None)


def _number(raw: Any) -> Decimal | None:
    """A finite number as an exact decimal of what JSON holds (`0.9123` stays 0.9123); None otherwise."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        as_float = float(raw)
    except ValueError:
        return None
    if not math.isfinite(as_float):
        return None
    if isinstance(raw, int):
        return Decimal(raw)
    try:
        return Decimal(raw.strip()) if isinstance(raw, str) else Decimal(repr(raw))
    except InvalidOperation:
        return Decimal(repr(as_float))


def _aliases(raw: Any) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return tuple(a.strip().lower() for a in items if isinstance(a, str) and a.strip())


def _generic_anchor(metric: str) -> tuple[str, ...]:
    """The first word with a letter in the metric key (`psnr_set5` → `psnr`): dataset qualifiers come later
    in the key and are never anchors."""
    word = next((w for w in NON_ALNUM.split(metric) if any(c.isalpha() for c in w)), "")
    return (word.lower(),) if word else ()


def anchor_index(claims: Sequence[ScalarClaim]) -> dict[str, list[ScalarClaim]]:
    """Every anchor with the claims that use it, in claim order."""
    index: dict[str, list[ScalarClaim]] = {}
    for claim in claims:
        for anchor in claim.anchors:
            index.setdefault(anchor, []).append(claim)
    return index


def ambiguous_anchors(index: Mapping[str, Sequence[ScalarClaim]]) -> list[Note]:
    """An anchor several claims with different targets share, one of them by the generic rule: a number after
    it cannot say which claim it shows, so it is accepted when it fits any of them."""
    notes = []
    for anchor, claims in index.items():
        if len(claims) >= 2 and len({c.target for c in claims}) >= 2 and any(c.generic for c in claims):
            notes.append(Note("ambiguous_anchor", tuple(c.id for c in claims), anchor=anchor))
    return notes


# --- reading documents ---------------------------------------------------------------------------------------

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


# --- comparing -----------------------------------------------------------------------------------------------

def consistent(reported: Decimal, decimals: int, target: Decimal, mode: str = "rounding") -> bool:
    """Whether a number written with `decimals` decimals shows `target`.

    `rounding`: |r − t| ≤ ½·10^−d + 1e-9·max(1, |t|), in exact decimal arithmetic, so both neighbours of a
    half-way target pass (0.125 may read 0.12 or 0.13: rounding half-even or half-up are both honest) and
    anything a decimal further off is stale. `exact`: math.isclose at rtol 1e-9 (the upstream behaviour)."""
    if mode == "exact":
        return math.isclose(float(reported), float(target), rel_tol=1e-9, abs_tol=0.0)
    tolerance = Decimal("0.5").scaleb(-decimals) + Decimal("1e-9") * max(Decimal(1), abs(target))
    return abs(reported - target) <= tolerance


def expected_text(claim: ScalarClaim, decimals: int) -> str:
    """The claim at `decimals` as the build's formatter writes it: the float it holds, rounded half-even on
    its exact binary value, which is what `f"{v:.{d}f}"` does (decimals < 0: to tens, hundreds, ...)."""
    with localcontext() as context:
        context.prec = 1500  # every digit of a double (309 before the point) to DECIMALS_MAX decimals
        rounded = Decimal(claim.shown).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)
    return format(rounded, "f") if decimals >= 0 else str(rounded)


def precision_of(claim: ScalarClaim) -> int:
    """The decimals a claim is shown with: its declared `precision`, else what the build shows (two)."""
    return DISPLAY_PRECISION if claim.precision is None else claim.precision


def coarse(reported: Decimal, decimals: int, claim: ScalarClaim) -> bool:
    """Whether a number consistent with `claim` says less than the claim's precision: fewer decimals than
    precision_of(claim), and not the value itself (`1` for 1.0 and `0.5` for 0.5 say all there is to say)."""
    exact = abs(reported - claim.target) <= Decimal("1e-9") * max(Decimal(1), abs(claim.target))
    return decimals < precision_of(claim) and not exact


def approximate_marker(lead: str) -> str | None:
    """The word or sign between an anchor and its number that marks the number approximate, if any."""
    found = APPROXIMATE.search(lead)
    return found.group() if found else None


@dataclass
class _Tally:
    drifts: list[Drift] = field(default_factory=list)
    coarse_quotes: list[CoarseQuote] = field(default_factory=list)
    infos: list[Note] = field(default_factory=list)
    coverage: dict[str, list[str]] = field(default_factory=dict)

    def cover(self, claims: Iterable[ScalarClaim], where: str) -> None:
        for claim in claims:
            if where not in self.coverage[claim.id]:
                self.coverage[claim.id].append(where)


def _judge(reading: Reading, candidates: Sequence[ScalarClaim], mode: str, tally: _Tally) -> None:
    """One reading against the claims sharing its anchor: covered by every claim it shows at that claim's
    precision; else, when it rounds correctly to some but with fewer decimals than their precision, a coarse
    quote if the sentence marks it approximate and a `coarser_than_precision` drift if not; else a drift."""
    fits = [c for c in candidates if consistent(reading.value, reading.decimals, c.target, mode)]
    where = f"{reading.doc}:{reading.line}"
    rough = [c for c in fits if mode == "rounding" and coarse(reading.value, reading.decimals, c)]
    full = [c for c in fits if c not in rough]
    if full:
        tally.cover(full, where)
        return
    if rough:
        ranked = sorted(rough, key=lambda c: abs(reading.value - c.target))
        nearest, precision = ranked[0], precision_of(ranked[0])
        marker = approximate_marker(reading.lead)
        if marker is not None:
            tally.cover(rough, where)
            tally.coarse_quotes.append(CoarseQuote(
                doc=reading.doc, line=reading.line, col=reading.col, claim_ids=tuple(c.id for c in ranked),
                metric=nearest.metric, authoritative=float(nearest.target),
                expected=expected_text(nearest, precision), reported=float(reading.value),
                reported_text=reading.text, decimals=reading.decimals, precision=precision, marker=marker,
                context=reading.context))
            return
        others = [c for c in candidates if c not in rough]
        ranked += sorted(others, key=lambda c: abs(reading.value - c.target))
        tally.drifts.append(Drift(
            doc=reading.doc, line=reading.line, col=reading.col, claim_ids=tuple(c.id for c in ranked),
            metric=nearest.metric, authoritative=float(nearest.target),
            expected=expected_text(nearest, precision), reported=float(reading.value),
            reported_text=reading.text, decimals=reading.decimals, context=reading.context,
            reason="coarser_than_precision", precision=precision))
        return
    ranked = sorted(candidates, key=lambda c: abs(reading.value - c.target))
    nearest = ranked[0]
    tally.drifts.append(Drift(
        doc=reading.doc, line=reading.line, col=reading.col, claim_ids=tuple(c.id for c in ranked),
        metric=nearest.metric, authoritative=float(nearest.target),
        expected=expected_text(nearest, reading.decimals), reported=float(reading.value),
        reported_text=reading.text, decimals=reading.decimals, context=reading.context))


def reconcile(evidence: Mapping[str, Any], documents: Sequence[Document], *, problems: Sequence[DocumentProblem] = (),
              window: int = WINDOW, mode: str = "rounding") -> ReconcileReport:
    """Every document against every scalar claim of EVIDENCE.json; the answer `reconcile.json` holds."""
    if mode not in MODES:
        raise ValueError(f"reconcile mode {mode!r} is not one of {', '.join(MODES)}")
    out_of_range: list[Note] = []
    claims = scalar_claims(evidence, out_of_range)
    index = anchor_index(claims)
    tally = _Tally(coverage={c.id: [] for c in claims})
    for doc in documents:
        for anchor, line, col, reading in readings(doc, index, window):
            if reading is None:
                tally.infos.append(Note("anchor_without_number", tuple(c.id for c in index[anchor]), anchor,
                                        doc.path, line, col))
                continue
            _judge(reading, index[anchor], mode, tally)
    covered = {claim for claim, where in tally.coverage.items() if where}
    missing = tuple(
        Missing(c.id, c.claim, c.metric, float(c.target), "warn" if c.paper_anchor else "info", c.paper_anchor)
        for c in claims if c.id not in covered)
    return ReconcileReport(
        drifts=tuple(tally.drifts), coarse_quotes=tuple(tally.coarse_quotes),
        warnings=(*out_of_range, *ambiguous_anchors(index)), infos=tuple(tally.infos),
        missing_from_docs=missing, coverage={k: tuple(v) for k, v in tally.coverage.items()},
        claims=tuple(claims), documents=tuple(d.path for d in documents), problems=tuple(problems), mode=mode)
