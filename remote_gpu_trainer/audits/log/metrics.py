"""Numbers out of training logs (docs/log-signatures.md §4): one line in, canonical `Sample`s out.

Pure: it reads the text it is given and keeps a little state between lines (the last step, the live
progress bar), nothing else. Per line the first parser that yields a number wins, in the spec's order:
JSON line → Hugging Face dict → tqdm bar → Lightning rich bar → key=value with progress counters.

Choices the spec leaves open, made here:
- Every sample carries its own line's step and epoch, never another line's (a Hugging Face dict beside a bar is
  not at the bar's step: §4.5). A line with a position but no metric (`Step 1200/50000`, a bar's first `?it/s`
  frame) emits `step`/`epoch` samples, so a consumer that only stores samples can still follow progress; lines
  with metrics do not repeat their position as samples (half the samples, and the parser's cost is mostly
  building them). A derived step (HF dict lines) is never emitted. When a line reveals the run's planned total
  (a tqdm total, `step 12/600`, Lightning epochs × batches), a `total_steps` sample is emitted once per change,
  for the same reason (nan: no longer known).
- Lightning's rich bar in a file wraps at 80 columns: an indented line of only `key: value` pairs right after
  a bar line is the rest of that bar, at its step.
- Progress counters also accept `=` (`step=12/600`, the demo trainer's format).
- Redraws are deduplicated by (epoch, n, total) and the postfix: Lightning adds `val_loss=` to the bar
  of a finished epoch without moving n.
- A tqdm bar that matched is the line's whole story: a redraw, a side bar (HF evaluation, with a smaller
  total) or a bar whose description names no epoch (`Map`, `Validation DataLoader 0`) yields nothing rather
  than falling through to key=value, which would re-read its postfix.
- A key=value line counts only if it names a known key (step, epoch, loss, lr, grad_norm, throughput,
  val/…) or carries a progress counter: banners and config echoes (`using: 0 TPU cores`,
  `seed=0 epochs=5`) are prose, not series. A line of only custom keys (`test_f1=0.8`) is dropped too.
- Values followed by `,<digit>` are thousands-separated counts (`Num examples = 8,000`), not a value.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from remote_gpu_trainer.audits.log.samples import Sample
from remote_gpu_trainer.shipped_toml import ASSETS, read_asset
from remote_gpu_trainer.text import strip_ansi

MAX_LINE_CHARS = 4096  # work per line is capped: a printed tensor can be megabytes long
MAX_JSON_DEPTH = 8
MAX_KEY_CHARS = 128
KEY_TABLE_PATH = ASSETS / "metrics.toml"

NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NONFINITE = r"(?ai:nan|[-+]?inf(?:inity)?)"  # ASCII: under Unicode case folding `İnf` matched, and float() raised
# The spec's KV and PROGRESS, made cheaper without changing what they match: possessive runs (a key cannot
# contain `=`, `:` or blanks, so there is nothing to backtrack into) and a first-letter lookahead. TQDM's
# description is capped at 200 characters: unbounded, a long line of colons costs quadratic time.
KV = re.compile(r"(?<![\w./-])(?P<key>[A-Za-z_][\w./-]*+)\s*+[=:]\s*+(?P<val>" + NUM + "|" + _NONFINITE
                + r")(?![\w.:/]|,\d)")
PROGRESS = re.compile(r"(?=[EeSsIi])\b(?P<unit>[Ee]poch|[Ss]tep|[Ii]ter(?:ation)?)\b\s*[:=\[]?\s*(?P<cur>\d+)\s*"
                      r"(?:/|of)\s*(?P<total>\d+)")
HF_PAIR = re.compile(r"'(?P<key>[^']+)':\s*'?(?P<val>" + NUM + r"|nan|[-+]?inf)'?(?=[,}])")
# HF 5 prints every float as a string of 4 significant digits (`'epoch': '1.25'`); HF 4 the float itself (exact)
HF_EPOCH = re.compile(r"'epoch':\s*(?P<quote>'?)(?P<val>" + NUM + r")'?(?=[,}])")
HF_SIGNIFICANT = 4
# the rest of a rich bar wrapped onto the next line: only `key: value` pairs, indented
RICH_REST = re.compile(r"\s+(?:[A-Za-z_][\w./-]*:\s*(?:" + NUM + "|" + _NONFINITE + r")\s*)+")
TQDM = re.compile(r"(?:(?P<desc>[^|\r\n]{0,200}?):\s*)?(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)\s*"
                  r"\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+),\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>[^\s,\]]+)"
                  r"(?:,\s*(?P<postfix>[^\]]*))?\]")
RICH = re.compile(r"^Epoch (?P<epoch>\d+)/(?P<max_epoch>\d+)\s+\S*\s*(?P<n>\d+)/(?P<total>\d+)\s+"
                  r"(?P<elapsed>[\d:]+)\s+•\s+(?P<remaining>[-\d:]+)\s+(?P<rate>[\d.]+)(?P<unit>it/s|s/it)(?P<rest>.*)$")
EPOCH_IN_DESC = re.compile(r"[Ee]poch\s*[:\[]?\s*(\d+)")
# A line KV can match at all: a separator whose key could end just before it (a letter, `_`, `.`, `/`, `-` or a
# blank; digits only after one of those, four or more digits always) and a value's first character after it.
# A superset of KV's matches found ~10x faster: it starts at the rare `=`/`:`, where KV tries every position,
# so chatter (`[10:05:00] INFO data: loaded ...`) costs one C-level scan. test_metrics_gate.py holds it to that.
KV_GATE = re.compile(r"[=:](?:(?<=[^\W\d][=:])|(?<=[./\s-][=:])|(?<=[^\W\d]\d[=:])|(?<=[./-]\d[=:])"
                     r"|(?<=[^\W\d]\d\d[=:])|(?<=[./-]\d\d[=:])|(?<=[^\W\d]\d\d\d[=:])|(?<=[./-]\d\d\d[=:])"
                     r"|(?<=\d\d\d\d[=:]))\s*+(?i:[-+.\dni])")
_OPTIMIZER_NAME = re.compile(r"[a-z][a-z0-9_]*")

Pair = tuple[str, float]
_new = tuple.__new__  # Sample(...) goes through a Python-level __new__: 3× the cost of building the tuple in C
Metric = tuple[str, float, str]  # canonical key, value, unit
Canon = tuple[str | None, str, bool]  # canonical key (None: ignored), unit, stored as 1/x
_IGNORED: Canon = (None, "", False)


@dataclass(frozen=True)
class KeyTable:
    """assets/metrics.toml, indexed for lookups (raw keys lowercased)."""

    canonical: dict[str, str]
    ignored: frozenset[str]
    val_prefixes: tuple[str, ...]
    lr_prefix: str
    throughput: dict[str, str]
    inverse_throughput: dict[str, str]
    summary_markers: frozenset[str]
    known: frozenset[str]  # canonical names that make a key=value line a metrics line


@lru_cache(maxsize=1)
def key_table() -> KeyTable:
    """The §4.2 table is data so a new trainer's spelling is a one-line change; read once per process."""
    data = read_asset(KEY_TABLE_PATH)["log_keys"]
    canonical = {raw.lower(): name for name, raws in data["canonical"].items() for raw in raws}
    return KeyTable(
        canonical=canonical,
        ignored=frozenset(k.lower() for k in data["ignored"]),
        val_prefixes=tuple(p.lower() for p in data["val_prefixes"]),
        lr_prefix=data["lr_optimizer_prefix"].lower(),
        throughput={k.lower(): v for k, v in data["throughput"].items()},
        inverse_throughput={k.lower(): v for k, v in data["inverse_throughput"].items()},
        summary_markers=frozenset(k.lower() for k in data["summary_markers"]),
        known=frozenset(canonical.values()) | {"throughput"},
    )


