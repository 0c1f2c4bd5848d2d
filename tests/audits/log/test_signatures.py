"""Log failure signatures (docs/log-signatures.md §1, §2, §4.6): the shipped catalogue, the detector over real-shaped
trainer logs, user rows and their load-time checks, the one-alert-per-row ledger, and hostile input."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from remote_gpu_trainer.audits.log.detector import MAX_BLOCK_LINES, LogDetector, parse_oom
from remote_gpu_trainer.audits.log.ledger import FindingsLedger
from remote_gpu_trainer.audits.log.samples import Hit
from remote_gpu_trainer.audits.log.signatures import Catalogue, load_catalogue
from remote_gpu_trainer.errors import ConfigError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "logs" / "signatures"

CATALOGUE = load_catalogue()
REGEX_ROWS = [row for row in CATALOGUE.rows.values() if row.pattern is not None]

# Copied from the original catalogue table (families in docs/log-signatures.md §2): id → (source, severity),
# an independent copy, so the test never reads the TOML it checks.
EXPECTED_ROWS = {
    "S01": ("log", "error"), "S02": ("log", "warn"), "S03": ("log", "error"), "S04": ("log", "critical"),
    "S05": ("log(dmesg)", "critical"), "S06": ("log", "error"), "S07": ("log", "critical"), "S08": ("log", "error"),
    "S09": ("log", "error"), "S10": ("log", "info"), "S11": ("log", "error"), "S12": ("log", "error"),
    "S13": ("log", "warn"), "S14": ("log", "error"), "S15": ("log", "error"), "S16": ("log", "error"),
    "S17": ("log", "error"), "S18": ("log", "error"), "S19": ("log", "error"), "S20": ("log", "error"),
    "S21": ("log", "error"), "S22": ("log", "error"), "S23": ("log", "error"), "S24": ("log", "error"),
    "S25": ("log", "critical"), "S26": ("log", "error"), "S27": ("log", "error"), "S28": ("log", "error"),
    "S29": ("log", "error"), "S30": ("log", "warn"), "S31": ("log", "critical"), "S32": ("log", "error"),
    "S33": ("log", "error"), "S34": ("log", "warn"), "S35": ("log", "error"), "S36": ("log", "error"),
    "S37": ("log", "error"), "S38": ("log", "error"), "S39": ("log", "error"), "S40": ("log", "error"),
    "S41": ("log", "warn"), "S42": ("log", "warn"), "S43": ("log(dmesg)", "critical"), "S44": ("log(dmesg)", "warn"),
    "S45": ("log", "critical"), "S46": ("log", "error"), "S47": ("log", "critical"), "S48": ("log", "error"),
    "S49": ("log(ssh)", "warn"), "S50": ("log", "warn"), "S51": ("log", "info"), "S52": ("log", "error"),
    "S53": ("log", "error"), "S54": ("log", "info"), "S55": ("log", "info"), "S56": ("log", "info"),
    "S57": ("log", "info"), "S58": ("proc", "error"), "S59": ("proc", "critical"), "S60": ("proc", "warn"),
    "S61": ("proc", "warn"), "S62": ("proc", "info"), "S63": ("proc", "warn"), "S64": ("proc", "critical"),
    "S65": ("proc", "error"), "S66": ("host", "warn"), "S67": ("host", "critical"), "S68": ("host", "warn"),
    "S69": ("host", "warn"), "S70": ("metric", "error"), "S71": ("metric", "warn"), "S72": ("metric", "error"),
    "S73": ("metric", "error"), "S74": ("metric", "warn"), "S75": ("metric", "warn"), "S76": ("metric", "warn"),
    "S77": ("metric", "warn"), "S78": ("metric", "error"), "S79": ("metric", "warn"), "S80": ("metric", "warn"),
    "S81": ("metric", "warn"), "S82": ("metric", "warn"), "S83": ("metric", "warn"), "S84": ("metric", "warn"),
    "S85": ("metric", "warn"), "S86": ("gpu", "info"), "S87": ("gpu", "warn"), "S88": ("gpu", "critical"),
    "S89": ("gpu", "warn"), "S90": ("gpu", "warn"), "S91": ("gpu", "warn"), "S92": ("gpu", "error"),
    "S93": ("gpu", "warn"), "S94": ("proc", "warn"),
    "S95": ("log", "error"), "S96": ("log", "error"),  # issue 23: a non-finite grad norm; torchrun's root cause
}
IGNORE_CASE = {"S08", "S38", "S95"}
# The rows whose backslashes and quotes are easiest to mangle in TOML, exactly as in the spec.
EXACT_PATTERNS = {
    "S08": r"""(?<![A-Za-z])loss(?![A-Za-z])[\w/'\"\]]{0,24}?\s*[:=]\s*['\"]?(?:tensor\()?[-+]?(?:nan|inf)\b"""
    r"""|loss (?:is|became) (?:nan|inf)""",
    "S39": r"""\$'\\r': command not found|/bin/(?:ba)?sh\^M: bad interpreter""",
    "S44": r"NVRM: Xid \([^)]*\): (?!(?:48|79)\b)\d+",
    "S23": r"Can't pickle local object|Can't get attribute '[^']+' on <module '__main__'"
    r"|before the\s*current process has finished its bootstrapping phase",
}


