"""`rgt build figure ID`: figures/<id>/figure.json → source.csv, final.png|svg|pdf and the pixel gate
(docs/deliver.md §3).

A build reads figure.json (user keys: figures/spec.py), reads every input once through deliver/inputs.py (so the
sha256 in `inputs` is of the bytes used), computes source.csv's rows (a built-in kind in figures/kinds.py, or
the folder's build.py in figures/custom.py), and renders it twice under the deterministic matplotlib settings
below, each time from the rows up: into every format (PNG, SVG, PDF), which is gated (figures/pixel_gate.py,
G1–G6), then again for the determinism check, whose SVG, PDF and PNG pixels must equal the first's byte for byte
(docs/deliver.md §3: the second PNG is drawn but not encoded). Only then are the files moved in and figure.json's
generated keys rewritten, the user's kept as written.
Bad input raises ConfigError (exit 2) before anything is written; a failed build.py raises VerbFailed (exit 1),
also with nothing written.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_gpu_trainer.audits.catalogue import metric_registry
from remote_gpu_trainer.audits.catalogue.model import MetricRule, sha256_hex
from remote_gpu_trainer.clock import iso_z, utc_now
from remote_gpu_trainer.deliver.document import load_document, merge_document
from remote_gpu_trainer.deliver.figures import custom as figure_custom
from remote_gpu_trainer.deliver.figures import kinds as figure_kinds
from remote_gpu_trainer.deliver.figures.kinds import SORT_KEY, SOURCE_COLUMNS
from remote_gpu_trainer.deliver.figures.pixel_gate import Check, GateInputs, qa_block, run_gate
from remote_gpu_trainer.deliver.figures.spec import FIGURE_SCHEMA, FigureSpec, parse_spec
from remote_gpu_trainer.deliver.outputs import output_folder, staging
from remote_gpu_trainer.deliver.provenance import environment, provenance, stable_provenance
from remote_gpu_trainer.deliver.source_csv import read_source_csv, source_csv

if TYPE_CHECKING:
    from matplotlib.figure import Figure

OUTPUTS = ("final.png", "final.svg", "final.pdf")
FILES = ("source.csv", *OUTPUTS)
PIXELS = "final.pixels"  # `width height sha256` of the PNG's RGBA pixels as drawn: compared, never installed
#: what both renders write, compared byte for byte (docs/deliver.md §3); PIXELS stands for final.png
RECHECKED = ("source.csv", "final.svg", "final.pdf", PIXELS)
PROVENANCE_KEY = "rgt:provenance"  # the PNG text chunk holding the stable provenance (SVG: dc:description)
#: the house style every figure is drawn in, on top of matplotlib's defaults (a user's matplotlibrc is not read)
STYLE: dict[str, Any] = {
    "font.family": ["DejaVu Sans"], "font.size": 10.0, "axes.titlesize": 11.0, "axes.grid": True,
    "axes.axisbelow": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False,
    "figure.facecolor": "white",
    "savefig.facecolor": "white", "savefig.transparent": False, "legend.frameon": True, "legend.framealpha": 0.9,
    "svg.fonttype": "path", "pdf.fonttype": 42, "svg.id": None, "path.simplify": False,
}


@dataclass(frozen=True)
class FigureBuild:
    """What a build wrote: figure.json as written, the gate's checks and the determinism check."""

    figure_id: str
    folder: Path
    document: Mapping[str, Any]
    checks: Mapping[str, Check]
    deterministic: bool
    differing: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return bool(self.document.get("qa", {}).get("passed")) and self.deterministic


@dataclass
class Plan:
    """How to make the rows and the figure, and what was read: the same for both renders."""

    rows: Callable[[], list[dict[str, Any]]]
    draw: Callable[[list[dict[str, Any]], Path], Figure]
    entries: list[dict[str, Any]]
    capsules: list[str]
    problems: Mapping[str, Sequence[str]] = field(default_factory=dict)
    disclosures: list[str] = field(default_factory=list)
    direction: str | None = None
    builder: Mapping[str, str] | None = None
    reductions: list[dict[str, Any]] = field(default_factory=list)  # figures/reduce.py: series drawn reduced