def _canon(raw: str) -> Canon:
    """A raw key's canonical name, unit and inversion; keys too long to be names are ignored (and so never
    enter the cache, whose memory then stays small whatever a garbage line holds)."""
    return _canon_cached(raw) if len(raw) <= MAX_KEY_CHARS else _IGNORED


@lru_cache(maxsize=4096)
def _canon_cached(raw: str) -> Canon:
    """Cached: a log repeats the same handful of keys millions of times."""
    key = raw.strip().lower()
    table = key_table()
    if not key or key in table.ignored:
        return _IGNORED
    if key in table.canonical:
        return table.canonical[key], "", False
    if key in table.throughput:
        return "throughput", table.throughput[key], False
    if key in table.inverse_throughput:
        return "throughput", table.inverse_throughput[key], True
    if key.startswith(table.lr_prefix) and _OPTIMIZER_NAME.fullmatch(key[len(table.lr_prefix):]):
        return "lr", "", False
    for prefix in table.val_prefixes:
        if key.startswith(prefix) and len(key) > len(prefix):
            return "val/" + key[len(prefix):], "", False
    return key, "", False


def canonical_key(raw: str) -> str | None:
    """The §4.2 name of a raw key; None for keys that are never metrics (`v_num`, `pid`, ...)."""
    return _canon(raw)[0]


