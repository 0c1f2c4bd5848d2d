"""Plain text, one copy of each rule: money and prices, sizes, durations, hashes, progress lines, ANSI
stripping and control-character escaping, shared by the audits, the TUI, the CLI and the reports."""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # annotations only; audits import this module, so it imports nothing above audits
    from remote_gpu_trainer.audits.gpu_health import GpuSample
    from remote_gpu_trainer.fleet_views import BoxView, FleetView, OrphanView, ProjectRowView
    from remote_gpu_trainer.views import CadenceView, LocationDriftView, RecoveryView

T = TypeVar("T")

# What a box may write that a terminal, the TUI or a report reader would act on instead of show: C0 controls
# (ESC starts a terminal command, BS and CR overwrite what was shown), DEL, C1 controls (0x9b is a one-byte
# CSI on some terminals), Unicode line and paragraph separators, and the bidirectional overrides that can
# make a file name read differently from its bytes. A tab only moves the cursor right, so it stays.
# Invisible or direction-changing characters (bidi marks and overrides, zero-width ones, the soft hyphen, a BOM)
# and lone surrogates (bytes that were not UTF-8) print as escapes too: a name must show what it is.
_INVISIBLE = "\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff\ud800-\udfff"
_CONTROL_CHARS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f" + _INVISIBLE + "]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + _INVISIBLE + "]")
_CONTROL_BUT_BREAKS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + _INVISIBLE + "]")


# Terminal escape sequences a trainer's log may hold, removed whole (they carry colour, links and titles, not
# content): CSI (`ESC [ ... final`, colours and cursor moves), OSC (`ESC ] ...` ended by BEL or by ST
# `ESC \\`: window titles and OSC-8 hyperlinks, whose visible text stays), character-set designations
# (`ESC ( B`, which tput sgr0 emits), and the remaining two-character escapes (`ESC 7`, `ESC =`, ...).
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]"
                   r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)"
                   r"|\x1b[()*+][ -~]"
                   r"|\x1b[ -/]*[0-~]")


def strip_ansi(text: str) -> str:
    """`text` without terminal escape sequences (see _ANSI). What is left of a broken one (a lone ESC)
    is for escape_control to show, not to obey."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def utf8_terminal() -> bool:
    """Braille and glyphs need UTF-8 (docs/ux.md §5). Only a locale that names another encoding turns them off:
    an unset locale is what most terminals that render Textual at all look like."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name, "")
        if value:
            return "utf-8" in value.lower() or "utf8" in value.lower() or value in ("C.UTF-8",)
    return True


def escape_control(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character shown as an escape (`\\x1b`, `\\n`, `\\u202e`), so text that
    came from a box (file names, log lines, error bodies) can be printed, put in a widget or a report and
    never move the cursor, recolour the terminal, set its title or hide what follows. `keep_newlines` is
    for multi-line fields; in a single-line field (a table cell, a report line) a newline is escaped too,
    so a file name cannot forge a second row."""
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL_CHARS
    if pattern.search(text) is None:
        return text  # the common case costs one scan
    return pattern.sub(_escaped, text)


def escape_all(value: T) -> T:
    """`value` with control characters escaped in every string it holds, keys included, however deep: strings,
    tuples (named ones too), lists, dicts and dataclasses are walked, so a field added later cannot be
    forgotten. One walk for the report's Overview and every `--format json` document."""
    if isinstance(value, str):
        return escape_control(value)  # type: ignore[return-value]
    if isinstance(value, tuple | list):
        items = [escape_all(item) for item in value]
        if isinstance(value, tuple) and all(new is old for new, old in zip(items, value, strict=True)):
            return value  # nothing to escape: an immutable value is its own copy
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {escape_all(k): escape_all(v) for k, v in value.items()}  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f.name for f in dataclasses.fields(value) if f.init]
        changes = {name: escape_all(getattr(value, name)) for name in fields}
        frozen = value.__dataclass_params__.frozen  # type: ignore[attr-defined]
        if frozen and all(changes[name] is getattr(value, name) for name in fields):
            return value  # a frozen record with nothing to escape, kept rather than rebuilt (a report's Overview)
        return dataclasses.replace(value, **changes)
    return value


