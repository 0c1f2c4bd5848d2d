"""The pixel re-open gate G1–G6 (docs/deliver.md §3) on real matplotlib renders: for each check a figure drawn
wrongly on purpose fails it (and only the checks it should), and the same figure drawn right passes all six.

Each figure is saved exactly as a build saves its own (support/figures.py), so the gate reads the PNG bytes
re-opened from disk, the live Figure, the warnings recorded while saving and source.csv.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from remote_gpu_trainer.deliver.figures.pixel_gate import Check, GateInputs, g1_blank, qa_block
from support.figures import gate

BAR_ROWS = [{"series": "base", "x": 0, "y": 0.8, "err_lo": 0.01, "err_hi": 0.01, "seeds": 2, "n": 50},
            {"series": "ours", "x": 1, "y": 0.9, "err_lo": 0.02, "err_hi": 0.02, "seeds": 3, "n": 50}]
LINE_ROWS = [{"series": s, "x": x, "y": float(y), "seeds": 1}
             for s, ys in (("base", [0, 1, 2, 3, 4]), ("ours", [4, 3, 2, 1, 0])) for x, y in enumerate(ys)]


def bars(figure: Figure, heights: tuple[float, float] = (0.8, 0.9), *, err: bool = True,
         ylim: tuple[float, float] | None = None) -> None:
    """Two bars as the built-in bar kind draws them: one labelled container per series, std error bars."""
    ax = figure.add_subplot()
    for index, (label, height) in enumerate(zip(["base", "ours"], heights, strict=True)):
        ax.bar([index], [height], yerr=[[0.01], [0.01]] if err else None, label=label)
    ax.set_xticks([0, 1], ["base", "ours"])
    ax.set_ylabel("acc")
    if ylim is not None:
        ax.set_ylim(*ylim)


def lines(figure: Figure, legend_loc: str = "best") -> None:
    ax = figure.add_subplot()
    ax.plot([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], "o-", label="base")
    ax.plot([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], "o-", label="ours")
    ax.legend(loc=legend_loc)


def failing(checks: dict[str, Check]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {name: (c.status, c.notes) for name, c in checks.items() if c.status != "pass"}


SINGLE_SEED = ("disclosed", ("'base' is single-seed: no error bar", "'ours' is single-seed: no error bar"))


def test_a_right_bar_figure_passes_all_six(tmp_path: Path) -> None:
    checks = gate(tmp_path, bars, BAR_ROWS)
    assert failing(checks) == {}
    assert qa_block(checks, deterministic=True, checked_at="t") == {
        "passed": True, "checked_at": "t", "deterministic": True, "human_viewed": False,
        "checks": {name: "pass" for name in checks}, "notes": ""}


def test_g1_blank_axes_and_an_empty_image_fail(tmp_path: Path) -> None:
    assert failing(gate(tmp_path, lambda f: f.add_subplot(), BAR_ROWS))["G1_blank"] == (
        "fail", ("axes 1 of 1 draws no data (no artist with a finite point)",))
    assert failing(gate(tmp_path, lambda f: None, BAR_ROWS))["G1_blank"] == (
        "fail", ("the image is one flat colour (grayscale std 0.000 ≤ 0.5)", "the figure has no axes"))
    broken = GateInputs(b"\x89PNG\r\n\x1a\nnot really", Figure(), (), b"", "bar")
    assert g1_blank(broken) == Check("fail", ("the PNG does not decode (OSError)",))


def test_g2_a_glyph_the_font_lacks_fails_and_names_the_characters(tmp_path: Path) -> None:
    def titled(figure: Figure) -> None:
        bars(figure)
        figure.axes[0].set_title("准确率 accuracy")

    assert failing(gate(tmp_path, titled, BAR_ROWS)) == {"G2_glyphs": (
        "fail", ("glyphs missing from the font, drawn as boxes: '准' (U+51C6), '确' (U+786E), '率' (U+7387)",))}


def test_g3_a_label_pushed_off_the_page_fails_and_one_touching_the_edge_warns(tmp_path: Path) -> None:
    def pushed(figure: Figure) -> None:
        bars(figure)
        figure.axes[0].set_ylabel("accuracy")
        figure.axes[0].yaxis.set_label_coords(-0.3, 0.5)

    status, notes = failing(gate(tmp_path, pushed, BAR_ROWS, constrained=False))["G3_clipped"]
    assert (status, notes[1:]) == ("fail", ("clipped: axes 1 y label 'accuracy'",))
    assert notes[0].startswith("drawing extends ") and notes[0].endswith(" pt beyond the left edge")

    def touching(figure: Figure) -> None:
        bars(figure)
        figure.text(1.0, 0.5, "edge note", ha="right", va="center")

    assert failing(gate(tmp_path, touching, BAR_ROWS))["G3_clipped"] == (
        "warn", ("text touches the right edge of the PNG",))


def test_g4_a_legend_over_data_warns_and_intersecting_panels_fail(tmp_path: Path) -> None:
    assert failing(gate(tmp_path, lambda f: lines(f, "center"), LINE_ROWS, kind="line")) == {
        "G4_overlap": ("warn", ("axes 1 legend covers 2 data point(s) and 0 bar(s)",)), "G6_data": SINGLE_SEED}
    assert failing(gate(tmp_path, lines, LINE_ROWS, kind="line")) == {"G6_data": SINGLE_SEED}

    def panels(figure: Figure) -> None:
        figure.add_axes((0.1, 0.1, 0.6, 0.6)).plot([0, 1], [0, 1], label="base")
        figure.add_axes((0.4, 0.4, 0.5, 0.5)).plot([0, 1], [1, 0], label="ours")

    rows = [{"series": "base", "x": 0, "y": 0.0, "seeds": 1}, {"series": "base", "x": 1, "y": 1.0, "seeds": 1},
            {"series": "ours", "x": 0, "y": 1.0, "seeds": 1}, {"series": "ours", "x": 1, "y": 0.0, "seeds": 1}]
    assert failing(gate(tmp_path, panels, rows, kind="line"))["G4_overlap"] == (
        "fail", ("panels 1 and 2 intersect",))


def test_g5_a_truncated_bar_axis_fails_unless_its_baseline_is_declared_and_disclosed(tmp_path: Path) -> None:
    truncated = lambda f: bars(f, ylim=(0.7, 0.95))  # noqa: E731
    assert failing(gate(tmp_path, truncated, BAR_ROWS)) == {"G5_axis": ("fail", (
        "axes 1: the bar value axis starts at 0.7, not 0 (a truncated bar axis exaggerates differences; to keep "
        "it, set expect.baseline to it and say why in disclose.G5_axis)",))}
    assert failing(gate(tmp_path, truncated, BAR_ROWS, expect={"baseline": 0.7}))["G5_axis"][0] == "fail"
    disclosed = gate(tmp_path, truncated, BAR_ROWS, expect={"baseline": 0.7},
                     disclose={"G5_axis": "zoomed to show the gap"})["G5_axis"]
    assert disclosed == Check("disclosed", ("axes 1: the bar axis starts at 0.7 (expect.baseline), disclosed",),
                              ("zoomed to show the gap",))


def test_g5_scale_inversion_and_a_contradicting_arrow_fail(tmp_path: Path) -> None:
    def dishonest(figure: Figure) -> None:
        bars(figure)
        figure.axes[0].set_ylim(0, 1)
        figure.axes[0].invert_yaxis()
        figure.axes[0].set_ylabel("acc ↓ better")

    assert failing(gate(tmp_path, dishonest, BAR_ROWS, expect={"direction": "higher_is_better"}))["G5_axis"] == (
        "fail", ("axes 1: the value axis is inverted, expect.inverted is false",
                 "axes 1: the axis label says lower is better, the metric is higher_is_better"))

    def logged(figure: Figure) -> None:
        lines(figure)
        figure.axes[0].set_xscale("log")
        figure.axes[0].set_yscale("log")

    def unequal(figure: Figure) -> None:
        bars(figure)
        figure.axes[0].patches[1].set_width(0.4)

    assert failing(gate(tmp_path, unequal, BAR_ROWS))["G5_axis"] == (
        "fail", ("axes 1: bars of unequal width (0.4, 0.8)",))
    rows = [r for r in LINE_ROWS if r["y"] > 0 and r["x"] > 0]
    assert failing(gate(tmp_path, logged, rows, kind="line"))["G5_axis"][1][0] == (
        "axes 1: the value axis is log, expect.scale is linear")


def test_g5_lines_going_back_or_over_different_ranges_fail(tmp_path: Path) -> None:
    def uneven(figure: Figure) -> None:
        ax = figure.add_subplot()
        ax.plot([0, 2, 1], [0.0, 1.0, 2.0], label="base")
        ax.plot([0, 1], [1.0, 0.0], label="ours")

    rows: list[dict[str, Any]] = [{"series": "base", "x": x, "y": y, "seeds": 1}
                                  for x, y in ((0, 0.0), (2, 1.0), (1, 2.0))]
    rows += [{"series": "ours", "x": 0, "y": 1.0, "seeds": 1}, {"series": "ours", "x": 1, "y": 0.0, "seeds": 1}]
    assert failing(gate(tmp_path, uneven, rows, kind="line"))["G5_axis"] == ("fail", (
        "axes 1: line 'base': x is not increasing", "axes 1: compared curves cover different x ranges (base 0–2, "
                                                    "ours 0–1)"))
    found = "series 'ours': seeds do not share x values (ours/seed0: 10, ours/seed1: 9)"
    assert failing(gate(tmp_path, bars, BAR_ROWS, problems={"G5_axis": [found]}))["G5_axis"] == ("fail", (found,))


def test_g6_drawn_values_that_differ_from_source_fail(tmp_path: Path) -> None:
    assert failing(gate(tmp_path, lambda f: bars(f, heights=(0.8, 0.95)), BAR_ROWS)) == {"G6_data": (
        "fail", ("series 'ours': drawn (1, 0.95) but source.csv has (1, 0.9)",))}
    off_by_a_hair = lambda f: bars(f, heights=(0.8, 0.9 * (1 + 1e-12)))  # noqa: E731  within 1e-9 relative
    assert failing(gate(tmp_path, off_by_a_hair, BAR_ROWS)) == {}
    extra = [*BAR_ROWS, {"series": "third", "x": 2, "y": 0.5, "seeds": 1}]
    assert failing(gate(tmp_path, bars, extra))["G6_data"] == (
        "fail", ("series 'third' is in source.csv but not drawn",))
    assert failing(gate(tmp_path, bars, BAR_ROWS[:1]))["G6_data"] == (
        "fail", ("drawn series 'ours' is not in source.csv",))


def test_g6_rows_non_finite_values_and_missing_error_bars(tmp_path: Path) -> None:
    assert failing(gate(tmp_path, bars, BAR_ROWS, expect={"rows": 3}))["G6_data"] == (
        "fail", ("source.csv has 2 rows, expect.rows is 3",))
    assert failing(gate(tmp_path, lambda f: bars(f, err=False), BAR_ROWS))["G6_data"] == ("fail", (
        "series 'base' averages 2 seeds but no error bar or band is drawn",
        "series 'ours' averages 3 seeds but no error bar or band is drawn"))
    nan_rows = [{**BAR_ROWS[0], "err_lo": float("nan")}, BAR_ROWS[1]]
    assert failing(gate(tmp_path, bars, nan_rows))["G6_data"] == (
        "fail", ("non-finite values in source.csv: row 1 err_lo=nan",))
    said = gate(tmp_path, bars, nan_rows, disclose={"G6_data": "one seed's spread is undefined"})["G6_data"]
    assert said == Check("disclosed", ("non-finite values in source.csv: row 1 err_lo=nan",),
                         ("one seed's spread is undefined",))
    assert qa_block({"G6_data": said, "G1_blank": Check("warn", ("x",))}, deterministic=True, checked_at="t")[
        "passed"] is False