def _inverse(value: float) -> float:
    """`s/it` → it/s; a zero duration is an infinite rate, kept like any other non-finite value."""
    return math.inf if value == 0 else 1.0 / value


def _as_step(value: float) -> int | None:
    """Steps are non-negative whole numbers; anything else is not a position."""
    if math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def _classify(pairs: Iterable[tuple[str, str | float]]) -> tuple[int | None, float | None, list[Metric]]:
    """Split raw pairs (values as matched text or numbers) into the position and canonical metrics.

    The position is the first step and the first finite epoch; everything else not ignored is a metric.
    """
    step: int | None = None
    epoch: float | None = None
    metrics: list[Metric] = []
    for raw, text in pairs:
        key, unit, invert = _canon_cached(raw) if len(raw) <= MAX_KEY_CHARS else _IGNORED  # _canon, inlined
        if key is None:
            continue
        value = float(text)
        if key == "step":
            step = _as_step(value) if step is None else step
        elif key == "epoch":
            epoch = value if epoch is None and math.isfinite(value) else epoch
        else:
            metrics.append((key, _inverse(value) if invert else value, unit))
    return step, epoch, metrics


def _build(t: float, step: int | None, epoch: float | None, metrics: list[Metric], source: str,
           approx: bool = False, stated_step: bool = True) -> list[Sample]:
    """All samples of one record share its step and epoch.

    A record with metrics carries its position on them; one with only a position (`Step 1200/50000`, a bar's
    first `?it/s` frame) yields `step`/`epoch` samples instead, so progress still reaches whoever only
    stores samples. A step the record did not state (carried onto an HF dict line) is never emitted.
    """
    if metrics:
        return [_new(Sample, (t, step, epoch, key, value, source, approx, unit)) for key, value, unit in metrics]
    out: list[Sample] = []
    if stated_step and step is not None:
        out.append(Sample(t, step, epoch, "step", float(step), source, approx, ""))
    if epoch is not None:
        out.append(Sample(t, step, epoch, "epoch", epoch, source, approx, ""))
    return out


def _names_known(metrics: list[Metric]) -> bool:
    known = key_table().known
    return any(key in known or key.startswith("val/") for key, _, _ in metrics)


def _to_float(number: Any) -> float | None:
    """JSON and CSV numbers; bools are not metrics, and an integer too big for a float is infinite."""
    if isinstance(number, bool):
        return None
    if isinstance(number, int):
        try:
            return float(number)
        except OverflowError:
            return math.inf if number > 0 else -math.inf
    if isinstance(number, float):
        return number
    if isinstance(number, str):
        try:
            return float(number)
        except ValueError:
            return None
    return None