def run_detector(lines: list[str], catalogue: Catalogue = CATALOGUE, source: str = "log") -> list[Hit]:
    detector = LogDetector(catalogue)
    hits: list[Hit] = []
    for line_no, line in enumerate(lines, start=1):
        hits.extend(detector.feed(line, line_no, float(line_no), source))
    return hits + detector.flush(float(len(lines) + 1))


def fixture_hits(name: str) -> list[Hit]:
    # split on "\n" only: bar redraws joined by "\r" stay one physical line, as the follower delivers them
    return run_detector((FIXTURES / name).read_text(encoding="utf-8").split("\n"))


def triples(hits: list[Hit]) -> set[tuple[str, str, int | None]]:
    return {(hit.signature, hit.severity, hit.line_no) for hit in hits}


# --------------------------------------------------------------------------------------------------------------
# (1) every regex row proves itself on its examples


def test_every_regex_row_ships_a_matching_and_a_non_matching_example() -> None:
    lacking = [row.id for row in REGEX_ROWS if not row.match or not row.nomatch]
    assert not lacking


@pytest.mark.parametrize("row", REGEX_ROWS, ids=lambda row: row.id)
def test_row_matches_its_examples_and_not_its_counter_examples(row) -> None:
    import re

    regex = re.compile(row.pattern, re.IGNORECASE if row.ignore_case else 0)
    assert [line for line in row.match if not regex.search(line)] == []
    assert [line for line in row.nomatch if regex.search(line)] == []


@pytest.mark.parametrize("row", [row for row in REGEX_ROWS if row.id != "S48"], ids=lambda row: row.id)
def test_detector_fires_on_every_example_and_on_no_counter_example(row) -> None:
    """The detector's literal prefilter must never hide a line its row's regex matches."""
    for line in row.match:
        assert row.id in {hit.signature for hit in run_detector([line], source=row.source)}, line
    for line in row.nomatch:
        assert row.id not in {hit.signature for hit in run_detector([line], source=row.source)}, line


# --------------------------------------------------------------------------------------------------------------
# (2) the catalogue is the spec table


def test_catalogue_holds_exactly_the_spec_rows_with_their_sources_and_severities() -> None:
    assert {row_id: (row.source, row.severity) for row_id, row in CATALOGUE.rows.items()} == EXPECTED_ROWS
    assert list(CATALOGUE.rows) == [f"S{n:02d}" for n in range(1, 97)]  # S94: rgt's checkpoint cadence row