@dataclass(frozen=True)
class Rendered:
    """What one render produced for the builder: the source.csv bytes, the gate's checks, the PNG's size in pixels
    and the fonts used."""

    source: bytes
    checks: Mapping[str, Check]
    px: tuple[int, int]
    fonts: tuple[str, ...]


@contextlib.contextmanager
def deterministic_matplotlib(figure_id: str) -> Iterator[None]:
    """Agg, matplotlib's default style, the house STYLE and the per-figure SVG hash salt (docs/deliver.md §3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.style

    from remote_gpu_trainer.deliver.figures import pdf_fonts

    pdf_fonts.install()  # the PDF's font subset made once per glyph set, the same bytes (figures/pdf_fonts.py)
    settings: Any = {**STYLE, "svg.hashsalt": figure_id}
    with matplotlib.style.context("default"), matplotlib.rc_context(settings):
        yield


def build_figure(root: Path, figure_id: str, *, declared: Mapping[str, MetricRule] | None = None,
                 code: Mapping[str, Any] | None = None, now: datetime | None = None,
                 amend: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> FigureBuild:
    """Build figures/<figure_id>/ (see the module docstring). `declared` are rgt.toml's metric directions;
    `code` the tree's git state (provenance.code_state, computed once per `rgt build`); `amend` a last change
    to figure.json before it is written (services/deliver/sources.py discloses unverified inputs: a builder
    cannot ask the state database), so it is written once."""
    folder = output_folder(root, "figure", figure_id)
    where = f"figures/{figure_id}/figure.json"
    user = load_document(folder / "figure.json", FIGURE_SCHEMA, "figure_id", figure_id)
    builder = figure_custom.load_builder(root, folder)
    spec = parse_spec(user, figure_id, where, has_builder=builder is not None)
    plan = plan_figure(spec, root, declared, builder)
    expect = {**spec.expect, "direction": spec.expect.get("direction") or plan.direction}
    moment = now or utc_now()
    prov = provenance(root, plan.capsules, command=f"rgt build figure {figure_id}", builder=plan.builder, env={},
                      code=code, now=moment)
    if plan.reductions:  # a long curve drawn from the extremes of each pixel column, with its full row count
        prov["reduction"] = plan.reductions
    with staging(folder) as stage:
        first = render_once(spec, plan, stage.first, prov, expect)
        render_once(spec, plan, stage.second, prov, expect, again=True)
        differing = ["final.png" if name == PIXELS else name for name in stage.differing(RECHECKED)]
        prov["env"] = environment(("matplotlib", "numpy", "pandas"), backend="Agg", fonts=first.fonts)
        qa = qa_block(first.checks, deterministic=not differing, checked_at=iso_z(moment))
        if differing:
            qa["notes"] = "; ".join(filter(None, [qa["notes"], f"two builds differ: {', '.join(differing)}"]))
        generated = {
            "inputs": plan.entries,
            "source": {"path": "source.csv", "sha256": sha256_hex(first.source),
                       "rows": len(read_source_csv(first.source)), "columns": list(SOURCE_COLUMNS),
                       "key": list(SORT_KEY)},
            "provenance": prov, "outputs": stage.outputs(OUTPUTS, {"final.png": first.px}), "qa": qa,
            "disclosure": disclosure_text(plan.disclosures, first.checks, prov),
        }
        document = merge_document(user, generated)
        if amend is not None:
            document = amend(document)
        stage.install(FILES, "figure.json", document)
    return FigureBuild(figure_id, folder, document, first.checks, not differing, tuple(differing))


def plan_figure(spec: FigureSpec, root: Path, declared: Mapping[str, MetricRule] | None,
                builder: figure_custom.Builder | None) -> Plan:
    """Read the inputs once; the rows come from them, the same for both renders."""
    if builder is None:
        prepared = figure_kinds.prepare(spec, root, declared)

        def draw(rows: list[dict[str, Any]], out: Path) -> Figure:
            from matplotlib.figure import Figure

            figure = Figure(figsize=spec.figsize, dpi=spec.dpi, layout="constrained")
            figure_kinds.draw(figure, spec, rows, prepared.direction)
            return figure

        return Plan(lambda: [dict(r) for r in prepared.rows], draw, prepared.entries,
                    [c for s in spec.series for c in s.capsules], prepared.problems, prepared.disclosures,
                    prepared.direction, reductions=prepared.reductions)
    inputs, entries = figure_custom.read_inputs(root, spec.inputs)
    where = f"{builder.path} build()"
    metric = next((i.metric for i in inputs if i.metric), None)
    short = metric_registry.direction(metric, declared) if metric else None

    def custom_rows() -> list[dict[str, Any]]:
        return figure_custom.frame_rows(builder.build(inputs), SOURCE_COLUMNS, where)

    def custom_draw(rows: list[dict[str, Any]], out: Path) -> Figure:
        import pandas as pd

        return builder.render(pd.DataFrame(rows, columns=list(SOURCE_COLUMNS)), out)

    return Plan(custom_rows, custom_draw, entries, [i.capsule for i in inputs],
                direction=metric_registry.DIRECTION_WORDS.get(short or ""),
                builder={"path": builder.path, "sha256": builder.sha256})


def render_once(spec: FigureSpec, plan: Plan, out: Path, prov: Mapping[str, Any], expect: Mapping[str, Any], *,
                again: bool = False) -> Rendered:
    """source.csv, final.png|svg|pdf and the PNG's pixels (PIXELS) into `out`, then the gate on what was written;
    `again` (the determinism check's second render) writes the same but the PNG, whose pixels are drawn and not
    encoded, and runs no gate. The rows are computed and the figure drawn afresh on each call."""
    with deterministic_matplotlib(spec.figure_id):
        rows = plan.rows()
        source = source_csv(SOURCE_COLUMNS, rows, SORT_KEY, f"figures/{spec.figure_id}/source.csv")
        (out / "source.csv").write_bytes(source)
        figure = plan.draw(rows, out)
        try:
            on_agg = _agg_canvas(figure)
            stable = stable_provenance(plan.entries, sha256_hex(source), prov)
            formats = ("final.svg", "final.pdf", PIXELS) if again else (*OUTPUTS, PIXELS)
            recorded = save_all(figure, out, spec.dpi, json.dumps(stable, sort_keys=True, ensure_ascii=True),
                                formats)
            if again:
                return Rendered(source, {}, (0, 0), ())
            png = (out / "final.png").read_bytes()
            checks = run_gate(GateInputs(png, figure, recorded, source, spec.kind, expect, spec.disclose,
                                         plan.problems, drawn=on_agg and figure.dpi == spec.dpi))
            return Rendered(source, checks, png_size(png), used_fonts(figure))
        finally:
            _release(figure)


def save_all(figure: Figure, out: Path, dpi: int, stable: str, formats: Sequence[str] = OUTPUTS) -> list[str]:
    """Write the outputs (`formats`: the three by default; PIXELS adds the digest of the PNG's pixels) with the
    metadata that makes them byte-identical on a rebuild (no dates, no software version in the PNG) and the
    stable provenance inside the PNG and SVG; return every warning raised while drawing and saving (G2 reads the
    missing-glyph ones). The figure is laid out once for all of them (lay_out_once)."""
    if PIXELS in formats:
        _agg_canvas(figure)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lay_out_once(figure)
        # the PNG last, on the figure's own Agg canvas, which then holds the draw the gate measures
        if "final.svg" in formats:
            figure.savefig(out / "final.svg", format="svg", metadata={"Date": None, "Description": stable})
        if "final.pdf" in formats:
            figure.savefig(out / "final.pdf", format="pdf", metadata={"CreationDate": None})
        if "final.png" in formats:
            figure.savefig(out / "final.png", format="png", dpi=dpi,
                           metadata={"Software": None, PROVENANCE_KEY: stable})
        elif PIXELS in formats:  # drawn on the canvas as the PNG is (print_raw draws as print_png), not encoded
            figure.savefig(io.BytesIO(), format="raw", dpi=dpi)
        if PIXELS in formats:
            (out / PIXELS).write_text(pixels_digest(figure), encoding="ascii")
    return [str(w.message) for w in caught]


def pixels_digest(figure: Figure) -> str:
    """`width height sha256` of the RGBA pixels the figure's Agg canvas last drew (the PNG's, or the raw draw
    that stands in for it): the determinism check compares these, not megabytes of pixels on disk."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = figure.canvas
    if not isinstance(canvas, FigureCanvasAgg):
        raise TypeError("pixels_digest: the figure has no Agg canvas")
    pixels = canvas.buffer_rgba()
    height, width = pixels.shape[:2] if pixels.shape else (0, 0)
    return f"{width} {height} {hashlib.sha256(pixels).hexdigest()}\n"


def lay_out_once(figure: Figure) -> None:
    """Run the figure's layout engine (constrained layout for the built-in kinds) once, on Agg at the figure's
    dpi, as the PNG is drawn and the gate measures, then switch it off: each savefig would otherwise lay the figure
    out again before drawing it (a draw more per format, about a third of a save), each time from where the
    previous save left it. All three files show that one layout (docs/deliver.md §3)."""
    import matplotlib

    engine = figure.get_layout_engine()
    if engine is None:
        return
    try:  # what Figure.draw does first, without the draw after it that a save would throw away
        engine.execute(figure)
    except ValueError:  # as Figure.draw: a layout that cannot be made leaves the figure as it is
        pass
    with matplotlib.rc_context({"figure.autolayout": False, "figure.constrained_layout.use": False}):
        figure.set_layout_engine(None)  # with both settings off this is None, whatever engine it replaces


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from the PNG's header, without decoding the pixels (G1 decodes them)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        width, height = image.size
    return int(width), int(height)


def used_fonts(figure: Figure) -> tuple[str, ...]:
    """The font files the figure's text resolved to (the environment the bytes depend on)."""
    from matplotlib import font_manager
    from matplotlib.text import Text

    return tuple(sorted({Path(font_manager.findfont(t.get_fontproperties())).name
                         for t in figure.findobj(Text) if isinstance(t, Text) and t.get_visible() and t.get_text()}))


def _agg_canvas(figure: Figure) -> bool:
    """Give the figure an Agg canvas of its own (a pyplot figure has one): the PNG, saved last, is then drawn on
    it and stays drawn there for the gate (docs/deliver.md §3), where a bare Figure's PNG would be drawn on a
    canvas thrown away after the save. The bytes are the same either way. False if the figure would not take it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(figure.canvas, FigureCanvasAgg):
        FigureCanvasAgg(figure)
    return isinstance(figure.canvas, FigureCanvasAgg)


def _release(figure: Figure) -> None:
    """A figure a build.py made through pyplot is registered there: close it so builds do not accumulate."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(figure)


def disclosure_text(found: Sequence[str], checks: Mapping[str, Check], prov: Mapping[str, Any]) -> str | None:
    """figure.json's `disclosure`, in the same sentences as a table's (docs/deliver.md §3): what the numbers
    need said (a split other than test), every disclosed check's sentences, a dirty tree. None when nothing."""
    parts = [*found, *(d for c in checks.values() for d in c.disclosure)]
    if prov.get("git_dirty"):
        parts.append("Built from uncommitted code")
    sentences = [p if p.endswith(".") else p + "." for p in parts]
    return " ".join(dict.fromkeys(sentences)) or None


def png_provenance(png: bytes) -> dict[str, Any] | None:
    """The stable provenance a build put into a PNG's text chunk, or None."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        text = image.info.get(PROVENANCE_KEY)
    return json.loads(text) if isinstance(text, str) else None
