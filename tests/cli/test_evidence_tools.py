"""`rgt capsule` and `rgt splits build`, run as a user runs them: the installed module in its own process, with
its exit code, its one-line refusals and the files it leaves (or does not leave) behind."""

from __future__ import annotations

from pathlib import Path

from remote_gpu_trainer.remote import rgt_capsule
from support.helpers import run_rgt

HELPER = Path(rgt_capsule.__file__)


# -- rgt capsule ------------------------------------------------------------------------------------------------

def test_capsule_prints_the_helpers_path(tmp_path: Path) -> None:
    result = run_rgt("capsule", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).resolve() == HELPER.resolve()
    assert list(tmp_path.iterdir()) == []


def test_capsule_write_copies_the_helper_and_refuses_to_replace_a_different_file(tmp_path: Path) -> None:
    first = run_rgt("capsule", "--write", str(tmp_path), cwd=tmp_path)
    assert first.returncode == 0 and "wrote" in first.stdout, first.stderr
    target = tmp_path / "rgt_capsule.py"
    assert target.read_bytes() == HELPER.read_bytes()
    again = run_rgt("capsule", "--write", str(tmp_path), cwd=tmp_path)
    assert again.returncode == 0 and "already this version" in again.stdout
    target.write_text("# an older helper\n")
    refused = run_rgt("capsule", "--write", str(tmp_path), cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert target.read_text() == "# an older helper\n"
    forced = run_rgt("capsule", "--write", str(tmp_path), "--force", cwd=tmp_path)
    assert forced.returncode == 0 and target.read_bytes() == HELPER.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rgt_capsule.py"]  # no temp file left


def test_capsule_write_into_a_missing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_rgt("capsule", "--write", str(tmp_path / "nope"), cwd=tmp_path)
    assert result.returncode == 2 and "no such folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