def test_regex_rows_and_rule_rows_are_where_the_spec_puts_them() -> None:
    rule_ids = {row.id for row in CATALOGUE.rows.values() if row.rule is not None}
    assert rule_ids == {"S03"} | {f"S{n}" for n in range(58, 95)}
    assert all(CATALOGUE[row_id].pattern is None for row_id in rule_ids)
    assert [row.id for row in CATALOGUE.rule_rows()] == [f"S{n}" for n in range(58, 95)]
    assert [row.id for row in CATALOGUE.log_rows("log(dmesg)")] == ["S05", "S43", "S44"]
    assert [row.id for row in CATALOGUE.log_rows("log(ssh)")] == ["S49"]
    assert {row.id for row in REGEX_ROWS if row.ignore_case} == IGNORE_CASE
    assert all(row.cause and row.fix for row in CATALOGUE.rows.values())


@pytest.mark.parametrize("row_id", sorted(EXACT_PATTERNS))
def test_tricky_patterns_survive_toml_exactly(row_id: str) -> None:
    assert CATALOGUE[row_id].pattern == EXACT_PATTERNS[row_id]


# --------------------------------------------------------------------------------------------------------------
# (3) real-shaped trainer logs through the real detector

FIXTURE_EXPECTATIONS = {
    "oom_fragmented.log": {("S01", "error", 19), ("S02", "warn", 19), ("S03", "error", 19)},
    "oom_not_fragmented.log": {("S01", "error", 12)},
    "oom_torch1.log": {("S01", "error", 6), ("S03", "error", 6)},
    "nccl_timeout.log": {("S25", "critical", 1), ("S25", "critical", 5), ("S29", "error", 21), ("S96", "error", 28)},
    "bash_killed.log": {("S04", "critical", 3)},
    "disk_full.log": {("S56", "info", 2), ("S31", "critical", 8), ("S31", "critical", 21)},
    "nan_loss.log": {("S08", "error", 3), ("S08", "error", 4), ("S95", "error", 3), ("S95", "error", 4)},
    "dataloader_killed.log": {("S07", "critical", 11)},
    "torchrun_sigkill.log": {("S04", "critical", 2), ("S29", "error", 12), ("S96", "error", 19),
                             ("S04", "critical", 24)},
    "generic_valueerror.log": {("S48", "error", 7)},
    "hf_normal.log": {("S54", "info", 3), ("S51", "info", 36), ("S56", "info", 42), ("S55", "info", 49)},
}


@pytest.mark.parametrize("name", sorted(FIXTURE_EXPECTATIONS))
def test_fixture_log_gives_exactly_the_expected_hits(name: str) -> None:
    hits = fixture_hits(name)
    assert triples(hits) == FIXTURE_EXPECTATIONS[name]
    assert len(hits) == len(FIXTURE_EXPECTATIONS[name])  # a traceback is one event, not one per line


def test_every_fixture_is_covered() -> None:
    assert {path.name for path in FIXTURES.glob("*.log")} == set(FIXTURE_EXPECTATIONS)


def test_a_healthy_hugging_face_log_raises_nothing_above_info() -> None:
    assert [hit for hit in fixture_hits("hf_normal.log") if hit.severity != "info"] == []


def test_oom_hits_carry_the_parsed_sizes() -> None:
    hits = {hit.signature: hit for hit in fixture_hits("oom_fragmented.log")}
    assert hits["S03"].detail.startswith("requested 2.00 GiB, reserved-but-unallocated 3.10 GiB")
    assert "free 1.02 GiB" in hits["S01"].detail
    assert hits["S01"].evidence.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert len(hits["S01"].evidence) <= 300


