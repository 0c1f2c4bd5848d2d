"""The shape of the package stays findable (docs/architecture.md §2): small modules, short functions,
capabilities checked by protocol, and every document a comment cites is one in the repo.

These read the package's own source as text and syntax trees; they fail on the first module that breaks a rule and
name it, so the rule is kept by the change that would break it rather than by a later clean-up.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "remote_gpu_trainer"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
# A module may be longer when its docstring says why, in these words.
LONG_MODULE_REASON = "longer than 600 lines because"
CITATION = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b(?:\s*§\s*(\d+(?:\.\d+)*))?")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "assets" not in p.relative_to(PACKAGE).parts)


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_no_module_is_over_600_lines_unless_its_docstring_says_why() -> None:
    too_long = []
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > MAX_MODULE_LINES and LONG_MODULE_REASON not in docstring:
            too_long.append(f"{path.relative_to(REPO)} ({text.count(chr(10))} lines)")
    assert too_long == []


def test_no_function_is_over_60_lines() -> None:
    assert [line for path in _modules() for line in _long_functions(path)] == []


def test_capabilities_are_checked_by_protocol_not_by_probing_attributes() -> None:
    """Providers declare what they can do (providers/base.py); callers use isinstance, never hasattr."""
    probing = [f"{path.relative_to(REPO)}:{n}" for path in _modules()
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               if re.search(r"\bhasattr\(\s*(provider|client|session|self\.client\(\))\b", line)
               or re.search(r"getattr\([^)]*\"(create|wait_gone|launch|submit|cancel)\"", line)]
    assert probing == []


def _citations(path: Path) -> Iterator[tuple[int, re.Match[str]]]:
    """Every citation in comments and docstrings; in other string literals only those naming a section (a
    message that says `docs/gate.md §5`), since a literal without one is data: DELIVER names its own files
    (a table's Markdown output, the demo's paper) in code and tests as plain strings."""
    text = path.read_text(encoding="utf-8")
    docstrings = {(node.body[0].lineno, node.body[0].col_offset) for node in ast.walk(ast.parse(text))
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                  and isinstance(node.body[0].value.value, str)}
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            continue
        prose = token.type == tokenize.COMMENT or token.start in docstrings
        for offset, line in enumerate(token.string.splitlines()):
            for match in CITATION.finditer(line):
                if prose or match.group(2):
                    yield token.start[0] + offset, match


def test_every_cited_document_is_in_the_repo_with_the_cited_section() -> None:
    """Comments and docstrings cite docs/*.md (§N must be a heading there), never a file outside the repo."""
    bad = []
    for path in [*_modules(), *sorted((REPO / "tests").rglob("*.py")), *sorted((REPO / "benchmarks").glob("*.py"))]:
        for n, match in _citations(path):
            cited, section = match.group(1), match.group(2)
            if cited in {"README.md", "help.md"} or cited.endswith("/help.md"):
                continue
            target = REPO / cited
            where = f"{path.relative_to(REPO)}:{n} cites {match.group(0)}"
            if not cited.startswith("docs/") or not target.is_file():
                bad.append(where)
            elif section and not re.search(rf"^#+ .*§{re.escape(section)}\b", target.read_text(encoding="utf-8"),
                                           re.M):
                bad.append(where + " (no such section)")
    assert bad == []