def has_control(text: str, *, line_breaks_ok: bool = False) -> bool:
    """Whether `escape_control` would change `text`; `line_breaks_ok` ignores `\\n` and `\\r`, so a whole
    chunk of a log can be checked in one scan before it is cut into lines."""
    pattern = _CONTROL_BUT_BREAKS if line_breaks_ok else _CONTROL_CHARS
    return pattern.search(text) is not None


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = {"\n": "\\n", "\r": "\\r"}.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def duration(seconds: float | None) -> str:
    """`45s`, `12m05s`, `3h07m`: ETAs and ages at a glance."""
    if seconds is None:
        return "—"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{(whole % 3600) // 60:02d}m"


def span(seconds: float | None) -> str:
    """A coarse span for evidence and liveness (`45s`, `40m`, `3.1h`); `never` when there is none."""
    if seconds is None:
        return "never"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def money(value: float | None, currency: str = "USD") -> str:
    """An amount (spent, burning, to finish), to the cent. Money is rounded only here, when rendered; the
    model keeps full precision."""
    if value is None:
        return "—"
    symbol = "$" if currency == "USD" else f"{currency} "
    return f"{symbol}{value:,.2f}"


def price_text(amount: float) -> str:
    """A quoted hourly price as the user types it to approve it: at least two decimals, at most four
    (0.44, 0.347, 2.00), because a provider's $0.347/h is not $0.35/h."""
    whole, _, fraction = f"{amount:.4f}".rstrip("0").partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def price(amount: float, currency: str = "USD") -> str:
    """A quoted hourly price with its currency (`$0.347`), by price_text's rule."""
    return f"${price_text(amount)}" if currency == "USD" else f"{price_text(amount)} {currency}"


# Sizes: one convention everywhere, IEC binary units (KiB, MiB, GiB, TiB), the units nvidia-smi, torch and
# `du -h` print. Files (pull progress, the checkpoint panel, reports), disks, caches and memory (the environment
# audit, the host rules) and GPU memory all go through `size_iec`; `size` and `gib` are its two usual shapes.
_IEC_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def size(value: int | None) -> str:
    """A file's size: `512 B`, `97.7 KiB`, `5.0 MiB` (the largest IEC unit that keeps it >= 1, one decimal)."""
    if value is None:
        return "—"
    return size_iec(value, 1)


def gib(value: float) -> str:
    """Gibibytes with one decimal (`10.0 GiB`): disks, caches and memory, where one unit keeps rows comparable."""
    return size_iec(value, 1, "GiB")


def size_iec(value: float, decimals: int = 2, unit: str | None = None) -> str:
    """IEC units as nvidia-smi and torch print them: the largest unit that keeps the number >= 1
    (2147483648 -> `2.00 GiB`), or the `unit` given (`GiB`)."""
    for name, factor in _IEC_UNITS:
        if name == unit or (unit is None and value >= factor):
            return f"{value / factor:.{decimals}f} {name}"
    return f"{value:.0f} B"


def short_hash(sha: str | None) -> str:
    """`5a2c11…7b31`: enough to compare by eye, short enough for a table."""
    return f"{sha[:6]}…{sha[-4:]}" if sha else "—"


def describe_gpus(samples: list[GpuSample] | None) -> str:
    """`2× util 87% · mem 61/80 GiB · 71°C` (medians over GPUs), or `no GPU`."""
    if samples is None:
        return "no GPU"
    if not samples:
        return "no GPU visible"

    def middle(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    util = middle([s.util_pct for s in samples])
    used = middle([s.memory_used_mib for s in samples])
    total = middle([s.memory_total_mib for s in samples])
    temp = max((s.temperature_c for s in samples if s.temperature_c is not None), default=None)
    parts = [f"util {util:.0f}%" if util is not None else "util ?"]
    if used is not None and total is not None:
        parts.append(f"mem {used / 1024:.0f}/{total / 1024:.0f} GiB")
    if temp is not None:
        parts.append(f"{temp:.0f}°C")
    return f"{len({s.index for s in samples})}× " + " · ".join(parts)


# `rgt status` and the TUI's all-boxes screen print the same cells (docs/remote-ops.md §9.3)
BOX_COLUMNS = ("PROJECT", "INSTANCE", "PROVIDER", "ID", "STATE", "BURN", "COST", "IDLE", "RUNS")
ORPHAN_COLUMNS = ("PROVIDER", "ID", "NAME", "STATE", "BURN", "")


def box_cells(box: BoxView) -> tuple[str, ...]:
    """One instance's row: every text from a box or a project escaped; `~` marks an estimated cost."""
    runs = ", ".join(f"{r.id} {r.liveness}" for r in box.runs) or "no run"
    cost = money(box.cost_so_far, box.currency) + ("~" if box.estimate else "")
    return tuple(escape_control(cell) for cell in (
        box.project, box.name, box.provider, box.id or "?", box.state, f"{money(box.burn_per_hour, box.currency)}/h",
        cost, duration(box.idle_s), runs))


def project_labels(view: FleetView) -> dict[str, str]:
    """How each project root is named in the all-boxes table: its name, and where two projects share a name
    (two clones of one repository), the name with its folder, `name (folder)`, or the whole root when even the
    folders' last parts agree. Without it two rows would read alike and the user could not tell which to tear
    down."""
    names: dict[str, set[str]] = {}
    for box in view.instances:
        names.setdefault(box.project, set()).add(box.root)
    labels: dict[str, str] = {}
    for name, roots in names.items():
        folders = [os.path.basename(root.rstrip("/")) for root in roots]
        for root in roots:
            if len(roots) == 1:
                labels[root] = name
            else:
                folder = os.path.basename(root.rstrip("/"))
                labels[root] = f"{name} ({folder if folders.count(folder) == 1 else root})"
    return labels


def fleet_rows(view: FleetView) -> list[tuple[str, ...]]:
    """The instances table's rows, the same in `rgt status` and the TUI, projects named as `project_labels`."""
    labels = project_labels(view)
    return [box_cells(dataclasses.replace(box, project=labels[box.root])) for box in view.instances]


def box_notes(view: FleetView) -> list[str]:
    """`project/instance: note` for each box with a note, projects named as in the table."""
    labels = project_labels(view)
    return [escape_control(f"{labels[b.root]}/{b.name}: {b.note}") for b in view.instances if b.note]


def fleet_summary(view: FleetView) -> str:
    return (f"{len(view.projects)} project(s) · {len(view.instances)} instance(s) · burning "
            f"{money(view.burn_per_hour, view.currency)}/h")


def project_line(project: ProjectRowView, root: str | None = None) -> str:
    """`ok  ROOT  NAME: 2 instance(s)`, or why the project could not be read; `root` overrides how it is shown."""
    return escape_control(f"{project.status:<10} {root or project.root}  {project.name or '?'}: {project.detail}")


def orphan_cells(orphan: OrphanView) -> tuple[str, ...]:
    """What the box bills now by the meter's rule (`~`: an estimate, `+?`: part of it at no known price)."""
    shown = (f"{'~' if orphan.estimate else ''}{price(orphan.burn_per_hour, orphan.currency)}/h"
             f"{'+?' if orphan.unknown_price else ''}")
    return tuple(escape_control(cell) for cell in (
        orphan.provider, orphan.id, orphan.name, orphan.state, shown, orphan.mark))


def location_drift_line(drift: tuple[LocationDriftView, ...]) -> str:
    """The location keys rgt.toml changed since the run's launch, the same in the run panel and the report: the
    run is still watched, pulled and gated where its launch put it (docs/gate.md §7, "Launch-time bindings")."""
    changes = "; ".join(f"{d.key} {_drift_value(d.launched)} → {_drift_value(d.now)}" for d in drift)
    return f"rgt.toml changed since the launch (applies to the next launch): {changes}"


def _drift_value(value: str | tuple[str, ...] | None) -> str:
    if value is None:
        return "(unset)"
    return "[" + ", ".join(value) + "]" if isinstance(value, tuple) else value


def recovery_line(view: RecoveryView) -> str:
    """A recoverable run's recovery (docs/remote-ops.md §10.1), the same in the run panel and the report."""
    approval = "approved" if view.approved else f"NOT APPROVED ({view.why_not})"
    age = "" if view.checkpoint_age_s is None else f" · newest checkpoint {duration(view.checkpoint_age_s)} old"
    return (f"recovery {approval} · restarts {view.restarts_used}/{view.max_restarts} · spent "
            f"{view.spent:.2f}/{view.max_spend:.2f} {view.currency} · until {view.until}{age} · {home_line(view)}")


def home_line(view: RecoveryView) -> str:
    """The checkpoint kept home (services/recover/checkpoint_home.py): what recovery would resume from, its age
    against how often it is refreshed, and OLD when it is older than twice that."""
    every = "" if view.home_every_s is None else f" (refreshed every {duration(view.home_every_s)})"
    if view.home_age_s is None:
        return f"no checkpoint kept home yet{every}"
    old = " OLD" if view.home_every_s is not None and view.home_age_s > 2 * view.home_every_s else ""
    cells = "" if view.cells <= 1 else f", {view.home_cells}/{view.cells} cells"
    return f"kept home: {escape_control(view.home)} {duration(view.home_age_s)} old{old}{every}{cells}"


def cadence_line(view: CadenceView) -> str:
    """The Young/Daly line of a run (docs/remote-ops.md §10), the same in the run panel and the report."""
    every = f"checkpoint every {duration(view.interval_s)}"
    if view.iterations is not None and view.s_per_iteration is not None:
        every += f" ({view.iterations} iterations at {view.s_per_iteration:.3g} s each)"
    newest = "" if view.newest_age_s is None else f" · newest {duration(view.newest_age_s)} old"
    overdue = " · OVERDUE (older than 2 × W)" if view.overdue else ""
    return (f"{every} · W = sqrt(2 · μ {duration(view.mtbp_s)} ({view.mtbp_source}) · C {view.write_s:.3g} s "
            f"({view.write_source})){newest}{overdue}")