def test_oom_fields_in_both_torch_formats() -> None:
    new = parse_oom("Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free. "
                    "Of the allocated memory 74.20 GiB is allocated by PyTorch, and 3.10 GiB is reserved by PyTorch "
                    "but unallocated.")
    assert new.requested == 2 * 2**30 and new.reserved_unallocated == pytest.approx(3.10 * 2**30)
    assert new.fragmented()
    old = parse_oom("Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; "
                    "3.44 MiB free; 14.64 GiB reserved in total by PyTorch)")
    assert old.total == pytest.approx(15.78 * 2**30) and old.free == pytest.approx(3.44 * 2**20)
    assert old.reserved_unallocated == pytest.approx(0.08 * 2**30)
    assert old.fragmented()
    small = parse_oom("Tried to allocate 1.00 TiB. 512.00 KiB is reserved by PyTorch but unallocated.")
    assert not small.fragmented()
    assert not parse_oom("CUDA out of memory.").fragmented()  # no numbers: nothing to claim


def test_traceback_is_labelled_by_its_specific_row_not_s48() -> None:
    hits = fixture_hits("dataloader_killed.log")
    assert [hit.signature for hit in hits] == ["S07"]
    assert "traceback lines 2–24" in hits[0].detail


def test_generic_traceback_is_s48_naming_the_exception() -> None:
    (hit,) = fixture_hits("generic_valueerror.log")
    assert hit.signature == "S48" and hit.severity == "error"
    assert hit.evidence == "ValueError: unknown optimizer 'adamw8bit'"
    assert hit.detail.startswith("ValueError")


def test_keyboard_interrupt_is_info() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 40, in <module>',
        "    time.sleep(1)",
        "KeyboardInterrupt",
    ]
    (hit,) = run_detector(lines)
    assert (hit.signature, hit.severity, hit.line_no) == ("S48", "info", 4)


def test_chained_traceback_is_one_event_named_by_the_last_exception() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 10, in load',
        "    return cfg['lr']",
        "TypeError: 'NoneType' object is not subscriptable",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "train.py", line 20, in <module>',
        "    load()",
        "ValueError: could not read the config",
        "step=1 loss=0.5",
    ]
    hits = run_detector(lines)
    assert triples(hits) == {("S48", "error", 11)}
    assert hits[0].detail.startswith("TypeError → ValueError")


def test_frame_source_lines_do_not_label_a_traceback() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 90, in <module>',
        '    print("Training finished")',  # S55 text, but program source inside a frame
        "ZeroDivisionError: division by zero",
    ]
    assert triples(run_detector(lines)) == {("S48", "error", 4)}


def test_indented_message_continuation_belongs_to_the_block() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "eval.py", line 12, in <module>',
        "    model.load_state_dict(state)",
        "RuntimeError: Error(s) in loading state_dict for ResNet:",
        '\tMissing key(s) in state_dict: "fc.weight", "fc.bias".',
        '\tUnexpected key(s) in state_dict: "module.fc.weight".',
        "evaluation aborted",
    ]
    assert triples(run_detector(lines)) == {("S35", "error", 5)}


def test_interleaved_output_inside_a_traceback_is_evaluated_on_its_own() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "train.py", line 5, in <module>',
        "Killed",  # another process's line landing mid-traceback
        "    main()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    assert triples(run_detector(lines)) == {("S04", "critical", 3), ("S46", "error", 5)}


def test_crlf_line_endings_do_not_break_a_traceback() -> None:
    lines = [
        "Traceback (most recent call last):\r",
        '  File "eval.py", line 12, in <module>\r',
        "RuntimeError: Error(s) in loading state_dict for ResNet:\r",
        '\tMissing key(s) in state_dict: "fc.weight".\r',
    ]
    assert triples(run_detector(lines)) == {("S35", "error", 4)}


def test_rank_prefixed_traceback_is_grouped() -> None:
    lines = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "train.py", line 5, in <module>',
        "[rank0]:     main()",
        "[rank0]: KeyError: 'warmup_steps'",
    ]
    assert triples(run_detector(lines)) == {("S20", "error", 4)}


