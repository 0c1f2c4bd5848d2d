"""DELIVER's builders against inputs that lie and folders that changed under them (docs/deliver.md §3, §4): files
under runs/ were written by a machine we do not trust, and the user's own folders are whatever a careless hand
left. Each case is a real file on disk that once crashed a build or left it half-written."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote_gpu_trainer.deliver.figures.build import build_figure
from remote_gpu_trainer.deliver.figures.spec import parse_spec
from remote_gpu_trainer.deliver.provenance import provenance
from remote_gpu_trainer.deliver.tables.build import build_table
from remote_gpu_trainer.errors import ConfigError, VerbFailed
from support.capsules import write_capsule, write_json
from support.figures import write_cells, write_figure
from support.tables import write_table

FILES = ("figure.json", "source.csv", "final.png", "final.svg", "final.pdf")


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    write_cells(project)
    write_figure(project, "loss", "line", y="loss")
    return project


def hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_diverged_loss_in_train_csv_fails_g6_instead_of_crashing_the_build(root: Path) -> None:
    """`inf` in one seed's curve: the mean there is inf and the spread nan (statistics.stdev itself raises an
    AttributeError on inf), written to source.csv and reported by G6 as the spec's non-finite values."""
    (root / "runs/ours/seed1/train.csv").write_text(
        "step,loss\n" + "".join(f"{100 * (k + 1)},{'inf' if k == 9 else 1.0 / (k + 1)}\n" for k in range(10)),
        encoding="utf-8")
    built = build_figure(root, "loss")
    source = (root / "figures/loss/source.csv").read_text(encoding="utf-8").splitlines()
    assert source[-1] == "ours,1000,inf,nan,nan,3,3,ours/seed0;ours/seed1;ours/seed2,,loss"
    assert (built.checks["G6_data"].status, built.checks["G6_data"].notes) == (
        "fail", ("non-finite values in source.csv: row 20 y=inf, row 20 err_lo=nan, row 20 err_hi=nan",))
    assert built.passed is False


@pytest.mark.parametrize(("text", "message"), [
    ("step,loss\n100,1.0\nabc,0.5\n,0.4\n300,0.3\n", "column 'step' holds 'abc', not a number"),
    ("step,loss\n2024-01-01,1.0\n2024-01-02,0.5\n", "column 'step' holds '2024-01-01', not a number"),
    ("step,loss\n100,True\n200,False\n", "column 'loss' holds True, not a number"),
])
def test_a_train_csv_cell_that_is_not_a_number_is_refused_naming_it(root: Path, text: str, message: str) -> None:
    """pandas leaves a column with one bad cell as text: comparing it with the numbers crashed (TypeError), and
    true/false was drawn as 1/0."""
    (root / "runs/ours/seed1/train.csv").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "loss")
    assert str(caught.value) == f"runs/ours/seed1/train.csv: {message}"
    assert sorted(p.name for p in (root / "figures/loss").iterdir()) == ["figure.json"]


def test_a_folder_where_an_output_goes_refuses_the_build_before_any_output_moves(root: Path) -> None:
    """final.svg replaced by a folder by hand: the rename into it failed after source.csv and final.png had
    already been replaced, leaving figure.json describing files that were no longer there."""
    build_figure(root, "loss")
    folder = root / "figures/loss"
    (folder / "final.svg").unlink()
    (folder / "final.svg").mkdir()
    before = hashes(folder)
    (root / "runs/ours/seed1/train.csv").write_text("step,loss\n" + "".join(
        f"{100 * (k + 1)},{2.0 / (k + 1)}\n" for k in range(10)), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "loss")
    assert str(caught.value) == ("figures/loss/final.svg is a folder where the build writes a file: move it out of "
                                 "the way and build again")
    assert hashes(folder) == before
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)