def _flatten(obj: dict[Any, Any], prefix: str = "", depth: int = 0) -> Iterator[Pair]:
    """Nested JSON keys joined with `/` (`{"train": {"loss": 1}}` → `train/loss`); depth capped."""
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if depth < MAX_JSON_DEPTH:
                yield from _flatten(value, name + "/", depth + 1)
        elif isinstance(value, int | float):
            number = _to_float(value)
            if number is not None:
                yield name, number


def _load_json(text: str) -> Any:
    """Python's json, on purpose: a NaN loss must reach S70 (strict_json would reject the whole line)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _is_summary(pairs: list[Pair]) -> bool:
    markers = key_table().summary_markers
    return any(raw.lower() in markers for raw, _ in pairs)


def _summary_metrics(pairs: list[Pair]) -> tuple[float | None, list[Metric]]:
    """HF's closing averages go under `summary/<key>`, so `train_loss` never lands in the loss series."""
    epoch = next((v for raw, v in pairs if raw.lower() == "epoch" and math.isfinite(v)), None)
    return epoch, [("summary/" + raw.lower(), value, "") for raw, value in pairs if raw.lower() != "step"]


def _throughput(rate: str, unit: str) -> list[Metric]:
    """A bar's rate as a throughput metric; `?` (no estimate yet) and unknown units give nothing."""
    if rate == "?":
        return []
    key, canon_unit, invert = _canon(unit)
    if key != "throughput":
        return []
    try:
        value = float(rate)
    except ValueError:
        return []
    return [("throughput", _inverse(value) if invert else value, canon_unit)]


def _postfix_metrics(text: str | None) -> list[Metric]:
    """Metrics in a bar's postfix; position keys there are ignored, the bar's own counter wins."""
    if not text:
        return []
    _, _, metrics = _classify(KV.findall(text))
    return metrics