def test_an_unfinished_traceback_is_bounded() -> None:
    lines = ["Traceback (most recent call last):"] + ['  File "x.py", line 1, in f'] * (MAX_BLOCK_LINES + 10)
    lines.append("Killed")
    hits = run_detector(lines)
    assert ("S48", "error", 1) in triples(hits)  # closed by the bound, not held until the end of the log
    assert ("S04", "critical", len(lines)) in triples(hits)


def test_flush_closes_an_open_traceback_and_only_once() -> None:
    detector = LogDetector(CATALOGUE)
    assert detector.feed("Traceback (most recent call last):", 1, 1.0) == []
    assert detector.feed("ValueError: bad", 2, 2.0) == []
    (hit,) = detector.flush(3.0)
    assert (hit.signature, hit.line_no, hit.t) == ("S48", 2, 2.0)
    assert detector.flush(4.0) == []


def test_elastic_exit_codes_map_to_their_rows() -> None:
    lines = ["  exitcode  : -11 (pid: 7)", "  exitcode  : -15 (pid: 8)", "  exitcode  : 1 (pid: 9)"]
    assert triples(run_detector(lines)) == {("S22", "error", 1), ("S47", "critical", 2)}


def test_one_line_can_hit_several_rows() -> None:
    line = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. Killed process 4242 oom-kill:"
    assert {hit.signature for hit in run_detector([line])} == {"S07"}  # S05 is a dmesg row: not read from the log
    both = "torch.distributed.DistNetworkError: failed to bind, name: EADDRINUSE"
    assert {hit.signature for hit in run_detector([both])} == {"S28", "S29"}


def test_dmesg_rows_fire_only_on_the_dmesg_stream() -> None:
    line = "[Mon May  6 14:02:11 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen off the bus."
    assert {hit.signature for hit in run_detector([line], source="log(dmesg)")} == {"S43"}
    assert {hit.signature for hit in run_detector([line], source="log")} == {"S45"}
    assert run_detector([line], source="nonsense") == []


# --------------------------------------------------------------------------------------------------------------
# (4) user rows

GOOD_ROW = """
[[signature]]
id = "U01"
source = "log"
severity = "error"
pattern = 'my_dataset: shard \\d+ is corrupt'
match = ['my_dataset: shard 12 is corrupt (crc mismatch)']
nomatch = ['my_dataset: shard 12 verified']
cause = "Corrupt shard"
fix = "Re-download the shard"
"""


