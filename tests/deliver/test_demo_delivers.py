"""The demo delivers (docs/deliver.md §9): `rgt demo`'s project, trained on the sim box, pulled and verified, then
`rgt build` and `rgt reconcile` through the real CLI: the loss curve with its seed band, the mean ± std table,
the macros, and exactly one drift, the accuracy the demo's paper typed by hand, with its line."""

from __future__ import annotations

import asyncio
import csv
import json
import statistics
from pathlib import Path

import pytest

from remote_gpu_trainer.cli import main
from remote_gpu_trainer.services.demo_project import DEMO_INSTANCE, DEMO_RUN, create_demo
from remote_gpu_trainer.services.evidence.verbs import pull_run, verify_run
from remote_gpu_trainer.services.instances import create_instance
from remote_gpu_trainer.services.launch.launch import launch_run
from remote_gpu_trainer.services.opening import open_session
from support.cpu_capability import assert_trained_under
from support.helpers import FIXED_NOW, FixedClock, wait_for_liveness

SEEDS = ("seed0", "seed1", "seed2")


@pytest.fixture(scope="module")
def verified_demo(tmp_path_factory: pytest.TempPathFactory, demo_capability: str) -> Path:
    """The demo trained for real, once per ATen CPU capability (support/cpu_capability.py): every number
    below is read from what it trained, never expected as committed bytes."""
    folder = tmp_path_factory.mktemp("demo") / "rgt-demo"
    session = open_session(str(create_demo(folder, quick=True)), clock=FixedClock(FIXED_NOW))

    async def prepare() -> None:
        await create_instance(session, DEMO_INSTANCE)
        await launch_run(session, DEMO_RUN)
        await wait_for_liveness(session, DEMO_RUN, timeout=180)
        await pull_run(session, DEMO_RUN)
        assert (await verify_run(session, DEMO_RUN)).ok

    asyncio.run(prepare())
    session.close()
    assert_trained_under(folder / ".rgt" / "sim" / DEMO_INSTANCE / "workspace" / "demo" / "train.log", demo_capability)
    return folder


def metric(folder: Path, name: str) -> list[float]:
    return [json.loads((folder / "runs" / DEMO_RUN / seed / "test" / "main" / "metrics.json").read_text(
        encoding="utf-8"))["metrics"][name]["value"] for seed in SEEDS]


def test_the_demo_builds_its_figure_table_and_macros_and_reconcile_finds_the_stale_number(
        verified_demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = verified_demo
    assert main(["build", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == [
        "✔ figure loss-curve", "✔ table tab-demo", "✔ evidence", "✔ macros"]
    assert lines[4] == "build: 4 passed"
    # verification audited EVIDENCE.json before its numbers existed (nothing to judge yet); the build audits the
    # file it wrote: V31 raises the drift and the two claims no document quotes consistently
    assert lines[2] == ("✔ evidence: C1-demo-acc pull_verified, C2-demo-nll pull_verified; 2 with a disclosure "
                        "(re-audited: 0 finding(s) fixed, 3 raised) → EVIDENCE.json")

    figure = json.loads((folder / "figures" / "loss-curve" / "figure.json").read_text(encoding="utf-8"))
    assert figure["qa"]["passed"] is True and figure["qa"]["deterministic"] is True
    with (folder / "figures" / "loss-curve" / "source.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    curves = [list(csv.DictReader((folder / "runs" / DEMO_RUN / seed / "train.csv").open(encoding="utf-8")))
              for seed in SEEDS]
    logged = [row for row in curves[0] if row["loss"]]
    assert len(rows) == len(logged) and {row["seeds"] for row in rows} == {"3"}
    first = [float(curve[0]["loss"]) for curve in curves]
    assert float(rows[0]["y"]) == pytest.approx(statistics.mean(first), rel=1e-12)
    assert float(rows[0]["err_lo"]) == float(rows[0]["err_hi"]) == pytest.approx(statistics.stdev(first), rel=1e-9)

    acc, nll = metric(folder, "acc"), metric(folder, "nll")
    expected_row = (f"| demo | 128 | 3 | {statistics.mean(acc):.4f} ± {statistics.stdev(acc):.4f} | "
                    f"{statistics.mean(nll):.4f} ± {statistics.stdev(nll):.4f} |")
    table = (folder / "tables" / "tab-demo" / "final.md").read_text(encoding="utf-8").splitlines()
    assert table[-1] == expected_row
    macros = (folder / "tables" / "macros" / "final.tex").read_text(encoding="utf-8")
    assert f"\\newcommand{{\\ClaimCOneDemoAcc}}{{{statistics.mean(acc):.4f}}}" in macros
    assert f"\\newcommand{{\\ClaimCTwoDemoNll}}{{{statistics.mean(nll):.4f}}}" in macros
    assert "cross-document drift: paper.md:7" in macros

    assert main(["reconcile", str(folder)]) == 1
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("DRIFT")] == [
        f"DRIFT paper.md:7:43  C1-demo-acc acc: reads 0.9701 where EVIDENCE.json has "
        f"{statistics.mean(acc):.4f} ({statistics.mean(acc)!r})"]
    report = json.loads((folder / "reconcile.json").read_text(encoding="utf-8"))
    assert [(d["doc"], d["line"], d["reported"], d["claim_ids"]) for d in report["drifts"]] == [
        ("paper.md", 7, 0.9701, ["C1-demo-acc"])]
    paper = (folder / "paper.md").read_text(encoding="utf-8").splitlines()
    assert paper[6] == "The classifier reaches a test accuracy of 0.9701 over the three seeds."


def test_the_demo_writes_the_user_half_of_deliver_only(tmp_path: Path) -> None:
    """Nothing generated ships with the demo: every number comes from its own run."""
    folder = tmp_path / "rgt-demo"
    create_demo(folder, quick=True)
    assert 'docs = ["paper.md"]' in (folder / "rgt.toml").read_text(encoding="utf-8")
    figure = json.loads((folder / "figures" / "loss-curve" / "figure.json").read_text(encoding="utf-8"))
    table = json.loads((folder / "tables" / "tab-demo" / "table.json").read_text(encoding="utf-8"))
    evidence = json.loads((folder / "EVIDENCE.json").read_text(encoding="utf-8"))
    generated = {"inputs", "source", "provenance", "outputs", "qa", "disclosure"}
    assert not generated & set(figure) and not generated & set(table)
    assert [sorted(set(row) & {"value", "n", "seeds", "variance", "sources"}) for claim in evidence["claims"]
            for row in claim["evidence"]] == [[], []]
    assert sorted(p.relative_to(folder).as_posix() for p in (folder / "figures").rglob("*") if p.is_file()) == [
        "figures/loss-curve/figure.json"]
