"""The one typed TOML table reader: typed reads collect every problem with file, dotted key and line, unknown
keys get a "did you mean", and one ConfigError (exit 2) carries them all."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from remote_gpu_trainer.errors import EXIT_USAGE, ConfigError
from remote_gpu_trainer.toml_table import (
    Field,
    Problem,
    Problems,
    SourceLines,
    Table,
    key_problems,
    parse_toml,
    read_text,
    refuse_unknown_keys,
    table_line,
)

TEXT = """\
[runs.exp1]
comand = "python train.py"
gpus = -1
stall_after = inf
roster = ["a", 3]
mode = "fast"
launch = { gpu = "A40", colour = "red" }

[[rows]]
name = "first"

[[rows]]
name = 2
"""


def reader(text: str = TEXT) -> tuple[Table, Problems]:
    problems = Problems()
    return Table(problems, "rgt.toml", (), parse_toml("rgt.toml", text), SourceLines(text)), problems


def rendered(problems: Problems) -> list[str]:
    return [problem.render() for problem in problems.found]


def test_typed_reads_collect_every_problem_with_its_line() -> None:
    top, problems = reader()
    runs = top.table("runs")
    assert runs is not None
    run = runs.table("exp1")
    assert run is not None
    assert run.text("command", required=True) is None
    assert run.whole("gpus", 0) == 0
    assert run.number("stall_after", 900.0, above=True) == 900.0
    assert run.strings("roster") is None
    assert run.text("mode", choices=("slow", "safe")) is None
    assert rendered(problems) == [
        "rgt.toml:1: runs.exp1.command: missing required key 'command'",
        "rgt.toml:3: runs.exp1.gpus: must be a whole number >= 0",
        "rgt.toml:4: runs.exp1.stall_after: must be a finite number > 0",
        "rgt.toml:5: runs.exp1.roster: must be a list of strings",
        "rgt.toml:6: runs.exp1.mode: 'fast' is not one of slow, safe",
    ]


def test_unknown_keys_suggest_the_closest_known_one_or_list_them() -> None:
    top, problems = reader()
    run = top.table("runs").table("exp1")  # type: ignore[union-attr]
    assert run is not None
    run.expect({"command", "gpus", "stall_after", "roster", "mode", "launch"})
    run.done()
    launch = run.table("launch")
    assert launch is not None
    assert launch.fields({"gpu": Field("str", required=True), "count": Field("int", default=1)}) == {
        "gpu": "A40", "count": 1}
    launch.done()
    assert rendered(problems) == [
        "rgt.toml:2: runs.exp1.comand: unknown key (did you mean 'command'?)",
        "rgt.toml:7: runs.exp1.launch.colour: unknown key (allowed: count, gpu)",  # an inline table: its line
    ]


def test_rows_are_addressed_by_index_and_found_by_their_header() -> None:
    top, problems = reader()
    rows = top.rows("rows")
    assert [row.text("name") for row in rows] == ["first", None]
    assert rendered(problems)[0].endswith("rows[1].name: must be a string, not integer")
    lines = SourceLines(TEXT)
    assert (lines.row_line("rows", 0), lines.row_line("rows", 1), lines.row_line("rows", 2)) == (9, 12, None)


def test_rows_of_an_inline_array_are_found_by_their_own_line() -> None:
    """Profiles write `storage = [ {...}, {...} ]`, one row per line: a problem in row 1 names row 1's line."""
    text = 'id = "x"\nstorage = [\n  { name = "a" },\n  { name = 2 },\n]\nafter = [\n  { name = "c" },\n]\n'
    problems = Problems()
    top = Table(problems, "p.toml", (), parse_toml("p.toml", text), SourceLines(text))
    assert [row.text("name") for row in top.rows("storage")] == ["a", None]
    assert rendered(problems) == ["p.toml:4: storage[1].name: must be a string, not integer"]
    lines = SourceLines(text)
    assert (lines.inline_row_line("storage", 0), lines.inline_row_line("storage", 2),
            lines.inline_row_line("after", 0)) == (3, None, 7)


def test_all_problems_raise_one_config_error_with_the_first_as_its_line() -> None:
    problems = Problems()
    problems.raise_if_any()  # nothing found: nothing raised
    problems.add(Problem("a.toml", "x", "first", 3))
    problems.add(Problem("a.toml", "y", "second"))
    with pytest.raises(ConfigError) as caught:
        problems.raise_if_any()
    assert str(caught.value) == "a.toml:3: x: first (and 1 more problem(s))"
    assert caught.value.exit_code == EXIT_USAGE
    assert caught.value.problems == ["a.toml:3: x: first", "a.toml: y: second"]  # type: ignore[attr-defined]


def test_files_that_cannot_be_read_or_parsed_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        read_text(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe = 1")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_text(tmp_path / "bad.toml")
    with pytest.raises(ConfigError) as caught:
        parse_toml("rgt.toml", 'name = "p\nother = 1\n')
    message = str(caught.value)
    assert message.startswith("rgt.toml: malformed TOML:") and "line 1" in message and "\n" not in message
    bom = tmp_path / "bom.toml"
    bom.write_text('\ufeffname = "p"\n', encoding="utf-8")
    assert parse_toml(str(bom), read_text(bom)) == {"name": "p"}


def test_numbers_refuse_booleans_infinities_and_nan() -> None:
    for value in ("true", "inf", "nan", "-1.0"):
        top, problems = reader(f"price = {value}\n")
        assert top.number("price") is None, value
        assert len(problems) == 1
    top, problems = reader("price = 0.5\ncount = 2\n")
    assert top.number("price") == 0.5 and top.whole("count") == 2 and not problems
    assert math.isfinite(top.number("missing", 1.5) or 0)


def test_table_line_names_a_header_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "rgt.toml"
    path.write_text(TEXT, encoding="utf-8")
    assert table_line(path, ("runs", "exp1")) == 1
    assert table_line(path, ("runs", "exp1", "launch")) == 7
    assert table_line(tmp_path / "none.toml", ("runs",)) is None


def test_a_json_object_s_stray_keys_are_found_and_worded_as_a_toml_table_s() -> None:
    """The same check serves JSON objects: strays sorted whatever their written order, missing keys in the order
    the reader lists them (a set sorted), a did-you-mean on request; a first-problem reader names the first."""
    record = {"zeta": 1, "nmae": "x", "id": 2}
    assert key_problems(record, ("id", "name", "source"), required=("source", "id", "name")) == [
        "unknown key 'nmae'", "unknown key 'zeta'", "missing key 'source'", "missing key 'name'"]
    assert key_problems(record, {"id", "name", "source"}, required={"source", "name"}, suggest=True) == [
        "unknown key 'nmae' (did you mean 'name'?)", "unknown key 'zeta' (allowed: id, name, source)",
        "missing key 'name'", "missing key 'source'"]
    assert key_problems({"id": 1}, ("id",), required=("id",)) == []
    with pytest.raises(ConfigError) as caught:
        refuse_unknown_keys(record, ("id",), "t.json: rows[0].", "a row has id")
    assert str(caught.value) == "t.json: rows[0].nmae: unknown key (a row has id)"
    refuse_unknown_keys({"id": 1}, ("id",), "t.json: ", "a row has id")
