"""The parse gate Q1–Q6 (docs/deliver.md §4) fed a correct table and hand-broken copies of it: each check has
an output that fails it, with the note that says where, and the correct table passes all six. The outputs are
the renderer's real bytes; final.csv goes through real pandas."""

from __future__ import annotations

from dataclasses import replace

from remote_gpu_trainer.deliver.tables.gate import CHECKS, GateResult, check_table
from remote_gpu_trainer.deliver.tables.render import Layout, read_source, render
from support.tables import source_bytes as source

# ours [31.35, 31.45] clears baseline [30.8, 31.2] on psnr; on ssim ours [0.885, 0.889] overlaps [0.884, 0.888]
ROWS = [("baseline", "psnr", 31.0, 0.2, 5, 3), ("baseline", "ssim", 0.886, 0.002, 5, 3),
        ("ours", "psnr", 31.4, 0.05, 5, 3), ("ours", "ssim", 0.887, 0.002, 5, 3)]
LAYOUT = Layout(rows=("baseline", "ours"), columns=("psnr", "ssim"), precision={"psnr": 2, "ssim": 3})
DIRECTIONS: dict[str, str | None] = {"psnr": "max", "ssim": "max"}
SOURCE = source(ROWS)
OUTPUTS = render(read_source(SOURCE), LAYOUT, DIRECTIONS)


def verdicts(**failing: str) -> dict[str, str]:
    """Every check `pass` but the ones named (Q3="fail")."""
    return {c: failing.get(c.split("_")[0], "pass") for c in CHECKS}


