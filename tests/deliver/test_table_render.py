"""Rendering a table from its source rows (docs/deliver.md §4) with real pandas: the exact bytes of
final.{md,tex,csv}, rounding only at render with `f"{v:.{p}f}"`, and the bold rule both ways."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from remote_gpu_trainer.deliver.tables.render import (
    Layout,
    SourceCell,
    bold_verdict,
    read_source,
    render,
    source_cells,
)
from support.tables import SourceRow, source_bytes

ROWS = [("baseline", "psnr", 30.0, 0.5, 5, 3), ("baseline", "lpips", 0.2, 0.01, 5, 3),
        ("ours", "psnr", 31.4238, 0.08, 5, 3), ("ours", "lpips", 0.19, 0.02, 5, 3)]
LAYOUT = Layout(rows=("baseline", "ours"), columns=("psnr", "lpips"), precision={"psnr": 2, "lpips": 3})
DIRECTIONS = {"psnr": "max", "lpips": "min"}


def outputs(rows: Sequence[SourceRow] = ROWS, layout: Layout = LAYOUT,
            directions: dict[str, str | None] | None = None) -> dict[str, str]:
    rendered = render(read_source(source_bytes(rows)), layout, DIRECTIONS if directions is None else directions)
    return {name: data.decode("utf-8") for name, data in rendered.items()}


def test_the_three_formats_have_these_exact_bytes() -> None:
    out = outputs()
    assert out["final.md"] == (
        "| method | n | seeds | psnr ↑ | lpips ↓ |\n"
        "| :--- | ---: | ---: | ---: | ---: |\n"
        "| baseline | 5 | 3 | 30.00 ± 0.50 | 0.200 ± 0.010 |\n"
        "| ours | 5 | 3 | **31.42 ± 0.08** | 0.190 ± 0.020 |\n")
    assert out["final.tex"] == (
        "\\begin{tabular}{lrrrr}\n\\toprule\n"
        "method & $n$ & seeds & psnr $\\uparrow$ & lpips $\\downarrow$ \\\\\n\\midrule\n"
        "baseline & 5 & 3 & 30.00 $\\pm$ 0.50 & 0.200 $\\pm$ 0.010 \\\\\n"
        "ours & 5 & 3 & \\textbf{31.42 $\\pm$ 0.08} & 0.190 $\\pm$ 0.020 \\\\\n"
        "\\bottomrule\n\\end{tabular}\n")
    assert out["final.csv"] == ("method,n,seeds,psnr_mean,psnr_std,lpips_mean,lpips_std\n"
                                "baseline,5,3,30.0,0.5,0.2,0.01\n"
                                "ours,5,3,31.4238,0.08,0.19,0.02\n")


def test_source_floats_come_back_as_the_exact_doubles_written() -> None:
    """pandas' default float parser can be one ulp off; the round-trip parser must give repr's double back."""
    awkward = [0.1 + 0.2, 1 / 3, 2.675, 1e-17, 123456789.12345679, 5e-324]
    rows = [("m", f"k{i}", v, v / 7, 1, 2) for i, v in enumerate(awkward)]
    cells = source_cells(read_source(source_bytes(rows)))
    assert [cells[("m", f"k{i}")].mean for i in range(len(awkward))] == awkward
    assert [cells[("m", f"k{i}")].std for i in range(len(awkward))] == [v / 7 for v in awkward]


def test_rounding_is_the_f_string_at_render_never_round_then_str() -> None:
    """31.4 at 2 decimals keeps its zero (str(round(31.4, 2)) is '31.4'); 2.675 is 2.67499999… in binary, so
    it shows 2.67; final.csv keeps every digit."""
    rows = [("a", "psnr", 31.4, 0.1, 5, 2), ("b", "psnr", 2.675, 0.005, 5, 2)]
    layout = Layout(rows=("a", "b"), columns=("psnr",), precision={"psnr": 2}, bold="none")
    out = outputs(rows, layout)
    assert out["final.md"].splitlines()[2:] == ["| a | 5 | 2 | 31.40 ± 0.10 |", "| b | 5 | 2 | 2.67 ± 0.01 |"]
    assert out["final.csv"].splitlines()[1:] == ["a,5,2,31.4,0.1", "b,5,2,2.675,0.005"]


def test_a_single_seed_row_shows_its_mean_alone_and_an_empty_std_in_csv() -> None:
    rows = [("a", "acc", 0.91234, None, 100, 1), ("b", "acc", 0.8, 0.01, 100, 3)]
    layout = Layout(rows=("a", "b"), columns=("acc",), precision={"acc": 3})
    out = outputs(rows, layout, {"acc": "max"})
    assert out["final.md"].splitlines()[2:] == ["| a | 100 | 1 | 0.912 |", "| b | 100 | 3 | 0.800 ± 0.010 |"]
    assert out["final.csv"].splitlines()[1:] == ["a,100,1,0.91234,", "b,100,3,0.8,0.01"]


def test_without_n_and_with_mean_cells_the_columns_are_method_and_metrics() -> None:
    layout = Layout(rows=("baseline", "ours"), columns=("psnr",), precision={"psnr": 1}, cell="mean",
                    show_n=False, formats=("md",), labels={"psnr": "PSNR (dB)"})
    out = outputs(layout=layout)
    assert list(out) == ["final.md"]
    assert out["final.md"] == ("| method | PSNR (dB) ↑ |\n| :--- | ---: |\n| baseline | 30.0 |\n"
                               "| ours | **31.4** |\n")


def test_labels_are_escaped_for_markdown_and_latex() -> None:
    rows = [("a|b_*c", "top1_acc", 0.5, 0.1, 10, 2), ("x&y%$#{}~^\\<>", "top1_acc", 0.4, 0.1, 10, 2)]
    layout = Layout(rows=("a|b_*c", "x&y%$#{}~^\\<>"), columns=("top1_acc",), precision={"top1_acc": 1},
                    bold="none")
    out = outputs(rows, layout, {"top1_acc": "max"})
    assert out["final.md"].splitlines()[0] == "| method | n | seeds | top1\\_acc ↑ |"
    assert out["final.md"].splitlines()[2] == "| a\\|b\\_\\*c | 10 | 2 | 0.5 ± 0.1 |"
    assert out["final.tex"].splitlines()[2] == "method & $n$ & seeds & top1\\_acc $\\uparrow$ \\\\"
    assert out["final.tex"].splitlines()[5] == (
        "x\\&y\\%\\$\\#\\{\\}\\textasciitilde{}\\textasciicircum{}\\textbackslash{}\\textless{}\\textgreater{} "
        "& 10 & 2 & 0.4 $\\pm$ 0.1 \\\\")


def cell(method: str, mean: float, std: float | None) -> SourceCell:
    return SourceCell(method, "psnr", mean, std, 5, 1 if std is None else 3, "", "set5")


@pytest.mark.parametrize(("cells", "direction", "bold", "note"), [
    # higher is better: [31.30, 31.50] clears [31.00, 31.20] → bold; [31.30, 31.50] vs [31.10, 31.31] overlaps
    ([cell("ours", 31.4, 0.1), cell("base", 31.1, 0.1)], "max", "ours", ""),
    ([cell("ours", 31.4, 0.1), cell("base", 31.2, 0.11)], "max", None, ""),
    # lower is better: the smallest mean, its upper end below the runner-up's lower end
    ([cell("ours", 0.10, 0.01), cell("base", 0.13, 0.01)], "min", "ours", ""),
    ([cell("ours", 0.10, 0.02), cell("base", 0.13, 0.02)], "min", None, ""),
    # the runner-up is the second best, not the worst: ours clears c but not b
    ([cell("c", 10.0, 0.1), cell("ours", 12.0, 0.5), cell("b", 11.4, 0.2)], "max", None, ""),
    ([cell("ours", 31.4, None), cell("base", 30.0, 0.1)], "max", None,
     "psnr: the best row 'ours' is single-seed (no error bar), so no row is bold"),
    ([cell("ours", 31.4, 0.1), cell("base", 30.0, None)], "max", None,
     "psnr: the runner-up 'base' is single-seed (no error bar), so no row is bold"),
    ([cell("ours", 31.4, 0.1), cell("base", 30.0, 0.1)], None, None,
     "psnr: direction unknown, so no row is marked best"),
    ([cell("ours", 31.4, 0.1), cell("base", 31.4, 0.1)], "max", None, ""),
    ([cell("ours", 31.4, 0.1)], "max", None, ""),
])
def test_bold_only_when_the_best_interval_clears_the_runner_up(cells: list[SourceCell], direction: str | None,
                                                               bold: str | None, note: str) -> None:
    verdict = bold_verdict(cells, direction, "best_clears_error_bar")
    assert (verdict.method, verdict.note) == (bold, note)
    assert bold_verdict(cells, direction, "none").method is None


def test_an_overlapping_best_is_rendered_without_bold() -> None:
    rows = [("baseline", "psnr", 31.3, 0.1, 5, 3), ("ours", "psnr", 31.4, 0.1, 5, 3)]
    layout = Layout(rows=("baseline", "ours"), columns=("psnr",), precision={"psnr": 2}, formats=("md", "tex"))
    out = outputs(rows, layout, {"psnr": "max"})
    assert "**" not in out["final.md"] and "\\textbf" not in out["final.tex"]
    assert out["final.md"].splitlines()[3] == "| ours | 5 | 3 | 31.40 ± 0.10 |"


def test_a_source_missing_a_cell_of_the_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="source has no row for method 'ours', metric 'lpips'"):
        outputs(ROWS[:3])