class MetricParser:
    """Stateful line parser for one run's log; see the module docstring for the order and the choices.

    `logging_steps`, `steps_per_epoch` and `epochs` come from the run's config when known: HF dict lines
    carry no step, and these are the spec's ways to recover it (§4.5). Memory is constant: a few scalars.
    """

    def __init__(self, logging_steps: int | None = None, steps_per_epoch: int | None = None,
                 epochs: int | None = None) -> None:
        self.logging_steps = logging_steps
        self.steps_per_epoch = steps_per_epoch
        self.epochs = epochs  # planned epochs; else an `Epoch k/N` counter's N
        self._counted_epochs: int | None = None
        self._step: int | None = None  # last global step a line stated (or derived exactly)
        self._total: int | None = None  # the run's planned steps, when a line revealed it
        self._total_sent: int | None = None
        self._hf_lines = 0  # HF training dict lines seen: × logging_steps gives their step
        self._last_bar: tuple[int | None, int, int, str | None] | None = None  # redraw dedup key
        self._main_total: int | None = None  # total of the bar that counts global steps
        self._bar_n: int | None = None
        self._bar_done = False
        self._bar_offset = 0  # per-epoch bars without a description: steps of the bars before this one
        self._desc: str | None = None  # the last bar description read, and the epoch it names
        self._desc_epoch: int | None = None
        self._rich_after: tuple[int, float] | None = None  # (step, epoch) when the previous line was a rich bar
        self._rich_rest: list[Metric] | None = None  # the last wrapped rest of a rich bar, read once

    @property
    def step(self) -> int | None:
        """The last global step any line gave (possibly approximate)."""
        return self._step

    @property
    def total_steps(self) -> int | None:
        """The run's planned steps, from a bar total, `step N/M` or Lightning epochs × batches."""
        return self._total

    def feed(self, line: str, t: float) -> list[Sample]:
        """Samples from one line (already split on \\r/\\n); never raises on garbage."""
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS]
        if "\x1b" in line:
            line = strip_ansi(line)
        if self._rich_after is not None:
            bar, self._rich_after = self._rich_after, None
            if line[:1] == " " and RICH_REST.fullmatch(line):
                return self._rich_wrapped(line, t, bar)
        samples: list[Sample] | None = None
        if "{" in line:
            samples = self._structured(line, t)
        if not samples and "%|" in line:
            samples = self._tqdm(line, t)
        if samples is None and "•" in line and line.startswith("Epoch"):
            samples = self._rich(line, t)
        if samples is None:
            samples = self._key_values(line, t)
        if samples and self._total != self._total_sent:
            self._send_total(samples, t)
        return samples

    def _structured(self, line: str, t: float) -> list[Sample] | None:
        """JSON lines, then HF dict lines; None when neither yields a number (the next parsers try)."""
        head = line.lstrip()
        if head.startswith("{") and not head.startswith("{'"):
            samples = self._json(head, t)
            if samples:
                return samples
        if "{'" in line:
            samples = self._hf_dict(line, t)
            if samples:
                return samples
        return None

    def _json(self, text: str, t: float) -> list[Sample]:
        obj = _load_json(text)
        if not isinstance(obj, dict):
            return []
        step, epoch, metrics = _classify(_flatten(obj))
        if step is not None:
            self._step = step
        return _build(t, step, epoch, metrics, "json")

    def _hf_dict(self, line: str, t: float) -> list[Sample]:
        """A Trainer dict line at its own position: its `step` when it has one, else the step its epoch
        gives exactly (§4.5), else no step (its epoch is its position). Never the progress bar's step."""
        pairs = [(key, float(value)) for key, value in HF_PAIR.findall(line)]
        if not pairs:
            return []
        if _is_summary(pairs):
            epoch, metrics = _summary_metrics(pairs)
            return _build(t, None, epoch, metrics, "hf", stated_step=False)
        step, epoch, metrics = _classify(pairs)
        if not metrics and step is None and epoch is None:
            return []
        training = any(not key.startswith("val/") for key, _, _ in metrics)
        self._hf_lines += training
        if step is not None:  # stated by the line
            self._step = step
            return _build(t, step, epoch, metrics, "hf")
        step, approx = self._hf_step(line, epoch, training)
        if step is not None:
            self._step = step
        return _build(t, step, epoch, metrics, "hf", approx, stated_step=False)

    def _hf_step(self, line: str, epoch: float | None, training: bool) -> tuple[int | None, bool]:
        """The spec's ways to a dict line's step: epoch × steps per epoch when exactly one whole step fits the printed
        epoch (marked approximate: derived), else the training line's index × logging_steps; else (None, False)."""
        per_epoch = self._steps_per_epoch()
        if epoch is not None and per_epoch:
            step = _step_of_epoch(line, epoch, per_epoch)
            if step is not None:
                return step, True
        if training and self.logging_steps:
            return self._hf_lines * self.logging_steps, False
        return None, False

    def _steps_per_epoch(self) -> int | None:
        """Declared steps per epoch, else the global bar's total over the planned epochs when it divides."""
        if self.steps_per_epoch:
            return self.steps_per_epoch
        epochs = self.epochs or self._counted_epochs
        total = self._main_total if self._bar_offset == 0 else None
        return total // epochs if epochs and total and total % epochs == 0 else None

    def _tqdm(self, line: str, t: float) -> list[Sample] | None:
        match = TQDM.search(line)
        if match is None:
            return None
        desc, n_text, total_text, rate, unit, postfix = match.group("desc", "n", "total", "rate", "unit", "postfix")
        n, total = int(n_text), int(total_text)
        epoch: int | None = None
        if desc:
            if desc != self._desc:  # a bar repeats its description on every frame: read its epoch once
                found = EPOCH_IN_DESC.search(desc)
                self._desc, self._desc_epoch = desc, None if found is None else int(found[1])
            epoch = self._desc_epoch
            if epoch is None:
                return []  # a data, download or validation bar: not training progress
            step, approx = epoch * total + n, True  # Lightning: the bar counts batches within the epoch
        else:
            position = self._global_bar(n, total)
            if position is None:
                return []
            step, approx = position
        if self._is_redraw((epoch, step, total, postfix)):
            return []
        self._step = step
        metrics = _throughput(rate, unit) + _postfix_metrics(postfix)
        return _build(t, step, None if epoch is None else float(epoch), metrics, "tqdm", approx)

    def _is_redraw(self, key: tuple[int | None, int, int, str | None]) -> bool:
        """Bars redraw the same position many times; (n, total) plus the postfix identifies a frame, so the
        frame that only adds validation metrics to a finished epoch's bar still counts."""
        if key == self._last_bar:
            return True
        self._last_bar = key
        return False

    def _global_bar(self, n: int, total: int) -> tuple[int, bool] | None:
        """A bar without a description counts global steps (HF Trainer: total = max steps).

        A smaller total beside it is a side bar (HF evaluation): None. The same total starting over after
        it completed is the next epoch of a per-epoch bar, so the count continues (approximate, and the run
        total becomes unknown); starting over before completing is a genuine step regression (S65).
        """
        if self._main_total is None or total > self._main_total:
            self._main_total, self._bar_offset, self._bar_n, self._bar_done = total, 0, None, False
            self._total = total
        elif total < self._main_total:
            return None
        if self._bar_n is not None and n < self._bar_n and self._bar_done:
            self._bar_offset += total
            self._total = None
        self._bar_n, self._bar_done = n, n >= total
        return self._bar_offset + n, self._bar_offset > 0

    def _rich(self, line: str, t: float) -> list[Sample] | None:
        match = RICH.match(line)
        if match is None:
            return None
        epoch, n, total = int(match["epoch"]), int(match["n"]), int(match["total"])
        step = epoch * total + n
        if self._is_redraw((epoch, step, total, match["rest"])):
            self._rich_after = (step, float(epoch))
            return []
        self._step = step
        self._rich_after = (step, float(epoch))
        self._total = (int(match["max_epoch"]) + 1) * total  # Lightning prints `Epoch e/(max_epochs - 1)`
        metrics = _throughput(match["rate"], match["unit"]) + _postfix_metrics(match["rest"])
        return _build(t, step, float(epoch), metrics, "rich", approx=True)

    def _rich_wrapped(self, line: str, t: float, bar: tuple[int, float]) -> list[Sample]:
        """The metrics a rich bar wrapped onto the next line (a file is 80 columns to rich), at the bar's step; a
        terminal redraws them with every frame (realigned as the bar's width changes): the same values are read once."""
        metrics = _postfix_metrics(line)
        if not metrics or metrics == self._rich_rest:
            return []
        self._rich_rest = metrics
        return _build(t, bar[0], bar[1], metrics, "rich", approx=True)

    def _key_values(self, line: str, t: float) -> list[Sample]:
        # findall's (key, value) tuples are much cheaper than match objects on this, the hottest path
        pairs: list[tuple[str, str]] = KV.findall(line) if KV_GATE.search(line) else []
        counter = ("/" in line or " of " in line) and ("poch" in line or "tep" in line or "ter" in line)
        if not pairs and not counter:
            return []
        kv_step, kv_epoch, metrics = _classify(pairs)
        step: int | None = None
        epoch: float | None = None
        if counter and (kv_step is None or "poch" in line):  # PROGRESS only where it can add something
            step, epoch = self._progress(line)
        if step is None and epoch is None and kv_step is None and kv_epoch is None and not _names_known(metrics):
            return []  # nothing, or a banner or config echo (`using: 0 TPU cores`): not a metrics line
        step = step if step is not None else kv_step
        epoch = epoch if epoch is not None else kv_epoch
        if step is not None:
            self._step = step
        return _build(t, step, epoch, metrics, "kv")

    def _progress(self, line: str) -> tuple[int | None, float | None]:
        """`Epoch 3/100`, `step=12/600`, `iter: 1200/50000`: the first step/iter counter and the first epoch."""
        step: int | None = None
        epoch: float | None = None
        for match in PROGRESS.finditer(line):
            cur, total = int(match["cur"]), int(match["total"])
            if match["unit"][0] in "Ee":
                if epoch is None:
                    epoch = float(cur)
                    if total > 0:
                        self._counted_epochs = total
                    if self.steps_per_epoch and self._total is None:
                        self._total = total * self.steps_per_epoch
            elif step is None:
                step = cur
                if total > 0:
                    self._total = total
        return step, epoch

    def _send_total(self, samples: list[Sample], t: float) -> None:
        """Announce a changed run total once, as a `total_steps` sample (nan when it became unknown)."""
        self._total_sent = self._total
        value = math.nan if self._total is None else float(self._total)
        first = samples[0]
        samples.append(Sample(t, first.step, first.epoch, "total_steps", value, first.source, first.approx_step, ""))