def write_rows(directory: Path, text: str, name: str = "mine.toml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_user_rows_from_a_directory_and_from_rgt_toml_load_and_fire(tmp_path: Path) -> None:
    write_rows(tmp_path / "signatures.d", GOOD_ROW)
    direct = {"id": "U02", "source": "log", "severity": "warn", "pattern": "(?i)eval skipped",
              "match": ["EVAL SKIPPED: no val split"], "nomatch": ["eval done"], "cause": "c", "fix": "f"}
    catalogue = load_catalogue(user_dirs=[tmp_path / "signatures.d", tmp_path / "absent"], user_rows=[direct])
    assert list(catalogue.rows)[-2:] == ["U01", "U02"] and len(catalogue) == 98
    hits = run_detector(["my_dataset: shard 7 is corrupt", "Eval Skipped for epoch 3", "all fine"], catalogue)
    assert triples(hits) == {("U01", "error", 1), ("U02", "warn", 2)}


@pytest.mark.parametrize(("pattern", "example"), [
    (r"(?x) shard \s+ (\d+) \s+ bad", "shard 3 bad"),  # verbose mode: no literal can be read from it
    (r"(\w+)-\1 shard \d+ bad", "ab-ab shard 3 bad"),  # back-reference
    (r"(?P<n>\d+) shard \d+ bad", "12 shard 3 bad"),  # named group, no leading literal
    (r"[Ss]hard\s+\d+\s+BAD", "Shard 3 BAD"),  # nothing literal of three characters
])
def test_unusual_user_regexes_still_fire(pattern: str, example: str) -> None:
    row = {"id": "U09", "source": "log", "severity": "warn", "pattern": pattern, "match": [example],
           "nomatch": ["shard ok"], "cause": "c", "fix": "f"}
    catalogue = load_catalogue(user_rows=[row])
    assert {hit.signature for hit in run_detector([example], catalogue)} == {"U09"}


def test_overlapping_literals_of_two_rows_both_fire() -> None:
    rows = [
        {"id": "U01", "source": "log", "severity": "warn", "pattern": r"worker crashed: disk", "cause": "c",
         "fix": "f", "match": ["worker crashed: disk"], "nomatch": ["worker ok"]},
        {"id": "U02", "source": "log", "severity": "error", "pattern": r"disk quota hit for \w+", "cause": "c",
         "fix": "f", "match": ["disk quota hit for alice"], "nomatch": ["disk quota ok"]},
    ]
    catalogue = load_catalogue(user_rows=rows)
    hits = run_detector(["worker crashed: disk quota hit for alice"], catalogue)
    assert {hit.signature for hit in hits} == {"U01", "U02"}


BAD_ROWS = {
    "bad regex": (GOOD_ROW.replace("shard \\d+ is corrupt", "shard (\\d+ is corrupt"), "bad regex"),
    "example mismatch": (GOOD_ROW.replace("shard 12 is corrupt (crc", "shard twelve is corrupt (crc"),
                         "pattern does not match its example 'my_dataset: shard twelve is corrupt (crc mismatch)'"),
    "counter-example matches": (GOOD_ROW.replace("'my_dataset: shard 12 verified'", "'my_dataset: shard 1 is corrupt'"),
                                "pattern matches its non-matching example"),
    "missing nomatch": (GOOD_ROW.replace("nomatch = ['my_dataset: shard 12 verified']\n", ""),
                        "at least one 'nomatch' example"),
    "id without U": (GOOD_ROW.replace('id = "U01"', 'id = "X01"'), "must start with 'U'"),
    "shipped id": (GOOD_ROW.replace('id = "U01"', 'id = "S01"'), "must start with 'U'"),
    "unknown key": (GOOD_ROW.replace('cause = "Corrupt shard"', 'cause = "Corrupt shard"\ncolour = "red"'),
                    "unknown key 'colour'"),
    "missing key": (GOOD_ROW.replace('fix = "Re-download the shard"\n', ""), "missing key 'fix'"),
    "unknown severity": (GOOD_ROW.replace('severity = "error"', 'severity = "fatal"'), "unknown severity 'fatal'"),
    "unknown source": (GOOD_ROW.replace('source = "log"', 'source = "journal"'), "unknown source 'journal'"),
    "user rule row": (GOOD_ROW.replace('source = "log"', 'source = "gpu"'), "source 'log'"),
    "both pattern and rule": (GOOD_ROW.replace('fix = "Re', 'rule = "x"\nfix = "Re'), "exactly one of"),
    "match not a list": (GOOD_ROW.replace("match = ['my_dataset: shard 12 is corrupt (crc mismatch)']",
                                          "match = 'my_dataset: shard 12 is corrupt'"), "'match' must be a list"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_user_rows_raise_one_line_naming_file_and_row(tmp_path: Path, case: str) -> None:
    text, problem = BAD_ROWS[case]
    path = write_rows(tmp_path / "signatures.d", text)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(user_dirs=[tmp_path / "signatures.d"])
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and problem in message
    row_id = "X01" if case == "id without U" else "S01" if case == "shipped id" else "U01"
    assert f"signature {row_id} in {path}" in message


def test_duplicate_user_id_names_both_places(tmp_path: Path) -> None:
    first = write_rows(tmp_path / "d", GOOD_ROW, "a.toml")
    second = write_rows(tmp_path / "d", GOOD_ROW, "b.toml")
    with pytest.raises(ConfigError, match="duplicate id") as caught:
        load_catalogue(user_dirs=[tmp_path / "d"])
    assert f"signature U01 in {second}" in str(caught.value) and str(first) in str(caught.value)


def test_rows_given_directly_are_named_by_their_origin() -> None:
    row = {"id": "U01", "source": "log", "severity": "warn", "pattern": "abc", "match": ["abc"], "nomatch": [],
           "cause": "c", "fix": "f"}
    with pytest.raises(ConfigError, match=r"^signature U01 in /p/rgt.toml: needs at least one 'nomatch'"):
        load_catalogue(user_rows=[row], user_origin="/p/rgt.toml")
    with pytest.raises(ConfigError, match=r"^signature #1 in rgt.toml: missing key 'id'"):
        load_catalogue(user_rows=[{"source": "log"}])


@pytest.mark.parametrize(("text", "problem"), [
    ("[[signature]\nid = 1", "not valid TOML"),
    ("[settings]\nx = 1", "unknown top-level key 'settings'"),
    ("signature = 3", "must be [[signature]] tables"),
])
def test_broken_user_files_are_one_line_errors(tmp_path: Path, text: str, problem: str) -> None:
    path = write_rows(tmp_path / "d", text)
    with pytest.raises(ConfigError) as caught:
        load_catalogue(user_dirs=[tmp_path / "d"])
    assert "\n" not in str(caught.value) and str(path) in str(caught.value) and problem in str(caught.value)


# --------------------------------------------------------------------------------------------------------------
# (5) one alert per row


def hit(signature: str, severity: str, t: float, evidence: str = "line", line_no: int | None = None) -> Hit:
    return Hit(signature, severity, evidence, t, line_no)


def test_ledger_notifies_once_per_row_and_counts_repeats() -> None:
    ledger = FindingsLedger()
    assert ledger.add(hit("S31", "critical", 1.0, "first", 10)) is True
    assert ledger.add(hit("S31", "critical", 2.0, "second", 11)) is False
    assert ledger.add(hit("S31", "critical", 3.0, "third", 12)) is False
    assert ledger.add(hit("S08", "error", 4.0)) is True
    (disk, nan) = ledger.entries()
    assert (disk.signature, disk.count, disk.first_t, disk.last_t) == ("S31", 3, 1.0, 3.0)
    assert (disk.first_evidence, disk.last_evidence, disk.line_no) == ("first", "third", 10)
    assert (nan.signature, nan.count) == ("S08", 1)


def test_ledger_re_alerts_only_on_a_worse_severity() -> None:
    ledger = FindingsLedger()
    assert ledger.add(hit("S48", "info", 1.0)) is True
    assert ledger.add(hit("S48", "error", 2.0)) is True  # escalation
    assert ledger.add(hit("S48", "info", 3.0)) is False  # never de-escalates
    assert ledger.add(hit("S48", "error", 4.0)) is False
    entry = ledger.get("S48")
    assert entry is not None and (entry.severity, entry.count) == ("error", 4)


def test_ledger_holds_one_entry_per_row_however_many_hits() -> None:
    ledger = FindingsLedger()
    alerts = sum(ledger.add(hit("S08", "error", float(i))) for i in range(10_000))
    assert alerts == 1 and len(ledger) == 1 and ledger.entries()[0].count == 10_000


def test_ledger_entries_are_frozen() -> None:
    ledger = FindingsLedger()
    ledger.add(hit("S04", "critical", 1.0))
    with pytest.raises(AttributeError):
        ledger.entries()[0].count = 5  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------------------
# (6) hostile input never raises


def test_random_bytes_never_raise() -> None:
    rng = random.Random(20240506)
    detector = LogDetector(CATALOGUE)
    for line_no in range(2000):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        for source in ("log", "log(dmesg)", "log(ssh)"):
            detector.feed(raw.decode("utf-8", errors="replace"), line_no, 0.0, source)
    detector.flush(0.0)


def test_a_ten_megabyte_line_is_cheap_and_matches_its_head() -> None:
    head = "RuntimeError: CUDA error: an illegal memory access was encountered "
    hits = run_detector([head + "x" * 10_000_000])
    assert [h.signature for h in hits] == ["S46"] and len(hits[0].evidence) <= 300
    tail = " RuntimeError: CUDA error: an illegal memory access was encountered"
    assert run_detector(["x" * 10_000_000 + tail]) == []  # beyond the scanned head: costs nothing


def test_nul_control_and_ansi_lines_never_raise() -> None:
    lines = ["\x00" * 5000, "\x00", "", "\r\r\n\n", "\x1b[31mKilled\x1b[0m", "[rank", "[rank0]:", "\\", "\udcff" * 10]
    hits = run_detector(lines)
    assert triples(hits) == {("S04", "critical", 5)}  # ANSI is stripped before matching


def chunk_logs() -> list[tuple[str, list[str]]]:
    """Every fixture log, as clean lines, plus a mix where the NaN sits among thousands of healthy lines."""
    from remote_gpu_trainer.audits.log.lines import LineSplitter

    logs = []
    for path in sorted([*FIXTURES.glob("*.log"), *(FIXTURES.parent / "monitor").glob("*.log"),
                        *FIXTURES.parent.glob("*.log")]):
        splitter = LineSplitter()
        lines = splitter.feed(path.read_bytes()) + splitter.flush()
        logs.append((path.name, [line.text for line in lines]))
    rng = random.Random(3)
    healthy = [f"step={i} loss={rng.random():.4f} lr=3e-4" for i in range(3000)]
    healthy[1777] = "step=1777 loss=nan lr=3e-4"
    healthy[2500] = "[2026-11-29 10:00:00] INFO inference: infinite loader ready"  # 'inf', no 'loss'
    logs.append(("mix", healthy))
    return logs


@pytest.mark.parametrize("name,lines", chunk_logs(), ids=[name for name, _ in chunk_logs()])
@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_chunked_detection_equals_line_by_line(name: str, lines: list[str], chunk: int) -> None:
    reference = LogDetector(load_catalogue())
    expected = [hit for i, line in enumerate(lines) for hit in reference.feed(line, i + 1, 0.0)]
    expected += reference.flush(0.0)
    chunked = LogDetector(load_catalogue())
    got = [hit for start in range(0, len(lines), chunk)
           for hit in chunked.feed_lines(lines[start:start + chunk], start + 1, 0.0)]
    got += chunked.flush(0.0)
    assert got == expected
    if name == "mix":
        assert [(h.signature, h.line_no) for h in got] == [("S08", 1778)]


def test_every_catalogue_row_has_examples_in_the_tests() -> None:
    """Regex rows carry their examples (tested above); rule rows have a scenario pair in test_run_rules;
    S03 (the OOM fragmentation rule) is exercised by the OOM fixtures."""
    from audits.test_run_rules import CASES  # tests/ is on sys.path (conftest.py), tests/audits is not always

    rows = CATALOGUE.rows
    regex_rows = {row_id for row_id, row in rows.items() if row.pattern is not None}
    assert all(rows[row_id].match and rows[row_id].nomatch for row_id in regex_rows)
    assert set(rows) == regex_rows | set(CASES) | {"S03"}
    assert "S03" in {hit.signature for hit in fixture_hits("oom_fragmented.log")}
    assert "S03" not in {hit.signature for hit in fixture_hits("oom_not_fragmented.log")}


def test_requires_that_would_hide_an_example_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "sig"
    folder.mkdir()
    (folder / "u.toml").write_text(
        '[[signature]]\nid = "U05"\nsource = "log"\npattern = "loss went (up|down)"\nseverity = "warn"\n'
        'cause = "c"\nfix = "f"\nrequires = ["up"]\nmatch = ["loss went down"]\nnomatch = ["loss ok"]\n',
        encoding="utf-8")
    with pytest.raises(ConfigError, match="U05.*'requires' would hide its example"):
        load_catalogue(user_dirs=(folder,))
