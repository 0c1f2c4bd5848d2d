"""The determinism check of a figure build (docs/deliver.md §3) on real renders: a figure that comes out
different on each render is caught in every format it differs in, and only there: its rows (source.csv), a
timestamp drawn into it (all three files), a jitter too small for the PNG's pixels (SVG and PDF), a text moved
less than the SVG's six decimals show (the PDF alone), an element id (the SVG alone), antialiasing (the PNG's
pixels alone). The
outputs are kept and qa names what differed. The PDF font subset memo (figures/pdf_fonts.py) gives the same
bytes as subsetting from the font file."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from remote_gpu_trainer.deliver.figures import pdf_fonts
from remote_gpu_trainer.deliver.figures.build import OUTPUTS, build_figure, deterministic_matplotlib
from support.figures import write_cells, write_figure

#: a folder build.py whose render() changes one thing on each call: `{change}` is a statement run with `turn`
#: (0 on the first render, 1 on the second) and the bar artists `bars` in scope
BUILD_PY = '''
import itertools

import matplotlib.pyplot as plt
import pandas as pd

renders = itertools.count()


def build(inputs):
    rows = []
    for index, item in enumerate(inputs):
        value = item.json()["metrics"]["acc"]["value"]
        rows.append({"series": item.capsule, "x": index, "y": value {rows}, "err_lo": None, "err_hi": None,
                     "n": 50, "seeds": 1, "capsules": item.capsule, "test_id": item.test_id, "metric": "acc"})
    return pd.DataFrame(rows)


def render(df, out_dir):
    turn = next(renders)
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=150, layout="constrained")
    bars = [ax.bar([row.x], [row.y], label=row.series)[0] for row in df.itertuples()]
    ax.set_xticks(list(df.x), list(df.series))
    ax.set_ylabel("acc")
    {change}
    return fig
'''

CASES = {
    # (rows changed in build(), statement in render()) -> the files the two renders differ in
    "rows": (("+ 1e-3 * next(renders)", "pass"), ("source.csv", "final.svg", "final.pdf", "final.png")),
    "timestamp": (("", "ax.set_title(f'built at 10:0{turn}')"), ("final.svg", "final.pdf", "final.png")),
    "jitter": (("", "bars[1].set_height(bars[1].get_height() + 1e-7 * turn)"), ("final.svg", "final.pdf")),
    "fine jitter": (("", "ax.title.set_x(0.5 + 1e-10 * turn); ax.set_title('acc')"), ("final.pdf",)),
    "link id": (("", "bars[0].set_gid(f'bar-{turn}')"), ("final.svg",)),
    "antialiasing": (("", "ax.yaxis.label.set_antialiased(turn == 0)"), ("final.png",)),
}


def custom(root: Path, rows: str, change: str) -> None:
    write_figure(root, "own", "custom", inputs=[{"capsule": "base/seed0", "test_id": "main", "metric": "acc"},
                                                {"capsule": "ours/seed0", "test_id": "main", "metric": "acc"}])
    code = BUILD_PY.replace("{rows}", rows).replace("{change}", change)
    (root / "figures/own/build.py").write_text(code, encoding="utf-8")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_figure_that_differs_between_renders_is_caught_in_each_format_it_differs_in(tmp_path: Path,
                                                                                        case: str) -> None:
    root = tmp_path / "project"
    write_cells(root)
    (rows, change), expected = CASES[case]
    custom(root, rows, change)
    built = build_figure(root, "own")
    assert (built.deterministic, built.passed, built.differing) == (False, False, expected)
    qa = built.document["qa"]
    assert qa["deterministic"] is False and qa["notes"].endswith(f"two builds differ: {', '.join(expected)}")
    folder = root / "figures/own"
    assert all((folder / name).is_file() for name in ("source.csv", *OUTPUTS))  # kept, so the user can look
    assert not list(folder.glob(".rgt-build-*")) and not list(folder.glob("*.pixels"))


def test_the_same_build_py_unchanged_between_renders_is_deterministic(tmp_path: Path) -> None:
    root = tmp_path / "project"
    write_cells(root)
    custom(root, "", "bars[0].set_gid('bar')")
    built = build_figure(root, "own")
    assert (built.deterministic, built.differing, built.document["qa"]["deterministic"]) == (True, (), True)


def test_the_pdf_font_subset_memo_writes_the_bytes_a_fresh_subset_writes() -> None:
    """The memo's hit re-reads the subset it saved; the PDF is the same as one whose subset was made from the
    font file (a memo cleared first), and a figure using other glyphs is another entry, not a stale subset."""
    from matplotlib.figure import Figure

    def pdf(title: str) -> bytes:
        with deterministic_matplotlib("memo"):
            figure = Figure(figsize=(4, 3))
            axes = figure.add_subplot()
            axes.plot([1, 2, 3], [3, 1, 2])
            axes.set_title(title)
            out = io.BytesIO()
            figure.savefig(out, format="pdf", metadata={"CreationDate": None})
            return out.getvalue()

    memoized = pdf_fonts.install()  # True on the matplotlib it was written against, which this project uses
    pdf_fonts.clear()
    fresh = pdf("loss (↓ better)")
    held = pdf_fonts.size()  # one subset per font file the text used
    assert (held > 0) is memoized
    assert pdf("loss (↓ better)") == fresh  # hits
    assert pdf_fonts.size() == held
    pdf_fonts.clear()
    assert pdf("loss (↓ better)") == fresh  # made again from the font file
    other = pdf("accuracy (↑ better)")
    assert other != fresh and (pdf_fonts.size() > held) is memoized