def _step_of_epoch(line: str, epoch: float, per_epoch: int) -> int | None:
    """The one whole step whose epoch prints as this line's (§4.5), or None when the printed precision leaves
    more than one: HF 5 prints 4 significant digits (`'epoch': '1.25'`), HF 4 the float itself (exact)."""
    if epoch == 0:
        return 0
    found = HF_EPOCH.search(line)
    if found is not None and found["quote"]:
        half = 0.5 * 10.0 ** (math.floor(math.log10(abs(epoch))) - HF_SIGNIFICANT + 1)
    else:
        half = 1e-9 * max(1.0, abs(epoch))
    low, high = (epoch - half) * per_epoch, (epoch + half) * per_epoch
    if not (math.isfinite(low) and math.isfinite(high)):
        return None
    first, last = math.ceil(low - 1e-9), math.floor(high + 1e-9)
    return first if first == last and first >= 0 else None


def parse_csv(text: str, t: float, source: str = "csv") -> list[Sample]:
    """`train.csv` or Lightning's CSVLogger `metrics.csv`: header required, rows merged by step.

    Lightning writes train and validation values of one step on separate rows with empty cells; merging
    gives one record per step. Rows without a step stay separate. `nan`/`inf` cells are kept (S70).
    """
    import csv  # a CSV log is rare beside the text ones: not on every start-up (docs/architecture.md §5)

    records: dict[object, dict[int, float]] = {}
    header: list[str] = []
    try:
        for row_no, row in enumerate(csv.reader(io.StringIO(text))):
            if header:
                _merge_row(records, row, header, row_no)
            elif any(cell.strip() for cell in row):
                if all(_to_float(cell) is not None for cell in row if cell.strip()):
                    return []  # no header row: the columns cannot be named
                header = row
    except csv.Error:
        pass  # a half-written or binary tail: keep what was read before it
    out: list[Sample] = []
    for values in records.values():
        step, epoch, metrics = _classify((header[index], value) for index, value in sorted(values.items()))
        out.extend(_build(t, step, epoch, metrics, source))
    return out


def _merge_row(records: dict[object, dict[int, float]], row: list[str], header: list[str], row_no: int) -> None:
    """Fold one row's non-empty numbers into the record of its step (a row without a step stands alone)."""
    values: dict[int, float] = {}
    step: int | None = None
    for index, cell in enumerate(row[:len(header)]):
        number = _to_float(cell.strip()) if cell.strip() else None
        if number is None:
            continue
        values[index] = number
        if step is None and _canon(header[index])[0] == "step":
            step = _as_step(number)
    if values:
        records.setdefault(step if step is not None else ("row", row_no), {}).update(values)


def parse_trainer_state(text: str, t: float) -> list[Sample]:
    """HF `trainer_state.json`: every `log_history[]` entry with its own `step`; the summary entry as `summary/…`."""
    state = _load_json(text)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        return []
    out: list[Sample] = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        pairs = list(_flatten(entry))
        step, epoch, metrics = _classify(pairs)
        if _is_summary(pairs):
            epoch, metrics = _summary_metrics(pairs)
        out.extend(_build(t, step, epoch, metrics, "trainer_state"))
    return out