def test_a_linked_cell_under_a_run_a_table_row_names_is_refused_not_skipped(tmp_path: Path) -> None:
    """`capsules: ["ours"]` means every cell of the run; a cell that is a link (here to a folder outside the
    project) was skipped without a word, so the row averaged two seeds of three."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    for seed, value in enumerate((33.0, 33.5, 34.0)):
        write_capsule(project if seed < 2 else outside, "ours", f"seed{seed}", seed=seed, test_id="set5", n=5,
                      metrics={"psnr": value})
    os.symlink(outside / "runs/ours/seed2", project / "runs/ours/seed2")
    write_table(project, "main", [{"method": "ours", "capsules": ["ours"]}])
    with pytest.raises(ConfigError) as caught:
        build_table(project, "main")
    assert str(caught.value) == (
        "tables/main/table.json: rows[0].capsules[0]: runs/ours/seed2 is a link, not a cell folder (evidence is "
        "read only through plain folders inside the project): list the cells `<run>/<cell>` instead")
    assert sorted(p.name for p in (project / "tables/main").iterdir()) == ["table.json"]


@pytest.fixture()
def mounted(root: Path) -> Iterator[Path]:
    """figures/acc/ as its own 1 MiB tmpfs holding the user's figure.json: a real file system that can be made
    read-only or full under the build (tests and CI run as root, as the disk-full tests need)."""
    folder = root / "figures/acc"
    folder.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the read-only and disk-full tests (needs root): {done.stderr}")
    try:
        write_figure(root, "acc", "bar", test_id="main", metric="acc")
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def remount(folder: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(folder)], check=True, capture_output=True)


@pytest.mark.parametrize(("options", "reason"), [("ro", "Read-only file system"), ("size=", "No space left on device")])
def test_a_read_only_or_full_figure_folder_fails_the_build_in_one_line_and_keeps_the_last_one(
        root: Path, mounted: Path, options: str, reason: str) -> None:
    """Either was an `internal error: PermissionError / OSError (run again with --debug)`; now it names the folder,
    exits 1, and the outputs of the last build stay, with no temp folder left behind."""
    build_figure(root, "acc")
    before = hashes(mounted)
    if options == "size=":  # room for the files already there and less than one more build of them
        used = sum(p.stat().st_size for p in mounted.iterdir())
        options = f"size={used + 64 * 1024}"
    remount(mounted, options)
    (root / "runs/ours/seed1/test/main/metrics.json").write_text(
        (root / "runs/ours/seed1/test/main/metrics.json").read_text(encoding="utf-8").replace("0.93", "0.95"),
        encoding="utf-8")
    with pytest.raises(VerbFailed) as caught:
        build_figure(root, "acc")
    assert str(caught.value) == f"figures/acc/: cannot write the build ({reason})"
    assert hashes(mounted) == before
    assert sorted(p.name for p in mounted.iterdir()) == sorted(FILES)


def test_a_figure_size_that_would_take_tens_of_gigabytes_is_refused_before_any_render() -> None:
    """figsize and dpi are each in range, but 40×40 in at 600 dpi is 576 MP: the two renders and the gate's float
    copies of the PNG would take tens of GB (the TUI builds in its own process). Parsed only: never rendered."""
    document = {"kind": "bar", "test_id": "main", "metric": "acc", "series": [{"label": "a", "capsules": ["r/s"]}],
                "figsize": [40, 40], "dpi": 600}
    with pytest.raises(ConfigError) as caught:
        parse_spec(document, "big", "figures/big/figure.json", has_builder=False)
    assert str(caught.value) == ("figures/big/figure.json: figsize: 40×40 in at 600 dpi is 24000×24000 px, more than "
                                 "40 megapixels: lower figsize or dpi")
    assert parse_spec({**document, "figsize": [13, 8]}, "big", "w", has_builder=False).dpi == 600  # 7800×4800 px


def test_a_metrics_json_too_big_to_parse_is_refused_unparsed(root: Path) -> None:
    """A box chooses a metrics.json's size and parsing JSON takes ~15 times it in memory (a 124 MB file took
    1.8 GB): more than 64 MiB is refused before parsing. Valid JSON padded with spaces, so without the limit
    it would simply build."""
    write_figure(root, "acc", "bar", test_id="main", metric="acc")
    path = root / "runs/ours/seed1/test/main/metrics.json"
    path.write_bytes(path.read_bytes() + b" " * (65 << 20))
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "acc")
    assert str(caught.value) == ("runs/ours/seed1/test/main/metrics.json: 65.0 MiB of JSON, more than the 64.0 MiB "
                                 "rgt parses (per-item rows belong in results.parquet or results.csv)")
    assert sorted(p.name for p in (root / "figures/acc").iterdir()) == ["figure.json"]


def test_a_train_csv_of_2_gib_ending_in_one_endless_line_is_refused_unheld(root: Path) -> None:
    """A sparse 2 GiB train.csv (no disk used; its rows then 2 GiB of NUL bytes, one line without end): a line
    figure streams train.csv in bounded memory (issue 26 item 13, so no size limit applies), and the parser
    would hold a line whole, so a line longer than 1 MiB is refused as soon as it is read."""
    with (root / "runs/ours/seed1/train.csv").open("r+b") as handle:
        handle.truncate(2 << 30)
    with pytest.raises(ConfigError) as caught:
        build_figure(root, "loss")
    assert str(caught.value) == ("runs/ours/seed1/train.csv: a line longer than 1048576 bytes: not a table of "
                                 "numbers; refused")


MATPLOTLIBRC = """font.family: serif
font.size: 20
lines.linewidth: 5
axes.prop_cycle: cycler('color', ['r', 'g', 'b'])
figure.dpi: 50
savefig.dpi: 50
svg.fonttype: none
svg.hashsalt: mine
path.simplify: True
figure.autolayout: True
axes.unicode_minus: False
"""


def test_a_user_matplotlibrc_timezone_locale_and_cwd_change_no_byte(root: Path, tmp_path: Path) -> None:
    """The same project built in another folder from another working directory, under another TZ and locale, with
    a matplotlibrc in MPLCONFIGDIR and one in the project (matplotlib reads both at import): the house style
    replaces every setting that draws, so all four files keep their bytes."""
    write_figure(root, "acc", "bar", test_id="main", metric="acc")
    (root / "rgt.toml").write_text('[project]\nname = "figures"\n', encoding="utf-8")
    copy = shutil.copytree(root, tmp_path / "elsewhere" / "deeper" / "project")
    config = tmp_path / "mplconfig"
    config.mkdir()
    for folder in (config, copy):
        (folder / "matplotlibrc").write_text(MATPLOTLIBRC, encoding="utf-8")
    plain = {**os.environ, "TZ": "UTC", "LC_ALL": "C"}
    odd = {**os.environ, "TZ": "Asia/Kolkata", "LC_ALL": "C.UTF-8", "MPLCONFIGDIR": str(config)}
    for project, env, cwd in ((root, plain, root), (copy, odd, copy)):
        for figure_id in ("acc", "loss"):
            done = subprocess.run([sys.executable, "-m", "remote_gpu_trainer", "build", "figure", figure_id,
                                   str(project)], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stderr
    for figure_id in ("acc", "loss"):
        mine, theirs = hashes(root / "figures" / figure_id), hashes(copy / "figures" / figure_id)
        assert {k: v for k, v in mine.items() if k != "figure.json"} == \
            {k: v for k, v in theirs.items() if k != "figure.json"}
        assert len(mine) == 5


def test_source_rows_counts_csv_rows_not_lines_when_a_series_label_holds_a_newline(root: Path) -> None:
    """A legend label may span two lines; source.csv quotes it, so the file has more lines than rows, and
    figure.json said 3 rows for 2 while G6 (which parses) passed expect.rows = 2."""
    series = [{"label": "base\nline", "capsules": ["base/seed0", "base/seed1"]},
              {"label": 'ours, "v2"', "capsules": ["ours/seed0", "ours/seed1", "ours/seed2"]}]
    write_figure(root, "acc", "bar", test_id="main", metric="acc", series=series, expect={"rows": 2})
    built = build_figure(root, "acc")
    assert (built.document["source"]["rows"], built.checks["G6_data"].status) == (2, "pass")
    assert (root / "figures/acc/source.csv").read_bytes().count(b"\n") == 4


def test_a_fifo_where_a_metrics_json_should_be_is_refused_without_blocking(tmp_path: Path) -> None:
    """open() of a FIFO for reading waits for a writer: the build (and `rgt build`, and the Deliver panel's b)
    hung for ever. The build runs in a thread; the finally opens the FIFO's other end so a hung reader ends."""
    project = tmp_path / "project"
    for seed, value in enumerate((33.0, 33.5)):
        write_capsule(project, "ours", f"seed{seed}", seed=seed, test_id="set5", n=5, metrics={"psnr": value})
    fifo = project / "runs/ours/seed1/test/set5/metrics.json"
    fifo.unlink()
    os.mkfifo(fifo)
    write_table(project, "main", [{"method": "ours", "capsules": ["ours"]}])
    outcome: dict[str, str] = {}

    def attempt() -> None:
        try:
            build_table(project, "main")
        except ConfigError as exc:
            outcome["refused"] = str(exc)

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    try:
        worker.join(60)
        assert outcome == {"refused": "tables/main/table.json: rows[0].capsules[1]: runs/ours/seed1/test/set5/"
                                      "metrics.json is not a regular file"}
    finally:
        with contextlib.suppress(OSError):  # ENXIO when nobody is waiting on the FIFO: nothing hung
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(60)


def test_provenance_still_reads_a_seal_bigger_than_a_metrics_json_may_be(tmp_path: Path) -> None:
    """The 64 MiB JSON limit is for metrics files; a PULL_MANIFEST.json of some 300,000 files is larger and the
    pull accepts it (256 MiB), so the checkpoint hash still comes from the seal, not from run.json."""
    write_capsule(tmp_path, "r1", "seed0", metrics={"acc": 0.5})
    manifest = write_json(tmp_path / "runs/r1/PULL_MANIFEST.json",
                          {"files": [{"path": "seed0/best.pth", "sha256": "cd" * 32, "bytes": 1}]})
    manifest.write_bytes(manifest.read_bytes() + b" " * (65 << 20))
    prov = provenance(tmp_path, ["r1/seed0"], command="c", builder=None, env={},
                      code={"git_commit": None, "git_dirty": False, "dirty_diff_sha256": None})
    assert prov["checkpoint_sha256"] == {"r1/seed0": "cd" * 32}  # run.json says "ab" * 32
