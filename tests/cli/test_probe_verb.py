"""`rgt probe RUN CHECK` from the command line: each cell's answer and the finding it led to (text and
rgt-probe/v1), the audit that follows, a failing probe as one line with exit 1, bad input as exit 2.

The models are real tiny torch modules saved with torch.save; the hook is real user code in the project; each
probe runs in its own process. The verb runs in-process through cli.main, as the redaction test runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remote_gpu_trainer.cli.main import main
from support.capsules import write_capsule
from support.helpers import run_rgt, write_project

torch = pytest.importorskip("torch")

HOOKS = '''\
import torch
from torch import nn


def make(collapsed=False):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, 4))
    if collapsed:
        with torch.no_grad():
            net[2].weight.zero_()
            net[2].bias.fill_(1.0)
    return net


def build(capsule):
    print("building the model of", capsule.name)  # must not reach rgt's stdout or the answer
    net = make()
    net.load_state_dict(torch.load(capsule / "best.pth", map_location="cpu", weights_only=True))
    x = torch.randn(24, 5, generator=torch.Generator().manual_seed(3))
    return {"model": net, "batch": lambda: x}


def broken(capsule):
    raise ValueError("the data folder is missing")
'''


def make_project(tmp_path: Path, hook: str = "probe_hooks:build") -> Path:
    """Run r1 with a healthy seed0 and a collapsed seed1, both pulled."""
    root = tmp_path / "proj"
    write_project(root)
    with (root / "rgt.toml").open("a", encoding="utf-8") as handle:
        handle.write(f'\n[verify.probe]\nhook = "{hook}"\ntimeout_s = 120\n')
    (root / "probe_hooks.py").write_text(HOOKS, encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(compile(HOOKS, "probe_hooks.py", "exec"), namespace)
    for cell, collapsed in (("seed0", False), ("seed1", True)):
        folder = write_capsule(root, "r1", cell)
        torch.save(namespace["make"](collapsed).state_dict(), folder / "best.pth")
    return root


def rgt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_text_output_shows_each_cells_answer_and_its_finding(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path)
    code, out, err = rgt(capsys, "probe", "r1", "V20", str(root))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("capsule:r1/seed0 (here): batch=24 mean_cosine=") and lines[1] == "  → pass"
    assert lines[2].startswith("capsule:r1/seed1 (here): batch=24 mean_cosine=1 ")
    assert lines[3].startswith("  → critical F-") and "open: outputs identical across inputs" in lines[3]
    assert lines[4].startswith("V20 output_cosine: findings")
    assert "building the model" not in out
    code, out, _ = rgt(capsys, "audit", str(root), "--check", "V20")  # the answers stay for later audits
    assert code == 0 and "V20 output_cosine" in out and "findings (1)" in out


def test_the_json_document_and_one_cell_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path)
    code, out, err = rgt(capsys, "probe", "r1", "output_cosine", str(root), "--cell", "seed1", "--here",
                         "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert (document["schema"], document["run"], document["check"], document["status"]) == (
        "rgt-probe/v1", "r1", "V20", "findings")
    (cell,) = document["cells"]
    assert (cell["cell"], cell["subject"], cell["where"], cell["verdict"]) == (
        "seed1", "capsule:r1/seed1", "here", "critical")
    assert cell["answer"]["batch"] == 24 and cell["finding"]["check"] == "V20"


def test_a_failing_probe_is_one_line_exit_1_and_nothing_is_stored(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = make_project(tmp_path, hook="probe_hooks:broken")
    code, out, err = rgt(capsys, "probe", "r1", "V20", str(root))
    assert code == 1 and out == ""
    assert err.strip().splitlines() == ["rgt: probe V20 of r1/seed0 (here) failed: hook_failed: the hook raised "
                                        "ValueError: the data folder is missing"]
    code, out, _ = rgt(capsys, "audit", str(root), "--check", "V20")
    assert code == 0 and "probe not run: rgt probe r1 V20" in out


@pytest.mark.parametrize(("argv", "message"), [
    (("probe", "r1", "V04"), "V04 seed_count is not a probe check"),
    (("probe", "r1", "nonsense"), "'nonsense' is not a VERIFY check"),
    (("probe", "r1", "V20", "--cell", "seed7"), "run r1 has no cell 'seed7'"),
    (("probe", "r1", "V20", "--here", "--on", "box"), "not allowed with argument"),
])
def test_bad_input_is_a_usage_error(tmp_path: Path, argv: tuple[str, ...], message: str) -> None:
    root = make_project(tmp_path)
    result = run_rgt(*argv, cwd=root)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
