"""docs/architecture.md §2's question list stays true: each "Where is X?" answers with exactly one file, and
that file exists. The list is how a newcomer finds a responsibility; an answer naming two files, or a file a
move left behind, would send them to the wrong room.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUESTION = re.compile(r"^- \*\*Where is (?P<what>[^?]+)\?\*\* (?P<answer>.+)$")
PATH = re.compile(r"`([\w./-]+\.(?:py|toml|sh|tcss|md))`")


def _questions() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return [(m["what"], m["answer"]) for line in text.splitlines() if (m := QUESTION.match(line))]


def test_the_question_list_is_there_and_long_enough_to_be_useful() -> None:
    assert len(_questions()) >= 25


def test_every_question_answers_with_one_file_that_exists() -> None:
    wrong = []
    for what, answer in _questions():
        paths = PATH.findall(answer)
        if len(paths) != 1:
            wrong.append(f"{what}: {len(paths)} files named")
        elif not (REPO / "remote_gpu_trainer" / paths[0]).is_file():
            wrong.append(f"{what}: remote_gpu_trainer/{paths[0]} does not exist")
    assert wrong == []