def edited(name: str, old: str, new: str, outputs: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """A copy of the outputs with one exact edit in one file (the edit must hit exactly once)."""
    files = dict(OUTPUTS if outputs is None else outputs)
    text = files[name].decode("utf-8")
    assert text.count(old) == 1, (name, old, text)
    files[name] = text.replace(old, new).encode("utf-8")
    return files


def gate(outputs: dict[str, bytes], *, src: bytes = SOURCE, layout: Layout = LAYOUT,
         directions: dict[str, str | None] | None = None) -> GateResult:
    return check_table(src, outputs, layout, DIRECTIONS if directions is None else directions)


def test_the_rendered_table_passes_all_six_checks() -> None:
    assert OUTPUTS["final.md"].decode().splitlines()[2:] == [
        "| baseline | 5 | 3 | 31.00 ± 0.20 | 0.886 ± 0.002 |", "| ours | 5 | 3 | **31.40 ± 0.05** | 0.887 ± 0.002 |"]
    result = gate(OUTPUTS)
    assert (result.checks, result.notes, result.passed) == (verdicts(), (), True)


# -- Q1 -------------------------------------------------------------------------------------------------------
def test_q1_a_final_csv_that_does_not_parse() -> None:
    result = gate(edited("final.csv", "ours,5,3,", "ours,5,3,extra,"))
    assert result.checks["Q1_parse_back"] == "fail" and not result.passed
    [note] = result.notes
    assert note.startswith("Q1_parse_back: final.csv does not parse back: ")
    assert note.endswith("Expected 7 fields in line 3, saw 8")  # pandas' words for the row that has 8


def test_q1_markdown_and_latex_rows_of_the_wrong_width_and_missing_files() -> None:
    md = edited("final.md", "| ours | 5 | 3 |", "| ours | 5 |")
    assert gate(md).notes == ("Q1_parse_back: final.md does not parse back: data row 2 has 4 cells, the header 5",)
    tex = edited("final.tex", "ours & 5 & 3 &", "ours & 5 & 3 & 1 &")
    assert gate(tex).notes == ("Q1_parse_back: final.tex does not parse back: data row 2 has 6 cells, the "
                               "header 5",)
    crlf = dict(OUTPUTS, **{"final.md": OUTPUTS["final.md"].replace(b"\n", b"\r\n")})
    assert gate(crlf).notes == ("Q1_parse_back: final.md does not parse back: final.md has CR line ends (LF only)",)
    no_newline = dict(OUTPUTS, **{"final.tex": OUTPUTS["final.tex"][:-1]})
    assert gate(no_newline).notes == ("Q1_parse_back: final.tex does not parse back: final.tex does not end with "
                                      "a newline",)
    missing = {k: v for k, v in OUTPUTS.items() if k != "final.tex"}
    assert gate(missing).checks == verdicts(Q1="fail")
    assert gate(missing).notes == ("Q1_parse_back: final.tex is missing (layout.formats lists tex)",)


def test_q1_a_source_csv_that_is_not_source_rows() -> None:
    broken = SOURCE.replace(b"ours,psnr,31.4,0.05,5,3", b"ours,psnr,31.4,0.05,five,3")
    assert gate(OUTPUTS, src=broken).notes == (
        "Q1_parse_back: source.csv does not parse: line 4: 'five' is not a whole number",)


# -- Q2 -------------------------------------------------------------------------------------------------------
def test_q2_a_nan_in_a_displayed_cell_or_in_final_csv() -> None:
    result = gate(edited("final.md", "| 0.887 ± 0.002 |", "| nan ± 0.002 |"))
    assert result.checks["Q2_no_nan"] == "fail"
    assert "Q2_no_nan: final.md ours: a cell shows 'nan ± 0.002'" in result.notes
    result = gate(edited("final.csv", "ours,5,3,31.4,0.05,", "ours,5,3,inf,0.05,"))
    assert result.checks["Q2_no_nan"] == "fail"
    assert "Q2_no_nan: final.csv ours / psnr_mean: 'inf'" in result.notes


def test_q2_a_nan_in_source_csv_fails_even_when_every_output_agrees_with_it() -> None:
    rows = [ROWS[0], ROWS[1], ("ours", "psnr", float("nan"), 0.05, 5, 3), ROWS[3]]
    layout = replace(LAYOUT, bold="none")
    nan_source = source(rows)
    result = gate(render(read_source(nan_source), layout, DIRECTIONS), src=nan_source, layout=layout)
    assert result.checks == verdicts(Q2="fail")
    assert result.notes == ("Q2_no_nan: source.csv ours / psnr: mean nan, std 0.05",
                            "Q2_no_nan: final.csv ours / psnr_mean: 'nan'",
                            "Q2_no_nan: final.md ours: a cell shows 'nan ± 0.05'",
                            "Q2_no_nan: final.tex ours: a cell shows 'nan $\\\\pm$ 0.05'")


# -- Q3 -------------------------------------------------------------------------------------------------------
def test_q3_a_markdown_cell_edited_by_hand() -> None:
    result = gate(edited("final.md", "31.00 ± 0.20", "31.50 ± 0.20"))
    assert result.checks == verdicts(Q3="fail")
    assert result.notes == ("Q3_cells_match_source: final.md baseline / psnr shows '31.50 ± 0.20'; source.csv "
                            "gives '31.00 ± 0.20'",)


def test_q3_outputs_left_from_an_older_source() -> None:
    """One number changed in source.csv, outputs not rebuilt. 31.004 still rounds to the 31.00 that the
    Markdown and LaTeX tables show, so only full-precision final.csv can tell: it must."""
    newer = SOURCE.replace(b"baseline,psnr,31.0,0.2", b"baseline,psnr,31.004,0.2")
    result = gate(OUTPUTS, src=newer)
    assert result.checks == verdicts(Q3="fail")
    assert result.notes == ("Q3_cells_match_source: final.csv baseline / psnr_mean is '31.0'; source.csv gives "
                            "'31.004'",)
    shown = SOURCE.replace(b"baseline,psnr,31.0,0.2", b"baseline,psnr,31.006,0.2")
    assert gate(OUTPUTS, src=shown).notes[:2] == (
        "Q3_cells_match_source: final.md baseline / psnr shows '31.00 ± 0.20'; source.csv gives '31.01 ± 0.20'",
        "Q3_cells_match_source: final.tex baseline / psnr shows '31.00 $\\\\pm$ 0.20'; source.csv gives "
        "'31.01 $\\\\pm$ 0.20'")


def test_q3_rows_reordered_a_column_dropped_and_a_full_precision_csv_value_rounded() -> None:
    lines = OUTPUTS["final.md"].decode().splitlines(keepends=True)
    swapped = dict(OUTPUTS, **{"final.md": "".join(lines[:2] + [lines[3], lines[2]]).encode()})
    assert gate(swapped).notes == ("Q3_cells_match_source: final.md rows are ['ours', 'baseline'], the layout's "
                                   "['baseline', 'ours']",)
    tex = OUTPUTS["final.tex"].decode().replace(" & ssim $\\uparrow$", "").replace(" & 0.886 $\\pm$ 0.002", "") \
        .replace(" & 0.887 $\\pm$ 0.002", "").replace("{lrrrr}", "{lrrr}")
    assert gate(dict(OUTPUTS, **{"final.tex": tex.encode()})).notes == (
        "Q3_cells_match_source: final.tex has no column 'ssim'",)
    rounded = edited("final.csv", "0.886,0.002", "0.89,0.002")
    assert gate(rounded).notes == ("Q3_cells_match_source: final.csv baseline / ssim_mean is '0.89'; source.csv "
                                   "gives '0.886'",)


# -- Q4 -------------------------------------------------------------------------------------------------------
def test_q4_a_bold_cell_whose_interval_overlaps_the_runner_up() -> None:
    result = gate(edited("final.md", "| 0.887 ± 0.002 |", "| **0.887 ± 0.002** |"))
    assert result.checks == verdicts(Q4="fail")
    assert result.notes == ("Q4_bold_rule: final.md ssim: ours bold, but the rule allows none here "
                            "(ours [0.885, 0.889]; baseline [0.884, 0.888])",)


def test_q4_a_best_that_clears_the_runner_up_left_plain_and_a_bold_runner_up() -> None:
    plain = edited("final.tex", "\\textbf{31.40 $\\pm$ 0.05}", "31.40 $\\pm$ 0.05")
    assert gate(plain).notes == ("Q4_bold_rule: final.tex psnr: ours clears the runner-up (ours "
                                 "[31.35, 31.45]; baseline [30.8, 31.2]) and is not bold",)
    moved = edited("final.md", "| **31.40 ± 0.05** |", "| 31.40 ± 0.05 |",
                   edited("final.md", "| 31.00 ± 0.20 |", "| **31.00 ± 0.20** |"))
    assert gate(moved).notes == ("Q4_bold_rule: final.md psnr: baseline bold; the rule bolds ours (ours "
                                 "[31.35, 31.45]; baseline [30.8, 31.2])",)


def test_q4_a_single_seed_best_is_not_bold_and_that_is_disclosed() -> None:
    rows = [ROWS[0], ROWS[1], ("ours", "psnr", 31.4, None, 5, 1), ("ours", "ssim", 0.887, None, 5, 1)]
    single = source(rows)
    result = gate(render(read_source(single), LAYOUT, DIRECTIONS), src=single)
    assert (result.checks, result.passed) == (verdicts(Q4="disclosed"), True)
    assert result.notes == (
        "Q4_bold_rule: psnr: the best row 'ours' is single-seed (no error bar), so no row is bold",
        "Q4_bold_rule: ssim: the best row 'ours' is single-seed (no error bar), so no row is bold")


# -- Q5 -------------------------------------------------------------------------------------------------------
def test_q5_the_n_column_missing_from_markdown() -> None:
    text = OUTPUTS["final.md"].decode().replace("| n ", "").replace("| ---: | ---: | ---: | ---: |",
                                                                   "| ---: | ---: | ---: |")
    text = text.replace("| baseline | 5 |", "| baseline |").replace("| ours | 5 |", "| ours |")
    result = gate(dict(OUTPUTS, **{"final.md": text.encode()}))
    assert result.checks == verdicts(Q5="fail")
    assert result.notes == ("Q5_n_shown: final.md has no n column",)


def test_q5_a_wrong_n_and_a_hidden_n_that_is_disclosed() -> None:
    wrong = gate(edited("final.tex", "ours & 5 & 3", "ours & 50 & 3"))
    assert wrong.checks == verdicts(Q5="fail")
    assert wrong.notes == ("Q5_n_shown: final.tex ours shows n, seeds = (50, 3); source.csv gives (5, 3)",)
    hidden = replace(LAYOUT, show_n=False)
    result = gate(render(read_source(SOURCE), hidden, DIRECTIONS), layout=hidden)
    assert (result.checks, result.passed) == (verdicts(Q5="disclosed"), True)
    assert result.notes == ("Q5_n_shown: n and seeds are not shown in the table (layout.show_n = false); "
                            "final.csv and source.csv hold them",)
    no_csv = replace(hidden, formats=("md",))
    result = gate(render(read_source(SOURCE), no_csv, DIRECTIONS), layout=no_csv)
    assert result.notes == ("Q5_n_shown: n and seeds are not shown in the table (layout.show_n = false); "
                            "source.csv holds them",)


# -- Q6 -------------------------------------------------------------------------------------------------------
def test_q6_a_missing_and_a_wrong_arrow() -> None:
    missing = gate(edited("final.md", "| psnr ↑ |", "| psnr |"))
    assert missing.checks == verdicts(Q6="fail")
    assert missing.notes == ("Q6_direction_marked: final.md header 'psnr' shows no arrow; psnr needs ↑ (max)",)
    wrong = gate(edited("final.tex", "ssim $\\uparrow$", "ssim $\\downarrow$"))
    assert wrong.notes == ("Q6_direction_marked: final.tex header 'ssim $\\\\downarrow$' shows ↓; ssim needs ↑ "
                           "(max)",)


def test_q6_an_unknown_direction_is_disclosed_and_an_invented_arrow_fails() -> None:
    unknown: dict[str, str | None] = {"psnr": "max", "ssim": None}
    rendered = render(read_source(SOURCE), LAYOUT, unknown)
    assert rendered["final.md"].decode().splitlines()[0] == "| method | n | seeds | psnr ↑ | ssim |"
    result = gate(rendered, directions=unknown)
    assert (result.checks, result.passed) == (verdicts(Q4="disclosed", Q6="disclosed"), True)
    assert result.notes == ("Q4_bold_rule: ssim: direction unknown, so no row is marked best",
                            "Q6_direction_marked: the direction of ssim is unknown (declare it in rgt.toml "
                            "[metrics]): no arrow")
    invented = gate(edited("final.md", "| ssim |", "| ssim ↑ |", rendered), directions=unknown)
    assert invented.checks["Q6_direction_marked"] == "fail"
    assert "Q6_direction_marked: final.md header 'ssim ↑' shows ↑; ssim needs none (direction unknown)" \
        in invented.notes
