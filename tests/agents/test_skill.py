"""`rgt skill` (issue 28): the skill file Claude Code and Codex load, generated from the tool table so it cannot
drift; `--install DIR` writes it under DIR/remote-gpu-trainer/ and never overwrites a file it did not write."""

from __future__ import annotations

from pathlib import Path

import yaml

from remote_gpu_trainer.agents.skill import SKILL_FILE, SKILL_NAME, generated_by_rgt, skill_text
from remote_gpu_trainer.agents.tools import TOOLS, arguments_of
from support.helpers import run_rgt


def frontmatter(text: str) -> dict[str, str]:
    assert text.startswith("---\n")
    head, _, _ = text[4:].partition("\n---\n")
    found: dict[str, str] = yaml.safe_load(head)
    return found


def test_the_skill_names_every_tool_of_the_table_with_its_arguments(tmp_path: Path) -> None:
    text = skill_text()
    assert frontmatter(text)["name"] == "remote-gpu-trainer"
    assert "person approves" in frontmatter(text)["description"]
    for row in TOOLS:
        assert f"### `{row.name}`" in text
        section = text.split(f"### `{row.name}`", 1)[1].split("### ", 1)[0]
        assert row.summary in section
        assert all(f"- `{name}`" in section for name, _ in arguments_of(row))
    for words in ("RUN → VERIFY → DELIVER", "rgt_requests", "exit_code", "`pending`", "3 the teardown gate refused"):
        assert words in text
    printed = run_rgt("skill", cwd=tmp_path)
    assert printed.returncode == 0 and printed.stdout == text and printed.stderr == ""


def test_install_writes_the_file_replaces_its_own_and_refuses_anyone_elses(tmp_path: Path) -> None:
    target = tmp_path / "skills" / SKILL_NAME / SKILL_FILE
    first = run_rgt("skill", "--install", str(tmp_path / "skills"), cwd=tmp_path)
    assert first.returncode == 0 and first.stdout == f"wrote {target}\n"
    assert target.read_text(encoding="utf-8") == skill_text() and generated_by_rgt(skill_text())
    again = run_rgt("skill", "--install", str(tmp_path / "skills"), cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == f"up to date: {target}\n"

    older = skill_text().replace("## The arc", "## The arc, as an older rgt wrote it")
    body = older[:older.rindex("<!--")]
    target.write_text(body + skill_text()[skill_text().rindex("<!--"):], encoding="utf-8")  # its marker no longer fits
    edited = run_rgt("skill", "--install", str(tmp_path / "skills"), cwd=tmp_path)
    assert edited.returncode == 2 and edited.stdout == ""
    assert edited.stderr == (f"rgt: rgt skill --install: {target} exists and was not written by rgt skill (or was "
                             "edited since): move it aside, or install elsewhere\n")
    assert target.read_text(encoding="utf-8").startswith(body)

    target.write_text("my own notes\n", encoding="utf-8")
    mine = run_rgt("skill", "--install", str(tmp_path / "skills"), cwd=tmp_path)
    assert mine.returncode == 2 and target.read_text(encoding="utf-8") == "my own notes\n"
